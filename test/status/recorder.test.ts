/**
 * The OutcomeRecorder (src/status/recorder.ts) on a temp folder, with the host facts given: it
 * writes each use case's record and textfile, joins a two-phase boot into one record, reads the
 * host facts only for a boot that came up, writes no metrics with `textfileDir: null`, carries
 * gc's counters, and never throws: a write that fails is a warning and nothing else. The source
 * a boot reports (src/agent/boot/source.ts) is checked here too.
 */
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t, { type Test } from "tap";
import type { Selection } from "../../src/agent/boot/plan.ts";
import { BOOT_SOURCES, bootSourceOf } from "../../src/agent/boot/source.ts";
import type { PrewarmState } from "../../src/agent/prewarm/state.ts";
import type { CacheFilesystem } from "../../src/host/facts.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { readBootRecord, withFirstPhase, type BootRecord } from "../../src/status/records.ts";
import { createOutcomeRecorder, type HostFacts } from "../../src/status/recorder.ts";
import { parsePromText, sampleOf } from "../fixtures/oracles/prom-text.ts";
import { readyBoot } from "../fixtures/builders/use-case-results.ts";
import type { BootReport, GcReport } from "../../src/agent/outcomes.ts";

const at = new Date("2026-12-01T10:00:00Z");
const fs: CacheFilesystem = {
  mountPoint: readyBoot.mountPoint!,
  device: "/dev/nvme1n1",
  fsType: "xfs",
  sizeBytes: 100,
  usedBytes: 40,
  availableBytes: 60,
  usedRatio: 0.4,
};

async function folder(tt: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "recorder-"));
  tt.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

function countingFacts(): HostFacts & { calls: number } {
  const facts = {
    calls: 0,
    cacheFilesystem: async (mountPoint: string) => {
      facts.calls++;
      return mountPoint === fs.mountPoint ? fs : undefined;
    },
    host: async () => {
      facts.calls++;
      return { memoryBytes: 8 * 2 ** 30, cpuCores: 2, cpuModel: "test" };
    },
  };
  return facts;
}

t.test("bootSourceOf: the outcome, then what the boot created, then the selection", async (tt) => {
  const pool: Selection = { source: "pool", candidates: ["vol-1"], relist: { tags: {} } };
  tt.equal(bootSourceOf(pool, "ready", undefined), "pool");
  tt.equal(bootSourceOf(pool, "warming", "snapshot"), "snapshot", "a pool claim that fell back to the snapshot");
  tt.equal(bootSourceOf(pool, "degraded", "snapshot"), "degraded", "no volume in the end");
  tt.equal(bootSourceOf({ source: "attached", volumeId: "vol-1", kind: "pool" }, "ready", undefined), "attached");
  const create = { availabilityZone: "eu-west-1a", volumeType: "gp3", initializationRateMiBps: null, tags: {} };
  tt.equal(
    bootSourceOf({ source: "new-workspace", from: "blank", create: { ...create, sizeGiB: 20 } }, "ready", undefined),
    "blank",
  );
  tt.equal(
    bootSourceOf(
      { source: "new-workspace", from: "snapshot", create: { ...create, snapshotId: "snap-1" } },
      "prepared",
      "snapshot",
    ),
    "snapshot",
  );
  tt.equal(bootSourceOf({ source: "disabled", reason: "off" }, "disabled", undefined), "disabled");
  tt.equal(bootSourceOf({ source: "none", reason: "nothing" }, "degraded", undefined), "degraded");
  const schema = JSON.parse(await readFile(new URL("../../schema/status.schema.json", import.meta.url), "utf8")) as {
    properties: { boot: { properties: { source: { enum: string[] } } } };
  };
  tt.same(schema.properties.boot.properties.source.enum, BOOT_SOURCES, "status.schema.json lists the same sources");
});

