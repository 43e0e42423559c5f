/**
 * fio's JSON, parsed from output recorded from real fio 3.33 runs on the lab's cold volumes
 * (test/fixtures/data/fio/record.ts), and the argument arrays and I/O logs the agent gives fio.
 */
import t from "tap";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  feedIolog,
  fioArgs,
  FioError,
  parseFioJson,
  renderIolog,
  runFio,
  splitJsonDocuments,
} from "../../src/host/fio.ts";
import { checkFigures, safeCursor } from "../../src/host/volume-reads.ts";

const fixture = (name: string) => readFileSync(new URL(`../fixtures/data/fio/${name}`, import.meta.url), "utf8");
const lastDocument = (text: string) => splitJsonDocuments(text).documents.at(-1)!;

t.test("the sample on a cold volume: few IOPS, long latencies", async (t) => {
  const report = parseFioJson(lastDocument(fixture("check-cold.json")));
  t.equal(report.fioVersion, "fio-3.33");
  t.equal(report.error, 0);
  t.equal(report.jobs[0]?.name, "prewarm-check");
  t.ok(report.read.totalIos > 0 && report.read.iops > 0);
  t.ok(report.read.latencyMs.p50! > 20, "median above the emulated first-read delay (20 ms)");
  t.ok(
    report.read.latencyMs.p99! >= report.read.latencyMs.p90! &&
      report.read.latencyMs.p90! >= report.read.latencyMs.p50!,
  );
  const figures = checkFigures(report);
  t.equal(figures.reads, report.read.totalIos);
  t.equal(figures.seconds, report.read.runtimeMs / 1000);
});

t.test("the same sample after initialization: relative to the cold one, far faster", async (t) => {
  const cold = parseFioJson(lastDocument(fixture("check-cold.json")));
  const warm = parseFioJson(lastDocument(fixture("check-warm.json")));
  t.ok(warm.read.iops >= 10 * cold.read.iops, `${warm.read.iops} >= 10 x ${cold.read.iops}`);
  t.ok(warm.read.latencyMs.p50! * 10 <= cold.read.latencyMs.p50!);
  // fio leaves the first iodepth-1 replayed reads out of io_bytes, not out of total_ios.
  t.ok(warm.read.ioBytes <= warm.read.totalIos * 4096);
});

t.test("--status-interval output: a stream of whole documents, growing, the last one final", async (t) => {
  for (const name of ["files-stream.json", "device-read.json"]) {
    const { documents, rest } = splitJsonDocuments(fixture(name));
    t.ok(documents.length > 1, `${name}: ${documents.length} documents`);
    t.equal(rest.trim(), "");
    const bytes = documents.map((d) => parseFioJson(d).read.ioBytes);
    t.ok(
      bytes.every((b, i) => i === 0 || b >= bytes[i - 1]!),
      `${name}: io_bytes never decreases`,
    );
  }
  const device = parseFioJson(lastDocument(fixture("device-read.json")));
  t.equal(device.read.ioBytes, 1024 ** 3, "the full read read the whole (1 GiB) device");
  t.equal(device.jobs[0]?.name, "volume-initialize");
});

t.test("split: documents cut anywhere are put back together; braces in strings do not count", async (t) => {
  const text = fixture("files-stream.json");
  const whole = splitJsonDocuments(text).documents;
  let pending = "";
  const seen: string[] = [];
  for (let i = 0; i < text.length; i += 777) {
    const { documents, rest } = splitJsonDocuments(pending + text.slice(i, i + 777));
    seen.push(...documents);
    pending = rest;
  }
  t.same(seen, whole);
  t.same(splitJsonDocuments('note: x\n{"a": "}{"}\n{"b": 1').documents, ['{"a": "}{"}']);
  t.equal(splitJsonDocuments('{"a": "}{"}\n{"b": 1').rest, '{"b": 1');
});

t.test("a failed job: JSON with the error set", async (t) => {
  const report = parseFioJson(lastDocument(fixture("error-no-device.json")));
  t.not(report.error, 0);
  t.equal(report.read.totalIos, 0);
  t.match(fixture("error-no-device.stderr"), /read-only/, "--readonly kept fio from creating the missing file");
});

t.test("not fio's JSON: a FioError", async (t) => {
  t.throws(() => parseFioJson("fio: command not found"), FioError);
  t.throws(() => parseFioJson('{"jobs": []}'), FioError);
});

t.test("argument arrays: AWS's documented full read, read-only, JSON", async (t) => {
  t.same(fioArgs({ name: "volume-initialize", device: "/dev/nvme1n1", rw: "read", blockSize: "128k", ioDepth: 32 }), [
    "--filename=/dev/nvme1n1",
    "--rw=read",
    "--bs=128k",
    "--iodepth=32",
    "--ioengine=libaio",
    "--direct=1",
    "--name=volume-initialize",
    "--clocksource=clock_gettime",
    "--readonly",
    "--output-format=json",
  ]);
  const resumed = fioArgs(
    { name: "volume-initialize", device: "/dev/nvme1n1", rw: "read", blockSize: "128k", ioDepth: 32, offset: 1 << 30 },
    { statusIntervalMs: 1000 },
  );
  t.ok(resumed.includes(`--offset=${1 << 30}`) && resumed.includes("--status-interval=1000ms"));
  // One 4 KiB read at the start of every 512 KiB block (the acceptance run's first reads).
  const strided = fioArgs({
    name: "first-read-qd8",
    device: "/dev/nvme1n1",
    rw: "read",
    blockSize: "4096",
    ioDepth: 8,
    skipBytes: 512 * 1024 - 4096,
    size: 32 << 20,
  });
  t.ok(strided.includes(`--rw=read:${512 * 1024 - 4096}`) && strided.includes(`--size=${32 << 20}`));
  t.ok(strided.includes("--readonly"));
  const replay = fioArgs({ name: "prewarm-check", iolog: "/tmp/x.iolog", ioDepth: 16, runtimeSeconds: 5 });
  t.ok(
    [
      "--read_iolog=/tmp/x.iolog",
      "--replay_no_stall=1",
      "--iodepth=16",
      "--direct=1",
      "--runtime=5",
      "--readonly",
    ].every((a) => replay.includes(a)),
  );
});

