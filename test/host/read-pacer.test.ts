/**
 * The pacing loop on a running fio (src/host/read-pacer.ts), with a fake clock, fake device
 * counters and a fake fio handle: the settings it is given are the lengths it runs and pauses
 * for, its threshold decides whether others' reads keep fio stopped, and fio is left running.
 * No device, no real time: the clock moves only when the pacer sleeps.
 */
import t from "tap";
import { DEFAULT_PACE, type PaceSettings } from "../../src/host/read-pace.ts";
import { paceReads, type PacerClock } from "../../src/host/read-pacer.ts";

const MiB = 1024 * 1024;

/** A world where others read `othersBytesPerSecond` all along; the reads end at `endMs`. */
function world(othersBytesPerSecond: number, endMs: number, fioAlive = true) {
  let now = 0;
  const end = new AbortController();
  const sleeps: number[] = [];
  const signals: string[] = [];
  const clock: PacerClock = {
    now: () => now,
    sleep: async (ms, until) => {
      await new Promise((resolve) => setImmediate(resolve)); // a turn of the loop: a test gone wrong can time out
      sleeps.push(ms);
      now += ms;
      if (now >= endMs) end.abort();
      return !until?.aborted;
    },
  };
  return {
    clock,
    done: end.signal,
    sleeps,
    signals,
    counters: {
      readBytes: async () => Math.floor((othersBytesPerSecond * now) / 1000),
      readsInFlight: async () => 0,
    },
    reads: () => ({
      signal: (sig: NodeJS.Signals) => {
        signals.push(sig);
        return fioAlive;
      },
    }),
  };
}

const settings: PaceSettings = {
  runMs: 40,
  pauseMs: 7,
  maxPausedMs: 21,
  drainMs: 1_000,
  quietBytesPerSecond: 2 * MiB,
};

t.test(
  "others above the threshold: fio runs runMs, then stays stopped pauseMs at a time up to maxPausedMs",
  async (t) => {
    const w = world(3 * MiB, 1_000);
    const tally = await paceReads({ ...w, settings });
    const runs = w.sleeps.filter((ms) => ms === settings.runMs).length;
    t.ok(runs >= 2, "several periods of runMs");
    t.same(
      [...new Set(w.sleeps)].sort((a, b) => a - b),
      [settings.pauseMs, settings.runMs],
      "every sleep is a run (runMs) or a look (pauseMs)",
    );
    // After each run: the look, then pauses while busy until maxPausedMs would be passed.
    const perRun = settings.maxPausedMs / settings.pauseMs;
    t.ok(tally.pauses >= perRun * (runs - 1), `${perRun} pauses after each run (${tally.pauses} for ${runs} runs)`);
    t.equal(tally.pausedMs, tally.pauses * settings.pauseMs, "each pause lasts pauseMs");
    t.same(w.sleeps.slice(0, 1 + 1 + perRun), [40, 7, 7, 7, 7], "run, look, three pauses (21 ms), then run again");
    t.equal(w.sleeps[1 + 1 + perRun + 0], settings.runMs, "runs anyway once maxPausedMs is reached");
    t.equal(w.signals.at(-1), "SIGCONT", "fio is left running");
  },
);

t.test("others below the threshold: fio is stopped only for the looks and always continued", async (t) => {
  const w = world(3 * MiB, 1_000);
  const tally = await paceReads({ ...w, settings: { ...settings, quietBytesPerSecond: 4 * MiB } });
  t.equal(tally.pauses, 0, "never paused: 3 MiB/s counts as quiet under a 4 MiB/s threshold");
  t.ok(tally.looks > 0, "looked");
  t.same(
    [...new Set(w.sleeps)].sort((a, b) => a - b),
    [7, 40],
    "runs of 40 ms, looks of 7 ms",
  );
  t.same(w.signals.slice(0, 4), ["SIGSTOP", "SIGCONT", "SIGSTOP", "SIGCONT"]);
});

t.test("the defaults: runs of 250 ms, looks of 100 ms, others under 1 MiB/s are quiet", async (t) => {
  const quiet = world(0.5 * MiB, 3_000);
  t.equal((await paceReads({ ...quiet, settings: DEFAULT_PACE })).pauses, 0);
  t.same(quiet.sleeps.slice(0, 2), [250, 100]);
  const busy = world(2 * MiB, 3_000);
  t.ok((await paceReads({ ...busy, settings: DEFAULT_PACE })).pauses > 0, "2 MiB/s of others: paused");
});

t.test("fio gone (the handle sends nothing): no look is taken, nothing is counted", async (t) => {
  const w = world(3 * MiB, 500, false);
  const tally = await paceReads({ ...w, settings });
  t.same(tally, { looks: 0, pauses: 0, pausedMs: 0 });
  t.ok(
    w.sleeps.every((ms) => ms === settings.runMs),
    "only runs",
  );
});

t.test("a stop of the reads (SIGTERM) continues fio first, so that it acts on it", async (t) => {
  const w = world(3 * MiB, 1_000);
  const stopped = new AbortController();
  let signalsAtStop = -1;
  const clock: PacerClock = {
    ...w.clock,
    sleep: async (ms, until) => {
      // Stopped while paused: fio was stopped (SIGSTOP) by the look before.
      if (w.signals.at(-1) === "SIGSTOP" && signalsAtStop < 0 && w.sleeps.length > 3) {
        signalsAtStop = w.signals.length;
        stopped.abort();
      }
      return w.clock.sleep(ms, until);
    },
  };
  await paceReads({ ...w, clock, settings, stopped: stopped.signal });
  t.ok(signalsAtStop > 0, "the stop came while fio was stopped");
  t.equal(w.signals[signalsAtStop], "SIGCONT", "continued at once");
  t.equal(w.signals.at(-1), "SIGCONT");
});