t.test("a boot: the record and the textfile, with the host facts of a boot that came up", async (tt) => {
  const dir = await folder(tt);
  const facts = countingFacts();
  const log = createMemoryLogger();
  const recorder = createOutcomeRecorder({
    stateDir: join(dir, "state"),
    textfileDir: join(dir, "prom"),
    log,
    facts,
  });
  await recorder.bootFinished({
    instanceId: "i-1",
    bootId: "b-1",
    phase: "single",
    report: readyBoot,
    finishedAt: at,
    publishedLabels: { "x.state": "ready" },
  });
  const record = (await readBootRecord(join(dir, "state"))).record!;
  tt.equal(record.result.source, "pool");
  tt.same(record.labels, { "x.state": "ready" });
  const prom = parsePromText(await readFile(join(dir, "prom", "ebs_cache_agent_boot.prom"), "utf8"));
  tt.equal(sampleOf(prom, "ebs_cache_agent_boot_info")?.labels.source, "pool");
  tt.notOk(prom.has("ebs_cache_agent_cache_filesystem_used_ratio"), "the fill is in its own file, not the boot's");
  const fill = parsePromText(await readFile(join(dir, "prom", "ebs_cache_agent_fill.prom"), "utf8"));
  tt.equal(sampleOf(fill, "ebs_cache_agent_cache_filesystem_used_ratio")?.value, 0.4);
  tt.equal(sampleOf(prom, "ebs_cache_agent_host_cpu_cores")?.value, 2);
  tt.equal(facts.calls, 2);

  const degraded: BootReport = {
    outcome: "degraded",
    source: "degraded",
    reason: "no volume",
    timeline: [{ step: "claim-volume", ms: 3 }],
  };
  await recorder.bootFinished({ instanceId: "i-1", phase: "first", report: degraded, finishedAt: at });
  tt.equal(facts.calls, 2, "no host facts for a boot that did not come up");
  const after = parsePromText(await readFile(join(dir, "prom", "ebs_cache_agent_boot.prom"), "utf8"));
  tt.notOk(after.has("ebs_cache_agent_cache_device_info"), "the file is replaced whole");
  const fillAfter = parsePromText(await readFile(join(dir, "prom", "ebs_cache_agent_fill.prom"), "utf8"));
  tt.notOk(fillAfter.has("ebs_cache_agent_cache_filesystem_size_bytes"), "no fill of an earlier boot left behind");
  tt.same(
    log.lines.filter((l) => l.includes("could not write")),
    [],
  );
});

t.test(
  "a two-phase boot is one record: the first phase's source, both timelines; another boot's record is not joined",
  async (tt) => {
    const first: BootRecord = {
      version: 1,
      instanceId: "i-1",
      bootId: "b-1",
      phase: "first",
      finishedAt: at.toISOString(),
      result: {
        outcome: "prepared",
        source: "snapshot",
        volumeId: "vol-1",
        timeline: [{ step: "create-and-claim", ms: 9000 }],
      },
    };
    const second: BootRecord = {
      ...first,
      phase: "second",
      result: {
        outcome: "warming",
        source: "attached",
        volumeId: "vol-1",
        timeline: [{ step: "start-docker", ms: 1000 }],
      },
    };
    const joined = withFirstPhase(first, second);
    tt.equal(joined.result.source, "snapshot");
    tt.equal(joined.result.outcome, "warming");
    tt.same(
      joined.result.timeline.map((s) => s.step),
      ["create-and-claim", "start-docker"],
    );
    tt.equal(withFirstPhase({ ...first, bootId: "b-0" }, second), second, "a record of the previous machine boot");
    tt.equal(withFirstPhase(undefined, second), second);
    tt.equal(withFirstPhase({ ...first, phase: "second" }, second), second, "a joined record is not joined again");
    tt.equal(
      withFirstPhase(first, { ...second, result: { ...second.result, volumeId: "vol-2" } }).result.source,
      "attached",
      "another volume",
    );
    const bothDegraded = withFirstPhase(
      {
        ...first,
        result: { outcome: "degraded", source: "degraded", reason: "every pool candidate was taken", timeline: [] },
      },
      { ...second, result: { outcome: "degraded", source: "degraded", reason: "no volume attached", timeline: [] } },
    );
    tt.equal(bothDegraded.result.reason, "every pool candidate was taken", "the cause, not the second phase's echo");

    const dir = await folder(tt);
    const recorder = createOutcomeRecorder({
      stateDir: dir,
      textfileDir: join(dir, "prom"),
      log: createMemoryLogger(),
      facts: countingFacts(),
    });
    await recorder.bootFinished({
      instanceId: "i-1",
      bootId: "b-1",
      phase: "first",
      report: first.result,
      finishedAt: at,
    });
    await recorder.bootFinished({
      instanceId: "i-1",
      bootId: "b-1",
      phase: "second",
      report: second.result,
      finishedAt: at,
    });
    tt.equal((await readBootRecord(dir)).record?.result.source, "snapshot");
    const prom = parsePromText(await readFile(join(dir, "prom", "ebs_cache_agent_boot.prom"), "utf8"));
    tt.equal(
      sampleOf(prom, "ebs_cache_agent_boot_duration_seconds", { outcome: "warming", source: "snapshot" })?.value,
      10,
    );
  },
);

