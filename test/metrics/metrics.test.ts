/**
 * The metrics model and its text format, without a lab: each use case's result (built here as
 * the use cases return them) renders to a file that a strict parser of the format reads back
 * (test/fixtures/oracles/prom-text.ts), with names that follow Prometheus' conventions; the textfile
 * is replaced atomically and counters carry over runs.
 */
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t, { type Test } from "tap";
import type { PrewarmState } from "../../src/agent/prewarm/state.ts";
import { bootFailedMetrics, bootMetrics } from "../../src/metrics/boot.ts";
import { family, gauge, namingProblems, reasonLabel, type MetricFamily } from "../../src/metrics/family.ts";
import { gcFailedMetrics, gcMetrics } from "../../src/metrics/gc.ts";
import { cacheDeviceMetrics, cacheFilesystemMetrics, hostMetrics } from "../../src/metrics/host.ts";
import { keeperFailedMetrics, keeperMetrics } from "../../src/metrics/keeper.ts";
import { prewarmMetrics } from "../../src/metrics/prewarm.ts";
import { releaseFailedMetrics, releaseMetrics } from "../../src/metrics/release.ts";
import { pruneFailedMetrics } from "../../src/metrics/prune.ts";
import { escapeLabelValue, renderTextFormat } from "../../src/metrics/render.ts";
import { carryCounters, MetricsWriteError, textfilePath, writeTextfile } from "../../src/metrics/textfile.ts";
import { parsePromText, sampleOf, type ParsedFamily } from "../fixtures/oracles/prom-text.ts";
import { readyBoot } from "../fixtures/builders/use-case-results.ts";
import { readCacheFilesystem } from "../../src/host/facts.ts";
import type { BootReport, GcReport, ReleaseReport } from "../../src/agent/outcomes.ts";

const at = new Date("2026-12-01T10:00:00Z");

/** Names and labels by the conventions, checked on what the parser read (not on the model). */
function assertConventions(tt: Test, families: Map<string, ParsedFamily>) {
  for (const f of families.values()) {
    tt.match(f.name, /^ebs_cache_agent_[a-z0-9_]+$/, `${f.name}: prefix and snake case`);
    tt.ok(f.help.length > 10, `${f.name} has a HELP`);
    if (f.type === "counter") tt.match(f.name, /_total$/, `${f.name}: a counter ends with _total`);
    else tt.notMatch(f.name, /_total$/, `${f.name}: only counters end with _total`);
    tt.match(
      f.name,
      new RegExp(
        "_(seconds|bytes|ratio|info|iops|bytes_per_second|volumes|actions|cores|problems|inodes|images|runs|disks)" +
          "(_total)?$",
      ),
      `${f.name}: a unit in the name`,
    );
    tt.notMatch(f.name, /_(milliseconds|ms|mib|kb|percent)(_|$)/, `${f.name}: base units only`);
    for (const s of f.samples) {
      if (f.name.endsWith("_ratio")) tt.ok(s.value >= 0 && s.value <= 1, `${f.name} within 0..1`);
      if (f.name.endsWith("_info")) tt.equal(s.value, 1, `${f.name} is 1`);
    }
  }
}

function roundTrip(families: MetricFamily[]) {
  return parsePromText(renderTextFormat(families));
}

