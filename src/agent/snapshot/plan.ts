/**
 * Which blocks of a disk image an upload puts, pure. EBS direct snapshots are written in blocks
 * of 512 KiB; a block never written reads as zeros, and a snapshot started with a parent holds
 * the parent's blocks until one is written again. So:
 * - a block of zeros is not put, unless the parent holds data there (then zeros are put over it);
 * - a block whose SHA-256 equals the parent's block at the same index is not put (incremental);
 * - after a kill, a block the manifest says was already put to this snapshot with the same
 *   checksum is not put again (resumable).
 * Its rules are checked, not assumed: every index a whole number within the volume (a string
 * "5" beside the number 5 would plan block 5 twice), each planned once, and the counts within the
 * volume; a plan that breaks one is refused (SnapshotPlanError) before anything is put.
 */
import { AgentError, ExitCode } from "../../errors.ts";

/** The EBS direct block size: 512 KiB on every snapshot (src/aws/ebs-answers.ts checks EBS's answers say so). */
export const EBS_BLOCK_BYTES = 512 * 1024;
const GiB = 1024 ** 3;

/** Block index → base64 SHA-256 of the block's bytes, for the blocks holding data. */
export type BlockHashes = ReadonlyMap<number, string>;

/** Blocks of a snapshot of `volumeSizeGiB`: its indices are 0 to this, exclusive. */
export function blocksOfVolume(volumeSizeGiB: number): number {
  return (volumeSizeGiB * GiB) / EBS_BLOCK_BYTES;
}

export interface SnapshotUploadObservation {
  /** The snapshot's size in blocks: every index planned is below it. */
  volumeBlocks: number;
  /** The image's blocks holding data. */
  image: BlockHashes;
  /** The parent snapshot's blocks holding data (from the parent build's manifest); absent: a full upload. */
  parent?: BlockHashes;
  /** Blocks already put to this snapshot by an earlier run of the same build (resume). */
  alreadyPut?: BlockHashes;
  /** The hash of a block of zeros (what a put of a cleared block carries). */
  zeroHash: string;
}

export interface SnapshotUploadPlan {
  /** Block indices to put, ascending, each once, with the hash each put carries. */
  put: { index: number; hash: string; zeros: boolean }[];
  /** What every block the snapshot is written must hold once this run is done (put now or before). */
  wanted: Map<number, string>;
  /** Blocks the image holds that the parent already holds the same. */
  unchanged: number;
  /** Blocks already put by an earlier run of this build. */
  resumed: number;
  /** Every block this snapshot will have been written, after this run (CompleteSnapshot's ChangedBlocksCount). */
  changedBlocks: number;
}

/**
 * The plan broke one of its own rules: nothing of it was put. Every index it is given was checked
 * where it was read (the image scan, the manifests, EBS's answers), so this is the builder's bug.
 */
export class SnapshotPlanError extends AgentError {
  constructor(problem: string) {
    super(
      `the upload's plan ${problem}: nothing of it was put`,
      "this is the builder's own bug (every index it plans from was checked where it was read): report it with " +
        "the log; the manifest is unchanged",
      ExitCode.failure,
    );
  }
}

/** Every index a whole number (not a string that looks like one) below `volumeBlocks`, with a hash. */
export function checkBlockIndices(blocks: BlockHashes | undefined, what: string, volumeBlocks: number): void {
  for (const [index, hash] of blocks ?? []) {
    if (typeof index !== "number" || !Number.isSafeInteger(index) || index < 0 || index >= volumeBlocks)
      throw new SnapshotPlanError(
        `was given ${what} block ${JSON.stringify(index)} (${typeof index}), not a whole number from 0 to ` +
          `${volumeBlocks - 1}`,
      );
    if (typeof hash !== "string") throw new SnapshotPlanError(`was given ${what} block ${index} without a hash`);
  }
}

export function planSnapshotUpload(input: SnapshotUploadObservation): SnapshotUploadPlan {
  const { image, parent, alreadyPut, zeroHash, volumeBlocks } = input;
  if (!Number.isSafeInteger(volumeBlocks) || volumeBlocks <= 0)
    throw new SnapshotPlanError(`was given a volume of ${volumeBlocks} blocks`);
  checkBlockIndices(image, "an image", volumeBlocks);
  checkBlockIndices(parent, "a parent", volumeBlocks);
  checkBlockIndices(alreadyPut, "an already put", volumeBlocks);
  // What each index must hold in the new snapshot where it differs from what it holds without a put.
  const wanted = new Map<number, { hash: string; zeros: boolean }>();
  let unchanged = 0;
  for (const [index, hash] of image) {
    if (parent?.get(index) === hash) unchanged += 1;
    else wanted.set(index, { hash, zeros: false });
  }
  // Blocks the parent holds data in and the image no longer does: zeros go over them.
  for (const index of parent?.keys() ?? []) {
    if (!image.has(index)) wanted.set(index, { hash: zeroHash, zeros: true });
  }
  const put: SnapshotUploadPlan["put"] = [];
  let resumed = 0;
  for (const [index, target] of wanted) {
    if (alreadyPut?.get(index) === target.hash) resumed += 1;
    else put.push({ index, ...target });
  }
  put.sort((a, b) => a.index - b.index);
  // A block put earlier and wanted no more (the image changed between runs) still counts:
  // the snapshot was written there. Such a resume is refused before planning (see the manifest).
  const changed = new Set([...wanted.keys(), ...(alreadyPut?.keys() ?? [])]);
  // By construction, but checked: the same index put twice (data and zeros at once) would leave
  // whichever landed last.
  if (new Set(put.map((block) => block.index)).size !== put.length) throw new SnapshotPlanError("puts a block twice");
  if (put.length + resumed !== wanted.size)
    throw new SnapshotPlanError(`puts ${put.length} and resumes ${resumed} of ${wanted.size} blocks wanted`);
  if (changed.size > volumeBlocks)
    throw new SnapshotPlanError(`writes ${changed.size} blocks of a volume of ${volumeBlocks}`);
  return {
    put,
    wanted: new Map([...wanted].map(([index, target]) => [index, target.hash])),
    unchanged,
    resumed,
    changedBlocks: changed.size,
  };
}

/**
 * Before CompleteSnapshot: every block the plan wants is recorded written with the hash it wants,
 * and nothing is recorded outside the volume. Otherwise the snapshot is not completed.
 */
export function checkWritten(wanted: BlockHashes, written: BlockHashes, volumeBlocks: number): void {
  checkBlockIndices(written, "a written", volumeBlocks);
  for (const [index, hash] of wanted) {
    const put = written.get(index);
    if (put !== hash)
      throw new SnapshotPlanError(
        `would complete with block ${index} ${put === undefined ? "never put" : "put with another hash"}`,
      );
  }
}

/**
 * CompleteSnapshot's LINEAR aggregate: SHA-256 over the concatenated SHA-256 digests of every
 * block written to the snapshot, in block-index order.
 */
export function linearAggregate(written: BlockHashes, sha256: (data: Uint8Array) => Uint8Array): string {
  const digests = [...written.entries()].sort(([a], [b]) => a - b).map(([, hash]) => Buffer.from(hash, "base64"));
  return Buffer.from(sha256(Buffer.concat(digests))).toString("base64");
}