t.test("textfileDir null: the records, no metrics", async (tt) => {
  const dir = await folder(tt);
  const recorder = createOutcomeRecorder({
    stateDir: dir,
    textfileDir: null,
    log: createMemoryLogger(),
    facts: countingFacts(),
  });
  await recorder.bootFinished({ instanceId: "i-1", phase: "single", report: readyBoot, finishedAt: at });
  await recorder.releaseFinished({
    instanceId: "i-1",
    report: { outcome: "nothing", released: [], kept: [], problems: [], timeline: [] },
    finishedAt: at,
  });
  tt.same((await readdir(dir)).sort(), ["last-boot.json", "last-release.json"]);
});

t.test("a write that fails is a warning, never an exception", async (tt) => {
  const dir = await folder(tt);
  const notADir = join(dir, "file");
  await writeFile(notADir, "x");
  const log = createMemoryLogger();
  const recorder = createOutcomeRecorder({
    stateDir: join(notADir, "state"),
    textfileDir: join(notADir, "prom"),
    log,
    facts: countingFacts(),
  });
  await recorder.bootFinished({ instanceId: "i-1", phase: "single", report: readyBoot, finishedAt: at });
  await recorder.releaseFinished({
    instanceId: "i-1",
    report: { outcome: "nothing", released: [], kept: [], problems: [], timeline: [] },
    finishedAt: at,
  });
  await recorder.gcFinished({
    report: { decisions: [], wouldDelete: 0, wouldTag: 0, overCap: 0, deleted: 0, spared: 0, failed: 0 },
    dryRun: false,
    finishedAt: at,
  });
  const warnings = log.lines.filter((l) => l.startsWith("<4>metrics.write-failed: could not write"));
  tt.equal(warnings.length, 4, "boot and fill metrics, release metrics, gc metrics");
  tt.match(warnings.find((l) => l.includes("the boot metrics")) ?? "", /remediation=/, "with what to do");
  // A status record is not a metric: its failure is the use case's own event.
  tt.ok(
    log.lines.some((l) => l.startsWith("<4>boot.record-failed: could not write the boot's status record")),
    "the boot's record: its own event",
  );
  tt.ok(
    log.lines.some((l) => l.startsWith("<7>release.record-failed: could not write the release's status record")),
    "the release's record: its own event; the state folder's second failure in one run is a detail: said once",
  );
  tt.notOk(
    log.lines.some((l) => /^<\d>metrics\.write-failed: .*status record/.test(l)),
    "no status record told as metrics",
  );
});

