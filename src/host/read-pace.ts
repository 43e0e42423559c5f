/**
 * How fast the background pre-warm reads, decided from what else reads the device (pure). The
 * reads go in batches; between two batches the device's own counters (/sys/class/block/<dev>/stat)
 * tell how many bytes were read by others meanwhile: the pre-warm's bytes are known, the rest is
 * a service starting, which must never wait behind the pre-warm (an NVMe queue and EBS serve
 * reads in arrival order, whatever their I/O priority).
 *
 * - Nobody else reads: full depth (the volume is the pre-warm's alone).
 * - Someone reads, and the batch is of the images the node is about to run: the yielding depth
 *   (the service reads those very files; they are worth reading, but not ahead of it).
 * - Someone reads, and the batch is of anything else: pause, and look again after the pause; after
 *   `maxPausedMs` paused in a row one batch goes at the yielding depth, so that a node that never
 *   stops reading still gets its volume initialized.
 */

/** What the pre-warm saw of the device over its last batch or pause. */
export interface DeviceActivity {
  /** Bytes read from the device by others (the device's count minus the pre-warm's own). */
  otherBytes: number;
  /** Length of the window, in seconds. */
  seconds: number;
}

export interface PaceSettings {
  /** Depth when the device is the pre-warm's alone. */
  fullDepth: number;
  /** Depth of a batch read while others read (the images about to run, or a forced batch). */
  yieldDepth: number;
  /** How long one pause lasts (then the device is looked at again). */
  pauseMs: number;
  /** Paused this long in a row, the next batch is read anyway (at the yielding depth). */
  maxPausedMs: number;
  /** Others reading at most this many bytes per second count as quiet (a log flush, metadata). */
  quietBytesPerSecond: number;
}

export const DEFAULT_PACE: Omit<PaceSettings, "fullDepth" | "yieldDepth"> = {
  pauseMs: 100,
  maxPausedMs: 5_000,
  quietBytesPerSecond: 1024 * 1024,
};

/** `wanted`: the files of the images about to run; `rest`: everything read after them. */
export type PacePhase = "wanted" | "rest";

/** The next step: a batch at some depth, or a pause. */
export type Pace = { depth: number } | { pauseMs: number };

/** Whether others read more than a trickle over the window. */
export function othersReading(activity: DeviceActivity, settings: Pick<PaceSettings, "quietBytesPerSecond">): boolean {
  if (activity.otherBytes <= 0) return false;
  const seconds = Math.max(activity.seconds, 0.001);
  return activity.otherBytes / seconds > settings.quietBytesPerSecond;
}

/**
 * The next step after a window of `activity`, `pausedMs` paused in a row so far. An unknown
 * activity (the counters could not be read) yields: the pre-warm cannot tell it is alone.
 */
export function nextPace(
  phase: PacePhase,
  activity: DeviceActivity | undefined,
  pausedMs: number,
  settings: PaceSettings,
): Pace {
  if (activity && !othersReading(activity, settings)) return { depth: settings.fullDepth };
  if (phase === "wanted" || !activity) return { depth: settings.yieldDepth };
  if (pausedMs + settings.pauseMs > settings.maxPausedMs) return { depth: settings.yieldDepth };
  return { pauseMs: settings.pauseMs };
}

/** Bytes read so far from `/sys/class/block/<dev>/stat` text (its third field counts 512-byte sectors). */
export function parseReadBytes(statText: string): number | undefined {
  const fields = statText.trim().split(/\s+/);
  const sectors = Number(fields[2]);
  return fields.length >= 3 && Number.isSafeInteger(sectors) && sectors >= 0 ? sectors * 512 : undefined;
}

/** Splits reads into batches of at most `batchBytes` (a read larger than that is a batch alone). */
export function batchesOf<R extends { length: number }>(reads: readonly R[], batchBytes: number): R[][] {
  const batches: R[][] = [];
  let current: R[] = [];
  let bytes = 0;
  for (const read of reads) {
    if (current.length > 0 && bytes + read.length > batchBytes) {
      batches.push(current);
      current = [];
      bytes = 0;
    }
    current.push(read);
    bytes += read.length;
  }
  if (current.length > 0) batches.push(current);
  return batches;
}
