/**
 * What EBS direct may answer, checked before any of it is used (pure). The SDK passes a JSON
 * answer through as it came: a `BlockIndex` sent as the string "5" stays a string, and a plan
 * keyed by it would put index 5 twice (data and zeros). So every field the builder reads is
 * checked against the API's model and documented values: block indices whole numbers within the
 * snapshot, unique and ascending (ListSnapshotBlocks: "unique, and in numerical order"), 512 KiB
 * blocks, the statuses the model names, a block's bytes matching the checksum sent with them.
 * Anything else is an EbsAnswerError naming the field and the value.
 */
import { createHash } from "node:crypto";
import { EbsAnswerError, type EbsCall } from "./ebs-errors.ts";

/** EBS direct's block size: 512 KiB on every snapshot ("BlockSize … 524288"). */
export const EBS_BLOCK_BYTES = 512 * 1024;
const GiB = 1024 ** 3;
/** The largest snapshot EBS direct writes (StartSnapshot's VolumeSize: 64 TiB). */
export const MAX_VOLUME_GIB = 65536;
/** The snapshot statuses of the model (Status: completed | error | pending). */
export const SNAPSHOT_STATUSES = ["pending", "completed", "error"] as const;
export type SnapshotStatus = (typeof SNAPSHOT_STATUSES)[number];
const SNAPSHOT_ID = /^snap-[0-9a-f]{8,17}$/;

const shown = (value: unknown): string => (typeof value === "string" ? JSON.stringify(value) : String(value));

/** A whole number of the model's kind (the SDK leaves a string in place). */
function isWhole(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value);
}

function checkBlockSize(call: EbsCall, snapshotId: string | undefined, value: unknown): void {
  if (value !== EBS_BLOCK_BYTES)
    throw new EbsAnswerError(call, snapshotId, `a BlockSize of ${shown(value)} (EBS direct's is ${EBS_BLOCK_BYTES})`);
}

function checkVolumeSize(call: EbsCall, snapshotId: string | undefined, value: unknown): number {
  if (!isWhole(value) || value < 1 || value > MAX_VOLUME_GIB)
    throw new EbsAnswerError(call, snapshotId, `a VolumeSize of ${shown(value)} (a whole number of GiB, 1-65536)`);
  return value;
}

function checkStatus(call: EbsCall, snapshotId: string | undefined, value: unknown): SnapshotStatus {
  if (!SNAPSHOT_STATUSES.includes(value as SnapshotStatus))
    throw new EbsAnswerError(call, snapshotId, `a Status of ${shown(value)} (${SNAPSHOT_STATUSES.join(", ")})`);
  return value as SnapshotStatus;
}

/** Blocks of `volumeSizeGiB` (the indices EBS takes are 0 to this, exclusive). */
export function volumeBlocks(volumeSizeGiB: number): number {
  return (volumeSizeGiB * GiB) / EBS_BLOCK_BYTES;
}

/** StartSnapshot's answer, for the request it answers. */
export function checkStarted(
  answer: { SnapshotId?: unknown; BlockSize?: unknown; Status?: unknown; VolumeSize?: unknown },
  request: { volumeSizeGiB: number },
): { snapshotId: string; status: SnapshotStatus } {
  if (typeof answer.SnapshotId !== "string" || !SNAPSHOT_ID.test(answer.SnapshotId))
    throw new EbsAnswerError("StartSnapshot", undefined, `a SnapshotId of ${shown(answer.SnapshotId)} (snap-…)`);
  const snapshotId = answer.SnapshotId;
  checkBlockSize("StartSnapshot", snapshotId, answer.BlockSize);
  if (answer.VolumeSize !== undefined && answer.VolumeSize !== request.volumeSizeGiB)
    throw new EbsAnswerError(
      "StartSnapshot",
      snapshotId,
      `a VolumeSize of ${shown(answer.VolumeSize)} for the ${request.volumeSizeGiB} GiB asked`,
    );
  return { snapshotId, status: checkStatus("StartSnapshot", snapshotId, answer.Status) };
}

/** PutSnapshotBlock's answer: the checksum it echoes is the one sent. */
export function checkPut(
  answer: { Checksum?: unknown; ChecksumAlgorithm?: unknown },
  snapshotId: string,
  index: number,
  sent: string,
): void {
  if (answer.Checksum !== undefined && answer.Checksum !== sent)
    throw new EbsAnswerError(
      "PutSnapshotBlock",
      snapshotId,
      `the checksum ${shown(answer.Checksum)} for block ${index}, put with ${sent}`,
    );
  if (answer.ChecksumAlgorithm !== undefined && answer.ChecksumAlgorithm !== "SHA256")
    throw new EbsAnswerError(
      "PutSnapshotBlock",
      snapshotId,
      `a ChecksumAlgorithm of ${shown(answer.ChecksumAlgorithm)}`,
    );
}

