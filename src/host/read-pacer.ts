/**
 * The background pre-warm's pacing carried out on a running fio: it reads for `runMs`, is stopped
 * (SIGSTOP), looked at through the device's counters (others' reads and writes), and continued
 * (SIGCONT) or left stopped as read-pace.ts decides, until its reads are done. The counters and the clock come from the
 * caller, so that the loop runs in tests without a device or real time. And the one look (watchQueue) that decides
 * whether reads otherwise left unpaced (the wanted files') hold others up, and so are paced too.
 */
import { readFile, realpath } from "node:fs/promises";
import { basename, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { RunningCommand } from "../exec.ts";
import {
  afterLook,
  holdsOthersUp,
  nextPace,
  parseReadBytes,
  parseReadsInFlight,
  parseRequests,
  type DeviceLook,
  type Pace,
  type PaceSettings,
  type Stopped,
} from "./read-pace.ts";

/** The device's counters: bytes read, requests (reads + writes) completed, reads in flight (undefined: unreadable). */
export interface DeviceCounters {
  readBytes(): Promise<number | undefined>;
  requests(): Promise<number | undefined>;
  readsInFlight(): Promise<number | undefined>;
}

/** The device's counters from its /sys/class/block entry. */
export function deviceCounters(device: string): DeviceCounters {
  let dir: Promise<string | undefined> | undefined;
  const read = async (file: string) => {
    dir ??= realpath(device).then(
      (path) => `/sys/class/block/${basename(path)}`,
      () => undefined,
    );
    const found = await dir;
    return found ? readFile(join(found, file), "utf8").catch(() => "") : "";
  };
  return {
    readBytes: async () => parseReadBytes(await read("stat")),
    requests: async () => parseRequests(await read("stat")),
    readsInFlight: async () => parseReadsInFlight(await read("inflight")),
  };
}

/** The pacer's time. */
export interface PacerClock {
  /** Waits `ms`; false when `done` came first. */
  sleep(ms: number, done?: AbortSignal): Promise<boolean>;
  /** Milliseconds, for the lengths of the looks. */
  now(): number;
}

export const REAL_CLOCK: PacerClock = {
  sleep: (ms, done) =>
    sleep(ms, undefined, done ? { signal: done } : {}).then(
      () => true,
      () => false,
    ),
  now: () => Date.now(),
};

/** How often the reads were stopped, for the log. */
export interface PaceTally {
  /** Looks taken after a run (fio stopped to see whether others read). */
  looks: number;
  /** Pauses: fio left stopped while others read. */
  pauses: number;
  pausedMs: number;
}

export interface PaceReadsOptions {
  /** The fio process, once it runs (signalled through its child handle: RunningCommand). */
  reads: () => Pick<RunningCommand, "signal"> | undefined;
  counters: DeviceCounters;
  settings: PaceSettings;
  /** The reads ended: pacing stops and fio is left running. */
  done: AbortSignal;
  /** The reads are being stopped (SIGTERM): fio is continued, or it would not act on it. */
  stopped?: AbortSignal;
  /** Stop and look at once, not after a first run (reads that have run already and were found in the way). */
  lookFirst?: boolean;
  clock?: PacerClock;
}

/**
 * Stops and continues the reads as nextPace decides, until `done`; leaves them running. The
 * signals go through fio's child handle, never to a bare pid: between fio's exit and `done`, its
 * pid could be another process's already.
 */
export async function paceReads(options: PaceReadsOptions): Promise<PaceTally> {
  const { counters, settings, done, stopped } = options;
  const clock = options.clock ?? REAL_CLOCK;
  const signal = (sig: "SIGSTOP" | "SIGCONT") => {
    try {
      return options.reads()?.signal(sig) ?? false;
    } catch {
      return false;
    }
  };
  const onStop = () => signal("SIGCONT");
  stopped?.addEventListener("abort", onStop, { once: true });
  const tally: PaceTally = { looks: 0, pauses: 0, pausedMs: 0 };
  try {
    let step: Pace = { runMs: options.lookFirst ? 0 : settings.runMs };
    let stop: Stopped = { pausedMs: 0, quietMs: 0 };
    for (;;) {
      let seen: DeviceLook | undefined;
      if ("runMs" in step) {
        stop = { pausedMs: 0, quietMs: 0 };
        if (!(await clock.sleep(step.runMs, done))) return tally;
        // Being stopped: fio is never stopped again (SIGSTOP would hold its SIGTERM, which it
        // handles, until a SIGCONT: up to maxPausedMs while others read, at a shutdown).
        if (stopped?.aborted) return tally;
        if (!signal("SIGSTOP")) continue;
        tally.looks++;
        seen = await look(counters, settings.drainMs, settings.pauseMs, done, clock);
      } else {
        tally.pauses++;
        tally.pausedMs += step.pauseMs;
        // The pause is the next look: fio is stopped and drained, whatever the device does is others'.
        seen = await look(counters, 0, step.pauseMs, done, clock);
      }
      step = nextPace(seen, stop, settings);
      if ("pauseMs" in step) stop = afterLook(stop, seen, step.pauseMs, settings);
      if (done.aborted || stopped?.aborted) return tally;
      if ("runMs" in step) signal("SIGCONT");
    }
  } finally {
    signal("SIGCONT");
    stopped?.removeEventListener("abort", onStop);
  }
}

/**
 * A look at the device with the pre-warm stopped: waits up to `drainMs` for the reads in flight
 * to be done, then counts the requests completed over `windowMs` (all of them others').
 */
async function look(
  counters: DeviceCounters,
  drainMs: number,
  windowMs: number,
  done: AbortSignal,
  clock: PacerClock,
): Promise<DeviceLook | undefined> {
  let drained = true;
  if (drainMs > 0) {
    const until = clock.now() + drainMs;
    for (;;) {
      const inFlight = await counters.readsInFlight();
      if (inFlight === undefined) return undefined;
      if (inFlight === 0) break;
      if (clock.now() >= until || done.aborted) {
        drained = false;
        break;
      }
      await clock.sleep(5);
    }
  }
  const start = await counters.requests();
  const started = clock.now();
  await clock.sleep(windowMs, done);
  const end = await counters.requests();
  if (start === undefined || end === undefined) return undefined;
  return { drained, otherRequests: Math.max(0, end - start), seconds: (clock.now() - started) / 1000 };
}

/** What a look at the pre-warm's queue found (read-pace.ts, holdsOthersUp). */
export interface QueueVerdict {
  holdsUp: boolean;
  /** The warm reads' times, in milliseconds. */
  warmReadMs: number[];
  /** The pre-warm's reads' median completion then. */
  readP50Ms: number;
}

export interface WatchQueueOptions {
  /** The reads' median completion so far and offsets of a few reads surely done, once fio has reported enough. */
  progress: () => { readP50Ms: number; doneOffsets: readonly number[] } | undefined;
  /** Times a warm read at `offset` (warm-read.ts); undefined: no figure. */
  timeRead: (offset: number) => Promise<number | undefined>;
  /** The reads ended: nothing to decide. */
  done: AbortSignal;
  /** How often progress is looked at until it is enough (default 100 ms). */
  lookEveryMs?: number;
  clock?: PacerClock;
}

/**
 * Once the reads have run long enough to be surely queued (progress), times a warm read at each of the offsets (at
 * once) and tells whether the reads hold others up. Undefined: the reads ended first, or no warm read could be timed.
 */
export async function watchQueue(options: WatchQueueOptions): Promise<QueueVerdict | undefined> {
  const clock = options.clock ?? REAL_CLOCK;
  for (;;) {
    if (!(await clock.sleep(options.lookEveryMs ?? 100, options.done))) return undefined;
    const progress = options.progress();
    if (!progress) continue;
    // At once: each waits behind the same queue, not behind the others' few KiB.
    const timed = await Promise.all(progress.doneOffsets.map((offset) => options.timeRead(offset)));
    if (options.done.aborted) return undefined;
    const warmReadMs = timed.filter((ms): ms is number => ms !== undefined);
    if (warmReadMs.length === 0) return undefined;
    return { holdsUp: holdsOthersUp(warmReadMs, progress.readP50Ms), warmReadMs, readP50Ms: progress.readP50Ms };
  }
}
