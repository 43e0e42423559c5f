/**
 * The one guard before a detach (detachBlocker): still mounted here, mounted in another mount
 * namespace, or a look that fails all keep the volume attached with a message and a way out;
 * only a filesystem live nowhere lets the detach go. A holder in another namespace is looked at
 * again, on a clock of the test's that moves only when the guard sleeps (so nothing here is timed):
 * one that goes lets the detach go, one there at the bound refuses it. No root: the storage port
 * is two functions.
 */
import t from "tap";
import { detachBlocker } from "../../src/agent/detach-guard.ts";
import type { FilesystemLiveness, HostStorage } from "../../src/agent/ports.ts";
import { createLogger, type Logger } from "../../src/log.ts";

type Looks = Pick<HostStorage, "mountPointOf" | "liveness">;

const nowhere: FilesystemLiveness = { holders: [], superblock: false };
const held: FilesystemLiveness = {
  holders: [{ ns: "mnt:[4026532900]", processes: [{ pid: 4242, command: "sleep 600" }], mountPoints: ["/srv/x"] }],
  superblock: true,
};

function looks(mountPoint: string | undefined | Error, live: FilesystemLiveness | Error): Looks & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    mountPointOf: async (device) => {
      asked.push(`mountPointOf ${device}`);
      if (mountPoint instanceof Error) throw mountPoint;
      return mountPoint;
    },
    liveness: async (device) => {
      asked.push(`liveness ${device}`);
      if (live instanceof Error) throw live;
      return live;
    },
  };
}

t.test("live nowhere: no blocker, after both looks", async (t) => {
  const storage = looks(undefined, nowhere);
  t.equal(await detachBlocker(storage, "vol-1", "/dev/nvme1n1", "release"), undefined);
  t.same(storage.asked, ["mountPointOf /dev/nvme1n1", "liveness /dev/nvme1n1"]);
});

t.test("still mounted here: blocked, naming where, without asking further", async (t) => {
  const storage = looks("/var/lib/ebs-cache/vol-1", nowhere);
  const blocker = await detachBlocker(storage, "vol-1", "/dev/nvme1n1", "boot");
  t.match(blocker?.message, /^vol-1 is still mounted at \/var\/lib\/ebs-cache\/vol-1: not detaching it/);
  t.match(blocker?.remediation, /fuser -vm \/var\/lib\/ebs-cache\/vol-1.*then run boot again$/);
  t.same(storage.asked, ["mountPointOf /dev/nvme1n1"]);
});

t.test("mounted in another mount namespace: blocked, naming the process", async (t) => {
  const blocker = await detachBlocker(looks(undefined, held), "vol-1", "/dev/nvme1n1", "release");
  t.match(blocker?.message, /still mounted in another mount namespace, held by pid 4242 "sleep 600"/);
  t.match(blocker?.remediation, /kill 4242.*then run release again$/);
});

t.test("a look that fails counts as mounted", async (t) => {
  const table = await detachBlocker(looks(new Error("EACCES"), nowhere), "vol-1", "/dev/nvme1n1", "release");
  t.match(table?.message, /could not learn whether vol-1 is still mounted \(EACCES\): not detaching it/);
  t.match(table?.remediation, /then run release again$/);
  const namespaces = await detachBlocker(looks(undefined, new Error("EPERM")), "vol-1", "/dev/nvme1n1", "boot");
  t.match(
    namespaces?.message,
    /could not learn whether vol-1's filesystem is still mounted in another mount namespace/,
  );
  t.match(namespaces?.remediation, /then run boot again$/);
});

/** A clock that moves only when the guard sleeps: the wait's bound is counted, never timed. */
function fakeClock(): { now(): number; sleep(ms: number): Promise<void>; slept: number[] } {
  let at = 1_000;
  const slept: number[] = [];
  return {
    slept,
    now: () => at,
    sleep: async (ms) => {
      slept.push(ms);
      at += ms;
    },
  };
}

/** Liveness answered in turn from `answers`, the last one for ever after. */
function looksInTurn(answers: FilesystemLiveness[]): Looks & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    mountPointOf: async () => undefined,
    liveness: async (device) => {
      asked.push(`liveness ${device}`);
      return answers[Math.min(asked.length - 1, answers.length - 1)]!;
    },
  };
}

function recordingLog(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return { lines, ...createLogger((line) => lines.push(line), "debug") };
}

