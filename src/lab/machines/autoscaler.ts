/**
 * A lab stand-in for osparc's autoscaler (services/autoscaling in osparc-simcore, see
 * docs/osparc.md): each method plays one of osparc's functions, named in its comment
 * (`core` = modules/cluster_scaling/_auto_scaling_core.py, `wb` =
 * modules/cluster_scaling/_warm_buffer_machines_pool_core.py, `ec2lib` =
 * packages/aws-library/src/aws_library/ec2/_client.py), and does what it does in its order,
 * through the EC2 emulator's API, the node's docker and a swarm manager of its own
 * (osparc-swarm.ts). It never waits for the agent and never reads its labels.
 *
 * What stands for what:
 * - `RunInstances`: the emulator's own, as `launch_instances` (ec2lib) sends it: MinCount 1, MaxCount
 *   the batch's count, the base tags (`get_ec2_tags_dynamic`, with `EC2_INSTANCES_CUSTOM_TAGS`), the
 *   labels tag (chunked as `dump_as_ec2_tags` cuts it) in TagSpecifications for the instance, its
 *   volumes and its ENI (not `dump_product_name_as_tag`'s product name: the lab's tasks name no
 *   product outside their labels), the cold-start user data (`compose_user_data`,
 *   run_on_every_boot=False), tags in instance metadata off; each launched instance becomes a lab
 *   host (`lab.adoptHost`);
 * - cloud-init's once-per-instance user data: a semaphore in the host folder (its root disk), as
 *   cloud-init keeps under /var/lib/cloud/instances/<id>/sem: a reboot or a start runs it no more;
 *   a warm buffer's activation script is per boot (MIME `text/x-shellscript-per-boot`);
 * - the instance's systemd: `boot()` runs ebs-cache-agent.service (phase 1), docker.service,
 *   ebs-cache-agent-ready.service (phase 2), and cloud-final's user data, which Debian orders
 *   After=multi-user.target, from phase 2's READY=1 (docker final) on: boot scripts,
 *   `docker swarm join --availability=drain` to the manager, login, the cold-start pre-pull;
 * - SSM's `docker compose pull` on a buffer: `docker pull`-free image copies in the lab (the
 *   caller's `pull`), since the lab has no registry for osparc's images;
 * - the OS shutting down on StopInstances / TerminateInstances of a running instance: the
 *   emulator's shutdown hook, which stops docker.service and runs the agent's release (its
 *   ExecStop). A stopped instance has no OS: terminating it runs nothing.
 * - the node osparc finds by its private DNS name (`find_node_with_name`): the node id the host's
 *   dockerd reports (the lab's dockerds share the machine's host name).
 */
import {
  CreateTagsCommand,
  DeleteTagsCommand,
  DescribeInstancesCommand,
  RunInstancesCommand,
  StartInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
  type EC2Client,
} from "@aws-sdk/client-ec2";
import { access, mkdir, writeFile } from "node:fs/promises";
import { dirname, join as joinPath } from "node:path";
import type { BootOutcome } from "../../agent/boot/run.ts";
import { BufferTag } from "../../agent/buffer-tags.ts";
import { labelsTagAsOsparcWrites, readLabelsTag } from "../../agent/labels-tag.ts";
import type { ReleaseOutcome } from "../../agent/release/run.ts";
import { AgentError } from "../../errors.ts";
import { createMemoryLogger, type Logger } from "../../log.ts";
import { bootLabHost, releaseLabHost, type ConfigOverrides } from "./agent.ts";
import { deepMerge } from "./deep-merge.ts";
import type { PrivateDockerd } from "../docker/dockerd.ts";
import type { Lab, LabHost } from "../lab.ts";
import { LAB_INSTANCE_TYPE } from "../types.ts";
import { startOsparcSwarm, type OsparcSwarm } from "./osparc-swarm.ts";
import { createStartSupervisor, type StartVerdict, type SupervisionCycle } from "./start-supervisor.ts";

export type { StartVerdict, SupervisionCycle } from "./start-supervisor.ts";

