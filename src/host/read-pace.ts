/**
 * When the background pre-warm reads, decided from what else uses the device (pure). A service
 * starting on the node must never wait behind the pre-warm: an NVMe queue and EBS serve reads in
 * arrival order, whatever their I/O priority. So the pre-warm's fio runs for `runMs`, then is
 * stopped (SIGSTOP: it submits nothing more) and, once its reads in flight are done, the device's
 * own counters (/sys/class/block/<dev>/stat) show whether anybody else reads or writes: then it
 * stays stopped, looking again every `pauseMs`, else it runs on (SIGCONT).
 *
 * - Others are counted in requests (reads and writes completed), not bytes: a service's start is
 *   mostly small requests (its files' first blocks, docker's metadata, the container's own
 *   writes) with gaps of CPU work between them. Measured on the lab's cold volumes (bench/cold.ts,
 *   4 containers starting while the pre-warm read on): their reads stayed under a threshold of
 *   1 MiB/s in most looks (0-3 stops in 4-9 looks a service), and the pre-warm read on beside
 *   them. Any request of others counts (`quietIops` 0) unless told otherwise.
 * - Once stopped for others, it stays stopped until they have been quiet for `settleMs` in a row:
 *   a look that falls in one of the start's gaps would otherwise let 250 ms of the pre-warm's
 *   reads in ahead of the start's next ones.
 * - Its own reads that did not drain within `drainMs` (others queue with them): stay stopped.
 * - After `maxPausedMs` stopped in a row it runs one period anyway, so that a node that never
 *   stops reading still gets its volume initialized.
 * - The counters cannot be read: run (nothing tells the pre-warm it is in the way).
 */
import type { GiveWaySettings } from "../agent/ports.ts";

/** What the pre-warm saw of the device while stopped. */
export interface DeviceLook {
  /** Its own reads in flight were done within `drainMs`. */
  drained: boolean;
  /** Reads and writes completed by others during the look (the pre-warm made none). */
  otherRequests: number;
  /** Length of the look, in seconds. */
  seconds: number;
}

/** The pacing: the settings the agent gives (config `prewarm.giveWay`), and how long a drain may take. */
export interface PaceSettings extends GiveWaySettings {
  /** How long the pre-warm's reads in flight may take to complete once it is stopped. */
  drainMs: number;
}

/** The pacing when the agent gives none: the config's defaults (a test holds them equal), and the drain. */
export const DEFAULT_PACE: PaceSettings = {
  runMs: 250,
  pauseMs: 100,
  maxPausedMs: 5_000,
  settleMs: 1_000,
  drainMs: 1_000,
  quietIops: 0,
};

/** How long fio has been stopped in a row, and for how long of that others have been quiet. */
export interface Stopped {
  /** Paused so far in a row, the pause the current look is taken in included (0: the look after a run). */
  pausedMs: number;
  /** Milliseconds of looks without others since the last look that saw them, the current look not included. */
  quietMs: number;
}

/** The next step: run for a while, or stay stopped for a while. */
export type Pace = { runMs: number } | { pauseMs: number };

/** Whether others used the device over the look: more requests than `quietIops`, or own reads that did not drain. */
export function othersActive(look: DeviceLook, settings: Pick<PaceSettings, "quietIops">): boolean {
  if (!look.drained) return true;
  if (look.otherRequests <= 0) return false;
  return look.otherRequests / Math.max(look.seconds, 0.001) > settings.quietIops;
}

/** The next step after a look (undefined: the counters could not be read), given the stop so far. */
export function nextPace(look: DeviceLook | undefined, stopped: Stopped, settings: PaceSettings): Pace {
  if (!look) return { runMs: settings.runMs };
  const active = othersActive(look, settings);
  // Quiet after a run: nobody has been seen since the last stop ended, the device is the pre-warm's.
  if (!active && stopped.pausedMs === 0) return { runMs: settings.runMs };
  // Quiet long enough after others: they are done (or between services: the next look will tell).
  if (!active && stopped.quietMs + look.seconds * 1000 >= settings.settleMs) return { runMs: settings.runMs };
  if (stopped.pausedMs + settings.pauseMs > settings.maxPausedMs) return { runMs: settings.runMs };
  return { pauseMs: settings.pauseMs };
}

/** The stop after a look that chose a pause of `pauseMs`: the pause counted, the quiet grown or restarted. */
export function afterLook(
  stopped: Stopped,
  look: DeviceLook | undefined,
  pauseMs: number,
  settings: PaceSettings,
): Stopped {
  const seen = look !== undefined && othersActive(look, settings);
  const lookMs = look ? look.seconds * 1000 : 0;
  return { pausedMs: stopped.pausedMs + pauseMs, quietMs: seen ? 0 : stopped.quietMs + lookMs };
}

/** The device's request counters from `/sys/class/block/<dev>/stat` text: reads and writes completed. */
export function parseRequests(statText: string): number | undefined {
  const fields = statText.trim().split(/\s+/);
  const reads = fields[0] ?? "";
  const writes = fields[4] ?? "";
  return /^\d+$/.test(reads) && /^\d+$/.test(writes) ? Number(reads) + Number(writes) : undefined;
}

/** Bytes read so far from `/sys/class/block/<dev>/stat` text (its third field counts 512-byte sectors). */
export function parseReadBytes(statText: string): number | undefined {
  const fields = statText.trim().split(/\s+/);
  const sectors = Number(fields[2]);
  return fields.length >= 3 && /^\d+$/.test(fields[2] ?? "") && Number.isSafeInteger(sectors)
    ? sectors * 512
    : undefined;
}

/** Reads in flight from `/sys/class/block/<dev>/inflight` text (`<reads> <writes>`). */
export function parseReadsInFlight(inflightText: string): number | undefined {
  const first = inflightText.trim().split(/\s+/)[0] ?? "";
  return /^\d+$/.test(first) ? Number(first) : undefined;
}

/**
 * Whether the pre-warm's reads hold others up on the volume: where the volume's throughput binds (not its fetches),
 * every read of others, warm or cold, waits behind the bytes the pre-warm has queued, and a read ahead costs the
 * volume's throughput twice (once now, once when the service reads the block again through its file). Where fetches
 * bind, a warm block is served at once beside them. So: warm blocks' reads timed while the pre-warm reads
 * (`warmReadMs`) against the pre-warm's own reads' median completion (`readP50Ms`). It holds others up when the
 * median warm read waited a quarter of that or more, and longer than any warm read of a volume takes
 * (QUEUED_WARM_READ_MS). The median, not the fastest: the throughput's queue empties for a moment while all the
 * pre-warm's reads wait for their fetches (a warm read then passes: the lab's 10 ms fetches at 125 MiB/s, one of
 * three 0.9 ms, the others 10-20 ms), and one of the blocks may still have been cold (its fetch's time).
 */
export function holdsOthersUp(warmReadMs: readonly number[], readP50Ms: number): boolean {
  if (warmReadMs.length === 0 || !(readP50Ms > 0)) return false;
  const sorted = [...warmReadMs].sort((a, b) => a - b);
  const median = sorted[(sorted.length - 1) >> 1]!;
  return median >= QUEUED_WARM_READ_MS && median >= readP50Ms / 4;
}

/** A warm 4 KiB read slower than this most likely waited behind others (AWS gives gp3 single-digit milliseconds). */
export const QUEUED_WARM_READ_MS = 5;
