/**
 * The pre-warm's pure parts: what to do with a volume, the verdict (against the thresholds,
 * and on the recorded samples), progress and labels, the allocated ranges from recorded
 * xfs_info / freesp output, and the state file rendered by `ebs-cache-agent status`.
 */
import t from "tap";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  planPrewarm,
  DEFAULT_PREWARM,
  formatDuration,
  prewarmLabels,
  progressLabel,
  progressOf,
  verdictOf,
  type PrewarmSettings,
} from "../../../src/agent/prewarm/plan.ts";
import {
  acquirePrewarmLock,
  readPrewarmState,
  renderPrewarmStatus,
  writePrewarmState,
  type PrewarmState,
} from "../../../src/agent/prewarm/state.ts";
import {
  allocatedRanges,
  coveringReads,
  mergeRanges,
  parseFreesp,
  parseXfsInfo,
  sampleReads,
  totalBytes,
} from "../../../src/host/extents.ts";
import { parseFioJson, splitJsonDocuments } from "../../../src/host/fio.ts";
import { checkFigures } from "../../../src/host/volume-reads.ts";
import { VolumeTag } from "../../../src/tags.ts";

const fixture = (name: string) => readFileSync(new URL(`../../fixtures/data/fio/${name}`, import.meta.url), "utf8");
const with_ = (over: Partial<PrewarmSettings>): PrewarmSettings => ({ ...DEFAULT_PREWARM, ...over });
const fromSnapshot = { volumeId: "vol-1", snapshotId: "snap-1", tags: {} };

t.test("decisions", async (t) => {
  t.match(
    planPrewarm(DEFAULT_PREWARM, { volume: { volumeId: "vol-1", tags: {} } }),
    { action: "skip", verdict: "warm" },
    "not from a snapshot: warm without reading",
  );
  t.match(
    planPrewarm(DEFAULT_PREWARM, {
      volume: { ...fromSnapshot, tags: { [VolumeTag.initialized]: "2026-11-30T00:00:00Z" } },
    }),
    { action: "skip", verdict: "warm" },
    "tagged initialized: never again",
  );
  t.match(planPrewarm(with_({ strategy: "off" }), { volume: fromSnapshot }), { action: "skip", verdict: "unknown" });
  t.match(planPrewarm(DEFAULT_PREWARM, { volume: fromSnapshot }), { action: "check" }, "default: check");
  t.match(planPrewarm(with_({ strategy: "files" }), { volume: fromSnapshot }), {
    action: "initialize",
    mode: "files",
    background: true,
  });
  t.match(planPrewarm(with_({ strategy: "device", background: false }), { volume: fromSnapshot }), {
    action: "initialize",
    mode: "device",
    background: false,
  });
  const rate = { type: "provisioned-rate", progress: 40, etaSeconds: 30 };
  t.match(
    planPrewarm(with_({ strategy: "files" }), { volume: fromSnapshot, status: rate }),
    { action: "follow" },
    "VolumeInitializationRate: followed, not read",
  );
  t.match(planPrewarm(DEFAULT_PREWARM, { volume: fromSnapshot, status: { ...rate, progress: 100 } }), {
    action: "record-initialized",
  });
  t.match(
    planPrewarm(with_({ strategy: "files" }), { volume: fromSnapshot, status: { type: "default", progress: 100 } }),
    { action: "initialize" },
    "default (lazy) initialization: read",
  );
  t.match(
    planPrewarm(with_({ strategy: "off" }), { volume: fromSnapshot, status: rate }),
    { action: "skip" },
    "off wins over following",
  );
});

t.test("verdicts against the thresholds", async (t) => {
  const figures = { reads: 1000, seconds: 1, iops: 3000, mibps: 11.7, latencyMs: { p50: 5 } };
  t.equal(verdictOf(figures, DEFAULT_PREWARM.thresholds).verdict, "warm");
  t.match(verdictOf({ ...figures, iops: 300 }, DEFAULT_PREWARM.thresholds), {
    verdict: "cold",
    reasons: [/300 IOPS < 1000/],
  });
  t.match(verdictOf({ ...figures, latencyMs: { p50: 50 } }, DEFAULT_PREWARM.thresholds), {
    verdict: "cold",
    reasons: [/median latency 50 ms > 20 ms/],
  });
  t.equal(
    verdictOf({ ...figures, latencyMs: { p50: 50 } }, { minIops: 1000, maxMedianLatencyMs: null }).verdict,
    "warm",
    "latency only reported",
  );
  t.equal(verdictOf(undefined, DEFAULT_PREWARM.thresholds).verdict, "unknown");
  t.equal(verdictOf({ ...figures, reads: 0 }, DEFAULT_PREWARM.thresholds).verdict, "unknown");
});

