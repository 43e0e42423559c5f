/**
 * A boot's figures: outcome and source with the reason, and how long each step took. One boot
 * per file (`ebs_cache_agent_boot.prom`), overwritten by the next boot of the host, so every
 * figure is a gauge of the last boot. The pre-warm's figures are in its own file
 * (`ebs_cache_agent_prewarm.prom`, written with its state file): the collector refuses a series
 * that two files both carry.
 */
import type { BootSource } from "../agent/boot/source.ts";
import { durationsByStep, family, gauge, reasonLabel, seconds, type MetricFamily } from "./family.ts";
import type { BootReport } from "../agent/outcomes.ts";

/** The sources whose volume already held the images: what the dashboard's hit rate counts. */
export const CACHE_HIT_SOURCES: readonly BootSource[] = ["pool", "workspace", "attached"];

/**
 * What the boot metrics need: the report (with its source) and when it finished. A boot that
 * ended before its report (bootFailedMetrics) has outcome `failed` and no source.
 */
export interface BootFacts {
  report: Pick<BootReport, "volumeId" | "reason" | "timeline"> & {
    outcome: BootReport["outcome"] | "failed";
    source: BootSource | "";
  };
  finishedAt: Date;
}

/** A boot that ended before its report (IMDS unreachable, bad instance tags): why, and when. */
export interface BootFailure {
  reason: string;
  finishedAt: Date;
}

/** A boot that failed before its report: outcome `failed` with why, no source, no step, no cache hit. */
export function bootFailedMetrics({ reason, finishedAt }: BootFailure): MetricFamily[] {
  return bootMetrics({ report: { outcome: "failed", source: "", reason, timeline: [] }, finishedAt });
}

/** The boot's families, in the order the file lists them. */
export function bootMetrics({ report, finishedAt }: BootFacts): MetricFamily[] {
  const { source } = report;
  const steps = durationsByStep(report.timeline);
  const totalMs = [...steps.values()].reduce((sum, ms) => sum + ms, 0);
  return [
    gauge(
      "boot_info",
      "info",
      "The last boot: outcome (ready, warming, prepared, degraded, disabled; failed: it ended before its report), " +
        "source of the data-root, volume, and the reason when it did not get a cache volume.",
      1,
      {
        outcome: report.outcome,
        source,
        volume_id: report.volumeId ?? "",
        reason: reasonLabel(report.reason),
      },
    ),
    gauge(
      "boot_cache_hit_ratio",
      "ratio",
      "1 when the last boot got a volume that already held docker's data (pool, workspace, attached), 0 otherwise.",
      source !== "" && CACHE_HIT_SOURCES.includes(source) && isUp(report.outcome) ? 1 : 0,
    ),
    gauge(
      "boot_duration_seconds",
      "seconds",
      "How long the last boot's steps took in all (both phases of a two-phase boot).",
      seconds(totalMs),
      { outcome: report.outcome, source },
    ),
    family(
      "boot_step_duration_seconds",
      "gauge",
      "seconds",
      "How long each step of the last boot took (a step run for several volumes in turn, or in both phases: the sum).",
      [...steps].map(([step, ms]) => ({ labels: { step }, value: seconds(ms) })),
    ),
    gauge(
      "boot_timestamp_seconds",
      "seconds",
      "When the last boot finished, or failed (seconds since the epoch).",
      finishedAt.getTime() / 1000,
    ),
  ];
}

function isUp(outcome: BootFacts["report"]["outcome"]): boolean {
  return outcome === "ready" || outcome === "warming" || outcome === "prepared";
}
