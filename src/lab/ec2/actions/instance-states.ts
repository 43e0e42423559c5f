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
    throw new Ec2Error(
      "InvalidInstanceID.NotFound",
      `The instance ID${missing.length > 1 ? "s" : ""} '${missing.join(", ")}' ` +
        `${missing.length > 1 ? "do" : "does"} not exist`,
    );
  }
  return [...new Set(ids)].map((id) => getInstance(ctx, id));
}

/** One instance action as a state transition: which states it changes, to what, and what follows. */
interface Transition {
  rule: (state: InstanceState) => "change" | "unchanged" | "refuse";
  refusal: (id: string) => string;
  to: InstanceState;
  /** Starts what the new state sets off (a shutdown, a boot) once the change is committed. */
  started: (ctx: ActionContext, instanceId: string, previous: InstanceState) => void;
  /** What else the change sets on the instance, committed with it. */
  changing?: (ctx: ActionContext, instance: InstanceRecord) => void;
}

/**
 * The action's handler: checks every named instance before changing any (EC2 refuses the whole
 * call), then moves each one to `to` (or leaves it, when the rule says so) and starts the transition.
 */
function transitionHandler(transition: Transition): ActionHandler {
  return (ctx, params) => {
    const instances = namedInstances(ctx, params.list("InstanceId"));
    const { rule, refusal, to, started, changing } = transition;
    for (const instance of instances) {
      if (rule(instance.state) === "refuse") throw new Ec2Error("IncorrectInstanceState", refusal(instance.instanceId));
    }
    const changes = instances.map((instance) => {
      const previous = instance.state;
      if (rule(previous) === "change") {
        instance.state = to;
        changing?.(ctx, instance);
      }
      return { instance, previous, changed: rule(previous) === "change" };
    });
    ctx.store.commit();
    for (const { instance, previous, changed } of changes) if (changed) started(ctx, instance.instanceId, previous);
    return {
      instancesSet: changes.map(({ instance, previous }) =>
        renderStateChange(instance.instanceId, previous, instance.state),
      ),
    };
  };
}

export const stopInstances = transitionHandler({
  rule: (state) =>
    state === "running" ? "change" : state === "stopping" || state === "stopped" ? "unchanged" : "refuse",
  refusal: (id) => `This instance '${id}' is not in a state from which it can be stopped.`,
  to: "stopping",
  started: (ctx, id) => ctx.lifecycle.instanceShuttingDown(id, "stop"),
  changing: (ctx, instance) => (instance.stateTransitionReason = userInitiated(ctx.now())),
});

/** EC2's StateTransitionReason for a stop or termination asked through the API. */
export function userInitiated(now: number): string {
  return `User initiated (${new Date(now).toISOString().slice(0, 19).replace("T", " ")} GMT)`;
}

export const startInstances = transitionHandler({
  rule: (state) =>
    state === "stopped" ? "change" : state === "pending" || state === "running" ? "unchanged" : "refuse",
  refusal: (id) => `The instance '${id}' is not in a state from which it can be started.`,
  to: "pending",
  started: (ctx, id) => ctx.lifecycle.instanceStarting(id),
  // EC2's LaunchTime is "the time that the instance was last launched": a start sets it, a reboot does not.
  changing: (ctx, instance) => {
    instance.launchTime = new Date(ctx.now()).toISOString();
    instance.stateTransitionReason = "";
  },
});

export const terminateInstances = transitionHandler({
  rule: (state) => (state === "shutting-down" || state === "terminated" ? "unchanged" : "change"),
  refusal: () => "",
  to: "shutting-down",
  changing: (ctx, instance) => (instance.stateTransitionReason = userInitiated(ctx.now())),
  // A stopped instance has no OS running to shut down.
  started: (ctx, id, previous) => ctx.lifecycle.instanceShuttingDown(id, "terminate", previous !== "stopped"),
});