t.test("verdicts of the recorded samples (lab cold volume, before and after initialization)", async (t) => {
  const figures = (name: string) => checkFigures(parseFioJson(splitJsonDocuments(fixture(name)).documents.at(-1)!));
  t.equal(verdictOf(figures("check-cold.json"), DEFAULT_PREWARM.thresholds).verdict, "cold");
  t.equal(verdictOf(figures("check-warm.json"), DEFAULT_PREWARM.thresholds).verdict, "warm");
});

t.test("progress, labels, durations", async (t) => {
  t.same(progressOf(512, 1024, 512, 1000), { doneBytes: 512, totalBytes: 1024, percent: 50, mibps: 0, etaSeconds: 1 });
  const p = progressOf(3 * 2 ** 30, 4 * 2 ** 30, 2 ** 30, 10_000);
  t.equal(p.percent, 75);
  t.equal(p.mibps, 102.4);
  t.equal(p.etaSeconds, 10);
  t.equal(progressOf(0, 100, 0, 0).etaSeconds, undefined, "no rate yet: no ETA");
  t.equal(progressOf(5, 0, 0, 0).percent, 100);
  t.equal(progressOf(2 * 999, 1000 * 2, 0, 1).percent, 99.9, "rounded down: 100 % only when done");
  t.equal(progressLabel(59.9), "50");
  t.equal(progressLabel(100), "100");
  t.same(prewarmLabels("warming", "cold", 42), { prewarm: "cold", "prewarm-progress": "40" });
  t.same(prewarmLabels("ready", "warm"), { prewarm: "warm" });
  t.equal(formatDuration(3725), "1h02m");
  t.equal(formatDuration(185), "3m05s");
  t.equal(formatDuration(12), "12s");
});

t.test("allocated ranges from recorded xfs_info and freesp", async (t) => {
  const geometry = parseXfsInfo(fixture("xfs_info.txt"));
  t.same(geometry, { agCount: 4, agBlocks: 65536, blockSize: 4096, dataBlocks: 262144 });
  const free = parseFreesp(fixture("freesp.txt"));
  t.ok(free.length > 0 && free.every((f) => f.ag < geometry.agCount));
  const used = allocatedRanges(geometry, free);
  const freeBytes = free.reduce((s, f) => s + f.length * 4096, 0);
  t.equal(totalBytes(used) + freeBytes, 262144 * 4096, "used + free = the data section");
  t.ok(totalBytes(used) >= 64 * 2 ** 20, "the 64 MiB of files (and the log) are in it");
  t.ok(
    used.every((r, i) => i === 0 || r.start > used[i - 1]!.end),
    "sorted, disjoint",
  );
  t.throws(() => parseXfsInfo("not xfs"));
});

t.test("range arithmetic", async (t) => {
  t.same(
    mergeRanges(
      [
        { start: 10, end: 20 },
        { start: 0, end: 5 },
        { start: 22, end: 30 },
      ],
      2,
    ),
    [
      { start: 0, end: 5 },
      { start: 10, end: 30 },
    ],
  );
  t.same(
    allocatedRanges({ blockSize: 10, agBlocks: 10, agCount: 2, dataBlocks: 20 }, [
      { ag: 0, start: 2, length: 3 },
      { ag: 1, start: 0, length: 10 },
    ]),
    [
      { start: 0, end: 20 },
      { start: 50, end: 100 },
    ],
  );
  const reads = coveringReads(
    [
      { start: 0, end: 2500 },
      { start: 4096, end: 5000 },
    ],
    1000,
    1500,
  );
  t.same(
    reads,
    [
      { offset: 1500, length: 1000 },
      { offset: 4096, length: 904 },
    ],
    "from a resume point, in pieces of at most 1000",
  );
  let x = 7;
  const random = () => (x = (x * 16807) % 2147483647) / 2147483647;
  const ranges = [
    { start: 0, end: 8192 },
    { start: 1 << 20, end: (1 << 20) + 4096 * 100 },
  ];
  const sample = sampleReads(ranges, 1000, 4096, random);
  t.equal(sample.length, 1000);
  t.ok(
    sample.every((r) => r.offset % 4096 === 0 && ranges.some((g) => r.offset >= g.start && r.offset + 4096 <= g.end)),
    "only allocated blocks",
  );
  const inSmall = sample.filter((r) => r.offset < 8192).length;
  t.ok(inSmall > 0 && inSmall < 60, `uniform over bytes: ${inSmall} of 1000 in the 2-block range (expected ~20)`);
  t.same(sampleReads([], 10, 4096), []);
});

