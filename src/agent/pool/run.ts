/**
 * The pool view's entry (`ebs-cache-agent pool`, src/cli/pool.ts): observe the pools' volumes,
 * snapshots and instances in EC2 (observe.ts) → the summary (pure, summary.ts) → for people, its
 * table (view.ts). Read only: it changes nothing.
 */
import type { AgentConfig } from "../../config/index.ts";
import type { CloudVolumes } from "../ports.ts";
import { observePool } from "./observe.ts";
import { poolReport, poolViewSettingsFrom, type PoolReport } from "./summary.ts";
import { renderPoolReport } from "./view.ts";

export type { PoolReport } from "./summary.ts";

/** The pools as EC2 has them now; `pool`: that pool alone. */
export async function runPoolView(
  config: AgentConfig,
  cloud: Pick<CloudVolumes, "findVolumes" | "findSnapshots" | "describeInstances" | "clock">,
  options: { pool?: string } = {},
): Promise<PoolReport> {
  const observed = await observePool(cloud, options.pool !== undefined ? { pool: options.pool } : {});
  // Ages, expiries, quarantine and stops are EC2's times: judged in EC2's time, known from those answers.
  return poolReport(observed, poolViewSettingsFrom(config, options.pool), cloud.clock.now());
}

/** The report for people (view.ts), or as JSON. */
export function renderPoolView(report: PoolReport, options: { json: boolean; wide: boolean }): string {
  return options.json ? JSON.stringify(report, null, 2) : renderPoolReport(report, { wide: options.wide });
}
