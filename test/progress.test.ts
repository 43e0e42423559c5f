/**
 * The shared progress line (src/progress.ts): its words for each kind of task, and its pace in
 * the journal, on a terminal and to systemd, over an injected clock (no timer, no wall time).
 */
import t from "tap";
import { createMemoryLogger } from "../src/log.ts";
import { formatProgress, progressReporter } from "../src/progress.ts";

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

t.test("the pre-warm's line, word for word", async (t) => {
  t.equal(
    formatProgress({ bytes: { done: 412 * MiB, total: 2 * GiB }, bytesPerSecond: 54 * MiB, etaSeconds: 31 }),
    "20.1 % (412 MiB of 2 GiB), 54.0 MiB/s, ETA 31s",
  );
});

t.test("a step of several, with its bytes", async (t) => {
  t.equal(
    formatProgress({ step: { index: 2, count: 4, name: "pull" }, bytes: { done: GiB, total: 4 * GiB } }),
    "step 2 of 4, pull: 25.0 % (1 GiB of 4 GiB)",
  );
  t.equal(formatProgress({ step: { index: 3, count: 4, name: "strip" } }), "step 3 of 4, strip");
});

t.test("things counted when no bytes are known; no ETA once all is done", async (t) => {
  t.equal(
    formatProgress({ count: { done: 1, total: 3, noun: "volumes available" }, etaSeconds: 65 }),
    "1 of 3 volumes available (33.3 %), ETA 1m05s",
  );
  t.equal(
    formatProgress({ count: { done: 3, total: 3, noun: "volumes available" }, etaSeconds: 0 }),
    "3 of 3 volumes available (100.0 %)",
  );
  t.equal(formatProgress({ bytes: { done: 5 * MiB, total: 0 } }), "5 MiB", "an unknown total: the bytes alone");
});

t.test("what the task waits on follows the figures, or stands alone", async (t) => {
  t.equal(
    formatProgress({
      step: { index: 2, count: 2, name: "pool gpu" },
      count: { done: 1, total: 3, noun: "volumes available" },
      note: "waiting for vol-1 (zone-a): creating",
    }),
    "step 2 of 2, pool gpu: 1 of 3 volumes available (33.3 %); waiting for vol-1 (zone-a): creating",
  );
  t.equal(formatProgress({ note: "waiting" }), "waiting");
});

/** A reporter on a clock the test moves, its outputs kept. */
function reporter(terminal: boolean) {
  let now = 0;
  const log = createMemoryLogger();
  const drawn: string[] = [];
  const status: string[] = [];
  const r = progressReporter({
    log,
    event: "snapshot.progress",
    fields: { snapshotId: "snap-1" },
    now: () => now,
    ...(terminal ? { terminal: { show: (text) => drawn.push(text), clear: () => drawn.push("<clear>") } } : {}),
    status: (text) => status.push(text),
  });
  return { r, log, drawn, status, at: (ms: number) => (now = ms) };
}

t.test("the rate and the ETA: the run's average since its first figures", async (t) => {
  const { r, at } = reporter(false);
  at(0);
  r.update({ bytes: { done: 100 * MiB, total: 1100 * MiB } });
  at(10_000);
  r.update({ bytes: { done: 600 * MiB, total: 1100 * MiB } });
  t.equal(
    r.last,
    "54.5 % (600 MiB of 1.1 GiB), 50.0 MiB/s, ETA 10s",
    "500 MiB in 10 s; what was done before counts not",
  );
  at(11_000);
  r.update({ step: { index: 2, count: 2, name: "verify" }, bytes: { done: 0, total: 10 * MiB } });
  t.equal(r.last, "step 2 of 2, verify: 0.0 % (0 KiB of 10 MiB)", "a new step: a new average, none yet");
});

t.test("the journal and systemd every 5 s and at the end; never a control character", async (t) => {
  const { r, log, status, at } = reporter(false);
  for (let ms = 0; ms <= 12_000; ms += 1000) {
    at(ms);
    r.update({ count: { done: ms / 1000, total: 20, noun: "blocks put" } });
  }
  at(12_500);
  r.update({ count: { done: 20, total: 20, noun: "blocks put" } }, true);
  const lines = log.lines.filter((l) => l.includes("snapshot.progress"));
  t.equal(lines.length, 4, "at 0, 5 and 10 s, and the end");
  t.equal(status.length, 4, "systemd told as often");
  t.match(lines[3], /^<6>snapshot\.progress: 20 of 20 blocks put \(100\.0 %\) snapshotId=snap-1$/);
  t.notOk(
    // eslint-disable-next-line no-control-regex -- control characters are what is looked for
    log.lines.some((l) => /[\x00-\x1f\x7f]/.test(l)),
    "no control characters in the journal",
  );
});

t.test("a terminal's line: redrawn at most every 250 ms, erased at the end", async (t) => {
  const { r, drawn, at } = reporter(true);
  for (let ms = 0; ms <= 1000; ms += 100) {
    at(ms);
    r.update({ bytes: { done: ms * MiB, total: 2000 * MiB } });
  }
  r.update({ bytes: { done: 2000 * MiB, total: 2000 * MiB } }, true);
  t.same(
    drawn.map((d) => d.replace(/,.*/, "")),
    [
      "0.0 % (0 KiB of 2 GiB)",
      "15.0 % (300 MiB of 2 GiB)",
      "30.0 % (600 MiB of 2 GiB)",
      "45.0 % (900 MiB of 2 GiB)",
      "<clear>",
    ],
  );
});
