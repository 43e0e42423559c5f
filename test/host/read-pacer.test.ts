/**
 * The pacing loop on a running fio (src/host/read-pacer.ts), with a fake clock, fake device
 * counters and a fake fio handle: the settings it is given are the lengths it runs and pauses
 * for, its threshold decides whether others' requests keep fio stopped, it stays stopped settleMs
 * after others' last request, and fio is left running.
 * No device, no real time: the clock moves only when the pacer sleeps.
 */
import t from "tap";
import { DEFAULT_PACE, type PaceSettings } from "../../src/host/read-pace.ts";
import { paceReads, watchQueue, type PacerClock } from "../../src/host/read-pacer.ts";

/**
 * A world where others have made `othersRequests(now)` requests by `now` (ms); the reads end at
 * `endMs`. Each signal is recorded with the time it was sent.
 */
function world(othersRequests: (now: number) => number, endMs: number, fioAlive = true) {
  let now = 0;
  const end = new AbortController();
  const sleeps: number[] = [];
  const signals: string[] = [];
  const signalled: Array<{ sig: string; at: number }> = [];
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
    signalled,
    counters: {
      readBytes: async () => 0,
      requests: async () => Math.floor(othersRequests(now)),
      readsInFlight: async () => 0,
    },
    reads: () => ({
      signal: (sig: NodeJS.Signals) => {
        signals.push(sig);
        signalled.push({ sig, at: now });
        return fioAlive;
      },
    }),
  };
}

const settings: PaceSettings = {
  runMs: 40,
  pauseMs: 7,
  maxPausedMs: 21,
  settleMs: 0,
  drainMs: 1_000,
  quietIops: 200,
};
/** Others making `perSecond` requests a second all along. */
const steady = (perSecond: number) => (now: number) => (perSecond * now) / 1000;

t.test(
  "others above the threshold: fio runs runMs, then stays stopped pauseMs at a time up to maxPausedMs",
  async (t) => {
    const w = world(steady(300), 1_000);
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
  const w = world(steady(100), 1_000);
  const tally = await paceReads({ ...w, settings: { ...settings, quietIops: 400 } });
  // At most one request in a 7 ms look: up to 143 a second.
  t.equal(tally.pauses, 0, "never paused: 100 requests a second count as quiet under a threshold of 400");
  t.ok(tally.looks > 0, "looked");
  t.same(
    [...new Set(w.sleeps)].sort((a, b) => a - b),
    [7, 40],
    "runs of 40 ms, looks of 7 ms",
  );
  t.same(w.signals.slice(0, 4), ["SIGSTOP", "SIGCONT", "SIGSTOP", "SIGCONT"]);
});

t.test("the defaults: runs of 250 ms, looks of 100 ms, any request of others stops fio", async (t) => {
  const quiet = world(() => 0, 3_000);
  t.equal((await paceReads({ ...quiet, settings: DEFAULT_PACE })).pauses, 0);
  t.same(quiet.sleeps.slice(0, 2), [250, 100]);
  const trickle = world(steady(20), 3_000);
  t.ok((await paceReads({ ...trickle, settings: DEFAULT_PACE })).pauses > 0, "20 small requests a second: paused");
});

t.test("reads found in the way already (lookFirst): stopped and looked at before any run", async (t) => {
  const w = world(steady(300), 1_000);
  const tally = await paceReads({ ...w, settings, lookFirst: true });
  t.same(w.signalled[0], { sig: "SIGSTOP", at: 0 }, "stopped at once");
  t.same(w.sleeps.slice(0, 5), [0, 7, 7, 7, 7], "no run first: the look, then pauses while others read");
  t.equal(w.sleeps[5], settings.runMs, "later runs last runMs");
  t.ok(tally.looks >= 1);
});

