/**
 * The dashboard and docs/metrics.md name only metrics the agent writes: every
 * `ebs_cache_agent_*` name in them is a family the metric builders produce (or one of its
 * series' suffixes), so a renamed metric fails here instead of leaving an empty panel.
 */
import { readFile } from "node:fs/promises";
import t from "tap";
import { bootMetrics } from "../../src/metrics/boot.ts";
import { gcMetrics } from "../../src/metrics/gc.ts";
import { cacheDeviceMetrics, cacheFilesystemMetrics, hostMetrics } from "../../src/metrics/host.ts";
import { refreshMetrics } from "../../src/metrics/refresh.ts";
import { keeperMetrics } from "../../src/metrics/keeper.ts";
import { pruneMetrics } from "../../src/metrics/prune.ts";
import { prewarmMetrics } from "../../src/metrics/prewarm.ts";
import { releaseMetrics } from "../../src/metrics/release.ts";
import { readyBoot } from "../fixtures/builders/use-case-results.ts";

const at = new Date();
const families = [
  ...bootMetrics({ report: readyBoot, finishedAt: at }),
  ...prewarmMetrics({
    ...readyBoot.prewarm!,
    after: readyBoot.prewarm!.before,
    progress: { doneBytes: 1, totalBytes: 2, percent: 50, mibps: 1, etaSeconds: 1 },
    updatedAt: at.toISOString(),
  }),
  ...releaseMetrics({
    report: { outcome: "released", released: [], kept: [], problems: [], timeline: [{ step: "detach", ms: 1 }] },
    finishedAt: at,
  }),
  ...gcMetrics({
    report: { decisions: [], wouldDelete: 0, wouldTag: 0, overCap: 0, deleted: 0, spared: 0, failed: 0 },
    dryRun: false,
    finishedAt: at,
  }),
  ...keeperMetrics({
    actions: [{ action: "create", pool: "p", outcome: "done" }],
    poolVolumes: { p: 1 },
    finishedAt: at,
  }),
  ...cacheFilesystemMetrics({
    mountPoint: "/m",
    device: "/dev/x",
    sizeBytes: 1,
    usedBytes: 0,
    availableBytes: 1,
    usedRatio: 0,
    inodes: 2,
    freeInodes: 1,
  }),
  ...cacheDeviceMetrics({
    mountPoint: "/m",
    device: "/dev/x",
    fsType: "xfs",
    sizeBytes: 1,
    usedBytes: 0,
    availableBytes: 1,
    usedRatio: 0,
  }),
  ...pruneMetrics({
    verdict: "prune",
    trigger: "timer",
    reason: "x",
    dryRun: false,
    removedImages: 1,
    failedImages: 0,
    removedBytes: 1,
    usedRatioBefore: 0.9,
    usedRatioAfter: 0.5,
    finishedAt: at,
  }),
  ...hostMetrics({ memoryBytes: 1, cpuCores: 1, cpuModel: "x", instanceStore: [] }),
  ...refreshMetrics({
    version: 1,
    pid: 1,
    volumeId: null,
    generation: null,
    phase: "done",
    images: [],
    markedCurrent: null,
    warnings: [],
    startedAt: at.toISOString(),
    updatedAt: at.toISOString(),
  }),
];
const known = new Set(families.map((f) => f.name));

function namesIn(text: string): string[] {
  return [...new Set(text.match(/ebs_cache_agent_[a-z0-9_]+/g) ?? [])];
}

t.test("the dashboard queries metrics the agent writes", async (tt) => {
  const dashboard = JSON.parse(await readFile("docs/grafana-dashboard.json", "utf8")) as {
    panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
  };
  tt.ok(dashboard.panels.length >= 4);
  const exprs = dashboard.panels.flatMap((p) => p.targets.map((x) => x.expr));
  for (const name of namesIn(exprs.join("\n"))) tt.ok(known.has(name), `${name} is written by the agent`);
  for (const panel of ["Cache hit rate", "Boot time percentiles by source", "Cold volumes", "Cache disk fill"]) {
    tt.ok(
      dashboard.panels.some((p) => p.title === panel && p.targets.length > 0),
      `a panel: ${panel}`,
    );
  }
});

t.test("docs/metrics.md names metrics the agent writes, and shows the boot's file", async (tt) => {
  const doc = await readFile("docs/metrics.md", "utf8");
  for (const name of namesIn(doc)) {
    // File names (ebs_cache_agent_boot.prom) are not metric names.
    if (doc.includes(`${name}.prom`)) continue;
    tt.ok(known.has(name), `${name} is written by the agent`);
  }
  for (const f of bootMetrics({ report: readyBoot, finishedAt: at }))
    tt.match(doc, `# TYPE ${f.name} ${f.type}`, `the example shows ${f.name}`);
});
