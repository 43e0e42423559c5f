/**
 * The keeper's figures (`ebs_cache_agent_keeper.prom`), written after each `pool fill` run that
 * is not a dry run (src/agent/keeper/run.ts `keeperFacts`). Actions are counters carried from run
 * to run.
 */
import { family, gauge, type MetricFamily } from "./family.ts";
import type { KeeperFacts } from "../agent/outcomes.ts";

/** The keeper's families. */
export function keeperMetrics({ actions, poolVolumes, finishedAt }: KeeperFacts): MetricFamily[] {
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
    gauge(
      "keeper_timestamp_seconds",
      "seconds",
      "When the keeper's last run finished (seconds since the epoch).",
      finishedAt.getTime() / 1000,
    ),
  ];
}