t.test("a boot renders, parses, and says outcome, source and steps; the pre-warm has its own file", async (tt) => {
  const parsed = roundTrip(bootMetrics({ report: readyBoot, finishedAt: at }));
  assertConventions(tt, parsed);
  tt.same(sampleOf(parsed, "ebs_cache_agent_boot_info")?.labels, {
    outcome: "ready",
    source: "pool",
    volume_id: "vol-0123456789abcdef0",
    reason: "",
  });
  tt.equal(sampleOf(parsed, "ebs_cache_agent_boot_cache_hit_ratio")?.value, 1);
  // claim-volume ran twice (a volume handed back): its two runs add up.
  tt.equal(sampleOf(parsed, "ebs_cache_agent_boot_step_duration_seconds", { step: "claim-volume" })?.value, 2);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_boot_step_duration_seconds", { step: "start-docker" })?.value, 2.1);
  tt.equal(parsed.get("ebs_cache_agent_boot_step_duration_seconds")?.samples.length, 5);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_boot_duration_seconds", { source: "pool" })?.value, 4.452);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_boot_timestamp_seconds")?.value, at.getTime() / 1000);
  // node_exporter refuses a series two files carry: the pre-warm's are only in its own file.
  tt.notOk(
    [...parsed.keys()].some((name) => name.startsWith("ebs_cache_agent_prewarm_")),
    "no pre-warm families in the boot's file",
  );
  const prewarm = roundTrip(prewarmMetrics({ volumeId: readyBoot.volumeId, ...readyBoot.prewarm! }));
  assertConventions(tt, prewarm);
  tt.equal(sampleOf(prewarm, "ebs_cache_agent_prewarm_cold_volumes")?.value, 1);
  tt.equal(
    sampleOf(prewarm, "ebs_cache_agent_prewarm_sample_latency_seconds", { sample: "before", percentile: "p50" })?.value,
    0.0045,
  );
  tt.equal(
    sampleOf(prewarm, "ebs_cache_agent_prewarm_sample_read_bytes_per_second", { sample: "before" })?.value,
    0.8 * 1024 * 1024,
  );
  tt.notOk(prewarm.has("ebs_cache_agent_prewarm_progress_ratio"), "no progress figures without progress");
});

t.test("a degraded boot: source degraded, no hit, the reason on one bounded line", async (tt) => {
  const reason = 'claim-volume: no pool volume "available"\nin zone eu-west-1a\\b ' + "x".repeat(400);
  const degraded: BootReport = {
    outcome: "degraded",
    source: "degraded",
    reason,
    timeline: [
      { step: "check-host", ms: 5 },
      { step: "claim-volume", ms: 900 },
    ],
  };
  const text = renderTextFormat(bootMetrics({ report: degraded, finishedAt: at }));
  const parsed = parsePromText(text);
  assertConventions(tt, parsed);
  const info = sampleOf(parsed, "ebs_cache_agent_boot_info")!;
  tt.equal(info.labels.outcome, "degraded");
  tt.equal(info.labels.source, "degraded");
  tt.equal(info.labels.reason, reasonLabel(reason), "the reason survives escaping");
  tt.notMatch(info.labels.reason!, /\n/);
  tt.ok(info.labels.reason!.length <= 160);
  tt.match(info.labels.reason!, /^claim-volume: no pool volume "available" in zone eu-west-1a\\b x/);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_boot_cache_hit_ratio")?.value, 0);
  tt.notOk(parsed.has("ebs_cache_agent_prewarm_info"));
});

t.test("a snapshot boot is not a cache hit", async (tt) => {
  const parsed = roundTrip(
    bootMetrics({ report: { ...readyBoot, outcome: "warming", source: "snapshot" }, finishedAt: at }),
  );
  tt.equal(sampleOf(parsed, "ebs_cache_agent_boot_cache_hit_ratio")?.value, 0);
});

