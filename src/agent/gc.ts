/**
 * `gc`: observe the managed volumes (one filtered DescribeVolumes), plan (pure), apply. EC2 is
 * the last guard: DeleteVolume refuses a volume that got attached in the meantime.
 */
import { describeError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { VolumeTag } from "../tags.ts";
import { planGc, type GcDecision } from "./gc-plan.ts";
import type { CloudVolumes } from "./ports.ts";

export interface GcOutcome {
  decisions: Array<GcDecision & { done?: "deleted" | "gone" | "tagged" | "failed"; error?: string }>;
  deleted: number;
  failed: number;
}

/** Runs gc over the managed volumes EC2 shows in this region. */
export async function runGc(
  cloud: CloudVolumes,
  options: { dryRun: boolean; maxDeletes: number; ttlHours: number; now?: Date; log: Logger },
): Promise<GcOutcome> {
  const { log } = options;
  const volumes = await cloud.findVolumes({ tags: { [VolumeTag.managed]: "true" } });
  const decisions = planGc(volumes, { now: options.now ?? new Date(), ttlHours: options.ttlHours, maxDeletes: options.maxDeletes });
  const outcome: GcOutcome = { decisions, deleted: 0, failed: 0 };
  for (const decision of outcome.decisions) {
    const fields = { volume: decision.volumeId, verdict: decision.verdict, reason: decision.reason };
    if (decision.verdict === "malformed") log.warning("gc", "skipping a volume with malformed tags", fields);
    if (options.dryRun || (decision.verdict !== "delete" && decision.verdict !== "tag-expiry")) {
      log.debug("gc", options.dryRun ? "would act (dry run)" : "left alone", fields);
      continue;
    }
    try {
      if (decision.verdict === "tag-expiry") {
        await cloud.tagVolume(decision.volumeId, decision.tags ?? {});
        decision.done = "tagged";
        log.notice("gc", "never-released volume tagged to expire", fields);
      } else {
        decision.done = await cloud.deleteVolume(decision.volumeId);
        outcome.deleted++;
        log.notice("gc", "expired volume deleted", fields);
      }
    } catch (error) {
      decision.done = "failed";
      decision.error = describeError(error);
      outcome.failed++;
      log.error("gc", `could not act on the volume: ${decision.error}`, fields);
    }
  }
  return outcome;
}
