/** A release's figures (`ebs_cache_agent_release.prom`): outcome, how long, which volumes went where. */
import { durationsByStep, family, gauge, reasonLabel, seconds, type MetricFamily } from "./family.ts";
import type { ReleaseReport } from "../agent/outcomes.ts";

export interface ReleaseFacts {
  report: ReleaseReport;
  finishedAt: Date;
}

/** A release that ended before its report (IMDS or EC2 could not be asked): why, and when. */
export interface ReleaseFailure {
  reason: string;
  finishedAt: Date;
}

/** A release that failed before its report: outcome `failed` and why, no step, no volume. */
export function releaseFailedMetrics({ reason, finishedAt }: ReleaseFailure): MetricFamily[] {
  return releaseMetrics({
    report: {
      outcome: "failed",
      reason,
      released: [],
      kept: [],
      problems: [{ step: "release", kind: "failed", message: reason, remediation: "" }],
      timeline: [],
    },
    finishedAt,
  });
}

/** The release's families. */
export function releaseMetrics({ report, finishedAt }: ReleaseFacts): MetricFamily[] {
  const steps = durationsByStep(report.timeline);
  const totalMs = [...steps.values()].reduce((sum, ms) => sum + ms, 0);
  const problems = new Map<string, number>();
  for (const p of report.problems) problems.set(p.kind, (problems.get(p.kind) ?? 0) + 1);
  return [
    gauge(
      "release_info",
      "info",
      "The last release: outcome (released, nothing, disabled, refused, failed) and the reason when it was not " +
        "released.",
      1,
      {
        outcome: report.outcome,
        reason: reasonLabel(report.reason ?? report.problems[0]?.message),
      },
    ),
    gauge("release_duration_seconds", "seconds", "How long the last release's steps took in all.", seconds(totalMs), {
      outcome: report.outcome,
    }),
    family(
      "release_step_duration_seconds",
      "gauge",
      "seconds",
      "How long each step of the last release took (summed over its volumes).",
      [...steps].map(([step, ms]) => ({ labels: { step }, value: seconds(ms) })),
    ),
    family(
      "release_volumes",
      "gauge",
      "volumes",
      "Volumes the last release detached and tagged released, or kept attached over a stop.",
      [
        { labels: { disposition: "released" }, value: report.released.length },
        { labels: { disposition: "kept" }, value: report.kept.length },
      ],
    ),
    family(
      "release_problems",
      "gauge",
      "problems",
      "Steps the last release refused or failed (see the journal for each).",
      [
        { labels: { kind: "refused" }, value: problems.get("refused") ?? 0 },
        { labels: { kind: "failed" }, value: problems.get("failed") ?? 0 },
      ],
    ),
    gauge(
      "release_timestamp_seconds",
      "seconds",
      "When the last release finished, or failed (seconds since the epoch).",
      finishedAt.getTime() / 1000,
    ),
  ];
}
