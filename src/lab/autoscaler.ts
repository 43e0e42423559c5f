/**
 * A lab stand-in for osparc's autoscaler (services/autoscaling in osparc-simcore, see
 * docs/osparc.md): it starts, joins, labels, drains, stops and terminates lab instances the way
 * the autoscaler does, through the EC2 emulator's API and the node's docker, so the agent can be
 * proven against the machine lifecycle it meets in production. It only does what osparc does
 * (it never waits for the agent, never reads its labels) unless a method says otherwise.
 *
 * What stands for what:
 * - `RunInstances` with tags: a lab host registered with the tags osparc writes (the labels tag
 *   chunked as `dump_as_ec2_tags` cuts it, tags in instance metadata off, as osparc launches);
 * - the instance's systemd running the agent: `boot()` (the agent's one-shot boot in this
 *   process, the host's dockerd as docker.service);
 * - the user data's `docker swarm join`: the node's dockerd becomes a (single-node) swarm node;
 * - the OS shutting down on StopInstances / TerminateInstances: the emulator's shutdown hook,
 *   which stops docker.service and runs the agent's release (its ExecStop).
 */
import {
  CreateTagsCommand,
  DeleteTagsCommand,
  DescribeInstancesCommand,
  StartInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
  type EC2Client,
} from "@aws-sdk/client-ec2";
import type { BootOutcome } from "../agent/boot/run.ts";
import { labelsTagAsOsparcWrites, readLabelsTag } from "../agent/labels-tag.ts";
import type { ReleaseOutcome } from "../agent/release/run.ts";
import { AgentError } from "../errors.ts";
import { createMemoryLogger, type Logger } from "../log.ts";
import { bootLabHost, deepMerge, releaseLabHost, type ConfigOverrides } from "./agent.ts";
import { initSwarm } from "./images.ts";
import type { Lab, LabHost } from "./lab.ts";

/** Tags and node labels osparc's autoscaler reads and writes (docs/osparc.md, OSPARC.md). */
export const Osparc = {
  /** The task's placement labels as JSON, chunked `<key>_0`, `<key>_1`, … past 256 characters. */
  labelsTag: "io.simcore.autoscaling.ec2_instance.docker_node_labels",
  /** `true` on a stopped warm buffer, `false` once it is activated for a task. */
  warmBufferTag: "io.simcore.autoscaling.warm_buffer_machine",
  servicesReady: "io.simcore.osparc-services-ready",
  servicesReadyLastChanged: "io.simcore.osparc-services-ready-last-changed",
  instanceType: "ec2-instance-type",
} as const;

/** An instance the actor started, and what happened on it. */
export interface OsparcNode {
  host: LabHost;
  instanceId: string;
  /** The task labels it was launched or last activated for (placement keys and values). */
  labels: Record<string, string>;
  /** The last release the shutdown hook ran (after a stop or a terminate). */
  lastRelease?: AgentRun<ReleaseOutcome>;
}

/** An agent command run on a node, with its log and how long it took. */
export type AgentRun<T> = T & { log: string[]; ms: number };

/**
 * A node's boot: phase 2's outcome (`ready`, `degraded`, …) with phase 1's (`prepared`, the volume it chose); `ms` for
 * both and docker's start.
 */
export type OsparcBoot = AgentRun<BootOutcome> & { phase1: AgentRun<BootOutcome> };

export interface AutoscalerActorOptions {
  lab: Lab;
  /** Config overrides for every agent the actor runs (a boot may add its own). */
  agentConfig?: ConfigOverrides;
  /** How often instance states are polled (ms; default 100). */
  pollMs?: number;
  /** How long a state transition may take before the actor gives up (ms; default 120 000). */
  transitionTimeoutMs?: number;
}

