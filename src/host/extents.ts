/**
 * Where a filesystem's data lies on its device: the allocated ranges, i.e. everything except
 * the free space. On XFS (the cache volumes' filesystem) the free extents come from
 * `xfs_spaceman -c "freesp -d"` (GETFSMAP, works on a mounted filesystem without rmapbt) and the
 * geometry from its `info` command (what `xfs_info` prints for a mounted filesystem: xfs_info is a
 * shell script that runs findmnt and then `xfs_spaceman -c info`); both in one process.
 * Allocated = every allocation group minus its free extents, so file
 * data, directories, inodes, btrees and the log are all in it. Parsing and range arithmetic are
 * pure (tested with recorded output); only usedRanges() runs the tools.
 */
import { AgentError } from "../errors.ts";
import { run } from "../exec.ts";
import type { Logger } from "../log.ts";
import type { DeviceRead } from "./fio.ts";

/** A byte range of the device: [start, end). */
export interface ByteRange {
  start: number;
  end: number;
}

/** What xfs_info says about the data section. */
export interface XfsGeometry {
  blockSize: number;
  agCount: number;
  /** Blocks per allocation group (the last one may be shorter). */
  agBlocks: number;
  /** Blocks of the data section. */
  dataBlocks: number;
}

/** A free extent, in filesystem blocks, as `freesp -d` lists it. */
export interface FreeExtent {
  ag: number;
  start: number;
  length: number;
}

/** Parses `xfs_info <mountpoint>`. */
export function parseXfsInfo(text: string): XfsGeometry {
  const ag = /agcount=(\d+),\s*agsize=(\d+)\s+blks/.exec(text);
  const data = /^data\s+=\s*bsize=(\d+)\s+blocks=(\d+)/m.exec(text);
  if (!ag || !data)
    throw new AgentError("xfs_info printed no agcount/agsize/bsize/blocks", "check that the volume holds XFS");
  return { agCount: Number(ag[1]), agBlocks: Number(ag[2]), blockSize: Number(data[1]), dataBlocks: Number(data[2]) };
}

/**
 * Parses `xfs_spaceman -c "freesp -d"`: the `agno agbno len` lines before the histogram (the
 * geometry that `-c info` prints before them has no line of three bare numbers).
 */
export function parseFreesp(text: string): FreeExtent[] {
  const extents: FreeExtent[] = [];
  for (const line of text.split("\n")) {
    if (/^\s*from\s+to\s+extents/.test(line)) break;
    const m = /^\s*(\d+)\s+(\d+)\s+(\d+)\s*$/.exec(line);
    if (m) extents.push({ ag: Number(m[1]), start: Number(m[2]), length: Number(m[3]) });
  }
  return extents;
}

/**
 * Sorts and merges ranges; ranges closer than `gap` bytes are joined (reading a little free space is cheaper than
 * another I/O).
 */
export function mergeRanges(ranges: readonly ByteRange[], gap = 0): ByteRange[] {
  const sorted = ranges.filter((r) => r.end > r.start).sort((a, b) => a.start - b.start);
  const out: ByteRange[] = [];
  for (const range of sorted) {
    const last = out.at(-1);
    if (last && range.start <= last.end + gap) last.end = Math.max(last.end, range.end);
    else out.push({ ...range });
  }
  return out;
}

/** The allocated byte ranges: the data section minus the free extents. */
export function allocatedRanges(geometry: XfsGeometry, free: readonly FreeExtent[]): ByteRange[] {
  const { blockSize, agBlocks, dataBlocks } = geometry;
  const freeBytes = mergeRanges(
    free.map((f) => {
      const start = (f.ag * agBlocks + f.start) * blockSize;
      return { start, end: start + f.length * blockSize };
    }),
  );
  const size = dataBlocks * blockSize;
  const used: ByteRange[] = [];
  let at = 0;
  for (const f of freeBytes) {
    if (f.start > at) used.push({ start: at, end: Math.min(f.start, size) });
    at = Math.max(at, f.end);
  }
  if (at < size) used.push({ start: at, end: size });
  return used.filter((r) => r.end > r.start);
}

/** Bytes in the ranges. */
export function totalBytes(ranges: readonly ByteRange[]): number {
  return ranges.reduce((sum, r) => sum + (r.end - r.start), 0);
}

