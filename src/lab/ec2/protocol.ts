/**
 * One EC2 Query request, start to end: faults first (latency, throttling), then the action,
 * then IAM's decision for the caller's key (iam/enforcement.ts), then the action, then the XML
 * answer. Signatures are not checked: a key is taken at its word.
 */
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { ACTIONS, type ActionContext } from "./actions/index.ts";
import { Ec2Error, internalError, throttled } from "./ec2-error.ts";
import type { Params } from "./params.ts";
import { renderError, renderResponse } from "./xml.ts";

/** An HTTP answer: status and XML body. */
export interface Ec2Answer {
  status: number;
  body: string;
  requestId: string;
}

function fail(error: Ec2Error, requestId: string): Ec2Answer {
  return { status: error.status, body: renderError(error, requestId), requestId };
}

/** Handles one request's parameters (`Action`, `Version`, the action's own). */
export async function handleEc2Request(
  ctx: ActionContext,
  params: Params,
  accessKeyId: string | undefined,
): Promise<Ec2Answer> {
  const requestId = randomUUID();
  const action = params.action ?? "";
  const latency = ctx.faults.latencyMs(action);
  if (latency > 0) await sleep(latency);
  if (ctx.faults.throttle(action)) {
    ctx.log?.debug("lab.ec2-emulator", "throttled", { action, requestId });
    return fail(throttled(), requestId);
  }
  if (action === "") {
    return fail(new Ec2Error("MissingAction", "The request must contain the parameter Action"), requestId);
  }
  const handler = Object.hasOwn(ACTIONS, action) ? ACTIONS[action] : undefined;
  if (!handler) {
    return fail(new Ec2Error("InvalidAction", `The action ${action} is not valid for this web service.`), requestId);
  }
  const refusal = ctx.faults.errorCode(action);
  if (refusal !== undefined) {
    ctx.log?.debug("lab.ec2-emulator", `answering ${refusal} (fault)`, { action, requestId });
    return fail(new Ec2Error(refusal, `The request was refused with ${refusal} (a fault of the lab).`), requestId);
  }
  try {
    const refusal = await ctx.iam.ec2Refusal(ctx, params, accessKeyId);
    if (refusal) return fail(refusal, requestId);
    // EC2 answers a DryRun after deciding it: DryRunOperation means the caller may.
    if (params.bool("DryRun")) {
      throw new Ec2Error("DryRunOperation", "Request would have succeeded, but DryRun flag is set.", 412);
    }
    const result = handler(ctx, params);
    if (ctx.faults.applyThen500(action)) {
      ctx.store.event({ kind: "apply-then-500", detail: action });
      ctx.store.commit();
      ctx.log?.info("lab.ec2-emulator", "change applied, answering 500 (fault)", { action, requestId });
      return fail(internalError(), requestId);
    }
    ctx.log?.debug("lab.ec2-emulator", action, { requestId });
    return { status: 200, body: renderResponse(action, requestId, result), requestId };
  } catch (error) {
    if (error instanceof Ec2Error) {
      ctx.log?.debug("lab.ec2-emulator", `${action} failed`, { requestId, code: error.code, message: error.message });
      return fail(error, requestId);
    }
    ctx.log?.error("lab.ec2-emulator", `${action} crashed`, {
      requestId,
      error: error instanceof Error ? (error.stack ?? error.message) : String(error),
    });
    return fail(internalError(), requestId);
  }
}