t.test("the pre-warm state file's progress", async (tt) => {
  const state: PrewarmState = {
    version: 1,
    volumeId: "vol-0123456789abcdef0",
    device: "/dev/nvme1n1",
    mountPoint: "/mnt/x",
    strategy: "files",
    action: "initialize",
    mode: "files",
    reason: "prewarm.strategy is files",
    phase: "initializing",
    verdict: "cold",
    progress: { doneBytes: 512 * 1024 * 1024, totalBytes: 2048 * 1024 * 1024, percent: 25, mibps: 64, etaSeconds: 24 },
    labels: {},
    startedAt: "2026-12-01T09:59:00Z",
    updatedAt: "2026-12-01T10:00:00Z",
  };
  const parsed = roundTrip(prewarmMetrics(state));
  assertConventions(tt, parsed);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_prewarm_progress_ratio")?.value, 0.25);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_prewarm_progress_read_bytes")?.value, 512 * 1024 * 1024);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_prewarm_progress_remaining_seconds")?.value, 24);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_prewarm_updated_timestamp_seconds")?.value, at.getTime() / 1000);
  tt.same(sampleOf(parsed, "ebs_cache_agent_prewarm_info")?.labels, {
    volume_id: state.volumeId,
    verdict: "cold",
    phase: "initializing",
    action: "initialize",
    strategy: "files",
  });
  tt.notOk(parsed.has("ebs_cache_agent_prewarm_sample_iops"), "no sample, no empty family");
});

t.test("a release: outcome, duration, volumes, problems", async (tt) => {
  const result: ReleaseReport = {
    outcome: "refused",
    released: ["vol-0123456789abcdef0"],
    kept: [],
    problems: [
      {
        step: "unmount",
        volumeId: "vol-0fedcba9876543210",
        kind: "refused",
        message: "busy: held by pid 42",
        remediation: "stop it",
      },
    ],
    timeline: [
      { step: "stop-docker", ms: 800 },
      { step: "detach", volumeId: "vol-0123456789abcdef0", ms: 1200 },
      { step: "unmount", volumeId: "vol-0fedcba9876543210", ms: 3 },
    ],
  };
  const parsed = roundTrip(releaseMetrics({ report: result, finishedAt: at }));
  assertConventions(tt, parsed);
  tt.same(sampleOf(parsed, "ebs_cache_agent_release_info")?.labels, {
    outcome: "refused",
    reason: "busy: held by pid 42",
  });
  tt.equal(sampleOf(parsed, "ebs_cache_agent_release_duration_seconds")?.value, 2.003);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_release_volumes", { disposition: "released" })?.value, 1);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_release_volumes", { disposition: "kept" })?.value, 0);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_release_problems", { kind: "refused" })?.value, 1);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_release_step_duration_seconds", { step: "detach" })?.value, 1.2);
});

const gcRun: GcReport = {
  decisions: [
    { volumeId: "vol-1", verdict: "delete", reason: "expired", done: "deleted" },
    { volumeId: "vol-2", verdict: "delete", reason: "expired", done: "failed", error: "in use" },
    { volumeId: "vol-3", verdict: "tag-expiry", reason: "never released", done: "tagged" },
    { volumeId: "vol-4", verdict: "kept", reason: "keep=true" },
    { volumeId: "vol-5", verdict: "kept", reason: "keep=true" },
    { volumeId: "vol-6", verdict: "delete", reason: "expired; spared: now in-use", done: "spared" },
  ],
  wouldDelete: 3,
  wouldTag: 1,
  overCap: 0,
  deleted: 1,
  spared: 1,
  failed: 1,
};

t.test("gc: volumes by verdict, and counters", async (tt) => {
  const parsed = roundTrip(gcMetrics({ report: gcRun, dryRun: false, finishedAt: at }));
  assertConventions(tt, parsed);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_gc_volumes", { verdict: "kept" })?.value, 2);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_gc_volumes", { verdict: "foreign" })?.value, 0);
  tt.equal(parsed.get("ebs_cache_agent_gc_deleted_volumes_total")?.type, "counter");
  tt.equal(sampleOf(parsed, "ebs_cache_agent_gc_deleted_volumes_total")?.value, 1);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_gc_tagged_volumes_total")?.value, 1);
  tt.equal(
    sampleOf(parsed, "ebs_cache_agent_gc_spared_volumes_total")?.value,
    1,
    "a deletion called off by the last look counts",
  );
  const dry = roundTrip(gcMetrics({ report: gcRun, dryRun: true, finishedAt: at }));
  tt.equal(sampleOf(dry, "ebs_cache_agent_gc_deleted_volumes_total")?.value, 0, "a dry run deletes nothing");
  tt.equal(sampleOf(dry, "ebs_cache_agent_gc_dry_run_ratio")?.value, 1);
});