/** Tags and node labels osparc's autoscaler reads and writes (docs/osparc.md, OSPARC.md). */
export const Osparc = {
  /** The task's placement labels as JSON, chunked `<key>_0`, `<key>_1`, … past 256 characters. */
  labelsTag: "io.simcore.autoscaling.ec2_instance.docker_node_labels",
  /** `true` on a stopped warm buffer, `false` once it is activated. */
  warmBufferTag: BufferTag.warm,
  /** osparc's `pre_pulled_images` list (`INSTANCE_PRE_PULLED_IMAGES_EC2_TAG_KEY`). */
  prePulledImagesTag: BufferTag.prePulledImages,
  /** `io.simcore.autoscaling.pre-pulling-images` and the SSM command id, while a pull runs. */
  pullingTag: "io.simcore.autoscaling.pre-pulling-images",
  pullCommandTag: "io.simcore.autoscaling.ssm-command-id",
  productNameTag: "io.simcore.product_name",
  servicesReady: "io.simcore.osparc-services-ready",
  servicesReadyLastChanged: "io.simcore.osparc-services-ready-last-changed",
  instanceType: "ec2-instance-type",
  /** Base tags (`AS/constants.py`): the autoscaler's version and what its nodes monitoring watches. */
  versionTag: "io.simcore.autoscaling.version",
  monitoredNodesLabelsTag: "io.simcore.autoscaling.monitored_nodes_labels",
  monitoredServicesLabelsTag: "io.simcore.autoscaling.monitored_services_labels",
} as const;

/**
 * `get_ec2_tags_dynamic` (AS/utils/utils_ec2.py) with osparc's defaults: the version, the nodes
 * monitoring's label lists as JSON, `Name` = `<EC2_INSTANCES_NAME_PREFIX>-<EC2_INSTANCES_KEY_NAME>`;
 * `EC2_INSTANCES_CUSTOM_TAGS` go on top. They are also osparc's `tag:` filters for its instances.
 */
export function osparcBaseTags(customTags: Readonly<Record<string, string>> = {}): Record<string, string> {
  return {
    [Osparc.versionTag]: "1.117.0",
    [Osparc.monitoredNodesLabelsTag]: JSON.stringify([Osparc.servicesReady]),
    [Osparc.monitoredServicesLabelsTag]: JSON.stringify(["io.simcore.runtime.user-id"]),
    Name: "osparc-dynamic-autoscaled-worker-osparc-lab-key",
    ...customTags,
  };
}

/** The AMI the stand-in launches (`EC2_INSTANCES_ALLOWED_TYPES[type].ami_id`): any id, the lab has no images. */
export const LAB_AMI = "ami-0a1b2c3d4e5f60718";

/** An instance the actor started, and what happened on it. */
export interface OsparcNode {
  host: LabHost;
  instanceId: string;
  /** The RunInstances reservation it was launched in: a batch's instances share it. */
  reservationId: string;
  /** The task labels it was launched or last activated for (placement keys and values). */
  labels: Record<string, string>;
  /**
   * What cloud-init runs: `cold` (`ec2_startup_script`), `warm-buffer` (`ec2_warm_buffer_startup_script`, no join),
   * `join` (the idempotent join set by an activation).
   */
  userData: "cold" | "warm-buffer" | "join";
  /** The last release the shutdown hook ran (after a stop or a terminate of a running instance). */
  lastRelease?: AgentRun<ReleaseOutcome>;
  /**
   * Every user-data command cloud-final ran on this node, in order (the last boot's; empty when
   * cloud-init ran nothing: a once-per-instance script that ran already).
   */
  userDataRun: string[];
  /** How many boots ran the user data (cloud-init's scripts-user) on this instance. */
  userDataRuns: number;
}

/** An agent command run on a node, with its log and how long it took. */
export type AgentRun<T> = T & { log: string[]; ms: number };

/**
 * A node's boot: phase 2's outcome (`ready`, `degraded`, …) with phase 1's; `ms` from the start of
 * phase 1 to the end of cloud-final's user data; `joinedMs` from the start of phase 1 to the join
 * (undefined: the user data has no join, or it failed).
 */
export type OsparcBoot = AgentRun<BootOutcome> & { phase1: AgentRun<BootOutcome>; joinedMs?: number };

