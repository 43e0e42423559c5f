/**
 * The pre-warm's figures: the verdict, the fio samples before and after, and the progress of
 * an initialization. From the boot's result, or from the state file the background run keeps
 * (`prewarm.json`), which rewrites `ebs_cache_agent_prewarm.prom` as it goes.
 */
import type { CheckFigures } from "../agent/ports.ts";
import type { Progress } from "../agent/prewarm/plan.ts";
import type { PrewarmState } from "../agent/prewarm/state.ts";
import { epochSeconds, family, gauge, type MetricFamily, type Sample } from "./family.ts";

const MiB = 1024 * 1024;

/** What both the boot result's pre-warm and the state file carry. */
export type PrewarmFacts = Pick<PrewarmState, "verdict" | "phase"> &
  Partial<Pick<PrewarmState, "strategy" | "updatedAt" | "error">> & {
    action: string;
    volumeId?: string | undefined;
    before?: CheckFigures | undefined;
    after?: CheckFigures | undefined;
    progress?: Progress | undefined;
  };

/** The pre-warm's families. */
export function prewarmMetrics(facts: PrewarmFacts): MetricFamily[] {
  const families: MetricFamily[] = [
    gauge(
      "prewarm_info",
      "info",
      "The pre-warm of the cache volume: verdict (warm, cold, unknown), phase, what it decided to do.",
      1,
      {
        volume_id: facts.volumeId ?? "",
        verdict: facts.verdict,
        phase: facts.phase,
        action: facts.action,
        strategy: facts.strategy ?? "",
      },
    ),
    gauge(
      "prewarm_cold_volumes",
      "volumes",
      "1 when the sample found the volume cold (its blocks still in S3), else 0.",
      facts.verdict === "cold" ? 1 : 0,
      {
        volume_id: facts.volumeId ?? "",
      },
    ),
  ];
  families.push(...sampleMetrics(facts), ...progressMetrics(facts.progress));
  const updated = epochSeconds(facts.updatedAt);
  if (updated !== undefined)
    families.push(
      gauge(
        "prewarm_updated_timestamp_seconds",
        "seconds",
        "When the pre-warm last wrote its state (seconds since the epoch).",
        updated,
      ),
    );
  return families;
}

/** fio's samples before and after the initialization: IOPS, throughput, latency by percentile. */
function sampleMetrics(facts: PrewarmFacts): MetricFamily[] {
  const samples = [
    ["before", facts.before],
    ["after", facts.after],
  ] as const;
  const iops: Sample[] = [];
  const rate: Sample[] = [];
  const latency: Sample[] = [];
  for (const [sample, figures] of samples) {
    if (!figures) continue;
    iops.push({ labels: { sample }, value: figures.iops });
    rate.push({ labels: { sample }, value: figures.mibps * MiB });
    for (const [percentile, ms] of Object.entries(figures.latencyMs)) {
      // fio reports nanoseconds: whole nanoseconds, without the float noise of ms / 1000.
      if (ms !== undefined) latency.push({ labels: { sample, percentile }, value: Math.round(ms * 1e6) / 1e9 });
    }
  }
  return [
    family(
      "prewarm_sample_iops",
      "gauge",
      "iops",
      "Random-read IOPS fio measured on the volume's data (before / after the initialization).",
      iops,
    ),
    family(
      "prewarm_sample_read_bytes_per_second",
      "gauge",
      "bytes_per_second",
      "Read throughput fio measured on the volume's data.",
      rate,
    ),
    family(
      "prewarm_sample_latency_seconds",
      "gauge",
      "seconds",
      "Read latency fio measured (percentile: p50, p90, p99, mean, max).",
      latency,
    ),
  ];
}

/** The initialization's progress: how much is read, at what rate, how long it has left. */
function progressMetrics(progress: Progress | undefined): MetricFamily[] {
  if (!progress) return [];
  const families: MetricFamily[] = [];
  families.push(
    gauge(
      "prewarm_progress_ratio",
      "ratio",
      "How much of the volume the initialization has read (0 to 1).",
      progress.percent / 100,
    ),
    gauge("prewarm_progress_read_bytes", "bytes", "Bytes the initialization has read.", progress.doneBytes),
    gauge("prewarm_progress_total_bytes", "bytes", "Bytes the initialization reads in all.", progress.totalBytes),
    gauge(
      "prewarm_progress_read_bytes_per_second",
      "bytes_per_second",
      "The initialization's average read rate in this run.",
      progress.mibps * MiB,
    ),
  );
  if (progress.etaSeconds !== undefined)
    families.push(
      gauge(
        "prewarm_progress_remaining_seconds",
        "seconds",
        "Estimated time until the initialization is done.",
        progress.etaSeconds,
      ),
    );
  return families;
}