t.test("keeper: actions by action, pool and outcome", async (tt) => {
  const parsed = roundTrip(
    keeperMetrics({
      actions: [
        { action: "create", pool: "p1", outcome: "done" },
        { action: "create", pool: "p1", outcome: "done" },
        { action: "create", pool: "p1", outcome: "failed" },
      ],
      poolVolumes: { p1: 4 },
      finishedAt: at,
    }),
  );
  assertConventions(tt, parsed);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_keeper_actions_total", { action: "create", outcome: "done" })?.value, 2);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_keeper_actions_total", { outcome: "failed" })?.value, 1);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_keeper_pool_volumes", { pool: "p1" })?.value, 4);
});

t.test("host facts", async (tt) => {
  const fs = {
    mountPoint: "/mnt/c",
    device: "/dev/nvme1n1",
    fsType: "xfs",
    sizeBytes: 100,
    usedBytes: 25,
    availableBytes: 75,
    usedRatio: 0.25,
    inodes: 640,
    freeInodes: 600,
    model: "Amazon Elastic Block Store",
    serial: "vol0123456789abcdef0",
  };
  const parsed = roundTrip([
    ...cacheFilesystemMetrics(fs),
    ...cacheDeviceMetrics(fs),
    ...hostMetrics({ memoryBytes: 8 << 30, cpuCores: 2, cpuModel: "Intel Xeon" }),
  ]);
  assertConventions(tt, parsed);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_cache_filesystem_used_ratio", { mountpoint: "/mnt/c" })?.value, 0.25);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_cache_filesystem_free_inodes", { mountpoint: "/mnt/c" })?.value, 600);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_cache_device_info")?.labels.serial, "vol0123456789abcdef0");
  tt.equal(sampleOf(parsed, "ebs_cache_agent_host_cpu_cores")?.value, 2);
  tt.notOk(
    cacheFilesystemMetrics({ ...fs, inodes: undefined }).some((f) => f.name.includes("inodes")),
    "no inode figures when statfs gave none",
  );
});

t.test("names that break the conventions are refused when the family is made", async (tt) => {
  tt.throws(
    () => gauge("boot_duration_ms", "seconds", "x", 1),
    { name: "MetricNameError" },
    "a gauge not ending with its unit",
  );
  tt.throws(
    () => family("gc_deleted_volumes", "counter", "volumes", "x", [{ labels: {}, value: 1 }]),
    { name: "MetricNameError" },
    "a counter without _total",
  );
  tt.throws(() => gauge("deleted_volumes_total", "volumes", "x", 1), { name: "MetricNameError" }, "_total on a gauge");
  tt.throws(() => gauge("boot-time_seconds", "seconds", "x", 1), { name: "MetricNameError" }, "a dash");
  tt.throws(() => gauge("boot_info", "info", "x", 2), { name: "MetricNameError" }, "an info of 2");
  tt.throws(
    () => gauge("boot_seconds", "seconds", "x", 1, { "step-name": "a" }),
    { name: "MetricNameError" },
    "a bad label name",
  );
  tt.throws(
    () => gauge("boot_seconds", "seconds", "x", 1, { __name: "a" }),
    { name: "MetricNameError" },
    "a reserved label name",
  );
  tt.throws(
    () =>
      family("boot_seconds", "gauge", "seconds", "x", [
        { labels: { a: "1", b: "2" }, value: 1 },
        { labels: { b: "2", a: "1" }, value: 2 },
      ]),
    { name: "MetricNameError" },
    "the same series twice",
  );
  tt.same(namingProblems({ name: "ebs_cache_agent_boot_seconds", type: "gauge", unit: "seconds", samples: [] }), []);
  tt.throws(
    () => renderTextFormat([gauge("a_seconds", "seconds", "x", 1), gauge("a_seconds", "seconds", "y", 2)]),
    /rendered twice/,
  );
});