t.test("I/O logs: fio's version-2 format", async (t) => {
  t.equal(
    renderIolog("/dev/loop3", [
      { offset: 0, length: 4096 },
      { offset: 1 << 20, length: 1 << 20 },
    ]),
    "fio version 2 iolog\n/dev/loop3 add\n/dev/loop3 open\n/dev/loop3 read 0 4096\n/dev/loop3 read 1048576 " +
      "1048576\n/dev/loop3 close\n",
  );
  t.throws(() => renderIolog("/dev/a b", []), FioError);
});

t.test("the resume point only covers reads fio surely finished", async (t) => {
  const reads = [0, 1, 2, 3, 4].map((i) => ({ offset: i * 100, length: 100 }));
  const prefix = [100, 200, 300, 400, 500];
  t.equal(safeCursor(reads, prefix, 0, 100, 0), 0);
  t.equal(
    safeCursor(reads, prefix, 350, 100, 0),
    200,
    "350 counted, 100 may be in flight: reads up to 250 done, so up to 200 whole",
  );
  t.equal(safeCursor(reads, prefix, 500, 0, 0), 500);
});

t.test("a log fed while fio runs: header at once, reads as added, the close line at its end", async (t) => {
  const feed = feedIolog("/dev/nvme1n1", 1 << 20);
  t.same(
    fioArgs({ name: "prewarm-need", iolog: feed, ioDepth: 4, idle: true }).slice(0, 6),
    [
      "--name=prewarm-need",
      "--read_iolog=-",
      "--read_iolog_chunked=1",
      "--bs=1048576",
      "--replay_no_stall=1",
      "--iodepth=4",
    ],
    "from stdin, a part at a time, buffers for the longest read",
  );
  const text = streamText(feed.input);
  feed.add([{ offset: 0, length: 4096 }]);
  feed.add([]);
  feed.add([{ offset: 1 << 20, length: 1 << 20 }]);
  t.throws(
    () =>
      feed.add([
        { offset: 0, length: 4096 },
        { offset: 0, length: (1 << 20) + 4096 },
      ]),
    RangeError,
  );
  let ended = false;
  void feed.ended.then(() => (ended = true));
  await Promise.resolve();
  t.notOk(ended, "not ended before end()");
  feed.end();
  feed.end();
  feed.add([{ offset: 8192, length: 4096 }]);
  await feed.ended;
  t.equal(
    await text,
    renderIolog("/dev/nvme1n1", [
      { offset: 0, length: 4096 },
      { offset: 1 << 20, length: 1 << 20 },
    ]),
    "fio's version-2 format, as a file's; nothing of a refused part, nothing after the end",
  );
  t.same(feed.added, [
    { offset: 0, length: 4096 },
    { offset: 1 << 20, length: 1 << 20 },
  ]);
});

t.test("a fio waiting on its fed log when stopped: the log is ended, so it ends by itself", async (t) => {
  // As fio does: SIGTERM is not enough while its job waits on stdin. This one ignores it, reads to the end, says so.
  const dir = mkdtempSync(join(tmpdir(), "fed-fio-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const fio = join(dir, "fio");
  writeFileSync(fio, `#!/bin/sh\ntrap '' TERM\ncat > /dev/null\necho eof > ${dir}/saw\n`, { mode: 0o755 });
  const feed = feedIolog("/dev/nvme1n1", 1 << 20);
  const stop = new AbortController();
  const running = runFio(
    { name: "prewarm-need", iolog: feed, ioDepth: 4 },
    { fio, signal: stop.signal, onSpawn: () => setTimeout(() => stop.abort(), 50) },
  );
  await t.rejects(running, /fio was stopped/);
  t.equal(readFileSync(join(dir, "saw"), "utf8"), "eof\n", "it read the log's end: not killed");
});

t.test("a fed log's fio stopped before it starts: the log is ended at once", async (t) => {
  const feed = feedIolog("/dev/nvme1n1", 1 << 20);
  await t.rejects(runFio({ name: "x", iolog: feed, ioDepth: 1 }, { fio: "true", signal: AbortSignal.abort() }));
  let ended = false;
  await Promise.race([feed.ended.then(() => (ended = true)), Promise.resolve()]);
  t.ok(ended, "ended");
});

function streamText(stream: NodeJS.ReadableStream): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    stream.setEncoding("utf8");
    stream.on("data", (chunk: string) => (text += chunk));
    stream.on("end", () => resolve(text));
    stream.on("error", reject);
  });
}
