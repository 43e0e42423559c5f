/**
 * The prune's figures (`ebs_cache_agent_prune.prom`): images removed and the bytes they were
 * estimated to free, as counters carried from run to run (the prune runs after each boot and
 * from its timer, by hand), and the last run's verdict and fills. The fill it leaves goes to the fill file
 * (src/metrics/host.ts cacheFilesystemMetrics), not here: no series is in two files.
 */
import { family, gauge, reasonLabel, type MetricFamily } from "./family.ts";
import type { PruneFacts, PruneTrigger } from "../agent/outcomes.ts";

/** A prune that ended before its report (docker or EC2 could not be asked): what started it, why, and when. */
export interface PruneFailure {
  trigger: PruneTrigger;
  reason: string;
  dryRun: boolean;
  finishedAt: Date;
}

/**
 * A prune that failed before its report, as a run of verdict `failed`: counted as a run of its
 * trigger (a timer whose runs all fail is not a timer that is off), nothing removed, no fills.
 */
export function pruneFailedMetrics(failure: PruneFailure): MetricFamily[] {
  return pruneMetrics({
    verdict: "failed",
    trigger: failure.trigger,
    reason: failure.reason,
    dryRun: failure.dryRun,
    removedImages: 0,
    failedImages: 0,
    removedBytes: 0,
    finishedAt: failure.finishedAt,
  });
}

/** The prune's families; its counters count this run only until carryCounters adds the previous file's. */
export function pruneMetrics(facts: PruneFacts): MetricFamily[] {
  const counted = (value: number) => (facts.dryRun ? 0 : value);
  return [
    family(
      "prune_runs_total",
      "counter",
      "runs",
      "Prune runs, by what started them (boot, timer, manual); a dry run counts nothing. On a node that runs for " +
        "days the timer's count keeps growing: a flat line means its timer is off.",
      [{ labels: { trigger: facts.trigger }, value: counted(1) }],
    ),
    family(
      "prune_removed_images_total",
      "counter",
      "images",
      "Images the prune removed from the cache volume (outside the current generation, used by no container).",
      [{ labels: {}, value: counted(facts.removedImages) }],
    ),
    family("prune_failed_images_total", "counter", "images", "Removals the prune tried and docker refused.", [
      { labels: {}, value: counted(facts.failedImages) },
    ]),
    family(
      "prune_removed_bytes_total",
      "counter",
      "bytes",
      "Bytes the removed images were estimated to free (the bytes no other image shares).",
      [{ labels: {}, value: counted(facts.removedBytes) }],
    ),
    gauge(
      "prune_info",
      "info",
      "The last prune's verdict (prune, below-threshold, workspace, …; failed: it ended before its end), what " +
        "started it, and why.",
      1,
      {
        verdict: facts.verdict,
        trigger: facts.trigger,
        reason: reasonLabel(facts.reason),
      },
    ),
    ...(facts.usedRatioBefore === undefined
      ? []
      : [
          gauge(
            "prune_used_before_ratio",
            "ratio",
            "The cache filesystem's fill when the last prune began.",
            facts.usedRatioBefore,
          ),
        ]),
    ...(facts.usedRatioAfter === undefined
      ? []
      : [
          gauge(
            "prune_used_after_ratio",
            "ratio",
            "The cache filesystem's fill after the last prune's removals.",
            facts.usedRatioAfter,
          ),
        ]),
    gauge(
      "prune_dry_run_ratio",
      "ratio",
      "1 when the last prune was a dry run (it changed nothing).",
      facts.dryRun ? 1 : 0,
    ),
    gauge(
      "prune_timestamp_seconds",
      "seconds",
      "When the last prune finished, or failed (seconds since the epoch).",
      facts.finishedAt.getTime() / 1000,
    ),
  ];
}
