/**
 * gc's decisions, carried out: one handler per verdict that acts (GC_HANDLERS); every other
 * verdict leaves its volume alone. Right before each DeleteVolume the volume is described again
 * and spared when anything that would keep it appeared since the plan (sparedSince: a keep, a
 * claim, an attachment, a new expiry, another state), as the keeper's trim does. EC2 is the last
 * guard: DeleteVolume refuses a volume that got attached in the instant between.
 */
import { describeError } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import type { CloudVolumes, VolumeInfo } from "../ports.ts";
import { DELETING, sparedSince, type GcDecision, type GcPlan, type GcPlanOptions, type GcVerdict } from "./plan.ts";
import type { GcStepDone, GcReport } from "../outcomes.ts";

type Fields = Record<string, string>;

/** What a deletion needs to look again: the volumes as planned, and the plan's judgement. */
export interface Recheck {
  observed: ReadonlyMap<string, VolumeInfo>;
  options: Pick<GcPlanOptions, "now" | "ttlHours" | "retire">;
}

interface HandlerContext {
  cloud: CloudVolumes;
  log: Logger;
  fields: Fields;
  recheck: Recheck;
}

/** What a handler did: `deleted` / `gone` count as deletions. */
type GcHandler = (decision: GcDecision, ctx: HandlerContext) => Promise<Exclude<GcStepDone, "failed">>;

/** Describes the volume again and deletes it only while nothing spares it; `deleted` logs the deletion. */
async function deleteUnlessSpared(
  decision: GcDecision,
  { cloud, log, fields, recheck }: HandlerContext,
  deleted: () => void,
): Promise<Exclude<GcStepDone, "failed">> {
  const observed = recheck.observed.get(decision.volumeId);
  const fresh = await cloud.describeVolume(decision.volumeId);
  if (!fresh) return "gone";
  const spared = observed ? sparedSince(observed, fresh, recheck.options) : "not among the volumes it was judged with";
  if (spared !== undefined) {
    decision.reason += `; spared: ${spared}`;
    log.notice("gc.spared", `left alone: ${spared}`, fields);
    return "spared";
  }
  const done = await cloud.deleteVolume(decision.volumeId);
  deleted();
  return done;
}

const GC_HANDLERS: Partial<Record<GcVerdict, GcHandler>> = {
  "tag-expiry": async (decision, { cloud, log, fields }) => {
    await cloud.tagVolume(decision.volumeId, decision.tags ?? {});
    log.notice("gc.tagged", "never-released volume tagged to expire", fields);
    return "tagged";
  },
  delete: (decision, ctx) =>
    deleteUnlessSpared(decision, ctx, () => ctx.log.notice("gc.deleted", "expired volume deleted", ctx.fields)),
  superseded: (decision, ctx) =>
    deleteUnlessSpared(decision, ctx, () => ctx.log.notice("gc.retired", "superseded pool volume deleted", ctx.fields)),
};

/** Acts on the decisions (a dry run only logs them). A failed action is counted, never thrown. */
export async function applyGc(
  decisions: GcPlan,
  cloud: CloudVolumes,
  options: { dryRun: boolean; log: Logger; recheck: Recheck },
): Promise<GcReport> {
  const { log } = options;
  const count = (which: (verdict: GcVerdict) => boolean) => decisions.filter((d) => which(d.verdict)).length;
  const report: GcReport = {
    decisions,
    wouldDelete: count((verdict) => DELETING.has(verdict)),
    wouldTag: count((verdict) => verdict === "tag-expiry"),
    overCap: count((verdict) => verdict === "over-cap"),
    deleted: 0,
    spared: 0,
    failed: 0,
  };
  for (const decision of report.decisions) {
    const fields = { volume: decision.volumeId, verdict: decision.verdict, reason: decision.reason };
    if (decision.verdict === "malformed") log.warning("gc.malformed", "skipping a volume with malformed tags", fields);
    const handler = GC_HANDLERS[decision.verdict];
    if (options.dryRun || !handler) {
      log.debug("gc.skipped", options.dryRun ? "would act (dry run)" : "left alone", fields);
      continue;
    }
    try {
      decision.done = await handler(decision, { cloud, log, fields, recheck: options.recheck });
      if (decision.done === "spared") report.spared++;
      else if (decision.done !== "tagged") report.deleted++;
    } catch (error) {
      decision.done = "failed";
      decision.error = describeError(error);
      report.failed++;
      log.error("gc.failed", `could not act on the volume: ${decision.error}`, fields);
    }
  }
  return report;
}
