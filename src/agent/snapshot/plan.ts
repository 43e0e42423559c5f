/**
 * Which blocks of a disk image an upload puts, pure. EBS direct snapshots are written in blocks
 * of 512 KiB; a block never written reads as zeros, and a snapshot started with a parent holds
 * the parent's blocks until one is written again. So:
 * - a block of zeros is not put, unless the parent holds data there (then zeros are put over it);
 * - a block whose SHA-256 equals the parent's block at the same index is not put (incremental);
 * - after a kill, a block the manifest says was already put to this snapshot with the same
 *   checksum is not put again (resumable).
 */

/** The EBS direct block size (StartSnapshot answers it; 512 KiB on every snapshot today). */
export const EBS_BLOCK_BYTES = 512 * 1024;

/** Block index → base64 SHA-256 of the block's bytes, for the blocks holding data. */
export type BlockHashes = ReadonlyMap<number, string>;

export interface SnapshotUploadObservation {
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
  /** Block indices to put, ascending, with the hash each put carries. */
  put: { index: number; hash: string; zeros: boolean }[];
  /** Blocks the image holds that the parent already holds the same. */
  unchanged: number;
  /** Blocks already put by an earlier run of this build. */
  resumed: number;
  /** Every block this snapshot will have been written, after this run (CompleteSnapshot's ChangedBlocksCount). */
  changedBlocks: number;
}

export function planSnapshotUpload(input: SnapshotUploadObservation): SnapshotUploadPlan {
  const { image, parent, alreadyPut, zeroHash } = input;
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
  return { put, unchanged, resumed, changedBlocks: changed.size };
}

/**
 * CompleteSnapshot's LINEAR aggregate: SHA-256 over the concatenated SHA-256 digests of every
 * block written to the snapshot, in block-index order.
 */
export function linearAggregate(written: BlockHashes, sha256: (data: Uint8Array) => Uint8Array): string {
  const digests = [...written.entries()].sort(([a], [b]) => a - b).map(([, hash]) => Buffer.from(hash, "base64"));
  return Buffer.from(sha256(Buffer.concat(digests))).toString("base64");
}
