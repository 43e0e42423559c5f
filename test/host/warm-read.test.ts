/**
 * The warm read's figure (src/host/warm-read.ts) from dd's own report, and the queue look's progress from fio's
 * (src/host/volume-reads.ts, queueProgress). dd runs for real on a regular file: the device path check refuses it, so
 * the timing itself is run by the lab test (volume-reads-need.lab.test.ts).
 */
import t from "tap";
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
