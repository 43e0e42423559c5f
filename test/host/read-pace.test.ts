/**
 * The background pre-warm's pacing (src/host/read-pace.ts): it runs while the device is its own,
 * stays stopped while others read or write (one request is enough) and until they have been quiet
 * for settleMs (or while its own reads do not drain), runs one period after a long pause all the
 * same, and runs when the counters cannot be read.
 */
import t from "tap";
import {
  afterLook,
  DEFAULT_PACE,
  holdsOthersUp,
  nextPace,
  othersActive,
  parseReadBytes,
  parseReadsInFlight,
  parseRequests,
  QUEUED_WARM_READ_MS,
  type DeviceLook,
  type Stopped,
} from "../../src/host/read-pace.ts";

const settings = DEFAULT_PACE;
const busy: DeviceLook = { drained: true, otherRequests: 1, seconds: 0.1 };
const quiet: DeviceLook = { drained: true, otherRequests: 0, seconds: 0.1 };
const afterRun: Stopped = { pausedMs: 0, quietMs: 0 };

t.test("alone on the device after a run: run", async (t) => {
  t.same(nextPace(quiet, afterRun, settings), { runMs: settings.runMs });
  t.same(nextPace({ drained: true, otherRequests: 0, seconds: 0 }, afterRun, settings), { runMs: settings.runMs });
});

t.test("one read or write of others in a look: stay stopped, looking again every pauseMs", async (t) => {
  t.same(nextPace(busy, afterRun, settings), { pauseMs: settings.pauseMs });
  t.same(nextPace(busy, { pausedMs: settings.maxPausedMs - settings.pauseMs, quietMs: 0 }, settings), {
    pauseMs: settings.pauseMs,
  });
});

t.test("stopped for others: quiet looks keep it stopped until settleMs of quiet in a row", async (t) => {
  // Others seen in the look after a run, then nothing: 100 ms looks until 1 s of quiet.
  let stop = afterLook(afterRun, busy, settings.pauseMs, settings);
  t.same(stop, { pausedMs: settings.pauseMs, quietMs: 0 }, "others seen: the quiet count starts over");
  const steps: string[] = [];
  for (let i = 0; i < 20; i++) {
    const step = nextPace(quiet, stop, settings);
    steps.push("runMs" in step ? "run" : "pause");
    if ("runMs" in step) break;
    stop = afterLook(stop, quiet, step.pauseMs, settings);
  }
  t.equal(steps.length, settings.settleMs / 100, "runs on the look that completes settleMs of quiet");
  t.same(steps.slice(0, -1), Array(steps.length - 1).fill("pause"));
  t.equal(steps.at(-1), "run");
});

t.test("others again while settling: the quiet count starts over", async (t) => {
  const settling: Stopped = { pausedMs: 800, quietMs: 700 };
  t.same(afterLook(settling, busy, 100, settings), { pausedMs: 900, quietMs: 0 });
  t.same(afterLook(settling, quiet, 100, settings), { pausedMs: 900, quietMs: 800 });
  t.same(nextPace(quiet, { pausedMs: 900, quietMs: 900 }, settings), { runMs: settings.runMs }, "900 + 100 ms");
  t.same(nextPace(quiet, { pausedMs: 900, quietMs: 800 }, settings), { pauseMs: settings.pauseMs });
});

t.test("settleMs 0: the first quiet look runs, as before the settling", async (t) => {
  t.same(nextPace(quiet, { pausedMs: 300, quietMs: 0 }, { ...settings, settleMs: 0 }), { runMs: settings.runMs });
});

t.test("own reads not drained: others queue with them, stay stopped", async (t) => {
  t.same(nextPace({ drained: false, otherRequests: 0, seconds: 0.05 }, afterRun, settings), {
    pauseMs: settings.pauseMs,
  });
});

t.test("stopped maxPausedMs in a row: one period of running anyway, settled or not", async (t) => {
  t.same(nextPace(busy, { pausedMs: settings.maxPausedMs, quietMs: 0 }, settings), { runMs: settings.runMs });
  t.same(nextPace(quiet, { pausedMs: settings.maxPausedMs, quietMs: 100 }, settings), { runMs: settings.runMs });
});

