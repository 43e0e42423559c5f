/**
 * gc's entry (`ebs-cache-agent gc`, src/cli/gc.ts): observe the managed volumes and the pools'
 * snapshots, plan (pure, ./plan.ts), apply. Every expiry is judged against EC2's time (the
 * CloudClock its answers teach), never the host's: a host days ahead would otherwise delete what
 * EC2's time still keeps. Without EC2's time nothing is planned, so nothing is deleted.
 */
import { ExitCode } from "../../errors.ts";
import { applyGc } from "./apply.ts";
import { observeGc } from "./observe.ts";
import { planGc, type RetireOptions } from "./plan.ts";
import type { GcReport } from "../outcomes.ts";
import type { GcDeps } from "./deps.ts";

/** Runs gc over the managed volumes EC2 shows in this region. */
export async function runGc(
  deps: GcDeps,
  options: {
    dryRun: boolean;
    maxDeletes: number;
    ttlHours: number;
    /** Retiring superseded pool volumes (`gc.supersededGraceHours`, `claim.quarantineHours`, this host's pool). */
    retire: Omit<RetireOptions, "snapshots">;
  },
): Promise<GcReport> {
  const { cloud, log, recorder } = deps;
  const { volumes, snapshots } = await observeGc(cloud);
  // After the listing: EC2's answers have told its time (CloudTimeUnknownError otherwise: nothing deleted).
  const judging = {
    now: cloud.clock.now(),
    ttlHours: options.ttlHours,
    retire: { ...options.retire, snapshots },
  };
  const decisions = planGc(volumes, { ...judging, maxDeletes: options.maxDeletes });
  const recheck = { observed: new Map(volumes.map((v) => [v.volumeId, v])), options: judging };
  const report = await applyGc(decisions, cloud, { dryRun: options.dryRun, log, recheck });
  await recorder?.gcFinished({ report, dryRun: options.dryRun });
  return report;
}

/** 0: done (or nothing to do); 1: some action failed (the log says which). */
export function gcExitCode(report: GcReport): number {
  return report.failed > 0 ? ExitCode.failure : ExitCode.ok;
}
