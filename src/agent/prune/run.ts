/**
 * The prune's entry (`ebs-cache-agent prune`, src/cli/prune.ts; after each boot that came up, and
 * from ebs-cache-agent-prune.timer while the node runs):
 * observe → plan (pure, ./plan.ts) → apply → measure the fill again → record the figures.
 */
import type { AgentConfig } from "../../config/index.ts";
import { ExitCode } from "../../errors.ts";
import type { HostAdapters } from "../adapters.ts";
import type { OutcomeRecorder, PruneFacts, PruneTrigger } from "../outcomes.ts";
import type { CloudVolumes } from "../ports.ts";
import { prewarmStatus } from "../prewarm/run.ts";
import { applyPrune, type PruneStepReport } from "./apply.ts";
import { observePrune } from "./observe.ts";
import { planPrune, type PrunePlan, type PruneSettings } from "./plan.ts";
import type { PruneDeps } from "./deps.ts";

export type { LastBoot, PrewarmActivity, PruneDeps } from "./deps.ts";

export interface PruneReport {
  plan: PrunePlan;
  dryRun: boolean;
  removals: PruneStepReport[];
  removed: number;
  failed: number;
  /** Bytes the removed images were estimated to free. */
  removedBytes: number;
  usedRatioBefore?: number;
  /** Measured again after the removals (statfs). */
  usedRatioAfter?: number;
}

/**
 * The prune's parts, from the host's adapters: the volume it works on is the one the last boot
 * recorded (observe.ts mountedVolumeOf takes it only from a boot that came up), EC2 of the
 * instance's region (asked only once the fill calls for it), and the pre-warm's activity from its
 * state file, since the prune gives way to a running pre-warm.
 */
export function pruneDeps(config: AgentConfig, host: HostAdapters): PruneDeps {
  let cloud: CloudVolumes | undefined;
  const cloudNow = async () => (cloud ??= host.cloudFor(config.region ?? (await host.identify()).region));
  return {
    lastBoot: () => host.lastBoot(),
    cloud: {
      describeVolume: async (volumeId, call) => (await cloudNow()).describeVolume(volumeId, call),
      findSnapshots: async (tags, call) => (await cloudNow()).findSnapshots(tags, call),
    },
    fill: (mountPoint) => host.fill(mountPoint),
    docker: host.images,
    // Fresh: osparc tags pre_pulled_images after its pulls, long after the boot read the tags.
    instanceTags: async () => (await host.identify({ fresh: true })).tags,
    prewarm: async () => {
      const { state, running } = await prewarmStatus(config.paths.stateDir);
      return { phase: state?.phase, running };
    },
    log: host.log,
  };
}

/** Runs the prune (a dry run plans and changes nothing). */
export async function runPrune(
  deps: PruneDeps,
  options: {
    settings: PruneSettings;
    imageSet: string | null;
    /** osparc's pre-pulled images instance tag (config refresh.prePulledImagesTag); null or absent: not read. */
    prePulledImagesTag?: string | null;
    dryRun: boolean;
    /** What started this run (the metrics tell the timer's runs apart); default manual. */
    trigger?: PruneTrigger;
    recorder?: Pick<OutcomeRecorder, "pruneFinished">;
  },
): Promise<PruneReport> {
  const { log } = deps;
  const observed = await observePrune(deps, {
    imageSet: options.imageSet,
    ...(options.prePulledImagesTag ? { prePulledImagesTag: options.prePulledImagesTag } : {}),
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
  const report: PruneReport = {
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
      before: report.usedRatioBefore?.toFixed(3),
      after: report.usedRatioAfter?.toFixed(3),
      failed: report.failed,
    });
  }
  const facts: PruneFacts = {
    verdict: plan.verdict,
    trigger: options.trigger ?? "manual",
    reason: plan.reason,
    dryRun: options.dryRun,
    removedImages: report.removed,
    failedImages: report.failed,
    removedBytes: report.removedBytes,
    ...(report.usedRatioBefore !== undefined ? { usedRatioBefore: report.usedRatioBefore } : {}),
    ...(report.usedRatioAfter !== undefined ? { usedRatioAfter: report.usedRatioAfter } : {}),
    ...(fillAfter ? { fill: fillAfter } : {}),
    finishedAt: new Date(),
  };
  await options.recorder?.pruneFinished(facts);
  return report;
}

/** 0: done (or nothing to do); 1: some removal failed (the log says which). */
export function pruneExitCode(report: PruneReport): number {
  return report.failed > 0 ? ExitCode.failure : ExitCode.ok;
}
