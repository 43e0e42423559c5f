/**
 * The parent snapshot's content when its manifest is not at hand (`--parent-snapshot` alone): EBS
 * lists its blocks, and the checksum of each block the image holds too is read back (the one
 * place a hash can spare a put), each block downloaded once. Its manifest spares all of it, and
 * is preferred whenever it is given.
 */
import type { SnapshotUploadDeps } from "./deps.ts";
import { EBS_BLOCK_BYTES, type BlockHashes } from "./plan.ts";
import { stopIfAborted } from "./stop.ts";

/** The parent's blocks (index → SHA-256; "" where unknown: not read), and what reading them cost. */
export interface ParentRead {
  volumeSizeGiB: number;
  blocks: Map<number, string>;
  /** Blocks downloaded (GetSnapshotBlock) to learn their hash. */
  read: number;
  bytesRead: number;
}

/**
 * Where the hash is not read it stays unknown (""), which matches no block's: the plan needs only
 * to know that the parent holds data there (zeros go over it).
 */
export async function readParentBlocks(
  deps: SnapshotUploadDeps,
  snapshotId: string,
  image: BlockHashes,
  concurrency: number,
): Promise<ParentRead> {
  const { reader } = deps;
  const listed = await reader.listBlocks(snapshotId);
  const blocks = new Map<number, string>([...listed.blocks.keys()].map((index) => [index, ""]));
  const toRead = [...listed.blocks].filter(([index]) => image.has(index));
  deps.log.notice(
    "snapshot.parent-read",
    "no manifest of the parent: reading the checksums of the blocks it shares with the image back from EBS " +
      "(give its manifest with --parent to spare this)",
    { parent: snapshotId, parentBlocks: listed.blocks.size, read: toRead.length },
  );
  let next = 0;
  const worker = async () => {
    while (next < toRead.length) {
      stopIfAborted(deps.signal);
      const [index, token] = toRead[next++]!;
      blocks.set(index, (await reader.getBlock(snapshotId, index, token)).sha256);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, toRead.length)) }, worker));
  return {
    volumeSizeGiB: listed.volumeSizeGiB,
    blocks,
    read: toRead.length,
    bytesRead: toRead.length * EBS_BLOCK_BYTES,
  };
}