export interface AutoscalerActorOptions {
  lab: Lab;
  /** Config overrides for every agent the actor runs (a boot may add its own). */
  agentConfig?: ConfigOverrides;
  /** How often instance states are polled while waiting for a transition (ms; default 100). */
  pollMs?: number;
  /** How long a state transition may take before the actor gives up (ms; default 120 000). */
  transitionTimeoutMs?: number;
  /**
   * `EC2_INSTANCES_MAX_START_TIME` (ms; osparc's default 1 minute). Given, the agents the actor runs
   * count it too (`timeouts.startLimitSeconds`, as docs/osparc.md has the operator set both). Not given,
   * they count none: a lab boot starts when its test calls it, not 15–30 s after RunInstances, and a
   * loaded machine would otherwise degrade boots that are not about the limit.
   */
  maxStartTimeMs?: number;
  /** `AUTOSCALING_POLL_INTERVAL` (ms; osparc's default 10 s). */
  pollIntervalMs?: number;
  /** `custom_boot_scripts` of the instance type: run first by the user data. */
  bootScripts?: Array<(node: OsparcNode) => Promise<void>>;
  /**
   * `EC2_INSTANCES_COLD_START_DOCKER_IMAGES_PRE_PULLING` / the buffer's `pre_pull_images`: images
   * the user data (cold start, after the join) or SSM (buffers) pull, and `pull` how (the lab
   * has no registry for them). Default: none.
   */
  prePullImages?: string[];
  pull?: (docker: PrivateDockerd, image: string) => Promise<void>;
  /**
   * `EC2_INSTANCES_CUSTOM_TAGS`: added to the base tags of every launch, so copied onto each instance,
   * its root volume and its ENI (default none).
   */
  customTags?: Record<string, string>;
}

