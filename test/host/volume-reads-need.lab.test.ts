/**
 * The need list's reads on a cold lab volume (src/host/volume-reads.ts, read-phases.ts), proved by
 * the order of fio's and filefrag's command lines and by the cold layer's log of first reads, never
 * by time: the wanted files' reads start before the list's other files are mapped, at the depth EBS
 * fetches in parallel and never stopped; with no image named (`files`, `device`) the whole list is
 * read before the rest of the volume.
 */
import t from "tap";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { InitializeOptions, ReadTarget } from "../../src/agent/ports.ts";
import { run } from "../../src/exec.ts";
import { parseFilefrag } from "../../src/host/extents.ts";
import { createFioReader } from "../../src/host/volume-reads.ts";
import { startLab } from "../../src/lab/lab.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { cachedBytes } from "../fixtures/oracles/page-cache.ts";
import { assertLabPrerequisites } from "../fixtures/lab/lab-prereq.ts";
import { attach, COLD, createVolume, mountXfs, NEED_FILES, needListSnapshot } from "../fixtures/lab/prewarm-lab.ts";

await assertLabPrerequisites();

const WANTED = NEED_FILES.wanted;
const OTHER = NEED_FILES.other;
const REST = NEED_FILES.rest;
const MiB = 1024 * 1024;

const lab = await startLab({ name: "test-reads-need", coldSnapshots: COLD, log: createMemoryLogger("info") });
t.teardown(async () => {
  for (const host of lab.hosts) await run("umount", ["-R", host.paths.mountRoot], { check: false });
  await lab.close();
});
const ec2 = lab.ec2Client();
// The rest of the volume first, then the listed files: device order would read them last.
const snapshotId = await needListSnapshot(lab, ec2, 16);
const host = await lab.addHost();
let volumes = 0;

/** A fresh cold volume from the snapshot, mounted. */
async function coldVolume(): Promise<{ volumeId: string; target: ReadTarget }> {
  const volumeId = await createVolume(ec2, host.instance.availabilityZone, { snapshotId });
  const device = await attach(lab, ec2, volumeId, host);
  return { volumeId, target: { device, mountPoint: await mountXfs(device, host, `v${++volumes}`) } };
}

/** The chunks holding the files' data on the device. */
async function chunksOf(mountPoint: string, files: string[]): Promise<Set<number>> {
  const { stdout } = await run("filefrag", ["-v", "-e", ...files.map((f) => join(mountPoint, "docker", f))]);
  const chunks = new Set<number>();
  for (const ranges of parseFilefrag(stdout).values())
    for (const r of ranges)
      for (let c = Math.floor(r.start / COLD.chunkBytes); c * COLD.chunkBytes < r.end; c++) chunks.add(c);
  return chunks;
}

/** Where each chunk was first fetched, counting from `skip` fetches of the volume. */
async function fetchPositions(volumeId: string, skip: number): Promise<Map<number, number>> {
  const position = new Map<number, number>();
  (await lab.cold!.fetchOrder(volumeId)).slice(skip).forEach((c, i) => position.has(c) || position.set(c, i));
  return position;
}

/** Reads all the wanted files with fio (none through the page cache): what most cases here look at. */
const FIO_ONLY = { pageCacheBudget: async () => 0 };

const background = (log: ReturnType<typeof createMemoryLogger>, extra: Partial<InitializeOptions> = {}) => ({
  reader: createFioReader({ log, ...FIO_ONLY }),
  options: { fromOffset: 0, ioDepth: 32, maxIoBytes: MiB, yieldDepth: 2, onProgress: () => undefined, ...extra },
});

/** The exec line of fio's job `name` (its arguments), and its index among the log's lines. */
const fioLine = (lines: string[], name: string) => {
  const index = lines.findIndex((l) => l.includes("exec.run") && l.includes(`--name=${name} `));
  return { index, line: lines[index] ?? "" };
};