export interface AutoscalerActor {
  readonly ec2: EC2Client;
  /**
   * `RunInstances` as `_launch_instances` does it: the task's labels in the labels tag (chunked
   * when long), tags in instance metadata off. `warmBuffer` launches a buffer machine instead
   * (no labels, `warm_buffer_machine=true`).
   */
  launch(
    labels: Record<string, string>,
    options?: { warmBuffer?: boolean; extraTags?: Record<string, string> },
  ): Promise<OsparcNode>;
  /** The instance's systemd running the agent's boot (phase 1 then phase 2). `log` sees the lines as they come. */
  boot(
    node: OsparcNode,
    options?: { overrides?: ConfigOverrides; log?: Logger & { lines: string[] } },
  ): Promise<OsparcBoot>;
  /** The user data's swarm join; returns the node id. */
  join(node: OsparcNode): Promise<string>;
  /**
   * `_try_attach_pending_ec2s` / `attach_node`: the labels tag read back from EC2 and copied onto
   * the docker node with `osparc-services-ready=false`, then the tag deleted from the instance.
   */
  attachNode(node: OsparcNode): Promise<void>;
  /**
   * `set_node_osparc_ready(true)` with the task's placement labels (a drained node re-activated: the hot buffer path).
   */
  activate(node: OsparcNode, labels?: Record<string, string>): Promise<void>;
  /** `_deactivate_empty_nodes`: ready=false, the placement labels removed. */
  drain(node: OsparcNode): Promise<void>;
  /** TerminateInstances; resolves once EC2 shows `terminated` (the release ran in its shutdown). */
  terminate(node: OsparcNode): Promise<void>;
  /** StopInstances; resolves once EC2 shows `stopped`. */
  stop(node: OsparcNode): Promise<void>;
  /**
   * `_try_start_warm_buffer_instances`: StartInstances, then ONE CreateTags carrying
   * `warm_buffer_machine=false` and the task's labels tag together (no labels tag for `{}`: a
   * start to refill hot buffers). The boot runs meanwhile; the tags are written once the boot
   * has been running for `tagDelayMs` (default: once it says it waits for them). `tags-first`
   * writes the same CreateTags before the start (the order osparc does not use, for tests).
   */
  activateWarmBuffer(
    node: OsparcNode,
    labels: Record<string, string>,
    options?: { overrides?: ConfigOverrides; tagDelayMs?: number; order?: "osparc" | "tags-first" },
  ): Promise<OsparcBoot>;
  /** StartInstances (a warm buffer restarted as it is, no new tags). */
  start(node: OsparcNode): Promise<void>;
  /** The docker node's labels (the swarm's node spec). */
  nodeLabels(node: OsparcNode): Promise<Record<string, string>>;
  /** EC2's state name for the instance. */
  instanceState(node: OsparcNode): Promise<string | undefined>;
  /** The instance's tags as EC2 has them. */
  instanceTags(node: OsparcNode): Promise<Record<string, string>>;
}

/** Placement keys osparc copies from the labels tag onto the node and removes on drain. */
const PLACEMENT_KEYS = ["product-name", "user-id", "project-id", "node-id", "wallet-id"];

