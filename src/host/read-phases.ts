/**
 * The order and depth of the `files` / `device` initialization's first reads, as pure decisions:
 * the need list's files (docs/prewarm.md) before everything else. The files of the images about to
 * run come first; then those of the list's other images. With no image named (the node's images
 * unknown), the list's files are still the best guess of what a service reads first: all of them
 * come before device order.
 *
 * Depth: EBS fetches a cold volume's blocks from S3 a few at a time; a deeper queue fetches
 * nothing sooner, and a service's first read waits behind every read queued before it (NVMe and
 * EBS serve in arrival order). So, in the background run, the need list's reads keep in flight
 * what AWS's documented initialization keeps (`--bs=128k --iodepth=32`: 4 MiB, eight 512 KiB
 * snapshot blocks), not `prewarm.initialize.ioDepth` reads of up to `maxIoKiB` each. Measured on
 * the lab's cold layer (8 fetches at once, 40 ms each), 1 MiB reads: depth 4 55 MiB/s at a median
 * completion of 62 ms, depth 8 62 MiB/s at 108 ms, depth 32 52 MiB/s at 518 ms (bench/README.md).
 *
 * Pacing: the wanted files' reads are not stopped while others read the device (read-pace.ts)
 * where EBS serves them in parallel: what reads the device then is, most likely, a service
 * starting from those very files, and a read it waits behind (a few MiB at most, by the depth
 * above) fetches a block it reads next. Stopping for every look instead cost the head start a
 * third of its reads. Where the volume's throughput binds instead, every read of others (docker's
 * start, warm or cold) waits behind all of them, and a block read ahead costs the throughput twice
 * (once now, once through its file): there, once a warm read timed beside them says so
 * (holdsOthersUp), they are paced too (volume-reads.ts). The list's other files are paced in the
 * background, as device order is.
 */
import type { InitializeOptions } from "../agent/ports.ts";
import { coveringReads, type ByteRange } from "./extents.ts";
import type { DeviceRead } from "./fio.ts";

/** Bytes AWS's documented initialization keeps in flight: 32 reads of 128 KiB. */
export const FETCH_IN_FLIGHT_BYTES = 32 * 128 * 1024;

/** One fio run of the need-ordered reads. */
export interface ReadPhase {
  name: "prewarm-need" | "prewarm-listed";
  /** In the files' order (first read at start first), each range in reads of at most maxIoBytes. */
  reads: DeviceRead[];
  depth: number;
  /** Stopped while others read the device (the background's other reads are). */
  paced: boolean;
}

type DepthOptions = Pick<InitializeOptions, "ioDepth" | "maxIoBytes" | "yieldDepth">;

/**
 * The depth of reads a service is about to want: inline (no yieldDepth: nothing else reads yet)
 * `ioDepth`; in the background as many reads of `maxIoBytes` as fill FETCH_IN_FLIGHT_BYTES, at
 * least one, at most `ioDepth`.
 */
export function fetchDepth(init: DepthOptions): number {
  if (init.yieldDepth === undefined) return init.ioDepth;
  return Math.max(1, Math.min(init.ioDepth, Math.floor(FETCH_IN_FLIGHT_BYTES / Math.max(1, init.maxIoBytes))));
}

/**
 * The phase of the wanted files' reads: at the fetch depth, not paced from the start (what reads beside it most likely
 * reads the same files; paced later only where its queue holds others up).
 */
export function wantedPhase(init: DepthOptions): { name: "prewarm-need"; depth: number; paced: false } {
  return { name: "prewarm-need", depth: fetchDepth(init), paced: false };
}

/**
 * The need list's phases, in order: the files of the images about to run (`wanted`), then the
 * list's other files (`listed`). The listed files go at the fetch depth too when no image was
 * named (they are then the best guess), else at the background's yielding depth; only they are
 * paced. Empty phases are left out.
 */
export function needPhases(
  wanted: readonly ByteRange[],
  listed: readonly ByteRange[],
  init: DepthOptions & Pick<InitializeOptions, "images">,
): ReadPhase[] {
  const named = (init.images?.length ?? 0) > 0;
  const phases: ReadPhase[] = [
    { ...wantedPhase(init), reads: coveringReads(wanted, init.maxIoBytes) },
    {
      name: "prewarm-listed",
      reads: coveringReads(listed, init.maxIoBytes),
      depth: named ? (init.yieldDepth ?? init.ioDepth) : fetchDepth(init),
      paced: init.yieldDepth !== undefined,
    },
  ];
  return phases.filter((phase) => phase.reads.length > 0);
}