t.test("escaping and special values survive the round trip", async (tt) => {
  tt.equal(escapeLabelValue('a\\b"c\nd'), 'a\\\\b\\"c\\nd');
  const odd = 'a\\b"c\nd}{,=';
  const text = renderTextFormat([
    gauge("odd_info", "info", "help with a \\ and a\nnewline", 1, { v: odd }),
    family("odd_seconds", "gauge", "seconds", "special values", [
      { labels: { k: "nan" }, value: NaN },
      { labels: { k: "inf" }, value: Infinity },
      { labels: { k: "tiny" }, value: 1e-9 },
    ]),
  ]);
  const parsed = parsePromText(text);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_odd_info")?.labels.v, odd);
  tt.equal(parsed.get("ebs_cache_agent_odd_info")?.help, "help with a \\ and a\nnewline");
  tt.ok(Number.isNaN(sampleOf(parsed, "ebs_cache_agent_odd_seconds", { k: "nan" })?.value));
  tt.equal(sampleOf(parsed, "ebs_cache_agent_odd_seconds", { k: "inf" })?.value, Infinity);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_odd_seconds", { k: "tiny" })?.value, 1e-9);
  tt.equal(renderTextFormat([family("empty_seconds", "gauge", "seconds", "x", [])]), "", "an empty family is left out");
});

t.test("the parser is strict (so the round trips above mean something)", async (tt) => {
  const ok = "# HELP m_seconds h\n# TYPE m_seconds gauge\nm_seconds 1\n";
  tt.ok(parsePromText(ok).has("m_seconds"));
  tt.throws(() => parsePromText("m_seconds 1\n"), /outside its family/);
  tt.throws(() => parsePromText(ok.slice(0, -1)), /newline/);
  tt.throws(() => parsePromText(ok.replace("m_seconds 1", "m_seconds 1 1700000000")), /timestamp/);
  tt.throws(() => parsePromText(ok + "\n"), /blank line/);
  tt.throws(() => parsePromText(ok.replace("m_seconds 1", 'm_seconds{a="1",a="2"} 1')), /twice/);
  tt.throws(() => parsePromText(ok.replace("m_seconds 1", 'm_seconds{a="\\x"} 1')), /escape/);
  tt.throws(
    () => parsePromText(ok + "# HELP n_seconds h\n# TYPE n_seconds gauge\nn_seconds 1\nm_seconds 2\n"),
    /outside its family/,
  );
  tt.throws(() => parsePromText(ok.replace(" 1\n", " one\n")), /bad value/);
  tt.throws(() => parsePromText(ok.replace("h\n", "h \\x\n")), /escape in HELP/);
});

t.test("the textfile: replaced whole, one file per use case, counters carried", async (tt) => {
  const dir = await mkdtemp(join(tmpdir(), "metrics-"));
  tt.teardown(() => rm(dir, { recursive: true, force: true }));
  const boot = await writeTextfile(dir, "boot", bootMetrics({ report: readyBoot, finishedAt: at }));
  tt.equal(boot, join(dir, "ebs_cache_agent_boot.prom"));
  tt.equal((await stat(boot)).mode & 0o777, 0o644, "readable by node_exporter");
  const first = await writeTextfile(dir, "gc", gcMetrics({ report: gcRun, dryRun: false, finishedAt: at }), {
    carry: true,
  });
  await writeTextfile(dir, "gc", gcMetrics({ report: gcRun, dryRun: false, finishedAt: at }), { carry: true });
  const gc = parsePromText(await readFile(first, "utf8"));
  tt.equal(sampleOf(gc, "ebs_cache_agent_gc_deleted_volumes_total")?.value, 2, "two runs of one deletion each");
  tt.equal(sampleOf(gc, "ebs_cache_agent_gc_volumes", { verdict: "kept" })?.value, 2, "gauges are not added up");
  tt.same(
    (await readdir(dir)).sort(),
    ["ebs_cache_agent_boot.prom", "ebs_cache_agent_gc.prom"],
    "no temp file left, the boot's file kept",
  );
  tt.ok(
    parsePromText(await readFile(boot, "utf8")).has("ebs_cache_agent_boot_info"),
    "the gc did not erase the boot's figures",
  );
});

