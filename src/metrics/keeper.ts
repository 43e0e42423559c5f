/**
 * The keeper's figures (`ebs_cache_agent_keeper.prom`), written after each `pool fill` run that
 * is not a dry run (src/agent/keeper/run.ts `keeperFacts`). Actions are counters carried from run
 * to run.
 */
import { family, gauge, type MetricFamily } from "./family.ts";
import type { KeeperFacts } from "../agent/outcomes.ts";

/** The keeper's families. */
export function keeperMetrics({ actions, poolVolumes, heldByStopped = {}, finishedAt }: KeeperFacts): MetricFamily[] {
  const counts = new Map<string, { labels: Record<string, string>; value: number }>();
  for (const a of actions) {
    const key = JSON.stringify([a.action, a.pool, a.outcome]);
    const entry = counts.get(key) ?? { labels: { action: a.action, pool: a.pool, outcome: a.outcome }, value: 0 };
    entry.value++;
    counts.set(key, entry);
  }
  return [
    family(
      "keeper_actions_total",
      "counter",
      "actions",
      "Actions the keeper took on the pools, by action, pool and outcome.",
      [...counts.values()],
    ),
    family(
      "keeper_pool_volumes",
      "gauge",
      "volumes",
      "Available volumes in each pool after the keeper's last run.",
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
    gauge(
      "keeper_timestamp_seconds",
      "seconds",
      "When the keeper's last run finished (seconds since the epoch).",
      finishedAt.getTime() / 1000,
    ),
  ];
}