export interface AutoscalerActor {
  readonly ec2: EC2Client;
  /** The swarm manager (started on first use). */
  swarm(): Promise<OsparcSwarm>;
  /**
   * `_launch_instances` (core) / `launch_instances` (ec2lib): RunInstances with the task's labels
   * in the labels tag (`dump_task_required_node_labels_as_tags`, chunked when long) and the cold
   * start user data (`ec2_startup_script`). `warmBuffer`: `_add_remove_buffer_instances` (wb), tags
   * `get_deactivated_warm_buffer_ec2_tags`, user data `ec2_warm_buffer_startup_script` (no join).
   */
  launch(labels: Record<string, string>, options?: LaunchOptions): Promise<OsparcNode>;
  /**
   * The same RunInstances for `count` instances of identical labels (MinCount 1, MaxCount count: one
   * reservation), as `_launch_instances` (core) launches a batch.
   */
  launchBatch(labels: Record<string, string>, count: number, options?: LaunchOptions): Promise<OsparcNode[]>;
  /**
   * `_launch_instances` (core): the tasks grouped by identical labels (its `Counter` of
   * `InstanceToLaunch`), one RunInstances per group, all at once (`asyncio.gather`); the nodes in
   * the order of the tasks.
   */
  launchForTasks(tasks: ReadonlyArray<Record<string, string>>): Promise<OsparcNode[]>;
  /**
   * A reboot of the instance's OS (a kernel update, `sudo reboot`; EC2 keeps it `running` and its
   * LaunchTime): systemd stops docker.service and runs the agent's release with reboot.target queued
   * (`node.lastRelease`), then the instance boots again (`boot()`): cloud-init runs no
   * once-per-instance user data this time, so nothing joins the swarm again.
   */
  reboot(node: OsparcNode, options?: { overrides?: ConfigOverrides }): Promise<OsparcBoot>;
  /**
   * Whether the manager lists the node as a member, `ready` (docker's node status): what osparc's
   * `get_worker_nodes` / `is_node_ready_and_available` see.
   */
  swarmStatus(node: OsparcNode): Promise<{ member: boolean; nodeId?: string; status?: string }>;
  /**
   * The instance's systemd: phase 1, docker.service, phase 2, then cloud-final (after
   * multi-user.target) runs the user data. `log` sees phase 1's lines as they come.
   */
  boot(
    node: OsparcNode,
    options?: { overrides?: ConfigOverrides; log?: Logger & { lines: string[] } },
  ): Promise<OsparcBoot>;
  /**
   * The user data's `docker swarm join --availability=drain <token> <manager>`
   * (`get_docker_swarm_join_bash_command`), in its idempotent form (nothing when already in a
   * swarm); returns the node id. `boot()` runs it already; a test may call it again.
   */
  join(node: OsparcNode): Promise<string>;
  /**
   * `auto_scale_cluster`'s first steps (core), start-supervisor.ts: on the autoscaler's own poll
   * (every `pollIntervalMs`, a phase unrelated to the launch), an instance not attached
   * `maxStartTimeMs` after its EC2 `LaunchTime` (reset by StartInstances) is broken and terminated
   * (`_analyze_current_cluster`, `_terminate_broken_ec2s`), BEFORE the cycle attaches the ones in
   * the swarm (`_try_attach_pending_ec2s`: attachNode, all of one cycle together). Resolves once a
   * cycle attached the node or terminated it; a stopped warm buffer waits for its start.
   */
  superviseStart(node: OsparcNode): Promise<StartVerdict>;
  /** One supervision cycle now, over the instances superviseStart watches (a test need not wait for the poll). */
  superviseCycle(): Promise<SupervisionCycle>;
  /**
   * `_try_attach_pending_ec2s` (core) / `attach_node`: for each joined node, the labels tag read
   * back from EC2 and merged onto the node's labels with `osparc-services-ready=false` (drained),
   * then ONE DeleteTags for all of them with the tag keys of the FIRST instance
   * (`list_task_required_node_labels_tag_keys(instances[0].tags)`).
   */
  attachNode(...nodes: OsparcNode[]): Promise<void>;
  /**
   * `_activate_drained_nodes` / `set_node_osparc_ready(true)`: labels merged, node active (a hot buffer re-activated
   * for any task).
   */
  activate(node: OsparcNode, labels?: Record<string, string>): Promise<void>;
  /**
   * `_deactivate_empty_nodes` / `set_node_osparc_ready(false)`: ready=false, the placement labels removed, node
   * drained.
   */
  drain(node: OsparcNode): Promise<void>;
  /**
   * director-v2's `service_remove_sidecar_proxy_docker_networks_and_volumes` when a service
   * closes: the service's docker volumes removed from its node (its state went to S3 first).
   */
  closeService(node: OsparcNode, volumes: string[]): Promise<void>;
  /**
   * `_handle_pool_image_pulling` + `_handle_image_pre_pulling` (wb) on a warm buffer that booted:
   * the pull (SSM `docker compose pull`; the lab's `pull`), the `pre_pulled_images` tags, the
   * pulling tags removed, StopInstances.
   */
  prepareWarmBuffer(node: OsparcNode): Promise<void>;
  /**
   * `_pre_pull_docker_images_on_idle_hot_buffers` (core): the pull started (tags: pulling, the
   * command id AND the `pre_pulled_images` list at once), then `_handle_pre_pull_status` on
   * success removes the pulling tags.
   */
  pullIntoHotBuffer(node: OsparcNode): Promise<void>;
  /**
   * TerminateInstances; resolves once EC2 shows `terminated` (a running one's release ran in its shutdown; a stopped
   * one runs nothing).
   */
  terminate(node: OsparcNode): Promise<void>;
  /** StopInstances; resolves once EC2 shows `stopped`. */
  stop(node: OsparcNode): Promise<void>;
  /**
   * `_try_start_warm_buffer_instances` (core) / `start_instances` (ec2lib): the user data set to
   * the idempotent join (ModifyInstanceAttribute: the lab emulator has none, the node records
   * it), StartInstances, then ONE CreateTags carrying `warm_buffer_machine=false`, the labels tag
   * when the task has labels, and the product name; the instance boots after that (EC2 answers
   * the tags within a second, an OS takes longer). `{}`: a start to refill hot buffers
   * (`_compute_hot_buffer_missing`), no labels tag. `bootBeforeTags` lets the boot read its tags
   * before the CreateTags lands (a boot faster than EC2's answer: the agent's wait, tested);
   * `order: "tags-first"` writes the CreateTags before StartInstances (not osparc's order).
   */
  activateWarmBuffer(
    node: OsparcNode,
    labels: Record<string, string>,
    options?: {
      overrides?: ConfigOverrides;
      bootBeforeTags?: boolean;
      order?: "osparc" | "tags-first";
      productName?: string;
    },
  ): Promise<OsparcBoot>;
  /** StartInstances (a stopped instance started as it is, no new tags). */
  start(node: OsparcNode): Promise<void>;
  /** The node's labels as the manager has them (the swarm's node spec). */
  nodeLabels(node: OsparcNode): Promise<Record<string, string>>;
  /** The node's availability on the manager (`active`, `drain`). */
  availability(node: OsparcNode): Promise<string>;
  /** EC2's state name for the instance. */
  instanceState(node: OsparcNode): Promise<string | undefined>;
  /** The instance's tags as EC2 has them. */
  instanceTags(node: OsparcNode): Promise<Record<string, string>>;
  /** Stops the manager. */
  close(): Promise<void>;
}

/** What a launch adds to osparc's tags: a warm buffer's, or tags a test sets besides osparc's. */
export interface LaunchOptions {
  warmBuffer?: boolean;
  extraTags?: Record<string, string>;
}

/** `OSPARC_CUSTOM_DOCKER_PLACEMENT_CONSTRAINTS_LABEL_KEYS`: copied from the labels tag, removed on drain. */
const PLACEMENT_KEYS = ["product-name", "user-id", "project-id", "node-id", "wallet-id"];