t.test("the release's status record alone not written: a warning of the release's own", async (tt) => {
  const dir = await folder(tt);
  const notADir = join(dir, "file");
  await writeFile(notADir, "x");
  const log = createMemoryLogger();
  const recorder = createOutcomeRecorder({ stateDir: notADir, textfileDir: null, log, facts: countingFacts() });
  await recorder.releaseFinished({
    instanceId: "i-1",
    report: { outcome: "nothing", released: [], kept: [], problems: [], timeline: [] },
    finishedAt: at,
  });
  tt.equal(log.lines.length, 1, log.lines.join("\n"));
  tt.match(log.lines[0], /^<4>release\.record-failed: could not write the release's status record: .*unchanged$/);
});

t.test("gc's counters are carried from run to run; the pre-warm's state becomes its own file", async (tt) => {
  const dir = await folder(tt);
  const recorder = createOutcomeRecorder({
    stateDir: dir,
    textfileDir: dir,
    log: createMemoryLogger(),
    facts: countingFacts(),
  });
  const report: GcReport = {
    decisions: [{ volumeId: "vol-1", verdict: "delete", reason: "expired", done: "deleted" }],
    wouldDelete: 1,
    wouldTag: 0,
    overCap: 0,
    deleted: 1,
    spared: 0,
    failed: 0,
  };
  await recorder.gcFinished({ report, dryRun: false, finishedAt: at });
  await recorder.gcFinished({ report, dryRun: false, finishedAt: at });
  const gc = parsePromText(await readFile(join(dir, "ebs_cache_agent_gc.prom"), "utf8"));
  tt.equal(sampleOf(gc, "ebs_cache_agent_gc_deleted_volumes_total")?.value, 2);
  const state: PrewarmState = {
    version: 1,
    volumeId: "vol-1",
    device: "/dev/nvme1n1",
    mountPoint: "/mnt/x",
    strategy: "files",
    action: "initialize",
    reason: "prewarm.strategy is files",
    phase: "initializing",
    verdict: "cold",
    progress: { doneBytes: 1, totalBytes: 4, percent: 25, mibps: 10 },
    labels: {},
    startedAt: at.toISOString(),
    updatedAt: at.toISOString(),
  };
  await recorder.prewarmStateWritten(state);
  const prewarm = parsePromText(await readFile(join(dir, "ebs_cache_agent_prewarm.prom"), "utf8"));
  tt.equal(sampleOf(prewarm, "ebs_cache_agent_prewarm_progress_ratio")?.value, 0.25);
  tt.equal(sampleOf(prewarm, "ebs_cache_agent_prewarm_info")?.labels.strategy, "files");
});

t.test(
  "a prune: its counters carried from run to run, the fill it left in the fill file; a dry run counts nothing",
  async (tt) => {
    const dir = await folder(tt);
    const recorder = createOutcomeRecorder({
      stateDir: dir,
      textfileDir: dir,
      log: createMemoryLogger(),
      facts: countingFacts(),
    });
    const fill = {
      mountPoint: "/mnt/x",
      device: "/dev/loop1",
      sizeBytes: 100,
      usedBytes: 50,
      availableBytes: 50,
      usedRatio: 0.5,
      inodes: 10,
      freeInodes: 4,
    };
    const facts = {
      verdict: "prune",
      trigger: "timer" as const,
      reason: "above",
      dryRun: false,
      removedImages: 2,
      failedImages: 0,
      removedBytes: 30,
      usedRatioBefore: 0.9,
      usedRatioAfter: 0.5,
      fill,
      finishedAt: at,
    };
    await recorder.pruneFinished(facts);
    await recorder.pruneFinished(facts);
    await recorder.pruneFinished({ ...facts, dryRun: true });
    const prune = parsePromText(await readFile(join(dir, "ebs_cache_agent_prune.prom"), "utf8"));
    tt.equal(sampleOf(prune, "ebs_cache_agent_prune_removed_images_total")?.value, 4);
    tt.equal(sampleOf(prune, "ebs_cache_agent_prune_removed_bytes_total")?.value, 60);
    tt.equal(sampleOf(prune, "ebs_cache_agent_prune_dry_run_ratio")?.value, 1);
    tt.notOk(prune.has("ebs_cache_agent_cache_filesystem_used_ratio"), "the fill is not in the prune's file");
    const fillFile = parsePromText(await readFile(join(dir, "ebs_cache_agent_fill.prom"), "utf8"));
    tt.equal(sampleOf(fillFile, "ebs_cache_agent_cache_filesystem_used_ratio", { mountpoint: "/mnt/x" })?.value, 0.5);
    tt.equal(sampleOf(fillFile, "ebs_cache_agent_cache_filesystem_free_inodes")?.value, 4);
  },
);
