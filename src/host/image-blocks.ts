/**
 * A disk image read as EBS blocks: which 512 KiB blocks hold data, and their SHA-256. Read only.
 * Only the file's data is read: its data ranges come from SEEK_DATA/SEEK_HOLE, which Node does
 * not expose, through xfs_io's `seek` (xfsprogs, which the upload needs anyway for xfs_db). So an
 * empty 64 GiB image costs what its few MiB of metadata cost, not 64 GiB of reading zeros. A
 * file system without SEEK_DATA reports the whole file as data (the kernel's generic answer): the
 * scan is then a full read, never a wrong one. Unwritten (preallocated) extents read as zeros and
 * may be reported as holes: right either way, since a block of zeros needs no put on a fresh
 * snapshot (EBS reads an unwritten block as zeros), and the blocks read are still checked for
 * zeros.
 */
import { createHash } from "node:crypto";
import { open } from "node:fs/promises";
import { AgentError } from "../errors.ts";
import { run } from "../exec.ts";
import type { Logger } from "../log.ts";

/** A byte range of the file: [start, end). */
export interface DataRange {
  start: number;
  end: number;
}

/** xfs_io's `seek` gave what cannot be read as the file's data ranges. */
export class SeekDataError extends AgentError {
  constructor(path: string, problem: string) {
    super(
      `cannot tell where ${path} holds data: ${problem}`,
      "check that xfsprogs' xfs_io is installed and that the image is a readable regular file",
    );
  }
}

/**
 * Parses `xfs_io -r -c "seek -a -r 0" FILE` (pure): a header, then `DATA n` / `HOLE n` lines in
 * ascending order (`DATA EOF` when there is no data), each data range ending at the next hole or
 * at the file's end.
 */
export function parseSeekRanges(text: string, size: number): DataRange[] {
  const lines = text.split("\n").filter((line) => line.trim() !== "");
  if (lines[0]?.replace(/\s+/g, " ").trim() !== "Whence Result") throw new Error("no `Whence Result` header");
  const marks: { kind: "DATA" | "HOLE"; at: number }[] = [];
  for (const line of lines.slice(1)) {
    const match = /^(DATA|HOLE)\s+(\d+|EOF)$/.exec(line.trim());
    if (!match) throw new Error(`unexpected line ${JSON.stringify(line)}`);
    const at = match[2] === "EOF" ? size : Number(match[2]);
    if (!Number.isSafeInteger(at) || at > size || (marks.length > 0 && at < marks[marks.length - 1]!.at))
      throw new Error(`offset ${match[2]} out of order or past the end (${size})`);
    marks.push({ kind: match[1] as "DATA" | "HOLE", at });
  }
  const ranges: DataRange[] = [];
  marks.forEach((mark, i) => {
    if (mark.kind !== "DATA") return;
    const end = marks.slice(i + 1).find((next) => next.kind === "HOLE")?.at ?? size;
    if (end > mark.at) ranges.push({ start: mark.at, end });
  });
  return ranges;
}

/** The file's data ranges, from SEEK_DATA/SEEK_HOLE (xfs_io). */
export async function dataRanges(path: string, size: number, log?: Logger): Promise<DataRange[]> {
  const result = await run("xfs_io", ["-r", "-c", "seek -a -r 0", path], { log, check: false });
  if (result.exitCode !== 0)
    throw new SeekDataError(path, `xfs_io exited with ${result.exitCode}: ${result.stderr.trim()}`);
  try {
    return parseSeekRanges(result.stdout, size);
  } catch (error) {
    throw new SeekDataError(path, `xfs_io printed ${(error as Error).message}`);
  }
}

/** The indices of the `blockSize` blocks the ranges touch, ascending, as runs [first, last]. */
export function blockRuns(ranges: readonly DataRange[], blockSize: number): [number, number][] {
  const runs: [number, number][] = [];
  for (const { start, end } of ranges) {
    const first = Math.floor(start / blockSize);
    const last = Math.floor((end - 1) / blockSize);
    const previous = runs[runs.length - 1];
    if (previous && first <= previous[1] + 1) previous[1] = Math.max(previous[1], last);
    else runs.push([first, last]);
  }
  return runs;
}

export interface ImageScan {
  bytes: number;
  /** Index → base64 SHA-256, for the blocks holding data. */
  blocks: Map<number, string>;
}

export function sha256(data: Uint8Array): Buffer {
  return createHash("sha256").update(data).digest();
}

/** The base64 SHA-256 of a block of zeros of `blockSize` bytes. */
export function zeroBlockHash(blockSize: number): string {
  return sha256(Buffer.alloc(blockSize)).toString("base64");
}

/**
 * The blocks of `path` holding data and their hashes: only the blocks its data ranges touch are
 * read (a short last block counts as padded with zeros, as EBS pads it), in runs of up to 32
 * blocks, each block checked for zeros.
 */
export async function scanImage(
  path: string,
  blockSize: number,
  options: { log?: Logger; onProgress?: (blocksRead: number, blocksToRead: number) => void } = {},
): Promise<ImageScan> {
  const file = await open(path, "r");
  try {
    const { size } = await file.stat();
    const runs = blockRuns(await dataRanges(path, size, options.log), blockSize);
    const toRead = runs.reduce((sum, [first, last]) => sum + last - first + 1, 0);
    options.onProgress?.(0, toRead);
    const chunkBlocks = 32;
    const buffer = Buffer.alloc(blockSize * chunkBlocks);
    const blocks = new Map<number, string>();
    let read = 0;
    for (const [first, last] of runs) {
      for (let index = first; index <= last; index += chunkBlocks) {
        const count = Math.min(chunkBlocks, last - index + 1);
        const chunk = buffer.subarray(0, count * blockSize);
        await readFully(file, chunk, index * blockSize);
        for (let i = 0; i < count; i += 1) {
          const block = chunk.subarray(i * blockSize, (i + 1) * blockSize);
          if (!isZero(block)) blocks.set(index + i, sha256(block).toString("base64"));
        }
        read += count;
        options.onProgress?.(read, toRead);
      }
    }
    return { bytes: size, blocks };
  } finally {
    await file.close();
  }
}

/** One block of the image (zero-padded past its end). */
export async function readImageBlock(path: string, index: number, blockSize: number): Promise<Buffer> {
  const file = await open(path, "r");
  try {
    const buffer = Buffer.alloc(blockSize);
    await readFully(file, buffer, index * blockSize);
    return buffer;
  } finally {
    await file.close();
  }
}

async function readFully(file: Awaited<ReturnType<typeof open>>, buffer: Buffer, position: number): Promise<void> {
  let offset = 0;
  while (offset < buffer.length) {
    const { bytesRead } = await file.read(buffer, offset, buffer.length - offset, position + offset);
    // Past the end: the rest reads as zeros, as EBS pads a short last block.
    if (bytesRead === 0) return void buffer.fill(0, offset);
    offset += bytesRead;
  }
}

const ZEROS = Buffer.alloc(64 * 1024);

function isZero(buffer: Buffer): boolean {
  for (let offset = 0; offset < buffer.length; offset += ZEROS.length) {
    const end = Math.min(buffer.length, offset + ZEROS.length);
    if (!buffer.subarray(offset, end).equals(ZEROS.subarray(0, end - offset))) return false;
  }
  return true;
}