/** CompleteSnapshot's answer. */
export function checkCompleted(answer: { Status?: unknown }, snapshotId: string): SnapshotStatus {
  return checkStatus("CompleteSnapshot", snapshotId, answer.Status);
}

/** What the pages of one ListSnapshotBlocks have shown so far (checkListPage keeps it). */
export interface ListState {
  volumeSizeGiB?: number;
  blocks: Map<number, string>;
  last: number;
  tokens: Set<string>;
}

export function newListState(): ListState {
  return { blocks: new Map(), last: -1, tokens: new Set() };
}

/**
 * One page of ListSnapshotBlocks, added to `state`; returns the next page's token. Every index a
 * whole number within the snapshot's size, above the last one seen (unique, ascending), with a
 * token; the same size on every page; a next token never seen before (no endless paging).
 */
export function checkListPage(
  answer: { Blocks?: unknown; VolumeSize?: unknown; BlockSize?: unknown; NextToken?: unknown },
  snapshotId: string,
  state: ListState,
): string | undefined {
  const call = "ListSnapshotBlocks";
  const size = checkVolumeSize(call, snapshotId, answer.VolumeSize);
  if (state.volumeSizeGiB !== undefined && size !== state.volumeSizeGiB)
    throw new EbsAnswerError(call, snapshotId, `a VolumeSize of ${size} GiB after ${state.volumeSizeGiB} GiB`);
  state.volumeSizeGiB = size;
  checkBlockSize(call, snapshotId, answer.BlockSize);
  const count = volumeBlocks(size);
  const blocks = answer.Blocks ?? [];
  if (!Array.isArray(blocks)) throw new EbsAnswerError(call, snapshotId, `Blocks of ${shown(blocks)} (a list)`);
  for (const block of blocks as { BlockIndex?: unknown; BlockToken?: unknown }[]) {
    const index = block?.BlockIndex;
    if (!isWhole(index) || index < 0 || index >= count)
      throw new EbsAnswerError(
        call,
        snapshotId,
        `a BlockIndex of ${shown(index)} (${typeof index}): a whole number from 0 to ${count - 1} is what the ` +
          `model says`,
      );
    if (index <= state.last)
      throw new EbsAnswerError(
        call,
        snapshotId,
        `block ${index} after block ${state.last} (the indices are unique and ascending)`,
      );
    if (typeof block.BlockToken !== "string" || block.BlockToken === "")
      throw new EbsAnswerError(call, snapshotId, `block ${index} without a BlockToken`);
    state.blocks.set(index, block.BlockToken);
    state.last = index;
  }
  const next = answer.NextToken;
  if (next === undefined || next === null || next === "") return undefined;
  if (typeof next !== "string") throw new EbsAnswerError(call, snapshotId, `a NextToken of ${shown(next)}`);
  if (state.tokens.has(next)) throw new EbsAnswerError(call, snapshotId, `the NextToken ${shown(next)} again`);
  state.tokens.add(next);
  return next;
}

/** GetSnapshotBlock's answer: 512 KiB, and a checksum (when sent) that is the bytes'. Returns their SHA-256. */
export function checkBlock(
  answer: { DataLength?: unknown; Checksum?: unknown; ChecksumAlgorithm?: unknown },
  data: Uint8Array,
  snapshotId: string,
  index: number,
): string {
  const call = "GetSnapshotBlock";
  if (answer.DataLength !== undefined && answer.DataLength !== EBS_BLOCK_BYTES)
    throw new EbsAnswerError(call, snapshotId, `a DataLength of ${shown(answer.DataLength)} for block ${index}`);
  if (data.length !== EBS_BLOCK_BYTES)
    throw new EbsAnswerError(call, snapshotId, `${data.length} bytes for block ${index} (${EBS_BLOCK_BYTES})`);
  const sha256 = createHash("sha256").update(data).digest("base64");
  if (answer.Checksum !== undefined && answer.ChecksumAlgorithm === "SHA256" && answer.Checksum !== sha256)
    throw new EbsAnswerError(
      call,
      snapshotId,
      `block ${index} with the checksum ${shown(answer.Checksum)}, but bytes whose SHA-256 is ${sha256}`,
    );
  return sha256;
}
