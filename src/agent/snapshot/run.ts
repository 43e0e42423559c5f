/**
 * `snapshot upload`: a disk image (the image set built into a sparse XFS image) becomes an EBS
 * snapshot through the EBS direct APIs, with no instance and no volume: observe (the parent
 * build's manifest, this build's manifest if a killed run left one, the image's blocks) →
 * plan (src/agent/snapshot/plan.ts) → start or resume the snapshot → put the planned blocks,
 * several at once → complete. The manifest is rewritten as blocks land, so a kill at any point
 * resumes where it stopped; once completed it is the next generation's parent.
 */
import { randomUUID } from "node:crypto";
import { AgentError, ExitCode } from "../../errors.ts";
import { MANIFEST_FORMAT, ManifestError, parseManifest, toMap, toRecord, type SnapshotManifest } from "./manifest.ts";
import {
  EBS_BLOCK_BYTES,
  blocksOfVolume,
  checkWritten,
  linearAggregate,
  planSnapshotUpload,
  type BlockHashes,
} from "./plan.ts";
import type { SnapshotUploadDeps } from "./deps.ts";

export interface SnapshotUploadSettings {
  image: string;
  manifest: string;
  /** The previous generation's completed manifest: its snapshot becomes the parent. */
  parentManifest?: string;
  /**
   * The previous generation's snapshot, its manifest not at hand: which blocks it holds comes from
   * ListSnapshotBlocks, and the SHA-256 of those the image holds too from GetSnapshotBlock (each
   * such block is read once: the price of not keeping the manifest).
   */
  parentSnapshotId?: string;
  tags: Record<string, string>;
  description: string;
  encrypted: boolean;
  kmsKeyArn?: string;
  /** Puts in flight at once. */
  concurrency: number;
  /** The snapshot's size; default the image's, rounded up to GiB (at least the parent's). */
  volumeSizeGiB?: number;
  /** Minutes EBS keeps a pending snapshot without a put before it fails it (StartSnapshot's Timeout). */
  timeoutMinutes: number;
}

export interface SnapshotUploadReport {
  snapshotId: string;
  parentSnapshotId?: string;
  status: string;
  volumeSizeGiB: number;
  imageBytes: number;
  /** Blocks of the image holding data. */
  imageBlocks: number;
  /** Blocks put by this run, of which zeros (over the parent's data). */
  put: number;
  zeros: number;
  /** Blocks the parent held the same, and blocks an earlier run of this build had put. */
  unchanged: number;
  resumed: number;
  bytesPut: number;
  seconds: number;
}

/** An upload that cannot go on as asked: nothing more is put. */
export class SnapshotUploadError extends AgentError {
  constructor(message: string, remediation: string, exitCode: number = ExitCode.usage) {
    super(message, remediation, exitCode);
  }
}

const GiB = 1024 ** 3;

/**
 * Stops between blocks once the signal (SIGTERM, Ctrl-C's SIGINT) is aborted: an error of its own
 * (exit 1, the manifest keeps what was put, the rerun resumes), not the abort's reason, which the
 * CLI would take for a bug.
 */
function stopIfAborted(signal: AbortSignal | undefined): void {
  if (!signal?.aborted) return;
  const why = signal.reason instanceof Error ? signal.reason.message : String(signal.reason);
  throw new SnapshotUploadError(
    `the upload was stopped (${why}); the manifest keeps the blocks put so far`,
    "run the same command again: it resumes from the manifest",
    ExitCode.failure,
  );
}

/** The manifest at `path` checked, or undefined when there is none. */
async function readManifest(deps: SnapshotUploadDeps, path: string): Promise<SnapshotManifest | undefined> {
  let json: unknown;
  try {
    json = await deps.readManifestJson(path);
  } catch (error) {
    throw new ManifestError(path, (error as Error).message);
  }
  return json === undefined ? undefined : parseManifest(path, json);
}

