/**
 * StopInstances, StartInstances and TerminateInstances: the instance state machine EC2 shows.
 *
 *   running ─Stop→ stopping ─(OS shut down)→ stopped ─Start→ pending ─→ running
 *   any but terminated ─Terminate→ shutting-down ─(OS shut down)→ terminated
 *
 * Each answer lists every named instance with its previous and current state, as EC2 does
 * (stopping a stopped instance, or starting a running one, is no error: both states are the
 * same). Volumes stay attached over a stop; at termination they are detached, and those
 * attached with DeleteOnTermination deleted (src/lab/ec2/lifecycle.ts).
 */
import { Ec2Error } from "../ec2-error.ts";
import type { InstanceRecord, InstanceState } from "../model.ts";
import { renderStateChange } from "../render.ts";
import type { XmlObject } from "../xml.ts";
import { getInstance, type ActionContext, type ActionHandler } from "./context.ts";

const INSTANCE_ID = /^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$/;

/** The named instances (InstanceId.N, at least one), each well formed and known. */
function namedInstances(ctx: ActionContext, ids: string[]): InstanceRecord[] {
  if (ids.length === 0) throw new Ec2Error("MissingParameter", "The request must contain the parameter InstanceId");
  for (const id of ids) {
    if (!INSTANCE_ID.test(id)) throw new Ec2Error("InvalidInstanceID.Malformed", `Invalid id: "${id}"`);
  }
  const missing = [...new Set(ids)].filter((id) => !ctx.store.instance(id));
  if (missing.length > 0) {
    throw new Ec2Error("InvalidInstanceID.NotFound", `The instance ID${missing.length > 1 ? "s" : ""} '${missing.join(", ")}' ${missing.length > 1 ? "do" : "does"} not exist`);
  }
  return [...new Set(ids)].map((id) => getInstance(ctx, id));
}

/**
 * Checks every instance before changing any (EC2 refuses the whole call), then moves each one
 * `from` → `to` (or leaves it, when `unchanged` says so) and starts the transition.
 */
function changeStates(
  ctx: ActionContext,
  instances: InstanceRecord[],
  rule: (state: InstanceState) => "change" | "unchanged" | "refuse",
  refusal: (id: string) => string,
  to: InstanceState,
  started: (instanceId: string, previous: InstanceState) => void,
): XmlObject {
  for (const instance of instances) {
    if (rule(instance.state) === "refuse") throw new Ec2Error("IncorrectInstanceState", refusal(instance.instanceId));
  }
  const changes = instances.map((instance) => {
    const previous = instance.state;
    if (rule(previous) === "change") instance.state = to;
    return { instance, previous, changed: rule(previous) === "change" };
  });
  ctx.store.commit();
  for (const { instance, previous, changed } of changes) if (changed) started(instance.instanceId, previous);
  return { instancesSet: changes.map(({ instance, previous }) => renderStateChange(instance.instanceId, previous, instance.state)) };
}

export const stopInstances: ActionHandler = (ctx, p) => {
  const instances = namedInstances(ctx, p.list("InstanceId"));
  return changeStates(
    ctx,
    instances,
    (state) => (state === "running" ? "change" : state === "stopping" || state === "stopped" ? "unchanged" : "refuse"),
    (id) => `This instance '${id}' is not in a state from which it can be stopped.`,
    "stopping",
    (id) => ctx.lifecycle.instanceShuttingDown(id, "stop"),
  );
};

export const startInstances: ActionHandler = (ctx, p) => {
  const instances = namedInstances(ctx, p.list("InstanceId"));
  return changeStates(
    ctx,
    instances,
    (state) => (state === "stopped" ? "change" : state === "pending" || state === "running" ? "unchanged" : "refuse"),
    (id) => `The instance '${id}' is not in a state from which it can be started.`,
    "pending",
    (id) => ctx.lifecycle.instanceStarting(id),
  );
};

export const terminateInstances: ActionHandler = (ctx, p) => {
  const instances = namedInstances(ctx, p.list("InstanceId"));
  return changeStates(
    ctx,
    instances,
    (state) => (state === "shutting-down" || state === "terminated" ? "unchanged" : "change"),
    () => "",
    "shutting-down",
    // A stopped instance has no OS running to shut down.
    (id, previous) => ctx.lifecycle.instanceShuttingDown(id, "terminate", previous !== "stopped"),
  );
};