export function createAutoscalerActor(options: AutoscalerActorOptions): AutoscalerActor {
  const { lab } = options;
  const ec2 = lab.ec2Client();
  const pollMs = options.pollMs ?? 100;
  const transitionMs = options.transitionTimeoutMs ?? 120_000;
  const merged = (extra?: ConfigOverrides): ConfigOverrides => deepMerge(options.agentConfig ?? {}, extra ?? {});

  const instanceState = async (node: OsparcNode) => {
    const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [node.instanceId] }));
    return out.Reservations?.[0]?.Instances?.[0]?.State?.Name;
  };
  const instanceTags = async (node: OsparcNode) => {
    const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [node.instanceId] }));
    return Object.fromEntries(
      (out.Reservations?.[0]?.Instances?.[0]?.Tags ?? []).map((tag) => [tag.Key!, tag.Value ?? ""]),
    );
  };
  const reach = async (node: OsparcNode, state: string) => {
    const deadline = Date.now() + transitionMs;
    for (;;) {
      const now = await instanceState(node);
      if (now === state) return;
      if (Date.now() > deadline)
        throw new AgentError(
          `${node.instanceId} did not reach ${state} (it is ${String(now)})`,
          "see the lab log: the shutdown hook (the release) may hang",
        );
      await sleep(pollMs);
    }
  };
  const docker = (node: OsparcNode) => {
    const dockerd = node.host.dockerd;
    if (!dockerd) throw new AgentError(`${node.instanceId} has no docker running`, "boot the node first");
    return dockerd;
  };
  const nodeLabels = async (node: OsparcNode) => {
    const { stdout } = await docker(node).docker(["node", "inspect", "self", "--format", "{{json .Spec.Labels}}"]);
    return (JSON.parse(stdout) as Record<string, string> | null) ?? {};
  };
  const updateNode = async (node: OsparcNode, add: Record<string, string>, remove: string[] = []) => {
    // `docker node update` takes no `self`: the node's own id, as a manager knows it.
    const nodeId = (await docker(node).info()).Swarm.NodeID;
    const args = [
      "node",
      "update",
      ...Object.entries(add).flatMap(([k, v]) => ["--label-add", `${k}=${v}`]),
      ...remove.flatMap((k) => ["--label-rm", k]),
      nodeId,
    ];
    await docker(node).docker(args);
  };
  const readiness = (ready: boolean) => ({
    [Osparc.servicesReady]: String(ready),
    [Osparc.servicesReadyLastChanged]: new Date().toISOString(),
  });
  const timed = async <T>(
    work: (log: Logger & { lines: string[] }) => Promise<T>,
    log = createMemoryLogger("debug"),
  ): Promise<AgentRun<T>> => {
    const started = performance.now();
    const outcome = await work(log);
    return { ...outcome, log: log.lines, ms: performance.now() - started };
  };
  // As the units run it: phase 1 (`boot --no-docker`, its budget), docker.service on whatever
  // data-root phase 1 left in daemon.json, phase 2 (`boot --no-claim`).
  const boot = async (
    node: OsparcNode,
    bootOptions: { overrides?: ConfigOverrides; log?: Logger & { lines: string[] } } = {},
  ): Promise<OsparcBoot> => {
    const overrides = merged(bootOptions.overrides);
    const started = performance.now();
    const phase1 = await timed(
      (log) => bootLabHost(lab, node.host, { overrides, log, withDocker: false }),
      bootOptions.log,
    );
    await node.host.startDocker();
    const phase2 = await timed((log) => bootLabHost(lab, node.host, { overrides, log, mayClaim: false }));
    return { ...phase2, phase1, ms: performance.now() - started };
  };

  return {
    ec2,
    async launch(labels, launchOptions = {}) {
      const tags: Record<string, string> = {
        Name: launchOptions.warmBuffer ? "osparc-warm-buffer" : "osparc-dynamic-node",
        ...launchOptions.extraTags,
      };
      if (launchOptions.warmBuffer) tags[Osparc.warmBufferTag] = "true";
      else if (Object.keys(labels).length > 0) Object.assign(tags, labelsTagAsOsparcWrites(Osparc.labelsTag, labels));
      const host = await lab.addHost({ tags, metadataTags: false });
      const node: OsparcNode = {
        host,
        instanceId: host.instance.instanceId,
        labels: launchOptions.warmBuffer ? {} : { ...labels },
      };
      // The OS's shutdown: docker.service stops, then the agent's release (its ExecStop).
      lab.ec2.setShutdownHook(node.instanceId, async () => {
        await host.dockerd?.stop();
        node.lastRelease = await timed((log) => releaseLabHost(lab, host, { overrides: merged(), log }));
      });
      return node;
    },
    boot,
    async join(node) {
      return initSwarm(docker(node));
    },
    async attachNode(node) {
      const tags = await instanceTags(node);
      const read = readLabelsTag(tags, Osparc.labelsTag);
      const labels = read.found && read.ok ? stringValues(read.labels) : {};
      await updateNode(node, { ...labels, [Osparc.instanceType]: "t3.medium", ...readiness(false) });
      const labelTags = Object.keys(tags).filter(
        (key) => key === Osparc.labelsTag || new RegExp(`^${escape(Osparc.labelsTag)}_\\d+$`).test(key),
      );
      if (labelTags.length > 0)
        await ec2.send(
          new DeleteTagsCommand({ Resources: [node.instanceId], Tags: labelTags.map((Key) => ({ Key })) }),
        );
      node.labels = labels;
    },
    async activate(node, labels) {
      if (labels) node.labels = { ...labels };
      await updateNode(node, { ...node.labels, ...readiness(true) });
    },
    async drain(node) {
      const present = await nodeLabels(node);
      await updateNode(
        node,
        readiness(false),
        PLACEMENT_KEYS.filter((key) => key in present),
      );
      node.labels = {};
    },
    async terminate(node) {
      await ec2.send(new TerminateInstancesCommand({ InstanceIds: [node.instanceId] }));
      await reach(node, "terminated");
    },
    async stop(node) {
      await ec2.send(new StopInstancesCommand({ InstanceIds: [node.instanceId] }));
      await reach(node, "stopped");
    },
    async start(node) {
      await ec2.send(new StartInstancesCommand({ InstanceIds: [node.instanceId] }));
      await reach(node, "running");
    },
    async activateWarmBuffer(node, labels, activation = {}) {
      // One CreateTags, as `_try_start_warm_buffer_instances` sets `get_activated_warm_buffer_ec2_tags`
      // with `dump_task_required_node_labels_as_tags` (only when the task has labels).
      const activationTags = {
        [Osparc.warmBufferTag]: "false",
        ...(Object.keys(labels).length > 0 ? labelsTagAsOsparcWrites(Osparc.labelsTag, labels) : {}),
      };
      const tag = () =>
        ec2.send(
          new CreateTagsCommand({
            Resources: [node.instanceId],
            Tags: Object.entries(activationTags).map(([Key, Value]) => ({ Key, Value })),
          }),
        );
      const tagsFirst = activation.order === "tags-first";
      if (tagsFirst) await tag();
      await ec2.send(new StartInstancesCommand({ InstanceIds: [node.instanceId] }));
      await reach(node, "running");
      // "first start the instance and then set the tags": the boot is already under way.
      const log = createMemoryLogger("debug");
      const booting = boot(node, { ...(activation.overrides ? { overrides: activation.overrides } : {}), log });
      if (!tagsFirst) {
        const deadline = Date.now() + transitionMs;
        if (activation.tagDelayMs !== undefined) await sleep(activation.tagDelayMs);
        else
          while (!log.lines.some((line) => /boot\.labels-tag: no labels tag yet/.test(line)) && Date.now() < deadline)
            await sleep(20);
        await tag();
      }
      node.labels = { ...labels };
      return booting;
    },
    nodeLabels,
    instanceState,
    instanceTags,
  };
}

function stringValues(labels: Readonly<Record<string, unknown>>): Record<string, string> {
  return Object.fromEntries(Object.entries(labels).map(([key, value]) => [key, String(value)]));
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
