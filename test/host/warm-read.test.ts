/**
 * The warm read's figure (src/host/warm-read.ts) from dd's own report, and the queue look's progress from fio's
 * (src/host/volume-reads.ts, queueProgress). dd is a script here that records its arguments; the real dd on a real
 * (loop) device is run by the lab tests (volume-reads-queue.lab.test.ts, volume-reads-need.lab.test.ts).
 */
import t from "tap";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseDdMs, timeWarmRead } from "../../src/host/warm-read.ts";
import { queueProgress } from "../../src/host/volume-reads.ts";
import type { FioReport } from "../../src/host/fio.ts";

t.test("dd's copy time in milliseconds", async (t) => {
  const report = "1+0 records in\n1+0 records out\n4096 bytes (4.1 kB, 4.0 KiB) copied, 0.0312 s, 131 kB/s\n";
  t.equal(parseDdMs(report), 31.2);
  t.equal(parseDdMs("4096 bytes (4.1 kB, 4.0 KiB) copied, 0.00017306 s, 23.7 MB/s"), 0.17306);
  t.ok(Math.abs(parseDdMs("4096 bytes copied, 1.5e-05 s, 273 MB/s")! - 0.015) < 1e-9, "printf's %g: an exponent");
  t.equal(parseDdMs("dd: failed to open '/dev/x': No such file or directory"), undefined);
  t.equal(parseDdMs(""), undefined);
  t.equal(parseDdMs("4096 bytes copied, . s"), undefined);
});

t.test(
  "dd is asked for one direct 4 KiB read at the block of the offset; a dd that fails or is stopped: no figure",
  async (t) => {
    const dir = await mkdtemp(join(tmpdir(), "warm-read-"));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const dd = join(dir, "dd");
    const args = join(dir, "args");
    // Writes its arguments, reports a copy of 12.5 ms; at block 99 it becomes a 30 s sleep (exec: one process).
    await writeFile(
      dd,
      `#!/bin/sh\necho "$*" > ${args}\ncase "$*" in *skip=99*) exec sleep 30;; esac\n` +
        'echo "4096 bytes (4.1 kB, 4.0 KiB) copied, 0.0125 s, 328 kB/s" >&2\n',
      { mode: 0o755 },
    );
    t.equal(await timeWarmRead("/dev/loop7", 8192 + 100, { dd }), 12.5);
    t.equal(
      (await readFile(args, "utf8")).trim(),
      "if=/dev/loop7 of=/dev/null bs=4096 count=1 skip=2 iflag=direct",
      "the block holding the offset",
    );
    const failing = join(dir, "dd-fails");
    await writeFile(failing, "#!/bin/sh\necho 'dd: error reading' >&2\nexit 1\n", { mode: 0o755 });
    t.equal(await timeWarmRead("/dev/loop7", 0, { dd: failing }), undefined);
    t.equal(await timeWarmRead("/dev/loop7", 0, { dd: join(dir, "missing") }), undefined, "no dd at all");
    const stop = new AbortController();
    const began = Date.now();
    const stopped = timeWarmRead("/dev/loop7", 99 * 4096, { dd, signal: stop.signal });
    setTimeout(() => stop.abort(), 50);
    t.equal(await stopped, undefined, "stopped while it waited: killed, no figure");
    // The stop, not the run's own 10 s guard, ended it (the script would sleep 30 s).
    t.ok(Date.now() - began < 9_000, "ended by the stop");
  },
);

t.test("a path that is not a device is refused before dd runs", async (t) => {
  await t.rejects(timeWarmRead("/etc/passwd", 0), /device/i);
});

function report(totalIos: number, p50?: number): FioReport {
  return {
    fioVersion: "fio-3.33",
    elapsedSeconds: 1,
    error: 0,
    read: {
      ioBytes: 0,
      totalIos,
      runtimeMs: 1000,
      iops: 0,
      bytesPerSecond: 0,
      latencyMs: p50 === undefined ? {} : { p50 },
    },
    jobs: [],
  };
}

t.test("the queue look waits for twice the depth issued, and a median completion", async (t) => {
  const reads = Array.from({ length: 40 }, (_, i) => ({ offset: i * 524288, length: 524288 }));
  t.equal(queueProgress(undefined, reads, 8), undefined, "no report yet");
  t.equal(queueProgress(report(15, 30), reads, 8), undefined, "fewer than 16 issued");
  t.equal(queueProgress(report(16), reads, 8), undefined, "no latency reported");
  t.same(queueProgress(report(16, 30), reads, 8), {
    readP50Ms: 30,
    doneOffsets: [0, 1, 2, 3, 4].map((i) => i * 524288),
  });
  t.same(queueProgress(report(2, 30), reads.slice(0, 2), 1)?.doneOffsets, [0, 524288], "fewer reads than five: each");
  t.equal(queueProgress(report(16, 30), reads.slice(0, 15), 8), undefined, "a log too short to build a queue");
});
