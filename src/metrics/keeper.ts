/**
 * The keeper's figures (`ebs_cache_agent_keeper.prom`), written after each `pool fill` run that
 * is not a dry run (src/agent/keeper/run.ts `keeperFacts`), and after one that failed before its
 * report (keeperFailedMetrics). Actions are counters carried from run to run.
 */
import { family, gauge, reasonLabel, type MetricFamily } from "./family.ts";
import type { KeeperFacts } from "../agent/outcomes.ts";

/** A keeper run that ended before its report (EC2 or IMDS could not be asked): why, and when. */
export interface KeeperFailure {
  reason: string;
  finishedAt: Date;
}

/** The keeper's families. */
export function keeperMetrics({
  actions,
  poolVolumes,
  heldByStopped = {},
  failed = 0,
  finishedAt,
}: KeeperFacts): MetricFamily[] {
  const counts = new Map<string, { labels: Record<string, string>; value: number }>();
  for (const a of actions) {
    const key = JSON.stringify([a.action, a.pool, a.outcome]);
    const entry = counts.get(key) ?? { labels: { action: a.action, pool: a.pool, outcome: a.outcome }, value: 0 };
    entry.value++;
    counts.set(key, entry);
  }
  return [
    keeperInfo(failed > 0 ? `${failed} step(s) failed or a pool could not be judged (see the journal)` : undefined),
    actionsFamily([...counts.values()]),
    family(
      "keeper_pool_volumes",
      "gauge",
      "volumes",
      "Volumes in stock in each pool after the keeper's last run: available ones and ones EC2 is still " +
        "creating (the keeper counts both toward keeper.minAvailable).",
      Object.entries(poolVolumes).map(([pool, value]) => ({ labels: { pool }, value })),
    ),
    family(
      "keeper_held_by_stopped_volumes",
      "gauge",
      "volumes",
      "Pool volumes attached to stopped instances (sleeping warm buffers, leaked stopped machines): no stock, yet in " +
        "the caps and the bill.",
      Object.entries(heldByStopped).map(([pool, held]) => ({ labels: { pool }, value: held.volumes })),
    ),
    family(
      "keeper_held_by_stopped_oldest_seconds",
      "gauge",
      "seconds",
      "How long the longest-stopped instance holding a pool volume has been stopped " +
        "(from EC2's StateTransitionReason).",
      Object.entries(heldByStopped).flatMap(([pool, held]) =>
        held.oldestSeconds === null ? [] : [{ labels: { pool }, value: held.oldestSeconds }],
      ),
    ),
    keeperTimestamp(finishedAt),
  ];
}

/**
 * A keeper run that failed before its report: its outcome and time, the action counters
 * unchanged (carried from the previous file), no stock it never counted.
 */
export function keeperFailedMetrics({ reason, finishedAt }: KeeperFailure): MetricFamily[] {
  return [keeperInfo(reason), actionsFamily([]), keeperTimestamp(finishedAt)];
}

/** The last run's outcome: `done`, or `failed` (a step failed, or the run ended before its end) with why. */
function keeperInfo(failure: string | undefined): MetricFamily {
  return gauge(
    "keeper_info",
    "info",
    "The keeper's last run: outcome (done; failed: a step failed or a pool could not be judged, or the run ended " +
      "before its end) and why it failed.",
    1,
    { outcome: failure === undefined ? "done" : "failed", reason: reasonLabel(failure) },
  );
}

function actionsFamily(samples: Array<{ labels: Record<string, string>; value: number }>): MetricFamily {
  return family(
    "keeper_actions_total",
    "counter",
    "actions",
    "Actions the keeper took on the pools, by action, pool and outcome.",
    samples,
  );
}

function keeperTimestamp(finishedAt: Date): MetricFamily {
  return gauge(
    "keeper_timestamp_seconds",
    "seconds",
    "When the keeper's last run finished, or failed (seconds since the epoch).",
    finishedAt.getTime() / 1000,
  );
}
