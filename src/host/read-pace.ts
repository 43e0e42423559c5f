/**
 * When the background pre-warm reads, decided from what else reads the device (pure). A service
 * starting on the node must never wait behind the pre-warm: an NVMe queue and EBS serve reads in
 * arrival order, whatever their I/O priority. So the pre-warm's fio runs for `runMs`, then is
 * stopped (SIGSTOP: it submits nothing more) and, once its reads in flight are done, the device's
 * own counters (/sys/class/block/<dev>/stat) show whether anybody else reads: then it stays
 * stopped, looking again every `pauseMs`, else it runs on (SIGCONT).
 *
 * - Nobody else reads (or a trickle: a log flush, metadata): run.
 * - Someone reads, or the pre-warm's own reads did not drain within `drainMs` (others queue with
 *   them): stay stopped; after `maxPausedMs` stopped in a row it runs one period anyway, so that a
 *   node that never stops reading still gets its volume initialized.
 * - The counters cannot be read: run (nothing tells the pre-warm it is in the way).
 */
import type { GiveWaySettings } from "../agent/ports.ts";

/** What the pre-warm saw of the device while stopped. */
export interface DeviceLook {
  /** Its own reads in flight were done within `drainMs`. */
  drained: boolean;
  /** Bytes read from the device by others during the look (the pre-warm read none). */
  otherBytes: number;
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
  drainMs: 1_000,
  quietBytesPerSecond: 1024 * 1024,
};

/** The next step: run for a while, or stay stopped for a while. */
export type Pace = { runMs: number } | { pauseMs: number };

/** Whether others read more than a trickle over the look. */
export function othersReading(look: DeviceLook, settings: Pick<PaceSettings, "quietBytesPerSecond">): boolean {
  if (!look.drained) return true;
  if (look.otherBytes <= 0) return false;
  return look.otherBytes / Math.max(look.seconds, 0.001) > settings.quietBytesPerSecond;
}

/** The next step after a look (undefined: the counters could not be read), `pausedMs` stopped in a row so far. */
export function nextPace(look: DeviceLook | undefined, pausedMs: number, settings: PaceSettings): Pace {
  if (!look || !othersReading(look, settings)) return { runMs: settings.runMs };
  if (pausedMs + settings.pauseMs > settings.maxPausedMs) return { runMs: settings.runMs };
  return { pauseMs: settings.pauseMs };
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