t.test("state file, lock and status", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "prewarm-state-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  t.equal(await readPrewarmState(dir), undefined);
  const state: PrewarmState = {
    version: 1,
    volumeId: "vol-1",
    device: "/dev/nvme1n1",
    mountPoint: "/var/lib/ebs-cache/vol-1",
    strategy: "files",
    action: "initialize",
    mode: "files",
    reason: "prewarm.strategy is files",
    phase: "initializing",
    verdict: "cold",
    before: { reads: 300, seconds: 3, iops: 50, mibps: 0.2, latencyMs: { p50: 312, p90: 337, p99: 591 } },
    progress: { doneBytes: 2 ** 30, totalBytes: 4 * 2 ** 30, percent: 25, mibps: 100, etaSeconds: 31 },
    cursor: { mode: "files", offset: 2 ** 30 },
    labels: { "volume-id": "vol-1" },
    pid: 999999999,
    startedAt: "2026-11-30T12:00:00.000Z",
    updatedAt: "2026-11-30T12:00:10.000Z",
  };
  await writePrewarmState(dir, state);
  t.same(await readPrewarmState(dir), state);
  const lines = renderPrewarmStatus(state, false, new Date("2026-11-30T12:00:20.000Z"));
  t.match(lines.join("\n"), /phase: +initializing, interrupted/);
  t.match(lines.join("\n"), /progress: 25\.0 % \(1 GiB of 4 GiB\), 100\.0 MiB\/s, ETA 31s/);
  t.match(lines.join("\n"), /before: +50 IOPS, 0\.2 MiB\/s, latency p50 312\.00 ms/);
  t.match(lines.join("\n"), /updated: .*\(10s ago\)/);
  t.match(renderPrewarmStatus(undefined, false)[0], /no state yet/);

  const lock = await acquirePrewarmLock(dir);
  t.ok("release" in lock);
  const again = await acquirePrewarmLock(dir);
  t.ok("release" in again, "the same process may take its own lock again");
  if ("release" in lock) await lock.release();
  const { writeFile } = await import("node:fs/promises");
  await writeFile(join(dir, "prewarm.lock"), JSON.stringify({ pid: 1 }));
  t.same(await acquirePrewarmLock(dir), { heldBy: 1 }, "a live holder keeps it");
  await writeFile(join(dir, "prewarm.lock"), JSON.stringify({ pid: 999999999 }));
  const taken = await acquirePrewarmLock(dir);
  t.ok("release" in taken, "a dead holder's lock is taken over");
});

t.test("the labels contract: pre-warm keys under the prefix; osparc's label is never the agent's", async (t) => {
  const { readinessLabels, nodeLabelChanges, validateLabelPrefix, LabelError } =
    await import("../../../src/docker/labels.ts");
  const prefix = "io.simcore.ebs-cache";
  const warming = readinessLabels(prefix, "warming", {
    "volume-id": "vol-1",
    pool: "p",
    kind: "pool",
    ...prewarmLabels("warming", "cold", 37),
  });
  t.same(warming, {
    [`${prefix}.state`]: "warming",
    [`${prefix}.volume-id`]: "vol-1",
    [`${prefix}.pool`]: "p",
    [`${prefix}.kind`]: "pool",
    [`${prefix}.prewarm`]: "cold",
    [`${prefix}.prewarm-progress`]: "30",
  });
  const ready = readinessLabels(prefix, "ready", {
    "volume-id": "vol-1",
    pool: "p",
    kind: "pool",
    ...prewarmLabels("ready", "warm"),
  });
  const osparc = { "io.simcore.osparc-services-ready": "true" };
  const change = nodeLabelChanges(prefix, { ...warming, ...osparc }, ready);
  t.same(
    change,
    { add: { [`${prefix}.state`]: "ready", [`${prefix}.prewarm`]: "warm" }, remove: [`${prefix}.prewarm-progress`] },
    "warming -> ready: progress removed, osparc's label untouched",
  );
  t.throws(() => validateLabelPrefix("io.simcore"), LabelError, "a prefix above osparc's label is refused");
  t.throws(() => validateLabelPrefix("io"), LabelError);
  t.doesNotThrow(() => validateLabelPrefix("io.simcore.ebs-cache"));
});
