/**
 * The read-back check of a completed snapshot, before its manifest says `completed` (a completed
 * manifest is the next generation's parent, and the snapshot the keeper stocks from): EBS lists
 * the snapshot's blocks (its own and its parent's), and a sample of them (every one with
 * `--verify`) is read back and compared, by the SHA-256 of the bytes read, with the image. Every
 * block the image holds data in must be listed; a listed block the image does not hold must read
 * as zeros (a cleared block of the parent's). EBS reads only a completed snapshot.
 */
import { randomInt } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { AgentError, ExitCode } from "../../errors.ts";
import { EbsCallError } from "../../aws/ebs-errors.ts";
import type { SnapshotBlockReader } from "../ports.ts";
import type { BlockHashes } from "./plan.ts";
import { stopIfAborted } from "./stop.ts";

/** Blocks read back when not all are (`--verify`): a quarter of them wrong goes unseen at odds of 0.75^32, 1e-4. */
export const VERIFY_SAMPLE_BLOCKS = 32;

/** What was checked. */
export interface VerifyReport {
  /** Blocks EBS lists for the snapshot. */
  listed: number;
  /** Blocks read back and compared. */
  read: number;
  all: boolean;
}

/**
 * What became of a snapshot found not to hold the image: deleted, or kept (why it could not be
 * deleted); either way it was never untagged `ebs-cache:unverified`, so nothing took it.
 */
export type Disposal = { deleted: true } | { deleted: false; why: string };

/**
 * The snapshot does not hold the image: it keeps `ebs-cache:unverified` (no keeper, boot or
 * refresh takes it), its manifest says `rejected`, never completed, and the upload deleted it if
 * it could (`disposal`; absent: not decided yet, as verifySnapshot throws it).
 */
export class SnapshotVerifyError extends AgentError {
  readonly snapshotId: string;
  readonly problems: string[];
  readonly disposal?: Disposal;

  constructor(snapshotId: string, problems: string[], disposal?: Disposal) {
    const found =
      `snapshot ${snapshotId} is completed but does not hold the image: ${problems.slice(0, 3).join("; ")}` +
      (problems.length > 3 ? ` (and ${problems.length - 3} more)` : "");
    const rerun = "the same command run again uploads anew (a new snapshot; this one is never checked again)";
    super(
      disposal === undefined
        ? found
        : disposal.deleted
          ? `${found}; it was deleted`
          : `${found}; it keeps ebs-cache:unverified, so nothing takes it, but it could not be deleted: ` +
            disposal.why,
      disposal?.deleted
        ? `${rerun}; if it fails again, check that --endpoint is EBS direct itself`
        : `nothing takes it (it keeps ebs-cache:unverified); delete it (aws ec2 delete-snapshot --snapshot-id ` +
            `${snapshotId}), or let the rerun try again (the build role needs ec2:DeleteSnapshot); ${rerun}`,
      ExitCode.failure,
    );
    this.snapshotId = snapshotId;
    this.problems = problems;
    this.disposal = disposal;
  }
}

/** `count` of `indices`, drawn at random (all of them when there are no more). */
export function pickSample(indices: readonly number[], count: number, draw = randomInt): number[] {
  if (indices.length <= count) return [...indices];
  const pool = [...indices];
  // A partial Fisher-Yates: the first `count` places end up a uniform draw without repeats.
  for (let i = 0; i < count; i += 1) {
    const j = i + draw(pool.length - i);
    [pool[i], pool[j]] = [pool[j]!, pool[i]!];
  }
  return pool.slice(0, count).sort((a, b) => a - b);
}

/**
 * Lists and reads back the snapshot; throws SnapshotVerifyError naming what differs from `image`
 * (index → SHA-256 of the blocks holding data), or returns what was checked.
 */
export async function verifySnapshot(
  reader: SnapshotBlockReader,
  snapshotId: string,
  expected: { image: BlockHashes; volumeSizeGiB: number; zeroHash: string },
  options: { all: boolean; concurrency: number; signal?: AbortSignal },
): Promise<VerifyReport> {
  const listed = await reader.listBlocks(snapshotId);
  const problems: string[] = [];
  if (listed.volumeSizeGiB !== expected.volumeSizeGiB)
    problems.push(`it is ${listed.volumeSizeGiB} GiB, not ${expected.volumeSizeGiB} GiB`);
  const missing = [...expected.image.keys()].filter((index) => !listed.blocks.has(index));
  if (missing.length > 0)
    problems.push(
      `${missing.length} blocks holding data in the image are not in it (${missing.slice(0, 5).join(", ")}` +
        `${missing.length > 5 ? ", …" : ""})`,
    );
  const indices = [...listed.blocks.keys()];
  const chosen = options.all ? indices : pickSample(indices, VERIFY_SAMPLE_BLOCKS);
  const wrong: number[] = [];
  let next = 0;
  const worker = async () => {
    while (next < chosen.length) {
      stopIfAborted(options.signal);
      const index = chosen[next++]!;
      const { sha256 } = await reader.getBlock(snapshotId, index, listed.blocks.get(index)!);
      if (sha256 !== (expected.image.get(index) ?? expected.zeroHash)) wrong.push(index);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(options.concurrency, chosen.length)) }, worker));
  if (wrong.length > 0) {
    wrong.sort((a, b) => a - b);
    problems.push(
      `${wrong.length} of the ${chosen.length} blocks read back differ from the image ` +
        `(${wrong.slice(0, 5).join(", ")}${wrong.length > 5 ? ", …" : ""})`,
    );
  }
  if (problems.length > 0) throw new SnapshotVerifyError(snapshotId, problems);
  return { listed: indices.length, read: chosen.length, all: options.all };
}

/**
 * Waits until EBS lets the snapshot be read (CompleteSnapshot may answer `pending` while it
 * seals it; EBS direct reads only a completed snapshot): ListSnapshotBlocks is asked again, with
 * a growing pause up to 30 s, while it refuses the snapshot as not found or invalid, until
 * `deadline`; then its last refusal is thrown.
 */
export async function waitUntilReadable(
  reader: SnapshotBlockReader,
  snapshotId: string,
  deadline: number,
  options: { now?: () => number; signal?: AbortSignal; onWait?: (attempt: number) => void } = {},
): Promise<void> {
  const now = options.now ?? Date.now;
  for (let attempt = 1; ; attempt += 1) {
    try {
      await reader.listBlocks(snapshotId);
      return;
    } catch (error) {
      const notYet = error instanceof EbsCallError && (error.kind === "not-found" || error.kind === "invalid-request");
      if (!notYet || now() >= deadline || options.signal?.aborted) throw error;
      options.onWait?.(attempt);
      await sleep(Math.min(30_000, 500 * 2 ** Math.min(attempt, 6), Math.max(0, deadline - now())));
    }
  }
}