t.test("counters that cannot be read: run (nothing says the pre-warm is in the way)", async (t) => {
  t.same(nextPace(undefined, afterRun, settings), { runMs: settings.runMs });
  t.same(nextPace(undefined, { pausedMs: 400, quietMs: 0 }, settings), { runMs: settings.runMs });
});

t.test("others counted in requests: any by default, a rate above quietIops when one is set", async (t) => {
  t.ok(othersActive({ drained: true, otherRequests: 1, seconds: 1 }, settings), "one 4 KiB read of others");
  t.notOk(othersActive({ drained: true, otherRequests: 0, seconds: 1 }, settings));
  t.notOk(othersActive({ drained: true, otherRequests: 5, seconds: 1 }, { quietIops: 10 }));
  t.ok(othersActive({ drained: true, otherRequests: 2, seconds: 0.1 }, { quietIops: 10 }), "20 per second");
  t.ok(othersActive({ drained: true, otherRequests: 1, seconds: 0 }, { quietIops: 500 }), "no division by 0");
});

t.test("the device's counters from its sysfs files", async (t) => {
  const stat = "    4538        0   526064     1745      142       98    10912      265        0     1880     2011\n";
  t.equal(parseReadBytes(stat), 526064 * 512);
  t.equal(parseRequests(stat), 4538 + 142, "reads and writes completed");
  t.equal(parseRequests("1 2 3 4"), undefined);
  t.equal(parseRequests("1 2 3 4 x"), undefined);
  t.equal(parseReadBytes(""), undefined);
  t.equal(parseReadBytes("1 2"), undefined);
  t.equal(parseReadBytes("1 2 x 4"), undefined);
  t.equal(parseReadsInFlight("       3        0\n"), 3);
  t.equal(parseReadsInFlight(""), undefined);
  t.equal(parseReadsInFlight("x 0"), undefined);
});

t.test(
  "the pre-warm holds others up where the median warm read waits a quarter of its reads' time and 5 ms",
  async (t) => {
    // The lab's 10 ms fetches at gp3's 125 MiB/s: 4 MiB queued, a warm read waits 10-20 ms, the reads take 32 ms.
    t.ok(holdsOthersUp([16, 10.2, 15.5], 32), "the throughput binds");
    t.ok(
      holdsOthersUp([0.9, 20.1, 10.6], 32),
      "one warm read passed in a moment the queue was empty: the median counts",
    );
    // 40 ms fetches, 8 at once: a warm read passes them, or waits a little behind a batch of fetches done at once.
    t.notOk(holdsOthersUp([0.6, 1.4, 0.4], 44), "the fetches bind");
    t.notOk(holdsOthersUp([12, 2.8, 8.5], 59.5), "the fetches bind, a cap behind them at times");
    // One fetch at a time: a cold read waits for the slot, a warm one does not.
    t.notOk(holdsOthersUp([0.3, 0.3, 0.3], 80), "the fetch slot binds");
    t.notOk(holdsOthersUp([40, 0.3, 0.5], 40), "one block was still cold: its fetch's time is not the queue's");
    t.notOk(holdsOthersUp([3, 3, 3], 4), "a fast volume: what waited was a few milliseconds");
    t.ok(holdsOthersUp([QUEUED_WARM_READ_MS], 4 * QUEUED_WARM_READ_MS), "on the line");
    t.notOk(holdsOthersUp([QUEUED_WARM_READ_MS], 4 * QUEUED_WARM_READ_MS + 1));
    t.ok(holdsOthersUp([30, 1, 30, 1, 30], 32), "five: the third fastest");
    t.notOk(holdsOthersUp([30, 1, 1, 30], 32), "four: the lower middle one");
    t.notOk(holdsOthersUp([], 32), "no warm read timed: nothing known");
    t.notOk(holdsOthersUp([30], 0), "no completion time of its own");
    t.notOk(holdsOthersUp([30], Number.NaN));
  },
);