t.test(
  "fio for the wanted files starts first; their reads go before the others are mapped, at depth 4, unpaced",
  async (t) => {
    const { target } = await coldVolume();
    const log = createMemoryLogger("debug");
    const { reader, options } = background(log, { images: ["lab/want:1"] });
    await reader.initialize(target, "files", options);
    const lines = log.lines;
    const filefrags = lines.flatMap((l, i) => (l.includes("exec.run") && l.includes("filefrag") ? [i] : []));
    const need = fioLine(lines, "prewarm-need");
    const listed = fioLine(lines, "prewarm-listed");
    const given = lines.findIndex((l) =>
      /prewarm\.need: 0 of 2 wanted files read through the page cache, 4 reads of the rest given to fio/.test(l),
    );
    t.equal(filefrags.length, 2, "the wanted files mapped, then the others");
    t.ok(need.index >= 0 && need.index < filefrags[0]!, "fio started before the wanted files are mapped");
    t.match(need.line, /--read_iolog=- --read_iolog_chunked=1 --bs=1048576 /, "its log read from stdin, as it comes");
    t.ok(given > filefrags[0]! && given < filefrags[1]!, "the wanted reads given to it between the two mappings");
    t.match(need.line, /--iodepth=4 /, "4 reads of 1 MiB in flight, not 32");
    t.match(need.line, /--thread/, "one process, to stop should its queue hold others up");
    t.notOk(
      lines.some((l) => l.includes("prewarm.pace: prewarm-need")),
      "4 reads are too few to build a queue: never looked at, never paced",
    );
    t.match(listed.line, /--iodepth=2 /, "the other image's files at the yielding depth");
    t.match(listed.line, /--thread/, "paced");
    t.ok(listed.index > need.index, "after the wanted files");
    t.ok(
      lines.some((l) => /prewarm\.read: prewarm-need: 4 reads, 4 MiB at depth 4/.test(l)),
      "fio's figures of the phase are logged",
    );
  },
);