/** Reads of at most `maxIo` bytes covering the ranges in order, from byte `from` on (a resume point). */
export function coveringReads(ranges: readonly ByteRange[], maxIo: number, from = 0): DeviceRead[] {
  const reads: DeviceRead[] = [];
  for (const range of ranges) {
    let offset = Math.max(range.start, from);
    while (offset < range.end) {
      const length = Math.min(maxIo, range.end - offset);
      reads.push({ offset, length });
      offset += length;
    }
  }
  return reads;
}

/**
 * `count` reads of `blockSize` at offsets drawn uniformly over the allocated bytes (aligned to
 * `blockSize`): a sample that sees the data, never the empty space. `random` returns [0, 1).
 */
export function sampleReads(
  ranges: readonly ByteRange[],
  count: number,
  blockSize: number,
  random: () => number = Math.random,
): DeviceRead[] {
  const blocks = ranges
    .map((r) => ({ first: Math.ceil(r.start / blockSize), last: Math.floor(r.end / blockSize) - 1 }))
    .filter((b) => b.last >= b.first);
  const cumulative: number[] = [];
  let total = 0;
  for (const b of blocks) {
    total += b.last - b.first + 1;
    cumulative.push(total);
  }
  if (total === 0) return [];
  const reads: DeviceRead[] = [];
  for (let i = 0; i < count; i++) {
    const pick = Math.min(total - 1, Math.floor(random() * total));
    let lo = 0;
    let hi = cumulative.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cumulative[mid]! > pick) hi = mid;
      else lo = mid + 1;
    }
    const before = lo === 0 ? 0 : cumulative[lo - 1]!;
    reads.push({ offset: (blocks[lo]!.first + (pick - before)) * blockSize, length: blockSize });
  }
  return reads;
}

/** The allocated ranges of the XFS filesystem mounted at `mountPoint` (merged across gaps below `gap` bytes). */
export async function usedRanges(
  mountPoint: string,
  options: { log?: Logger; gap?: number } = {},
): Promise<ByteRange[]> {
  const remediation = "install xfsprogs (xfs_spaceman); the volume must hold XFS";
  const { stdout } = await run("xfs_spaceman", ["-c", "info", "-c", "freesp -d", mountPoint], {
    log: options.log,
    remediation,
  });
  return mergeRanges(allocatedRanges(parseXfsInfo(stdout), parseFreesp(stdout)), options.gap ?? 0);
}

/**
 * The ranges of `ranges` outside `minus` (both sorted and merged, as mergeRanges gives them):
 * what remains to read once `minus` was read.
 */
export function subtractRanges(ranges: readonly ByteRange[], minus: readonly ByteRange[]): ByteRange[] {
  const out: ByteRange[] = [];
  let j = 0;
  for (const range of ranges) {
    let start = range.start;
    while (j < minus.length && minus[j]!.end <= start) j++;
    for (let k = j; k < minus.length && minus[k]!.start < range.end; k++) {
      if (minus[k]!.start > start) out.push({ start, end: minus[k]!.start });
      start = Math.max(start, minus[k]!.end);
    }
    if (start < range.end) out.push({ start, end: range.end });
  }
  return out;
}

/**
 * Parses `filefrag -v -e FILE…`: each file's extents as device byte ranges, in file order. Extents
 * without a place on the device yet (delayed allocation, inline data, unknown location) are left
 * out: there is nothing to fetch for them.
 */
export function parseFilefrag(text: string): Map<string, ByteRange[]> {
  const files = new Map<string, ByteRange[]>();
  let current: ByteRange[] | undefined;
  let blockSize = 0;
  for (const line of text.split("\n")) {
    const head = /^File size of (.*) is \d+ \(\d+ blocks? of (\d+) bytes\)/.exec(line);
    if (head) {
      current = [];
      blockSize = Number(head[2]);
      files.set(head[1]!, current);
      continue;
    }
    const extent = /^\s*\d+:\s+\d+\.\.\s*\d+:\s+(\d+)\.\.\s*(\d+):\s+(\d+):.*$/.exec(line);
    if (!extent || !current) continue;
    if (/unknown_loc|delalloc|inline|not_aligned|encoded/.test(line)) continue;
    const start = Number(extent[1]) * blockSize;
    current.push({ start, end: start + Number(extent[3]) * blockSize });
  }
  return files;
}
