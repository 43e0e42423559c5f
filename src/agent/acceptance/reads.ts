/**
 * Where the acceptance run reads (pure): one region of never-read blocks per queue depth (1, 8,
 * 32), each read a few KiB at the start of its own EBS block (one fetch from the snapshot per
 * read, never a block an earlier read fetched), and the warm region read twice: once to initialize
 * it, then timed. Regions lie in the filesystem's data where it has enough of it in one piece (on
 * EBS a block never written to the snapshot may read as zeros without a fetch), else anywhere on
 * the device; the calibration's source says which.
 */
import type { ByteRange } from "../../host/extents.ts";

/** EBS's fetch unit: a snapshot's block (512 KiB). */
export const EBS_BLOCK_BYTES = 512 * 1024;
/** Each timed first read: one page at the start of a block (the fetch is the block's). */
export const FIRST_READ_BYTES = 4096;
/** Reads per depth: a few rounds at each depth, so that the median is a read that waited its turn. */
export const FIRST_READS = { qd1: 16, qd8: 64, qd32: 128 } as const;
/** The warm region: read once to initialize it, then again for its throughput. */
export const WARM_BYTES = 64 * 1024 * 1024;
/** The warm read's block size and depth: AWS's documented initialization read (128 KiB at depth 32). */
export const WARM_READ = { blockBytes: 128 * 1024, ioDepth: 32 } as const;

export type Depth = keyof typeof FIRST_READS;
export const DEPTHS: Record<Depth, number> = { qd1: 1, qd8: 8, qd32: 32 };

/** A region of the device the run reads, and whether it lies in the filesystem's data. */
export interface ReadRegion {
  offset: number;
  size: number;
  inData: boolean;
}

export interface ReadPlan {
  firstReads: Record<Depth, ReadRegion>;
  warm: ReadRegion;
}

/** Bytes a depth's region spans: one block per read. */
const regionBytes = (depth: Depth) => FIRST_READS[depth] * EBS_BLOCK_BYTES;

/** The block-aligned part of a range, or undefined when it holds no whole block. */
function aligned(range: ByteRange): ByteRange | undefined {
  const start = Math.ceil(range.start / EBS_BLOCK_BYTES) * EBS_BLOCK_BYTES;
  const end = Math.floor(range.end / EBS_BLOCK_BYTES) * EBS_BLOCK_BYTES;
  return end > start ? { start, end } : undefined;
}

/**
 * Disjoint regions for the three depths and the warm read, from the filesystem's allocated ranges
 * first (largest first), then the whole device; throws when the device is too small for them.
 */
export function planReads(allocated: readonly ByteRange[], deviceBytes: number): ReadPlan {
  const wanted: Array<{ key: Depth | "warm"; size: number }> = [
    { key: "qd1", size: regionBytes("qd1") },
    { key: "qd8", size: regionBytes("qd8") },
    { key: "qd32", size: regionBytes("qd32") },
    { key: "warm", size: WARM_BYTES },
  ];
  const data = allocated
    .map(aligned)
    .filter((r): r is ByteRange => r !== undefined)
    .sort((a, b) => b.end - b.start - (a.end - a.start))
    .map((r) => ({ ...r, inData: true }));
  const device = aligned({ start: 0, end: deviceBytes });
  const spaces = [...data, ...(device ? [{ ...device, inData: false }] : [])];
  const taken: ByteRange[] = [];
  const placed = new Map<Depth | "warm", ReadRegion>();
  for (const { key, size } of wanted) {
    const region = firstFit(spaces, taken, size);
    if (!region)
      throw new RangeError(
        `the volume is too small for the acceptance run's reads (${Math.ceil(deviceBytes / 2 ** 20)} MiB)`,
      );
    taken.push({ start: region.offset, end: region.offset + size });
    placed.set(key, region);
  }
  return {
    firstReads: { qd1: placed.get("qd1")!, qd8: placed.get("qd8")!, qd32: placed.get("qd32")! },
    warm: placed.get("warm")!,
  };
}

/** The first place in `spaces` where `size` bytes fit without overlapping `taken`. */
function firstFit(
  spaces: ReadonlyArray<ByteRange & { inData: boolean }>,
  taken: readonly ByteRange[],
  size: number,
): ReadRegion | undefined {
  for (const space of spaces) {
    let start = space.start;
    for (;;) {
      if (start + size > space.end) break;
      const clash = taken.find((t) => start < t.end && t.start < start + size);
      if (!clash) return { offset: start, size, inData: space.inData };
      start = clash.end;
    }
  }
  return undefined;
}