t.test("where the fetches bind (one at a time), a warm read passes the wanted files' reads: not paced", async (t) => {
  const { volumeId, target } = await coldVolume();
  // 16 reads of 256 KiB at depth 4, a 100 ms fetch each: 1.6 s, the look comes after 8 are issued.
  await lab.cold!.setFirstReadDelay(volumeId, 100);
  const log = createMemoryLogger("debug");
  await createFioReader({ log, ...FIO_ONLY }).initialize(target, "files", {
    ...background(log).options,
    ioDepth: 4,
    maxIoBytes: 256 * 1024,
    images: ["lab/want:1"],
  });
  await lab.cold!.setFirstReadDelay(volumeId, COLD.firstReadDelayMs);
  const verdict = log.lines.find((l) => l.includes("prewarm.pace: prewarm-need:"));
  t.comment(verdict);
  t.match(verdict, /others' reads pass these \(a warm read is not held up\): not paced/);
  const p50 = Number(/readP50Ms=([0-9.]+)/.exec(verdict ?? "")?.[1]);
  t.ok(p50 >= 100, `the reads' own median: a fetch and more (${p50} ms)`);
  t.notOk(
    log.lines.some((l) => /prewarm\.pace: prewarm-need: stopped/.test(l)),
    "no pacer ran on them",
  );
  t.ok(log.lines.some((l) => /prewarm\.read: prewarm-need: 16 reads, 4 MiB at depth 4/.test(l)));
});

t.test("the wanted files within the page cache's budget are read through it; fio reads the rest", async (t) => {
  for (const [budget, through] of [
    [undefined, 2],
    [2 * MiB, 1],
  ] as const) {
    const { volumeId, target } = await coldVolume();
    const paths = WANTED.map((file) => join(target.mountPoint, "docker", file));
    const wanted = await chunksOf(target.mountPoint, WANTED);
    for (const path of paths) t.equal(await cachedBytes(path), 0, "cold, and not in memory, before");
    const before = (await lab.cold!.fetchOrder(volumeId)).length;
    const log = createMemoryLogger("debug");
    const reader = createFioReader({ log, ...(budget === undefined ? {} : { pageCacheBudget: async () => budget }) });
    await reader.initialize(target, "files", background(log, { images: ["lab/want:1"] }).options);
    const name = budget === undefined ? "the host's budget" : "a budget of one file";
    const split = `${through} of 2 wanted files read through the page cache, ${(2 - through) * 2} reads of the rest`;
    t.ok(
      log.lines.some((l) => l.includes(`prewarm.need: ${split}`)),
      `${name}: ${through} of the 2 files through the page cache`,
    );
    t.ok(
      log.lines.some((l) =>
        l.includes(`prewarm.read: prewarm-need: ${through} files, ${through * 2} MiB through the page`),
      ),
      "their figures logged",
    );
    for (const [i, path] of paths.slice(0, through).entries()) {
      const bytes = await cachedBytes(path);
      // Half at least: a machine busy with other labs reclaims a few pages read once (CI saw 1 and 4 of 512 go).
      t.ok(bytes >= MiB, `${name}: ${WANTED[i]} in memory after (${bytes} of ${2 * MiB} bytes)`);
    }
    for (const [i, path] of paths.slice(through).entries())
      t.equal(await cachedBytes(path), 0, `${name}: ${WANTED[through + i]} read by fio (direct), not in memory`);
    const position = await fetchPositions(volumeId, before);
    t.equal([...wanted].filter((c) => position.has(c)).length, wanted.size, "every chunk of the wanted files fetched");
  }
});

t.test("files with no image named reads the whole list first, then the rest", async (t) => {
  const { volumeId, target } = await coldVolume();
  const listed = await chunksOf(target.mountPoint, [...WANTED, ...OTHER]);
  const rest = await chunksOf(target.mountPoint, REST);
  const before = (await lab.cold!.fetchOrder(volumeId)).length;
  const log = createMemoryLogger("debug");
  const { reader, options } = background(log);
  await reader.initialize(target, "files", options);
  t.match(fioLine(log.lines, "prewarm-listed").line, /--iodepth=4 /, "at the fetch depth: they are the best guess");
  const position = await fetchPositions(volumeId, before);
  const l = [...listed].filter((c) => !rest.has(c) && position.has(c)).map((c) => position.get(c)!);
  const r = [...rest].filter((c) => !listed.has(c) && position.has(c)).map((c) => position.get(c)!);
  t.ok(l.length >= 20 && r.length >= 50, `fetched: ${l.length} listed chunks, ${r.length} others`);
  t.ok(Math.max(...l) < Math.min(...r), `listed first (last at ${Math.max(...l)}, the rest from ${Math.min(...r)})`);
});

t.test("a fio that cannot read its log from stdin gets the wanted files' reads from a file", async (t) => {
  const { volumeId, target } = await coldVolume();
  const wanted = await chunksOf(target.mountPoint, WANTED);
  const before = (await lab.cold!.fetchOrder(volumeId)).length;
  // As fio before 3.22 (which takes `-` for a file name), or any fio whose run from stdin fails.
  const dir = await mkdtemp(join(tmpdir(), "old-fio-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const fio = join(dir, "fio");
  await writeFile(
    fio,
    '#!/bin/sh\ncase " $* " in *" --read_iolog=- "*)\n' +
      '  echo "fopen read iolog: No such file or directory" >&2; exit 1;;\nesac\nexec fio "$@"\n',
    { mode: 0o755 },
  );
  const log = createMemoryLogger("debug");
  const options = background(log, { images: ["lab/want:1"] }).options;
  await createFioReader({ log, fio, ...FIO_ONLY }).initialize(target, "files", options);
  t.ok(
    log.lines.some((l) =>
      /prewarm-need: fio did not take its reads on stdin .*No such file.*: replaying them from a file/.test(l),
    ),
    "said so",
  );
  t.ok(
    log.lines.some((l) => /prewarm\.read: prewarm-need: 4 reads, 4 MiB at depth 4/.test(l)),
    "the same reads, from a file",
  );
  const position = await fetchPositions(volumeId, before);
  const fetched = [...wanted].filter((c) => position.has(c));
  t.equal(fetched.length, wanted.size, "every chunk of the wanted files fetched");
});

t.test("reads begun ahead (beginWanted) are taken over by the initialization that reads the same", async (t) => {
  const { volumeId, target } = await coldVolume();
  const wanted = await chunksOf(target.mountPoint, WANTED);
  const before = (await lab.cold!.fetchOrder(volumeId)).length;
  const log = createMemoryLogger("debug");
  const { reader, options } = background(log, { images: ["lab/want:1"] });
  const begun = reader.beginWanted!(target, options);
  // The begun reads fetch before any initialization is asked for.
  while (![...(await fetchPositions(volumeId, before)).keys()].some((c) => wanted.has(c))) await sleep(20);
  await reader.initialize(target, "files", { ...options, begun });
  const needRuns = log.lines.filter((l) => l.includes("exec.run") && l.includes("--name=prewarm-need "));
  t.equal(needRuns.length, 1, "one fio for the wanted files: the one begun");
  t.ok(
    log.lines.some((l) => /prewarm\.need: the wanted files' reads begun before the decision are taken over/.test(l)),
  );
  t.ok(
    log.lines.some((l) => /prewarm\.read: prewarm-need: 4 reads, 4 MiB at depth 4/.test(l)),
    "its reads, once",
  );
  const position = await fetchPositions(volumeId, before);
  t.equal([...wanted].filter((c) => position.has(c)).length, wanted.size, "every chunk of the wanted files fetched");
  t.ok(
    fioLine(log.lines, "prewarm-listed").index > fioLine(log.lines, "prewarm-need").index,
    "then the list's other files",
  );
  await begun.stop();
});

t.test("reads begun for other images are stopped, and the initialization reads its own", async (t) => {
  const { target } = await coldVolume();
  const log = createMemoryLogger("debug");
  const { reader, options } = background(log, { images: ["lab/want:1"] });
  const begun = reader.beginWanted!(target, { ...options, images: ["lab/other:1"] });
  await reader.initialize(target, "files", { ...options, begun });
  t.ok(
    log.lines.some((l) => /prewarm\.need: the reads begun before the decision read other files/.test(l)),
    "said so",
  );
  const needRuns = log.lines.filter((l) => l.includes("exec.run") && l.includes("--name=prewarm-need "));
  t.equal(needRuns.length, 2, "the begun fio, then the initialization's own");
  t.ok(
    log.lines.some((l) => /prewarm\.read: prewarm-need: 4 reads, 4 MiB at depth 4/.test(l)),
    "the wanted files read",
  );
});

t.test("reads begun and never taken over end on stop(), fio with them", async (t) => {
  const { target } = await coldVolume();
  const log = createMemoryLogger("debug");
  const { reader, options } = background(log, { images: ["lab/want:1"] });
  const begun = reader.beginWanted!(target, options);
  await begun.stop();
  await begun.stop();
  // fio is this process's child while it runs.
  const { stdout } = await run("pgrep", ["-P", String(process.pid), "fio"], { check: false });
  t.equal(stdout.trim(), "", "no fio left");
  t.ok(
    log.lines.some((l) => l.includes("exec.run") && l.includes("--name=prewarm-need ")),
    "fio had been started",
  );
});

t.test("device reads the list first, then the device from its start", async (t) => {
  const { volumeId, target } = await coldVolume();
  const listed = await chunksOf(target.mountPoint, [...WANTED, ...OTHER]);
  const before = (await lab.cold!.fetchOrder(volumeId)).length;
  const log = createMemoryLogger("debug");
  const stop = new AbortController();
  const { reader, options } = background(log, { signal: stop.signal });
  const reading = reader.initialize(target, "device", options).catch(() => undefined);
  // The whole 1 GiB device would take minutes at one 20 ms fetch at a time: its start is enough.
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline && (await lab.cold!.fetchOrder(volumeId)).length - before < listed.size + 64)
    await sleep(100);
  stop.abort();
  await reading;
  const order = (await lab.cold!.fetchOrder(volumeId)).slice(before);
  // Before the list's reads, only what reading the list and mapping its files fetches (a few chunks of metadata).
  const fetched = [...listed].filter((c) => order.includes(c));
  const last = Math.max(...fetched.map((c) => order.indexOf(c)));
  t.ok(fetched.length >= 20, `${fetched.length} listed chunks fetched (a chunk read at mount is warm already)`);
  t.ok(last < listed.size + 16, `the listed chunks among the first fetched (the last at ${last} of ${order.length})`);
  t.ok(order.length - last > 32, "then the device's own read");
});
