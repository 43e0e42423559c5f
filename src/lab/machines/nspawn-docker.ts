/**
 * The docker inside an engine machine, driven from the host: its API socket through the
 * machine's root (`/proc/<pid1>/root/run/docker.sock`), the host's docker CLI against it, and a
 * machine booted for docker alone (the agent's units installed but held back), as the golden
 * snapshot's builder and bench/boot.ts's load and pull runs need.
 */
import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createContainerdConfig } from "../../docker/containerd-store.ts";
import { createDockerEngine, type DockerEngineClient, type ImageStore } from "../../docker/engine.ts";
import { AgentError } from "../../errors.ts";
import { run, type RunOptions } from "../../exec.ts";
import { containerdRootOnVolume, DATA_ROOT_SUBDIR } from "../../layout.ts";
import { DOCKER_CLI } from "../docker/dockerd.ts";
import type { DockerClient } from "../docker/images.ts";
import { MessageId, type JournalEntry } from "./nspawn-journal.ts";
import { bootMachine, loopDeviceNumbers, prepareMachine, type Bind, type Machine } from "./nspawn.ts";

export const AGENT_UNITS = [
  "ebs-cache-agent.service",
  "ebs-cache-agent-ready.service",
  "ebs-cache-agent-release.service",
] as const;

/** A drop-in that keeps a product unit from starting in a machine that runs docker alone. */
const HELD_BACK =
  "# ebs-cache lab: this machine runs docker alone.\n[Unit]\nConditionPathExists=/run/ebs-cache-lab-never\n";

/**
 * The machine's daemon.json before anything edits it. The machine shares the host's network
 * namespace (to reach the lab's emulators): its dockerd must not create a bridge or iptables
 * rules there.
 */
export function machineDaemonJson(store: ImageStore): Record<string, unknown> {
  return {
    bridge: "none",
    iptables: false,
    "ip-forward": false,
    "ip-masq": false,
    ...(store === "containerd" ? { features: { "containerd-snapshotter": true } } : {}),
  };
}

/** The machine's docker socket, as the host reaches it. */
export function machineDockerHost(m: Pick<Machine, "pid1">): string {
  return `unix:///proc/${m.pid1}/root/run/docker.sock`;
}

/** The host's docker CLI against the machine's dockerd (what buildImage and `docker save` use). */
export function machineDockerClient(m: Pick<Machine, "pid1">): DockerClient {
  const host = machineDockerHost(m);
  return {
    docker: (args: readonly string[], options?: RunOptions) => run(DOCKER_CLI, ["-H", host, ...args], options),
    info: () =>
      Promise.reject(
        new AgentError("the machine's docker info is read through createDockerEngine", "use machineDockerEngine"),
      ),
  };
}

/** The first journal entry of a finished start or stop job of `unit`. */
export function jobDone(entries: JournalEntry[], unit: string, type: "start" | "stop"): JournalEntry | undefined {
  return entries.find(
    (e) => e.unit === unit && e.jobType === type && e.jobResult !== undefined && e.identifier === "systemd",
  );
}

/** Whether `unit` logged that it began starting. */
export function unitStarting(entries: JournalEntry[], unit: string): JournalEntry | undefined {
  return entries.find((e) => e.unit === unit && e.messageId === MessageId.unitStarting && e.identifier === "systemd");
}

/**
 * Boots a machine of `rootfs` whose docker uses `store`, with the agent's units held back, and
 * waits until docker.service has started. The caller destroys it (also on failure: `onBooted`
 * gets it before the wait).
 */
export async function dockerOnlyMachine(options: {
  rootfs: string;
  bundle: string;
  store: ImageStore;
  onBooted: (m: Machine) => void;
  /** Host folders bound into the machine (e.g. a tar to `docker load`). */
  binds?: Bind[];
  /** daemon.json keys beside the lab's (e.g. `insecure-registries`). */
  daemonJson?: Record<string, unknown>;
}): Promise<Machine> {
  const prepared = await prepareMachine({
    rootfs: options.rootfs,
    bundle: options.bundle,
    config: {},
    daemonJson: { ...machineDaemonJson(options.store), ...options.daemonJson },
    blockDevices: await loopDeviceNumbers(),
    dropIns: Object.fromEntries(AGENT_UNITS.map((unit) => [unit, HELD_BACK])),
  });
  let m: Machine;
  try {
    m = await bootMachine(prepared, options.binds ?? []);
  } catch (error) {
    await rm(prepared.dir, { recursive: true, force: true });
    throw error;
  }
  options.onBooted(m);
  await m.waitForJournal(
    (entries) => (jobDone(entries, "docker.service", "start") ? true : undefined),
    180_000,
    "the start of docker.service",
  );
  return m;
}

/** Runs a command in the machine; throws with its output unless it exits 0. */
export async function inMachine(m: Machine, args: string[], timeoutMs?: number): Promise<string> {
  const out = await m.exec(args, timeoutMs);
  if (out.exitCode !== 0)
    throw new AgentError(
      `${args.join(" ")} exited ${out.exitCode} in ${m.name}: ${out.stderr}${out.stdout}`,
      "see the machine's journal",
    );
  return out.stdout;
}

/**
 * Restarts the machine's docker with its data-root under `mountPoint` (a path inside the
 * machine) and, for the containerd store, containerd's root there too: with that store the
 * images live in containerd's content store, outside docker's data-root.
 */
export async function dockerOnVolume(m: Machine, mountPoint: string, store: ImageStore): Promise<DockerEngineClient> {
  if (store === "containerd")
    await createContainerdConfig({ path: join(m.dir, "etc/containerd/config.toml") }).setRoot(
      containerdRootOnVolume(mountPoint),
    );
  const daemonJson = join(m.dir, "etc/docker/daemon.json");
  const config = JSON.parse(await readFile(daemonJson, "utf8")) as Record<string, unknown>;
  await writeFile(
    daemonJson,
    JSON.stringify({ ...config, "data-root": join(mountPoint, DATA_ROOT_SUBDIR) }, null, 2) + "\n",
  );
  await inMachine(m, ["systemctl", "stop", "docker.service", "docker.socket"]);
  if (store === "containerd") await inMachine(m, ["systemctl", "restart", "containerd.service"]);
  await inMachine(m, ["systemctl", "start", "docker.service"]);
  const engine = createDockerEngine({ host: machineDockerHost(m) });
  await engine.waitUntilReady(60_000);
  return engine;
}

/** `dockerd --version`'s version in the machine, e.g. `28.5.2+dfsg3`. */
export async function machineEngineVersion(m: Machine): Promise<string> {
  const out = await inMachine(m, ["dockerd", "--version"]);
  return /version ([0-9][^\s,]*)/.exec(out)?.[1] ?? "unknown";
}