export async function runSnapshotUpload(
  deps: SnapshotUploadDeps,
  settings: SnapshotUploadSettings,
): Promise<SnapshotUploadReport> {
  const now = deps.now ?? Date.now;
  const started = now();
  if (settings.parentManifest && settings.parentSnapshotId) {
    throw new SnapshotUploadError(
      "both a parent manifest and a parent snapshot were given",
      "give one: the manifest when it is at hand (no block is read back), else the snapshot",
    );
  }
  const parent = settings.parentManifest ? await readManifest(deps, settings.parentManifest) : undefined;
  if (settings.parentManifest && parent?.status !== "completed") {
    throw new ManifestError(settings.parentManifest, parent ? "is not completed" : "does not exist");
  }
  const parentId = parent?.snapshotId ?? settings.parentSnapshotId;
  const earlier = await readManifest(deps, settings.manifest);
  if (earlier?.status === "completed") {
    throw new SnapshotUploadError(
      `the build of ${settings.manifest} is already completed: ${earlier.snapshotId}`,
      "give a new --manifest path for a new build (and this one as --parent for an incremental one)",
    );
  }
  if (earlier && earlier.parentSnapshotId !== parentId) {
    throw new SnapshotUploadError(
      `${settings.manifest} resumes an upload with parent ${earlier.parentSnapshotId ?? "none"}, ` +
        `not ${parentId ?? "none"}`,
      "resume with the same --parent, or start a new build with a new --manifest path",
    );
  }

  deps.log.info("snapshot.scan", "reading the image's blocks", { image: settings.image });
  const scan = await deps.scanImage(settings.image, EBS_BLOCK_BYTES);
  if (earlier && !sameHashes(toMap(earlier.blocks), scan.blocks)) {
    throw new SnapshotUploadError(
      `${settings.image} changed since the upload of ${earlier.snapshotId} started`,
      "upload an image once it is built and unmounted; start a new build with a new --manifest path",
    );
  }
  const parentRead =
    settings.parentSnapshotId !== undefined
      ? await readParentBlocks(deps, settings.parentSnapshotId, scan.blocks, settings.concurrency)
      : undefined;
  const parentBlocks = parent ? toMap(parent.blocks) : parentRead?.blocks;
  const volumeSizeGiB = Math.max(
    settings.volumeSizeGiB ?? Math.ceil(scan.bytes / GiB),
    parent?.volumeSizeGiB ?? parentRead?.volumeSizeGiB ?? 1,
    Math.ceil(scan.bytes / GiB),
  );

  const clientToken = earlier?.clientToken ?? randomUUID();
  const newSnapshot = await deps.writer.start({
    volumeSizeGiB,
    ...(parentId ? { parentSnapshotId: parentId } : {}),
    clientToken,
    description: settings.description,
    tags: settings.tags,
    encrypted: settings.encrypted,
    ...(settings.kmsKeyArn ? { kmsKeyArn: settings.kmsKeyArn } : {}),
    timeoutMinutes: settings.timeoutMinutes,
  });
  const { snapshotId } = newSnapshot;
  // The same token gives the same snapshot; another one (the first expired) starts from nothing.
  const written = new Map(earlier?.snapshotId === snapshotId ? toMap(earlier.written) : []);
  const manifest = (): SnapshotManifest => ({
    format: MANIFEST_FORMAT,
    snapshotId,
    ...(parentId ? { parentSnapshotId: parentId } : {}),
    clientToken,
    status: "uploading",
    volumeSizeGiB,
    blockSize: EBS_BLOCK_BYTES,
    imageBytes: scan.bytes,
    blocks: toRecord(scan.blocks),
    written: toRecord(written),
    tags: settings.tags,
  });
  await deps.writeManifestJson(settings.manifest, manifest());

  const volumeBlocks = blocksOfVolume(volumeSizeGiB);
  const plan = planSnapshotUpload({
    volumeBlocks,
    image: scan.blocks,
    ...(parentBlocks ? { parent: parentBlocks } : {}),
    alreadyPut: written,
    zeroHash: deps.zeroBlockHash(EBS_BLOCK_BYTES),
  });
  deps.log.info("snapshot.plan", "blocks to put", {
    snapshotId,
    parent: parentId,
    imageBlocks: scan.blocks.size,
    put: plan.put.length,
    unchanged: plan.unchanged,
    resumed: plan.resumed,
  });

  // The manifest is saved at most every 2 s while puts land: a kill loses at most those puts'
  // records, and they are put again (the same bytes) on resume.
  let saving: Promise<void> = Promise.resolve();
  let lastSave = now();
  const save = (force: boolean) => {
    if (!force && now() - lastSave < 2000) return saving;
    lastSave = now();
    const copy = manifest();
    saving = saving.then(() => deps.writeManifestJson(settings.manifest, copy));
    return saving;
  };

  let next = 0;
  let done = 0;
  let lastProgress = now();
  const zeros = Buffer.alloc(EBS_BLOCK_BYTES);
  const worker = async () => {
    while (next < plan.put.length) {
      stopIfAborted(deps.signal);
      const block = plan.put[next++]!;
      const data = block.zeros ? zeros : await deps.readBlock(settings.image, block.index, EBS_BLOCK_BYTES);
      await deps.writer.putBlock(snapshotId, block.index, data, block.hash);
      written.set(block.index, block.hash);
      done += 1;
      void save(false);
      if (now() - lastProgress >= 5000) {
        lastProgress = now();
        deps.log.info("snapshot.progress", `${done} of ${plan.put.length} blocks put`, {
          snapshotId,
          mib: Math.round((done * EBS_BLOCK_BYTES) / 2 ** 20),
        });
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.max(1, Math.min(settings.concurrency, plan.put.length)) }, worker));
  } finally {
    await save(true);
  }

  checkWritten(plan.wanted, written, volumeBlocks);
  const status = await deps.writer.complete(snapshotId, written.size, linearAggregate(written, deps.sha256));
  await deps.writeManifestJson(settings.manifest, { ...manifest(), status: "completed" });
  const report: SnapshotUploadReport = {
    snapshotId,
    ...(parentId ? { parentSnapshotId: parentId } : {}),
    status,
    volumeSizeGiB,
    imageBytes: scan.bytes,
    imageBlocks: scan.blocks.size,
    put: plan.put.length,
    zeros: plan.put.filter((b) => b.zeros).length,
    unchanged: plan.unchanged,
    resumed: plan.resumed,
    bytesPut: plan.put.length * EBS_BLOCK_BYTES,
    seconds: Math.round((now() - started) / 100) / 10,
  };
  deps.log.notice("snapshot.completed", `snapshot ${snapshotId} ${status}`, { ...report });
  return report;
}

