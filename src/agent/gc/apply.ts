/**
 * gc's decisions, carried out: one handler per verdict that acts (GC_HANDLERS); every other
 * verdict leaves its volume alone. EC2 is the last guard: DeleteVolume refuses a volume that got
 * attached since it was observed.
 */
import { describeError } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import type { CloudVolumes } from "../ports.ts";
import type { GcDecision, GcVerdict } from "./plan.ts";

export type GcDone = "deleted" | "gone" | "tagged" | "failed";

export interface GcOutcome {
  decisions: Array<GcDecision & { done?: GcDone; error?: string }>;
  deleted: number;
  failed: number;
}

type Fields = Record<string, string>;

/** What a handler did: `deleted` / `gone` count as deletions. */
type GcHandler = (decision: GcDecision, cloud: CloudVolumes, log: Logger, fields: Fields) => Promise<Exclude<GcDone, "failed">>;

const GC_HANDLERS: Partial<Record<GcVerdict, GcHandler>> = {
  "tag-expiry": async (decision, cloud, log, fields) => {
    await cloud.tagVolume(decision.volumeId, decision.tags ?? {});
    log.notice("gc.tagged", "never-released volume tagged to expire", fields);
    return "tagged";
  },
  delete: async (decision, cloud, log, fields) => {
    const done = await cloud.deleteVolume(decision.volumeId);
    log.notice("gc.deleted", "expired volume deleted", fields);
    return done;
  },
  superseded: async (decision, cloud, log, fields) => {
    const done = await cloud.deleteVolume(decision.volumeId);
    log.notice("gc.retired", "superseded pool volume deleted", fields);
    return done;
  },
};

/** Acts on the decisions (a dry run only logs them). A failed action is counted, never thrown. */
export async function applyGc(decisions: GcDecision[], cloud: CloudVolumes, options: { dryRun: boolean; log: Logger }): Promise<GcOutcome> {
  const { log } = options;
  const outcome: GcOutcome = { decisions, deleted: 0, failed: 0 };
  for (const decision of outcome.decisions) {
    const fields = { volume: decision.volumeId, verdict: decision.verdict, reason: decision.reason };
    if (decision.verdict === "malformed") log.warning("gc.malformed", "skipping a volume with malformed tags", fields);
    const handler = GC_HANDLERS[decision.verdict];
    if (options.dryRun || !handler) {
      log.debug("gc.skipped", options.dryRun ? "would act (dry run)" : "left alone", fields);
      continue;
    }
    try {
      decision.done = await handler(decision, cloud, log, fields);
      if (decision.done !== "tagged") outcome.deleted++;
    } catch (error) {
      decision.done = "failed";
      decision.error = describeError(error);
      outcome.failed++;
      log.error("gc.failed", `could not act on the volume: ${decision.error}`, fields);
    }
  }
  return outcome;
}
