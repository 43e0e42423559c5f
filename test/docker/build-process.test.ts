/**
 * The wait for a daemon a build (or the lab) starts itself, with real processes (sh, sleep): a daemon that answers,
 * one that keeps silent past the deadline, and one that exits just as the deadline comes, its exit not yet seen by
 * this process (a loaded machine): that one is told by its exit status, not as a timeout.
 */
import t from "tap";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnDaemon, waitUntilServing } from "../../src/docker/build-process.ts";

const work = await mkdtemp(join(tmpdir(), "build-process-"));
t.teardown(() => rm(work, { recursive: true, force: true }));
const logFile = join(work, "daemon.log");

/** The state letter of `pid` in /proc (Z: exited, not reaped yet), or undefined when it is gone. */
function procState(pid: number): string | undefined {
  try {
    return /\) (\S) /.exec(readFileSync(`/proc/${pid}/stat`, "utf8"))?.[1];
  } catch {
    return undefined;
  }
}

/**
 * Holds this process (synchronously: no event of the child's exit comes in meanwhile) until `pid` has exited; the
 * bound only stops a broken run from hanging.
 */
function holdUntilExited(pid: number): void {
  const bound = Date.now() + 60_000;
  while (procState(pid) !== "Z" && procState(pid) !== undefined) {
    if (Date.now() > bound) throw new Error(`process ${pid} did not exit within 60 s`);
  }
}

t.test("a daemon that exits as the deadline comes is told by its exit, not as a timeout", async (t) => {
  const daemon = await spawnDaemon("sh", ["-c", "echo 'unknown option' >&2; exit 3"], logFile);
  t.ok(daemon.pid, "it started");
  let stopped = 0;
  await t.rejects(
    waitUntilServing(
      daemon,
      async () => {
        // The deadline (0 ms) is past when this returns, and the exit has happened but is not yet reported.
        holdUntilExited(daemon.pid!);
        return false;
      },
      {
        what: "the test's daemon",
        logFile,
        timeoutMs: 0,
        stop: async () => void stopped++,
        detail: async () => readFileSync(logFile, "utf8").trim(),
      },
    ),
    { message: /^the test's daemon exited \(3\): unknown option$/ },
  );
  t.equal(daemon.exited(), "3", "its exit status is known by then");
  t.equal(stopped, 1, "the wait ran the stop once");
});

t.test("a daemon still running at the deadline did not answer in time, and is stopped", async (t) => {
  const daemon = await spawnDaemon("sleep", ["1000"], logFile);
  const pid = daemon.pid!;
  t.teardown(() => {
    if (procState(pid) !== undefined) process.kill(pid, "SIGKILL");
  });
  let stopped = 0;
  await t.rejects(
    waitUntilServing(daemon, async () => false, {
      what: "the test's daemon",
      logFile,
      timeoutMs: 0,
      stop: async () => {
        stopped++;
        process.kill(pid, "SIGTERM");
      },
    }),
    { message: "the test's daemon did not answer in time" },
  );
  t.equal(stopped, 1, "the wait ran the stop once");
});

t.test("a daemon that answers is waited for no further", async (t) => {
  const daemon = await spawnDaemon("sleep", ["1000"], logFile);
  const pid = daemon.pid!;
  t.teardown(() => process.kill(pid, "SIGKILL"));
  let asked = 0;
  await waitUntilServing(daemon, async () => ++asked >= 2, {
    what: "the test's daemon",
    logFile,
    timeoutMs: 600_000,
    stop: async () => void t.fail("not stopped"),
  });
  t.equal(asked, 2, "asked until it answered");
  t.equal(daemon.exited(), undefined, "it still runs");
});

t.test(
  "a daemon that exits at once: its exit is told every time (none lost while the log's handle closes)",
  async (t) => {
    let told = 0;
    for (let i = 0; i < 30; i++) {
      const daemon = await spawnDaemon("sh", ["-c", "exit 3"], logFile);
      // Only a bound against a lost exit, which is never told: a told one comes in milliseconds.
      let bound: NodeJS.Timeout | undefined;
      await Promise.race([daemon.ended, new Promise((resolve) => (bound = setTimeout(resolve, 30_000)))]);
      clearTimeout(bound);
      if (daemon.exited() === "3") told++;
      else break;
    }
    t.equal(told, 30, "30 exits of 30 told, with their status");
  },
);