function sameHashes(a: BlockHashes, b: BlockHashes): boolean {
  if (a.size !== b.size) return false;
  for (const [index, hash] of a) if (b.get(index) !== hash) return false;
  return true;
}

/**
 * The parent snapshot's blocks as EBS holds them: every block it lists holds data; the checksum
 * is read (GetSnapshotBlock) only where the image holds data too, the one place a hash can spare
 * a put. Elsewhere the hash stays unknown (""), which matches no block's: the plan needs only to
 * know that the parent holds data there (zeros go over it).
 */
async function readParentBlocks(
  deps: SnapshotUploadDeps,
  snapshotId: string,
  image: BlockHashes,
  concurrency: number,
): Promise<{ volumeSizeGiB: number; blocks: BlockHashes }> {
  const { reader } = deps;
  if (!reader) {
    throw new SnapshotUploadError("no reader of EBS snapshots was given", "report this bug", ExitCode.failure);
  }
  const listed = await reader.listBlocks(snapshotId);
  const blocks = new Map<number, string>([...listed.blocks.keys()].map((index) => [index, ""]));
  const toRead = [...listed.blocks].filter(([index]) => image.has(index));
  deps.log.info("snapshot.parent-read", "reading the parent snapshot's checksums back from EBS", {
    parent: snapshotId,
    parentBlocks: listed.blocks.size,
    read: toRead.length,
  });
  let next = 0;
  const worker = async () => {
    while (next < toRead.length) {
      stopIfAborted(deps.signal);
      const [index, token] = toRead[next++]!;
      blocks.set(index, (await reader.getBlock(snapshotId, index, token)).sha256);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, toRead.length)) }, worker));
  return { volumeSizeGiB: listed.volumeSizeGiB, blocks };
}
