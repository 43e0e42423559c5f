/**
 * The prune's entry (`ebs-cache-agent prune`, src/cli/prune.ts; after each boot that came up, and
 * from ebs-cache-agent-prune.timer while the node runs):
 * observe → plan (pure, ./plan.ts) → apply → measure the fill again → record the figures.
 */
import { ExitCode } from "../../errors.ts";

import type { OutcomeRecorder, PruneFacts, PruneTrigger } from "../outcomes.ts";
import { applyPrune, type RemovalResult } from "./apply.ts";
import { observePrune } from "./observe.ts";
import { planPrune, type PrunePlan, type PruneSettings } from "./plan.ts";
import type { PruneDeps } from "./deps.ts";

export type { LastBoot, PrewarmActivity, PruneDeps } from "./deps.ts";

export interface PruneOutcome {
  plan: PrunePlan;
  dryRun: boolean;
  removals: RemovalResult[];
  removed: number;
  failed: number;
  /** Bytes the removed images were estimated to free. */
  removedBytes: number;
  usedRatioBefore?: number;
  /** Measured again after the removals (statfs). */
  usedRatioAfter?: number;
}

/** Runs the prune (a dry run plans and changes nothing). */
export async function runPrune(
  deps: PruneDeps,
  options: {
    settings: PruneSettings;
    imageSet: string | null;
    dryRun: boolean;
    /** What started this run (the metrics tell the timer's runs apart); default manual. */
    trigger?: PruneTrigger;
    recorder?: Pick<OutcomeRecorder, "pruneFinished">;
  },
): Promise<PruneOutcome> {
  const { log } = deps;
  const observed = await observePrune(deps, {
    imageSet: options.imageSet,
    ...(options.trigger === "timer" ? { fillFirstBelowPercent: options.settings.thresholdPercent } : {}),
  });
  const plan = planPrune(options.settings, observed);
  log.info("prune.plan", `${plan.verdict}: ${plan.reason}`, {
    volume: plan.volumeId,
    removals: plan.removals.length,
    current: plan.currentSource,
  });
  const removals = await applyPrune(plan.removals, deps.docker, { dryRun: options.dryRun, log });
  const done = removals.filter((r) => r.done === "removed");
  const fillAfter =
    observed.volume && removals.length > 0 ? await deps.fill(observed.volume.mountPoint) : observed.fill;
  const outcome: PruneOutcome = {
    plan,
    dryRun: options.dryRun,
    removals,
    removed: done.length,
    failed: removals.filter((r) => r.done === "failed").length,
    removedBytes: done.reduce((sum, r) => sum + r.freesBytes, 0),
    ...(observed.fill ? { usedRatioBefore: observed.fill.usedRatio } : {}),
    ...(fillAfter ? { usedRatioAfter: fillAfter.usedRatio } : {}),
  };
  if (done.length > 0) {
    log.notice("prune.done", `${done.length} image(s) removed`, {
      before: outcome.usedRatioBefore?.toFixed(3),
      after: outcome.usedRatioAfter?.toFixed(3),
      failed: outcome.failed,
    });
  }
  const facts: PruneFacts = {
    verdict: plan.verdict,
    trigger: options.trigger ?? "manual",
    reason: plan.reason,
    dryRun: options.dryRun,
    removedImages: outcome.removed,
    failedImages: outcome.failed,
    removedBytes: outcome.removedBytes,
    ...(outcome.usedRatioBefore !== undefined ? { usedRatioBefore: outcome.usedRatioBefore } : {}),
    ...(outcome.usedRatioAfter !== undefined ? { usedRatioAfter: outcome.usedRatioAfter } : {}),
    ...(fillAfter ? { fill: fillAfter } : {}),
    finishedAt: new Date(),
  };
  await options.recorder?.pruneFinished(facts);
  return outcome;
}

/** 0: done (or nothing to do); 1: some removal failed (the log says which). */
export function pruneExitCode(outcome: PruneOutcome): number {
  return outcome.failed > 0 ? ExitCode.failure : ExitCode.ok;
}