t.test("a burst of others: fio stays stopped until settleMs after their last request", async (t) => {
  // Others make a request every ms from 30 ms to 60 ms (a service's start), then none.
  const burst = (now: number) => Math.max(0, Math.min(now, 60) - 30);
  const w = world(burst, 400);
  const tally = await paceReads({ ...w, settings: { ...settings, quietIops: 0, settleMs: 21, maxPausedMs: 1_000 } });
  // Run 0-40; looks of 7 ms: 40-47, 47-54, 54-61 see others; 61-68, 68-75, 75-82 are quiet: 21 ms.
  const firstStop = w.signalled.find((s) => s.sig === "SIGSTOP");
  const firstCont = w.signalled.find((s) => s.sig === "SIGCONT");
  t.equal(firstStop?.at, 40, "stopped after the first run");
  t.equal(firstCont?.at, 82, "continued once 21 ms had passed without a request of others");
  t.ok(tally.pauses >= 5, "left stopped through the burst and the settling");
  const noSettle = world(burst, 400);
  await paceReads({ ...noSettle, settings: { ...settings, quietIops: 0, settleMs: 0, maxPausedMs: 1_000 } });
  t.equal(
    noSettle.signalled.find((s) => s.sig === "SIGCONT")?.at,
    68,
    "without settling: continued on the first quiet look",
  );
});

t.test("being stopped (SIGTERM): fio is continued and never stopped again, whatever others do", async (t) => {
  const w = world(steady(300), 1_000);
  const stop = new AbortController();
  // The stop comes during the first pause (others busy): fio stopped, its SIGTERM held until continued.
  const sleep = w.clock.sleep;
  w.clock.sleep = async (ms, until) => {
    const slept = await sleep(ms, until);
    if (w.clock.now() >= 50 && !stop.signal.aborted) stop.abort();
    return slept;
  };
  const tally = await paceReads({ ...w, settings, stopped: stop.signal });
  const stoppedAt = w.signalled.findIndex(({ at }) => at >= 50);
  t.ok(stoppedAt >= 0, "signals sent after the stop");
  t.notOk(
    w.signalled.slice(stoppedAt).some(({ sig }) => sig === "SIGSTOP"),
    `no SIGSTOP after the stop (${JSON.stringify(w.signalled.slice(stoppedAt, stoppedAt + 4))})`,
  );
  t.equal(w.signals.at(-1), "SIGCONT", "fio is left running, to act on its SIGTERM");
  t.ok(tally.pausedMs < 50, `no pause after the stop (${tally.pausedMs} ms paused in all)`);
});

t.test("the look at the queue: once progress is enough, a warm read at each offset decides", async (t) => {
  const w = world(() => 0, 10_000);
  const timed: number[] = [];
  let progress: { readP50Ms: number; doneOffsets: number[] } | undefined;
  const looked = watchQueue({
    progress: () => (w.clock.now() >= 300 ? (progress ??= { readP50Ms: 32, doneOffsets: [0, 512, 1024] }) : undefined),
    timeRead: async (offset) => {
      timed.push(offset);
      return offset === 512 ? undefined : 30;
    },
    done: w.done,
    clock: w.clock,
  });
  const verdict = await looked;
  t.same(verdict, { holdsUp: true, warmReadMs: [30, 30], readP50Ms: 32 }, "a read dd could not time is left out");
  t.same(timed, [0, 512, 1024], "each offset once, after the first look with enough progress");
  t.equal(w.clock.now(), 300, "looked every 100 ms until then");

  const fast = world(() => 0, 10_000);
  t.same(
    await watchQueue({
      progress: () => ({ readP50Ms: 40, doneOffsets: [0] }),
      timeRead: async () => 0.3,
      done: fast.done,
      clock: fast.clock,
    }),
    { holdsUp: false, warmReadMs: [0.3], readP50Ms: 40 },
  );
});

t.test("the look at the queue: nothing decided when the reads end first or no warm read is timed", async (t) => {
  const ended = world(() => 0, 250);
  t.equal(
    await watchQueue({ progress: () => undefined, timeRead: async () => 30, done: ended.done, clock: ended.clock }),
    undefined,
    "the reads ended before progress was enough",
  );
  const untimed = world(() => 0, 10_000);
  t.equal(
    await watchQueue({
      progress: () => ({ readP50Ms: 32, doneOffsets: [0, 1] }),
      timeRead: async () => undefined,
      done: untimed.done,
      clock: untimed.clock,
    }),
    undefined,
  );
  const during = world(() => 0, 10_000);
  const stop = new AbortController();
  t.equal(
    await watchQueue({
      progress: () => ({ readP50Ms: 32, doneOffsets: [0, 1] }),
      timeRead: async () => {
        stop.abort();
        return 30;
      },
      done: stop.signal,
      clock: during.clock,
    }),
    undefined,
    "the reads ended while a warm read was timed",
  );
});