t.test("carryCounters ignores a broken previous file", async (tt) => {
  const families = gcMetrics({ report: gcRun, dryRun: false, finishedAt: at });
  const carried = carryCounters(
    families,
    "garbage\nebs_cache_agent_gc_deleted_volumes_total -5\nebs_cache_agent_gc_failed_volumes_total 3\n",
  );
  const parsed = parsePromText(renderTextFormat(carried));
  tt.equal(sampleOf(parsed, "ebs_cache_agent_gc_deleted_volumes_total")?.value, 1, "a negative count is not carried");
  tt.equal(sampleOf(parsed, "ebs_cache_agent_gc_failed_volumes_total")?.value, 4);
});

t.test("carryCounters keeps a counter's series this run did not add to, escapes and all", async (tt) => {
  const previous = renderTextFormat(
    keeperMetrics({
      actions: [
        { action: "create", pool: 'p"1\\x', outcome: "done" },
        { action: "trim", pool: "p2", outcome: "failed" },
      ],
      poolVolumes: {},
      finishedAt: at,
    }),
  );
  const now = keeperMetrics({
    actions: [{ action: "trim", pool: "p2", outcome: "failed" }],
    poolVolumes: {},
    finishedAt: at,
  });
  const parsed = parsePromText(renderTextFormat(carryCounters(now, previous)));
  tt.equal(sampleOf(parsed, "ebs_cache_agent_keeper_actions_total", { action: "trim" })?.value, 2, "added up");
  tt.match(
    sampleOf(parsed, "ebs_cache_agent_keeper_actions_total", { action: "create" }),
    { labels: { action: "create", pool: 'p"1\\x', outcome: "done" }, value: 1 },
    "no create this run: its count stays, its labels as they were",
  );
  const failed = parsePromText(
    renderTextFormat(carryCounters(keeperFailedMetrics({ reason: "EC2 unreachable", finishedAt: at }), previous)),
  );
  tt.equal(
    failed.get("ebs_cache_agent_keeper_actions_total")?.samples.length,
    2,
    "a run that failed keeps every count",
  );
});

