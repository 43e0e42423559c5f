/**
 * The stand-in's start limit (autoscaler.ts): osparc's cycle as `auto_scale_cluster` runs it
 * (`core` = modules/cluster_scaling/_auto_scaling_core.py), reduced to the instances it supervises.
 *
 * - A cycle every `AUTOSCALING_POLL_INTERVAL`, on a period of its own: its ticks fall on multiples
 *   of the interval in EC2's time, so their phase has nothing to do with any launch (osparc's
 *   periodic task started with the service, not with a machine).
 * - Within a cycle, `_analyze_current_cluster` (138) marks broken every pending instance (running or
 *   pending, not attached to the swarm) whose `LaunchTime` is more than `EC2_INSTANCES_MAX_START_TIME`
 *   ago, and `_terminate_broken_ec2s` (266) terminates them; only then `_try_attach_pending_ec2s`
 *   (280) attaches the pending ones it finds in the swarm, all of one cycle together. So a node that
 *   joined between two polls but after the limit is broken all the same: osparc's monitored nodes
 *   are the ones it attached, not the ones in the swarm.
 * - `LaunchTime` is read again at every cycle: a warm buffer's StartInstances resets it, so its
 *   activation is supervised from its start; a stopped instance is not listed (osparc lists pending
 *   and running ones) and waits for its start.
 * - The time compared with `LaunchTime` is EC2's (the emulator's clock): osparc compares it with its
 *   own host's clock, which NTP keeps on AWS's time. A test moves it with `setClockOffset` instead
 *   of waiting a minute.
 */
import { DescribeInstancesCommand, TerminateInstancesCommand, type EC2Client } from "@aws-sdk/client-ec2";
import { AgentError } from "../../errors.ts";

/** What the supervisor saw of one instance: attached within the start limit, or found broken and terminated. */
export type StartVerdict = { joined: true; launchToJoinedMs: number } | { joined: false; brokenAfterMs: number };

/** What one cycle did, in its order: the broken instances terminated, then the pending ones attached. */
export interface SupervisionCycle {
  broken: string[];
  attached: string[];
}

export interface StartSupervisorOptions<Node extends { instanceId: string }> {
  ec2: EC2Client;
  /** EC2's time now (ms since the epoch): the emulator's clock. */
  now(): number;
  /** `EC2_INSTANCES_MAX_START_TIME` (ms). */
  maxStartTimeMs: number;
  /** `AUTOSCALING_POLL_INTERVAL` (ms). */
  pollIntervalMs: number;
  /** `find_node_with_name`: is the node in the swarm? */
  inSwarm(node: Node): Promise<boolean>;
  /** `attach_node` and the labels tag's removal, for all the nodes one cycle found. */
  attach(nodes: Node[]): Promise<void>;
}

export interface StartSupervisor<Node extends { instanceId: string }> {
  /** Supervises the instance from the next cycle on; resolves once a cycle attached it or terminated it. */
  watch(node: Node): Promise<StartVerdict>;
  /** Runs one cycle now (after the one in flight), as its next tick would. */
  cycle(): Promise<SupervisionCycle>;
  /** Stops the ticks; what is still watched is refused. */
  close(): void;
}

interface Watched<Node> {
  node: Node;
  settle(verdict: StartVerdict): void;
  fail(error: Error): void;
}

/** A supervisor of instances' starts (see the module's comment). */
export function createStartSupervisor<Node extends { instanceId: string }>(
  options: StartSupervisorOptions<Node>,
): StartSupervisor<Node> {
  const watched = new Map<string, Watched<Node>>();
  let last: Promise<unknown> = Promise.resolve();
  let tick: ReturnType<typeof setTimeout> | undefined;

  const runCycle = async (): Promise<SupervisionCycle> => {
    const entries = [...watched.values()];
    if (entries.length === 0) return { broken: [], attached: [] };
    const out = await options.ec2.send(
      new DescribeInstancesCommand({ InstanceIds: entries.map((entry) => entry.node.instanceId) }),
    );
    const instances = new Map(
      (out.Reservations ?? []).flatMap((r) => r.Instances ?? []).map((instance) => [instance.InstanceId, instance]),
    );
    const now = options.now();
    const pending: Array<{ entry: Watched<Node>; sinceLaunchMs: number }> = [];
    const broken: Array<{ entry: Watched<Node>; sinceLaunchMs: number }> = [];
    for (const entry of entries) {
      const instance = instances.get(entry.node.instanceId);
      const state = instance?.State?.Name;
      if (state === "stopped" || state === "stopping") continue;
      const launched = instance?.LaunchTime?.getTime();
      if ((state !== "pending" && state !== "running") || launched === undefined || Number.isNaN(launched)) {
        watched.delete(entry.node.instanceId);
        entry.fail(
          new AgentError(
            `${entry.node.instanceId} is ${state ?? "gone"} before it joined (not terminated by the start limit)`,
            "the test ended the instance while its start was supervised",
          ),
        );
        continue;
      }
      const sinceLaunchMs = now - launched;
      (sinceLaunchMs > options.maxStartTimeMs ? broken : pending).push({ entry, sinceLaunchMs });
    }
    // `_terminate_broken_ec2s`: before anything of this cycle is attached.
    if (broken.length > 0)
      await options.ec2.send(
        new TerminateInstancesCommand({ InstanceIds: broken.map(({ entry }) => entry.node.instanceId) }),
      );
    for (const { entry, sinceLaunchMs } of broken) {
      watched.delete(entry.node.instanceId);
      entry.settle({ joined: false, brokenAfterMs: sinceLaunchMs });
    }
    // `_try_attach_pending_ec2s`: the pending ones in the swarm, attached together.
    const found: typeof pending = [];
    for (const each of pending) if (await options.inSwarm(each.entry.node)) found.push(each);
    if (found.length > 0) await options.attach(found.map(({ entry }) => entry.node));
    for (const { entry, sinceLaunchMs } of found) {
      watched.delete(entry.node.instanceId);
      entry.settle({ joined: true, launchToJoinedMs: sinceLaunchMs });
    }
    return {
      broken: broken.map(({ entry }) => entry.node.instanceId),
      attached: found.map(({ entry }) => entry.node.instanceId),
    };
  };

  const cycle = (): Promise<SupervisionCycle> => {
    const next = last.catch(() => undefined).then(runCycle);
    last = next;
    return next;
  };

  // The next tick on the interval's own grid in EC2's time, whenever something is watched.
  const schedule = () => {
    if (tick !== undefined || watched.size === 0) return;
    const wait = options.pollIntervalMs - (options.now() % options.pollIntervalMs);
    tick = setTimeout(() => {
      tick = undefined;
      cycle().then(schedule, (error: unknown) => {
        const failure = error instanceof Error ? error : new Error(String(error));
        for (const entry of watched.values()) entry.fail(failure);
        watched.clear();
      });
    }, wait);
  };

  return {
    watch(node) {
      const verdict = new Promise<StartVerdict>((settle, fail) => {
        watched.set(node.instanceId, { node, settle, fail });
      });
      // A refusal at close is the caller's to see when it awaits; unawaited, it crashes nothing.
      verdict.catch(() => undefined);
      schedule();
      return verdict;
    },
    cycle,
    close() {
      if (tick !== undefined) clearTimeout(tick);
      tick = undefined;
      for (const entry of watched.values())
        entry.fail(new AgentError("the stand-in closed before the start was decided", "await the verdict first"));
      watched.clear();
    },
  };
}