export function createAutoscalerActor(options: AutoscalerActorOptions): AutoscalerActor {
  const { lab } = options;
  const ec2 = lab.ec2Client();
  const pollMs = options.pollMs ?? 100;
  const transitionMs = options.transitionTimeoutMs ?? 120_000;
  const defaultMaxStartMs = options.maxStartTimeMs ?? 60_000;
  const defaultPollIntervalMs = options.pollIntervalMs ?? 10_000;
  // The agents count the autoscaler's limit only when the actor is given one (see maxStartTimeMs).
  const startLimit: ConfigOverrides =
    options.maxStartTimeMs !== undefined ? { timeouts: { startLimitSeconds: options.maxStartTimeMs / 1000 } } : {};
  const merged = (extra?: ConfigOverrides): ConfigOverrides =>
    deepMerge(deepMerge(startLimit, options.agentConfig ?? {}), extra ?? {});
  let swarmStarting: Promise<OsparcSwarm> | undefined;
  const swarm = () => (swarmStarting ??= startOsparcSwarm(joinPath(lab.root, "osparc")));

  const describe = async (node: OsparcNode) => {
    const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [node.instanceId] }));
    return out.Reservations?.[0]?.Instances?.[0];
  };
  const instanceState = async (node: OsparcNode) => (await describe(node))?.State?.Name;
  const instanceTags = async (node: OsparcNode) =>
    Object.fromEntries(((await describe(node))?.Tags ?? []).map((tag) => [tag.Key!, tag.Value ?? ""]));
  const setTags = (nodes: OsparcNode[], tags: Record<string, string>) =>
    ec2.send(
      new CreateTagsCommand({
        Resources: nodes.map((n) => n.instanceId),
        Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })),
      }),
    );
  const removeTags = (nodes: OsparcNode[], keys: string[]) =>
    ec2.send(new DeleteTagsCommand({ Resources: nodes.map((n) => n.instanceId), Tags: keys.map((Key) => ({ Key })) }));
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
  // `find_node_with_name`: the node the manager knows for this instance (see the header).
  const swarmNodeId = async (node: OsparcNode) => {
    const id = (await docker(node).info()).Swarm.NodeID;
    if (!id) throw new AgentError(`${node.instanceId} is not in the swarm`, "boot it (its user data joins)");
    return id;
  };
  const inspectNode = async (node: OsparcNode) => {
    const manager = (await swarm()).manager;
    const { stdout } = await manager.docker(["node", "inspect", await swarmNodeId(node), "--format", "{{json .Spec}}"]);
    const spec = JSON.parse(stdout) as { Labels?: Record<string, string> | null; Availability?: string };
    return { labels: spec.Labels ?? {}, availability: spec.Availability ?? "" };
  };
  // `tag_node`: the node's whole label set replaced, and its availability.
  const tagNode = async (node: OsparcNode, labels: Record<string, string>, available: boolean) => {
    const manager = (await swarm()).manager;
    const current = (await inspectNode(node)).labels;
    await manager.docker([
      "node",
      "update",
      "--availability",
      available ? "active" : "drain",
      ...Object.keys(current)
        .filter((key) => !(key in labels))
        .flatMap((key) => ["--label-rm", key]),
      ...Object.entries(labels).flatMap(([k, v]) => ["--label-add", `${k}=${v}`]),
      await swarmNodeId(node),
    ]);
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
  // `ignoreFailures`: the cold start's pull script runs `docker compose pull --ignore-pull-failures`
  // (`get_docker_pull_images_on_start_bash_command`); SSM's `DOCKER_PULL_COMMAND` on buffers does not.
  const pullAll = async (node: OsparcNode, ignoreFailures = false) => {
    for (const image of options.prePullImages ?? [])
      await options.pull?.(docker(node), image).catch((error: unknown) => {
        if (!ignoreFailures) throw error;
      });
  };
  // `get_docker_swarm_join_bash_command(join_as_drained=True, idempotent=…)`.
  const join = async (node: OsparcNode) => {
    const dockerd = docker(node);
    const s = await swarm();
    await s.link(node.instanceId, joinPath(dockerd.root, "net.ns"));
    const info = await dockerd.info();
    if (info.Swarm.LocalNodeState !== "inactive") return info.Swarm.NodeID;
    const { token, address } = await s.joinTarget();
    await dockerd.docker(["swarm", "join", "--availability=drain", "--token", token, address]);
    return swarmNodeId(node);
  };
  // cloud-init's semaphore of a once-per-instance script (`scripts-user`), on the instance's root disk.
  const userDataSemaphore = (node: OsparcNode) =>
    joinPath(node.host.paths.hostRoot, "var/lib/cloud/instances", node.instanceId, "sem/config_scripts_user");
  // cloud-init's cloud-final: the user data, its commands joined with `&&` (the first failure stops it).
  const runUserData = async (node: OsparcNode, started: number): Promise<number | undefined> => {
    node.userDataRun = [];
    // `compose_user_data(run_on_every_boot=False)` (cold start, warm buffer's launch): once per
    // instance. cloud-init writes the semaphore as it starts the scripts: a failed run is not retried.
    if (node.userData !== "join") {
      const semaphore = userDataSemaphore(node);
      if (await exists(semaphore)) return undefined;
      await mkdir(dirname(semaphore), { recursive: true });
      await writeFile(semaphore, `${new Date().toISOString()}\n`);
    }
    node.userDataRuns += 1;
    const step = async (name: string, work: () => Promise<unknown>) => {
      node.userDataRun.push(name);
      await work();
    };
    for (const [index, script] of (options.bootScripts ?? []).entries())
      await step(`custom_boot_scripts[${index}]`, () => script(node));
    if (node.userData === "warm-buffer") {
      // `ec2_warm_buffer_startup_script`: login and the compose file; the pull comes over SSM.
      await step("docker login", async () => undefined);
      await step("write the pre-pull compose file", async () => undefined);
      return undefined;
    }
    await step("docker swarm join --availability=drain", () => join(node));
    const joinedMs = performance.now() - started;
    if (node.userData === "cold") {
      await step("docker login", async () => undefined);
      if ((options.prePullImages ?? []).length > 0) await step("docker compose pull", () => pullAll(node, true));
    }
    return joinedMs;
  };
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
    // Debian's cloud-final runs once multi-user.target is reached: once phase 2's unit has started
    // (Type=notify, READY=1 when docker is final), beside the rest of phase 2 (the verdict, the labels).
    let userData: Promise<number | undefined> | undefined;
    const dataRootFinal = async () => {
      userData ??= runUserData(node, started);
      userData.catch(() => undefined);
    };
    const phase2 = await timed((log) =>
      bootLabHost(lab, node.host, { overrides, log, mayClaim: false, dataRootFinal }),
    );
    const joinedMs = await (userData ?? runUserData(node, started));
    return { ...phase2, phase1, ms: performance.now() - started, ...(joinedMs !== undefined ? { joinedMs } : {}) };
  };
  const joined = async (node: OsparcNode) => {
    const id = node.host.dockerd?.pid !== undefined ? (await docker(node).info()).Swarm.NodeID : "";
    if (!id) return false;
    const manager = (await swarm()).manager;
    const { stdout } = await manager.docker(["node", "ls", "--format", "{{.ID}}"]);
    return stdout.split("\n").includes(id);
  };

  // `launch_instances` (ec2lib): one RunInstances for the batch, then a lab host per instance.
  const launchBatch = async (
    labels: Record<string, string>,
    count: number,
    launchOptions: LaunchOptions = {},
  ): Promise<OsparcNode[]> => {
    const warm = launchOptions.warmBuffer === true;
    // `base_tags | dump_task_required_node_labels_as_tags(labels)` (core; its `dump_product_name_as_tag`
    // left out, see the header); a warm buffer: `get_ec2_tags | get_deactivated_warm_buffer_ec2_tags` (wb).
    const tags: Record<string, string> = { ...osparcBaseTags(options.customTags), ...launchOptions.extraTags };
    if (warm) tags[Osparc.warmBufferTag] = "true";
    else if (Object.keys(labels).length > 0) Object.assign(tags, labelsTagAsOsparcWrites(Osparc.labelsTag, labels));
    const commands = [
      ...(options.bootScripts ?? []).map((_, index) => `custom_boot_scripts[${index}]`),
      ...(warm ? ["docker login", "write the pre-pull compose file"] : ["docker swarm join --availability=drain"]),
      ...(!warm ? ["docker login", ...((options.prePullImages ?? []).length > 0 ? ["docker compose pull"] : [])] : []),
    ];
    const asTags = Object.entries(tags).map(([Key, Value]) => ({ Key, Value }));
    const out = await ec2.send(
      new RunInstancesCommand({
        ImageId: LAB_AMI,
        MinCount: 1,
        MaxCount: count,
        InstanceType: LAB_INSTANCE_TYPE,
        InstanceInitiatedShutdownBehavior: "terminate",
        TagSpecifications: (["instance", "volume", "network-interface"] as const).map((ResourceType) => ({
          ResourceType,
          Tags: asTags,
        })),
        UserData: Buffer.from(`#!/bin/bash\n${commands.join(" && ")}\n`).toString("base64"),
      }),
    );
    const launched = out.Instances ?? [];
    return Promise.all(
      launched.map(async (instance) => {
        const host = await lab.adoptHost(instance.InstanceId ?? "");
        // Its network reaches the manager from each start of its dockerd (a joined worker needs it then).
        host.network = async (netnsFile) => (await swarm()).link(host.instance.instanceId, netnsFile);
        const node: OsparcNode = {
          host,
          instanceId: host.instance.instanceId,
          reservationId: out.ReservationId ?? "",
          labels: warm ? {} : { ...labels },
          userData: warm ? "warm-buffer" : "cold",
          userDataRun: [],
          userDataRuns: 0,
        };
        // The OS's shutdown: docker.service stops, then the agent's release (its ExecStop).
        lab.ec2.setShutdownHook(node.instanceId, async () => {
          await host.dockerd?.stop();
          node.lastRelease = await timed((log) => releaseLabHost(lab, host, { overrides: merged(), log }));
        });
        return node;
      }),
    );
  };

  const supervisor = createStartSupervisor<OsparcNode>({
    ec2,
    now: () => lab.ec2.now(),
    maxStartTimeMs: defaultMaxStartMs,
    pollIntervalMs: defaultPollIntervalMs,
    // Asked through the node's docker (see the header): one that does not answer (stopped, not started yet)
    // is not found, as osparc's manager would not list it.
    inSwarm: (node) => joined(node).catch(() => false),
    attach: (nodes) => actor.attachNode(...nodes),
  });

  const actor: AutoscalerActor = {
    ec2,
    swarm,
    async launch(labels, launchOptions = {}) {
      const [node] = await launchBatch(labels, 1, launchOptions);
      if (!node) throw new AgentError("RunInstances launched no instance", "see the lab's EC2 emulator log");
      return node;
    },
    launchBatch,
    async launchForTasks(tasks) {
      const batches = new Map<string, { labels: Record<string, string>; count: number }>();
      for (const labels of tasks) {
        const key = canonicalLabels(labels);
        const batch = batches.get(key) ?? { labels, count: 0 };
        batch.count += 1;
        batches.set(key, batch);
      }
      const launched = new Map(
        await Promise.all(
          [...batches].map(async ([key, batch]) => [key, await launchBatch(batch.labels, batch.count)] as const),
        ),
      );
      return tasks.map((labels) => launched.get(canonicalLabels(labels))!.shift()!);
    },
    async reboot(node, rebootOptions = {}) {
      const host = node.host;
      await host.dockerd?.stop();
      node.lastRelease = await timed((log) =>
        releaseLabHost(lab, host, { overrides: merged(rebootOptions.overrides), log, rebootQueued: true }),
      );
      return boot(node, rebootOptions.overrides ? { overrides: rebootOptions.overrides } : {});
    },
    async swarmStatus(node) {
      const nodeId = node.host.dockerd?.pid !== undefined ? (await docker(node).info()).Swarm.NodeID : "";
      const manager = (await swarm()).manager;
      const { stdout } = await manager.docker(["node", "ls", "--format", "{{.ID}} {{.Status}}"]);
      const row = stdout
        .split("\n")
        .map((line) => line.trim().split(" "))
        .find(([id]) => nodeId !== "" && id === nodeId);
      return { member: row !== undefined, ...(nodeId ? { nodeId } : {}), ...(row?.[1] ? { status: row[1] } : {}) };
    },
    boot,
    join,
    superviseStart: (node) => supervisor.watch(node),
    superviseCycle: () => supervisor.cycle(),
    async attachNode(...nodes) {
      const withLabels: Array<{ node: OsparcNode; tags: Record<string, string> }> = [];
      for (const node of nodes) {
        const tags = await instanceTags(node);
        const read = readLabelsTag(tags, Osparc.labelsTag);
        const labels = read.found && read.ok ? stringValues(read.labels) : {};
        const current = (await inspectNode(node)).labels;
        await tagNode(node, { ...current, [Osparc.instanceType]: "t3.medium", ...labels, ...readiness(false) }, false);
        node.labels = labels;
        if (Object.keys(labels).length > 0) withLabels.push({ node, tags });
      }
      const keys = withLabels[0] ? labelsTagKeys(withLabels[0].tags) : [];
      if (keys.length > 0)
        await removeTags(
          withLabels.map((each) => each.node),
          keys,
        );
    },
    async activate(node, labels) {
      if (labels) node.labels = { ...labels };
      const current = (await inspectNode(node)).labels;
      await tagNode(node, { ...current, ...node.labels, ...readiness(true) }, true);
    },
    async drain(node) {
      const current = (await inspectNode(node)).labels;
      const kept = Object.fromEntries(Object.entries(current).filter(([key]) => !PLACEMENT_KEYS.includes(key)));
      await tagNode(node, { ...kept, ...readiness(false) }, false);
      node.labels = {};
    },
    async closeService(node, volumes) {
      if (volumes.length > 0) await docker(node).docker(["volume", "rm", "--force", ...volumes]);
    },
    async prepareWarmBuffer(node) {
      await setTags([node], { [Osparc.pullingTag]: "true", [Osparc.pullCommandTag]: "lab-ssm-command" });
      await pullAll(node);
      await setTags([node], labelsTagAsOsparcWrites(Osparc.prePulledImagesTag, options.prePullImages ?? []));
      await removeTags([node], [Osparc.pullingTag, Osparc.pullCommandTag]);
      await ec2.send(new StopInstancesCommand({ InstanceIds: [node.instanceId] }));
      await reach(node, "stopped");
    },
    async pullIntoHotBuffer(node) {
      await setTags([node], {
        [Osparc.pullingTag]: "true",
        [Osparc.pullCommandTag]: "lab-ssm-command",
        ...labelsTagAsOsparcWrites(Osparc.prePulledImagesTag, options.prePullImages ?? []),
      });
      await pullAll(node);
      await removeTags([node], [Osparc.pullingTag, Osparc.pullCommandTag]);
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
      // `get_activated_warm_buffer_ec2_tags` | `dump_task_required_node_labels_as_tags` (only when
      // the task has labels) | `dump_product_name_as_tag`: one CreateTags.
      const activationTags = {
        [Osparc.warmBufferTag]: "false",
        ...(Object.keys(labels).length > 0 ? labelsTagAsOsparcWrites(Osparc.labelsTag, labels) : {}),
        ...(activation.productName ? { [Osparc.productNameTag]: activation.productName } : {}),
      };
      const tag = () => setTags([node], activationTags);
      node.userData = "join";
      const tagsFirst = activation.order === "tags-first";
      if (tagsFirst) await tag();
      await ec2.send(new StartInstancesCommand({ InstanceIds: [node.instanceId] }));
      await reach(node, "running");
      const bootOptions = activation.overrides ? { overrides: activation.overrides } : {};
      node.labels = { ...labels };
      if (tagsFirst) return boot(node, bootOptions);
      if (!activation.bootBeforeTags && activation.order !== "osparc") {
        await tag();
        return boot(node, bootOptions);
      }
      // The boot reads its tags before the CreateTags lands: tagged once it says it waits (or
      // that it will not), as a boot faster than EC2's answer would see it.
      const log = createMemoryLogger("debug");
      const booting = boot(node, { ...bootOptions, log });
      const deadline = Date.now() + transitionMs;
      while (!log.lines.some((line) => /boot\.labels-tag: no labels tag yet/.test(line)) && Date.now() < deadline) {
        if (log.lines.some((line) => /boot\.identity/.test(line))) break;
        await sleep(20);
      }
      await tag();
      return booting;
    },
    nodeLabels: async (node) => (await inspectNode(node)).labels,
    availability: async (node) => (await inspectNode(node)).availability,
    instanceState,
    instanceTags,
    async close() {
      supervisor.close();
      if (swarmStarting) await (await swarmStarting).stop();
    },
  };
  return actor;
}

/** `list_task_required_node_labels_tag_keys`: the labels tag's keys in these tags, whole or chunked. */
function labelsTagKeys(tags: Readonly<Record<string, string>>): string[] {
  return Object.keys(tags).filter(
    (key) => key === Osparc.labelsTag || new RegExp(`^${escape(Osparc.labelsTag)}_\\d+$`).test(key),
  );
}

/** A task's labels as one key: tasks with identical labels are one batch (`_launch_instances`). */
function canonicalLabels(labels: Readonly<Record<string, string>>): string {
  return JSON.stringify(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
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