t.test(
  "a run that failed before its report: its file says failed, why and when, and keeps its counters",
  async (tt) => {
    const reason = "EC2 DescribeVolumes failed: ECONNREFUSED";
    const later = new Date(at.getTime() + 3_600_000);
    const files = {
      boot: bootFailedMetrics({ reason, finishedAt: later }),
      release: releaseFailedMetrics({ reason, finishedAt: later }),
      gc: gcFailedMetrics({ reason, dryRun: false, finishedAt: later }),
      keeper: keeperFailedMetrics({ reason, finishedAt: later }),
      prune: pruneFailedMetrics({ reason, trigger: "timer", dryRun: false, finishedAt: later }),
    };
    for (const [useCase, families] of Object.entries(files)) {
      const parsed = roundTrip(families);
      assertConventions(tt, parsed);
      tt.equal(
        sampleOf(parsed, `ebs_cache_agent_${useCase}_timestamp_seconds`)?.value,
        later.getTime() / 1000,
        `${useCase}: when it failed`,
      );
      const info = sampleOf(parsed, `ebs_cache_agent_${useCase}_info`)?.labels;
      tt.equal(info?.[useCase === "prune" ? "verdict" : "outcome"], "failed", `${useCase}: failed`);
      tt.equal(info?.reason, reason, `${useCase}: why`);
    }
    const boot = roundTrip(files.boot);
    tt.equal(sampleOf(boot, "ebs_cache_agent_boot_cache_hit_ratio")?.value, 0, "a failed boot is no cache hit");
    tt.equal(sampleOf(roundTrip(files.release), "ebs_cache_agent_release_problems", { kind: "failed" })?.value, 1);
    const gc = roundTrip(files.gc);
    tt.notOk(gc.has("ebs_cache_agent_gc_volumes"), "no count of volumes gc never saw");
    tt.equal(sampleOf(gc, "ebs_cache_agent_gc_deleted_volumes_total")?.value, 0, "nothing deleted this run");
    tt.equal(
      sampleOf(roundTrip(files.prune), "ebs_cache_agent_prune_runs_total", { trigger: "timer" })?.value,
      1,
      "a failed prune is a run of its timer: the timer is not off",
    );
    const carried = parsePromText(
      renderTextFormat(
        carryCounters(files.gc, renderTextFormat(gcMetrics({ report: gcRun, dryRun: false, finishedAt: at }))),
      ),
    );
    tt.equal(sampleOf(carried, "ebs_cache_agent_gc_deleted_volumes_total")?.value, 1, "the counters go on");
  },
);

t.test("gc and the keeper say the last run's outcome", async (tt) => {
  tt.same(
    sampleOf(
      roundTrip(gcMetrics({ report: { ...gcRun, failed: 0 }, dryRun: false, finishedAt: at })),
      "ebs_cache_agent_gc_info",
    )?.labels,
    {
      outcome: "done",
      reason: "",
    },
  );
  const refused = roundTrip(gcMetrics({ report: { ...gcRun, failed: 2 }, dryRun: false, finishedAt: at }));
  tt.match(sampleOf(refused, "ebs_cache_agent_gc_info")?.labels, { outcome: "failed", reason: /^2 deletion/ });
  const keeper = roundTrip(keeperMetrics({ actions: [], poolVolumes: { p: 3 }, failed: 1, finishedAt: at }));
  tt.match(sampleOf(keeper, "ebs_cache_agent_keeper_info")?.labels, { outcome: "failed", reason: /^1 step/ });
});

t.test("the keeper's stock counts volumes still being created, and its HELP says so", async (tt) => {
  const help = roundTrip(keeperMetrics({ actions: [], poolVolumes: { p: 3 }, finishedAt: at })).get(
    "ebs_cache_agent_keeper_pool_volumes",
  )?.help;
  tt.match(help, /available ones and ones EC2 is still creating/);
  tt.notMatch(help, /^Available volumes/, "not available ones alone");
});

t.test("a write that cannot happen says so and leaves the old file", async (tt) => {
  const dir = await mkdtemp(join(tmpdir(), "metrics-"));
  tt.teardown(() => rm(dir, { recursive: true, force: true }));
  const notADir = join(dir, "file");
  await writeFile(notADir, "x");
  await tt.rejects(
    writeTextfile(notADir, "boot", bootMetrics({ report: readyBoot, finishedAt: at })),
    MetricsWriteError,
  );
  const path = await writeTextfile(dir, "release", []);
  tt.equal(await readFile(path, "utf8"), "", "no figures: an empty file, which the collector accepts");
  tt.equal(textfilePath("/x", "keeper"), "/x/ebs_cache_agent_keeper.prom");
});

t.test("host facts: only the filesystem mounted exactly there", async (tt) => {
  const dir = await mkdtemp(join(tmpdir(), "metrics-"));
  tt.teardown(() => rm(dir, { recursive: true, force: true }));
  // A folder is no mount point, even though systeminformation's own filter would match a mount containing its text.
  tt.equal(await readCacheFilesystem(dir), undefined);
  tt.equal(await readCacheFilesystem(dir.slice(0, -1)), undefined);
});
