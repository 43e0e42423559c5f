/**
 * gc's figures (`ebs_cache_agent_gc.prom`). gc runs on a timer on one host for the region, so its
 * deletions are counters carried from run to run (see carryCounters), and what the last run saw
 * is a gauge by verdict.
 */
import type { GcVerdict } from "../agent/gc/plan.ts";
import { family, gauge, type MetricFamily } from "./family.ts";
import type { GcReport } from "../agent/outcomes.ts";

export interface GcFacts {
  report: GcReport;
  dryRun: boolean;
  finishedAt: Date;
}

const VERDICTS: readonly GcVerdict[] = [
  "delete",
  "superseded",
  "over-cap",
  "tag-expiry",
  "not-expired",
  "kept",
  "in-use",
  "never-claimed",
  "malformed",
  "foreign",
];

/** gc's families; its counters count this run only until carryCounters adds the previous file's. */
export function gcMetrics({ report, dryRun, finishedAt }: GcFacts): MetricFamily[] {
  const byVerdict = new Map<string, number>();
  for (const d of report.decisions) byVerdict.set(d.verdict, (byVerdict.get(d.verdict) ?? 0) + 1);
  const tagged = report.decisions.filter((d) => d.done === "tagged").length;
  return [
    family(
      "gc_volumes",
      "gauge",
      "volumes",
      "Managed volumes the last gc run saw, by its verdict on each.",
      VERDICTS.map((verdict) => ({ labels: { verdict }, value: byVerdict.get(verdict) ?? 0 })),
    ),
    family(
      "gc_deleted_volumes_total",
      "counter",
      "volumes",
      "Volumes gc deleted (expired, or of a superseded generation, and not attached).",
      [{ labels: {}, value: dryRun ? 0 : report.deleted }],
    ),
    family("gc_failed_volumes_total", "counter", "volumes", "Deletions or taggings gc tried and EC2 refused.", [
      { labels: {}, value: dryRun ? 0 : report.failed },
    ]),
    family(
      "gc_spared_volumes_total",
      "counter",
      "volumes",
      "Volumes gc was to delete but left alone: described again right before the deletion, they had changed " +
        "(kept, claimed, attached, a new expiry).",
      [{ labels: {}, value: dryRun ? 0 : report.spared }],
    ),
    family("gc_tagged_volumes_total", "counter", "volumes", "Never-released volumes gc tagged to expire.", [
      { labels: {}, value: dryRun ? 0 : tagged },
    ]),
    gauge("gc_dry_run_ratio", "ratio", "1 when the last gc run was a dry run (it changed nothing).", dryRun ? 1 : 0),
    gauge(
      "gc_timestamp_seconds",
      "seconds",
      "When the last gc run finished (seconds since the epoch).",
      finishedAt.getTime() / 1000,
    ),
  ];
}
