/**
 * A boot's figures: outcome and source with the reason, how long each step took, and the
 * pre-warm's verdict. One boot per file (`ebs_cache_agent_boot.prom`), overwritten by the next
 * boot of the host, so every figure is a gauge of the last boot.
 */
import type { BootResult } from "../agent/boot/context.ts";
import type { Selection } from "../agent/boot/plan.ts";
import { durationsByStep, family, gauge, reasonLabel, seconds, type MetricFamily } from "./family.ts";
import { prewarmMetrics } from "./prewarm.ts";

/**
 * Where the boot's data-root came from. `pool` / `workspace` / `attached`: a cache hit (a
 * volume with docker's data already on it); `snapshot`: created from the pool's snapshot (warm
 * only after initialization); `blank`: created empty; `degraded` / `disabled`: no cache volume.
 */
export type BootSource = "pool" | "workspace" | "attached" | "snapshot" | "blank" | "degraded" | "disabled";

/** The sources whose volume already held the images: what the dashboard's hit rate counts. */
export const CACHE_HIT_SOURCES: readonly BootSource[] = ["pool", "workspace", "attached"];

/** What the boot metrics need beyond the result. */
export interface BootFacts {
  result: BootResult;
  /**
   * The source the volume came from, as the boot knew it (the plan's selection, or the snapshot
   * fallback the claim took). Left to `bootSourceOf` when the outcome has no volume.
   */
  source: BootSource;
  /** When the boot finished. */
  finishedAt: Date;
}

/**
 * The source a result reports: a boot that ended without a volume is `degraded` or `disabled`
 * whatever its plan selected; otherwise the one the caller saw (the plan's selection, or the
 * fallback the claim took).
 */
export function bootSourceOf(outcome: BootResult["outcome"], selected: Exclude<BootSource, "degraded" | "disabled">): BootSource {
  if (outcome === "degraded") return "degraded";
  if (outcome === "disabled") return "disabled";
  return selected;
}

/**
 * The source from the plan's selection: a new workspace volume is `snapshot` or `blank` by what
 * it is created from. A pool claim that fell back to the snapshot shows as `pool` here: the
 * result does not say so yet (it should carry its source; until then the caller may pass it).
 */
export function bootSourceFrom(selection: Selection, outcome: BootResult["outcome"]): BootSource {
  switch (selection.source) {
    case "none":
      return bootSourceOf(outcome, "pool");
    case "new-workspace":
      return bootSourceOf(outcome, selection.create.snapshotId ? "snapshot" : "blank");
    case "disabled":
      return "disabled";
    default:
      return bootSourceOf(outcome, selection.source);
  }
}

/** The boot's families, in the order the file lists them. */
export function bootMetrics({ result, source, finishedAt }: BootFacts): MetricFamily[] {
  const steps = durationsByStep(result.timeline);
  const totalMs = [...steps.values()].reduce((sum, ms) => sum + ms, 0);
  const families: MetricFamily[] = [
    gauge("boot_info", "info", "The last boot: outcome (ready, warming, prepared, degraded, disabled), source of the data-root, volume, and the reason when it did not get a cache volume.", 1, {
      outcome: result.outcome,
      source,
      volume_id: result.volumeId ?? "",
      reason: reasonLabel(result.reason),
    }),
    gauge("boot_cache_hit_ratio", "ratio", "1 when the last boot got a volume that already held docker's data (pool, workspace, attached), 0 otherwise.", CACHE_HIT_SOURCES.includes(source) && isUp(result.outcome) ? 1 : 0),
    gauge("boot_duration_seconds", "seconds", "How long the last boot's steps took in all.", seconds(totalMs), { outcome: result.outcome, source }),
    family(
      "boot_step_duration_seconds",
      "gauge",
      "seconds",
      "How long each step of the last boot took (a step run for several volumes in turn: the sum).",
      [...steps].map(([step, ms]) => ({ labels: { step }, value: seconds(ms) })),
    ),
    gauge("boot_timestamp_seconds", "seconds", "When the last boot finished (seconds since the epoch).", finishedAt.getTime() / 1000),
  ];
  if (result.prewarm) families.push(...prewarmMetrics({ volumeId: result.volumeId, ...result.prewarm }));
  return families;
}

function isUp(outcome: BootResult["outcome"]): boolean {
  return outcome === "ready" || outcome === "warming" || outcome === "prepared";
}