t.test(
  "held for a moment: looked at again until it goes, then no blocker; the log names it and how long",
  async (t) => {
    const storage = looksInTurn([held, held, held, nowhere]);
    const clock = fakeClock();
    const log = recordingLog();
    const blocker = await detachBlocker(storage, "vol-1", "/dev/nvme1n1", "release", {
      boundMs: 10_000,
      log,
      area: "release",
      clock,
    });
    t.equal(blocker, undefined, "the detach may go");
    t.equal(storage.asked.length, 4, "looked until it was gone, no further");
    t.same(clock.slept, [50, 100, 200], "each look waits twice as long as the one before");
    t.match(log.lines[0], /^<5>release\.mount-held: vol-1's filesystem is still mounted in another mount namespace/);
    t.match(log.lines[0], /held by pid 4242 "sleep 600" \(mnt:\[4026532900\], at \/srv\/x\): waiting up to 10 s/);
    t.match(
      log.lines[1],
      /^<5>release\.mount-released: vol-1's filesystem is no longer mounted in any other mount namespace after 0\.4 s/,
    );
    t.match(log.lines[1], /heldBy="pid 4242 \\"sleep 600\\" \(mnt:\[4026532900\], at \/srv\/x\) for 0\.4 s"/);
    t.equal(log.lines.length, 2);
  },
);

t.test("held past the bound: refused, saying how long it waited; the looks are bounded", async (t) => {
  const storage = looksInTurn([held]);
  const clock = fakeClock();
  const log = recordingLog();
  const blocker = await detachBlocker(storage, "vol-1", "/dev/nvme1n1", "boot", {
    boundMs: 2_000,
    log,
    area: "boot",
    clock,
  });
  t.match(
    blocker?.message,
    /held by pid 4242 "sleep 600" \(mnt:\[4026532900\], at \/srv\/x\); still there at the end of the 2 s /,
  );
  t.match(
    blocker?.message,
    /\(timeouts\.mountHolderSeconds\); vol-1 stays attached and untagged: a mounted volume is never detached$/,
  );
  t.match(blocker?.remediation, /kill 4242.*then run boot again$/);
  t.same(clock.slept, [50, 100, 200, 400, 500, 500, 250], "never past the bound");
  t.equal(storage.asked.length, 8);
  t.match(log.lines, [/^<5>boot\.mount-held: /], "one line as the wait begins; the refusal is the caller's to log");
});

t.test("held only by the kernel for a moment (a namespace being torn down): waited for too", async (t) => {
  const storage = looksInTurn([{ holders: [], superblock: true }, nowhere]);
  const log = recordingLog();
  const blocker = await detachBlocker(storage, "vol-1", "/dev/nvme1n1", "release", {
    boundMs: 1_000,
    log,
    area: "release",
    clock: fakeClock(),
  });
  t.equal(blocker, undefined);
  t.match(log.lines[0], /held by a mount namespace no process is in/);
  t.match(log.lines[1], /heldBy="the kernel alone/);
});

t.test("no holder at the first look: no wait at all; a bound of 0 refuses at the first look", async (t) => {
  const clock = fakeClock();
  const log = recordingLog();
  const free = looksInTurn([nowhere]);
  t.equal(
    await detachBlocker(free, "vol-1", "/dev/x", "release", { boundMs: 10_000, log, area: "release", clock }),
    undefined,
  );
  t.same(clock.slept, [], "never slept");
  t.same(log.lines, [], "nothing logged");
  const busy = looksInTurn([held]);
  const refused = await detachBlocker(busy, "vol-1", "/dev/x", "release", { boundMs: 0, log, area: "release", clock });
  t.match(refused?.message, /held by pid 4242/);
  t.notMatch(refused?.message, /still there/, "no wait to speak of");
  t.equal(busy.asked.length, 1);
});

t.test("a stop ends the wait: refused at once, saying so", async (t) => {
  const controller = new AbortController();
  const clock = fakeClock();
  const storage = looksInTurn([held]);
  const sleep = clock.sleep;
  clock.sleep = async (ms) => {
    await sleep(ms);
    if (clock.slept.length === 2) controller.abort(new Error("SIGTERM received"));
  };
  const blocker = await detachBlocker(storage, "vol-1", "/dev/x", "release", {
    boundMs: 60_000,
    log: recordingLog(),
    area: "release",
    clock,
    signal: controller.signal,
  });
  t.match(blocker?.message, /the wait was ended after 0\.2 s \(SIGTERM received\)/);
  t.equal(clock.slept.length, 2, "no look after the stop");
});

t.test("a look that fails during the wait counts as mounted", async (t) => {
  let n = 0;
  const storage: Looks = {
    mountPointOf: async () => undefined,
    liveness: async () => {
      if (++n > 1) throw new Error("EACCES");
      return held;
    },
  };
  const blocker = await detachBlocker(storage, "vol-1", "/dev/x", "release", {
    boundMs: 10_000,
    log: recordingLog(),
    area: "release",
    clock: fakeClock(),
  });
  t.match(
    blocker?.message,
    /could not learn whether vol-1's filesystem is still mounted in another mount namespace \(EACCES\)/,
  );
});
