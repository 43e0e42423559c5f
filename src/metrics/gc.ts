/**
 * gc's figures (`ebs_cache_agent_gc.prom`). gc runs on a timer on one host for the region, so its
 * deletions are counters carried from run to run (see carryCounters), and what the last run saw
 * is a gauge by verdict.
 */
import type { GcVerdict } from "../agent/gc/plan.ts";
import { family, gauge, reasonLabel, type MetricFamily } from "./family.ts";
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

/** A gc run that ended before its report (EC2 or IMDS could not be asked): why, and when. */
export interface GcFailure {
  reason: string;
  dryRun: boolean;
  finishedAt: Date;
}

/** gc's families; its counters count this run only until carryCounters adds the previous file's. */
export function gcMetrics({ report, dryRun, finishedAt }: GcFacts): MetricFamily[] {
  const byVerdict = new Map<string, number>();
  for (const d of report.decisions) byVerdict.set(d.verdict, (byVerdict.get(d.verdict) ?? 0) + 1);
  const tagged = report.decisions.filter((d) => d.done === "tagged").length;
  const counted = (value: number) => (dryRun ? 0 : value);
  return [
    gcInfo(report.failed > 0 ? `${report.failed} deletion(s) or tagging(s) EC2 refused (see the journal)` : undefined),
    family(
      "gc_volumes",
      "gauge",
      "volumes",
      "Managed volumes the last gc run saw, by its verdict on each.",
      VERDICTS.map((verdict) => ({ labels: { verdict }, value: byVerdict.get(verdict) ?? 0 })),
    ),
    ...gcCounters({
      deleted: counted(report.deleted),
      failed: counted(report.failed),
      spared: counted(report.spared),
      tagged: counted(tagged),
    }),
    ...gcLast(dryRun, finishedAt),
  ];
}

/**
 * A gc run that failed before its report: its outcome and time, the counters unchanged (the
 * previous file's values are carried), and no count of volumes it never saw.
 */
export function gcFailedMetrics({ reason, dryRun, finishedAt }: GcFailure): MetricFamily[] {
  return [
    gcInfo(reason),
    ...gcCounters({ deleted: 0, failed: 0, spared: 0, tagged: 0 }),
    ...gcLast(dryRun, finishedAt),
  ];
}

/** The last run's outcome: `done`, or `failed` (an action EC2 refused, or a run that ended early) with why. */
function gcInfo(failure: string | undefined): MetricFamily {
  return gauge(
    "gc_info",
    "info",
    "The last gc run: outcome (done; failed: an action EC2 refused, or the run ended before its end) and why it " +
      "failed.",
    1,
    { outcome: failure === undefined ? "done" : "failed", reason: reasonLabel(failure) },
  );
}

function gcCounters(count: { deleted: number; failed: number; spared: number; tagged: number }): MetricFamily[] {
  return [
    family(
      "gc_deleted_volumes_total",
      "counter",
      "volumes",
      "Volumes gc deleted (expired, or of a superseded generation, and not attached).",
      [{ labels: {}, value: count.deleted }],
    ),
    family("gc_failed_volumes_total", "counter", "volumes", "Deletions or taggings gc tried and EC2 refused.", [
      { labels: {}, value: count.failed },
    ]),
    family(
      "gc_spared_volumes_total",
      "counter",
      "volumes",
      "Volumes gc was to delete but left alone: described again right before the deletion, they had changed " +
        "(kept, claimed, attached, a new expiry).",
      [{ labels: {}, value: count.spared }],
    ),
    family("gc_tagged_volumes_total", "counter", "volumes", "Never-released volumes gc tagged to expire.", [
      { labels: {}, value: count.tagged },
    ]),
  ];
}

function gcLast(dryRun: boolean, finishedAt: Date): MetricFamily[] {
  return [
    gauge("gc_dry_run_ratio", "ratio", "1 when the last gc run was a dry run (it changed nothing).", dryRun ? 1 : 0),
    gauge(
      "gc_timestamp_seconds",
      "seconds",
      "When the last gc run finished, or failed (seconds since the epoch).",
      finishedAt.getTime() / 1000,
    ),
  ];
}
