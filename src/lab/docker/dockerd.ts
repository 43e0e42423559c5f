/**
 * A private dockerd (Debian `docker.io`) for the lab: its own socket, exec-root, pidfile,
 * containerd and network namespace, so the host's docker (/var/run/docker.sock, /etc/docker,
 * /var/lib/docker, docker0) is never touched. The data-root comes from the daemon.json the agent
 * edits, exactly as on a real host; `restart()` re-reads it and `reload()` sends SIGHUP.
 *
 * What dockerd 20.10 needs to stay private (found on Debian 12's docker.io 20.10.24):
 * - it writes its trust key to /etc/docker/key.json unless daemon.json sets
 *   `deprecated-key-path`, and falls back to /var/lib/docker without `data-root`: both are
 *   added to the config file when it lacks them;
 * - `docker swarm init` creates a `docker_gwbridge` bridge (172.17.0.1/16, docker0's range) and
 *   binds 7946, even with `--bridge=none`: dockerd therefore runs in its own network namespace
 *   (`<root>/net.ns`, a bind mount), where "host" networking means that namespace;
 * - with no containerd at /run/containerd/containerd.sock it starts its own, with state under
 *   `<exec-root>/containerd` and `<data-root>/containerd`; the sweep in `stop()` kills it and
 *   any shim or container left behind.
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, open, readFile, rm, rmdir, stat, writeFile } from "node:fs/promises";
import { request } from "node:http";
import { join, resolve as resolvePath } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { AgentError } from "../../errors.ts";
import { run, type RunOptions, type RunResult } from "../../exec.ts";
import type { Logger } from "../../log.ts";
import { spawnDaemon, waitUntilServing, type SpawnedDaemon } from "../../docker/build-process.ts";
import { missingFolders, removeCreatedFolders } from "../../docker/plugin-discovery-dir.ts";
import { isMountPoint, listMounts, mountPointsUnder } from "../reaper/devices.ts";
import { argAfter, isPidAlive, listProcesses, withDescendants, type ProcessEntry } from "../reaper/procinfo.ts";

/** The Debian docker.io client and daemon (not /usr/local/bin/docker, which is another client). */
export const DOCKER_CLI = "/usr/bin/docker";
/** The Debian docker.io daemon. */
export const DOCKERD = "/usr/sbin/dockerd";
const SYSTEM_CONTAINERD_SOCKET = "/run/containerd/containerd.sock";
/** The host's docker data; a lab dockerd must never open it. */
const HOST_DATA_ROOT = "/var/lib/docker";
/** sun_path is 108 bytes; the longest socket is `<root>/exec/containerd/containerd.sock.ttrpc`. */
const MAX_ROOT_LENGTH = 107 - "/exec/containerd/containerd.sock.ttrpc".length;

/** Where a private dockerd lives and which daemon.json it reads. */
export interface PrivateDockerdOptions {
  /** Folder for the socket, exec-root, pidfile, log and (by default) the data-root. */
  root: string;
  /** The daemon.json dockerd reads (`--config-file`); created when missing. */
  configFile: string;
  log?: Logger;
  /** More dockerd flags (they must not repeat a setting of the config file). */
  extraArgs?: string[];
  /** How long start() waits for the API to answer. Default 60 s. */
  readyTimeoutMs?: number;
  /** How long stop() waits after SIGTERM before SIGKILL. Default 45 s (dockerd gives containers 15 s). */
  stopTimeoutMs?: number;
  /**
   * Run on each new network namespace before dockerd starts in it: links it to other namespaces
   * (a swarm worker's dockerd needs its route to the manager at its start).
   */
  network?: (netnsFile: string) => Promise<void>;
}

/** The fields of `GET /info` the lab and the agent look at. */
export interface DockerInfo {
  ID: string;
  DockerRootDir: string;
  Driver: string;
  Labels: string[];
  ServerVersion: string;
  Images: number;
  Containers: number;
  Swarm: { NodeID: string; LocalNodeState: string; ControlAvailable: boolean; Nodes?: number };
  [field: string]: unknown;
}

/** Start/stop/restart/reload as systemd offers them for docker.service. */
export interface ServiceControl {
  readonly name: string;
  start(): Promise<void>;
  stop(): Promise<void>;
  restart(): Promise<void>;
  /** `systemctl reload docker`: SIGHUP, so daemon.json `labels` apply without a restart. */
  reload(): Promise<void>;
  isActive(): Promise<boolean>;
}

/** A running (or stopped, restartable) private dockerd: its service controls and a client. */
export interface PrivateDockerd extends Omit<ServiceControl, "name"> {
  readonly root: string;
  readonly configFile: string;
  /** `unix://<root>/docker.sock`, for `docker -H` and DOCKER_HOST. */
  readonly host: string;
  readonly socket: string;
  readonly logFile: string;
  readonly pidFile: string;
  /** The running dockerd's pid; undefined when stopped. */
  readonly pid: number | undefined;
  /** The data-root the running dockerd was started with (from the config file). */
  readonly dataRoot: string | undefined;
  /** Runs `/usr/bin/docker -H <host> args…` with a client config kept under the root. */
  docker(args: readonly string[], options?: RunOptions): Promise<RunResult>;
  /** `GET /info` through the socket. */
  info(): Promise<DockerInfo>;
  /**
   * Ends dockerd as a power cut would (SIGKILL), then cleans up what it left as stop() does: for a
   * lab's close, when what dockerd would write at a clean stop is thrown away with the lab. A clean
   * stop takes 1.5-2 s, 4-6 s in swarm mode (its raft and ingress network); a kill a few ms.
   */
  kill(): Promise<void>;
}

/** Starts a private dockerd and resolves once its API answers. */
export async function startPrivateDockerd(options: PrivateDockerdOptions): Promise<PrivateDockerd> {
  const dockerd = new LabDockerd(options);
  await dockerd.start();
  return dockerd;
}

/** The private dockerd seen as docker.service, for the agent's service interface. */
export function dockerdService(dockerd: PrivateDockerd): ServiceControl {
  return {
    name: "docker.service",
    start: () => dockerd.start(),
    stop: () => dockerd.stop(),
    restart: () => dockerd.restart(),
    reload: () => dockerd.reload(),
    isActive: () => dockerd.isActive(),
  };
}

/**
 * The arguments a private dockerd is started with (after its path), known before it starts: the
 * lab host hands them to the agent as dockerd's effective command line.
 */
export function privateDockerdArgs(
  options: Pick<PrivateDockerdOptions, "root" | "configFile" | "extraArgs">,
): string[] {
  // dockerd 20.10 uses a system containerd when it finds one: keep our tasks apart from the host's.
  const namespace = containerdNamespace(options.root);
  const containerd = existsSync(SYSTEM_CONTAINERD_SOCKET)
    ? ["--containerd-namespace", namespace, "--containerd-plugins-namespace", `${namespace}-plugins`]
    : [];
  return [
    ...[
      "--config-file",
      options.configFile,
      "--exec-root",
      join(options.root, "exec"),
      "--pidfile",
      join(options.root, "dockerd.pid"),
    ],
    ...["-H", `unix://${join(options.root, "docker.sock")}`],
    ...["--bridge=none", "--iptables=false", "--ip6tables=false"],
    ...containerd,
    ...(options.extraArgs ?? []),
  ];
}

/**
 * Processes belonging to the private dockerd under `root`: dockerd, its containerd, the shims
 * and the containers below them. The sweep after a stop and the tests use it; the lab reaper
 * finds them through their command lines instead (see cleanup.ts), knowing no dockerd root.
 */
export async function privateDockerdProcesses(root: string): Promise<number[]> {
  return (await findPrivateDockerdProcesses(root)).map((entry) => entry.pid);
}

async function findPrivateDockerdProcesses(root: string): Promise<ProcessEntry[]> {
  const socketArg = `unix://${join(root, "docker.sock")}`;
  const containerdDir = `${join(root, "exec", "containerd")}/`;
  const namespace = containerdNamespace(root);
  const all = await listProcesses();
  const ours = all.filter(
    ({ argv }) =>
      // dockerd itself, not the docker clients that name the same socket.
      (argv[0]?.endsWith("dockerd") && argv.includes(socketArg)) ||
      argv.some((arg) => arg.startsWith(containerdDir)) ||
      argv.some((arg, i) => arg === "-namespace" && argv[i + 1] === namespace),
  );
  return withDescendants(all, ours);
}

class LabDockerd implements PrivateDockerd {
  private readonly options: PrivateDockerdOptions;
  readonly root: string;
  readonly configFile: string;
  readonly host: string;
  readonly socket: string;
  readonly logFile: string;
  readonly pidFile: string;
  private readonly execRoot: string;
  private readonly netnsFile: string;
  private runningPid: number | undefined;
  /** The data-root of the last dockerd started: what a sweep after it must unmount. */
  private lastDataRoot: string | undefined;
  private exited: Promise<void> | undefined;
  /** The folders of /run/docker/plugins missing before this dockerd first started: its own to remove. */
  private createdFolders: string[] | undefined;

  constructor(options: PrivateDockerdOptions) {
    this.options = options;
    this.root = options.root;
    this.configFile = options.configFile;
    this.socket = join(this.root, "docker.sock");
    this.host = `unix://${this.socket}`;
    this.logFile = join(this.root, "dockerd.log");
    this.pidFile = join(this.root, "dockerd.pid");
    this.execRoot = join(this.root, "exec");
    this.netnsFile = join(this.root, "net.ns");
  }

  get pid(): number | undefined {
    return this.runningPid;
  }

  get dataRoot(): string | undefined {
    return this.runningPid === undefined ? undefined : this.lastDataRoot;
  }

  async start(): Promise<void> {
    if (this.runningPid !== undefined) return;
    if (this.root.length > MAX_ROOT_LENGTH) {
      throw new AgentError(
        `dockerd root ${this.root} is too long for its unix sockets`,
        `use a root of at most ${MAX_ROOT_LENGTH} characters`,
      );
    }
    await mkdir(this.execRoot, { recursive: true });
    const dataRoot = await prepareDaemonConfig(this.configFile, this.root, this.options.log);
    const absolute = resolvePath(dataRoot);
    if (absolute === HOST_DATA_ROOT || absolute.startsWith(`${HOST_DATA_ROOT}/`)) {
      throw new AgentError(
        `${this.configFile} points the lab's dockerd at the host's ${HOST_DATA_ROOT}`,
        "use a data-root inside the lab (the lab's default is <root>/data)",
      );
    }
    // A dockerd of this root killed earlier leaves shims, mounts and pidfiles that stop a new one.
    await this.sweep(this.lastDataRoot ?? dataRoot);
    this.lastDataRoot = dataRoot;
    this.createdFolders ??= missingFolders();
    await createNetns(this.netnsFile);
    await this.options.network?.(this.netnsFile);

    const logOffset = existsSync(this.logFile) ? (await stat(this.logFile)).size : 0;
    this.options.log?.info("lab.dockerd-start", "starting private dockerd", { root: this.root, dataRoot });
    const daemon = await this.launch();
    // An exit that comes with the deadline (a loaded machine) is told as dockerd's exit, with its reason.
    await waitUntilServing(daemon, () => ping(this.socket, 1000), {
      what: "private dockerd",
      logFile: this.logFile,
      timeoutMs: this.options.readyTimeoutMs ?? 60_000,
      stop: () => this.stop(),
      detail: () => readLogTail(this.logFile, logOffset),
    });
    this.options.log?.info("lab.dockerd-ready", "private dockerd is up", { pid: this.runningPid, host: this.host });
  }

  /** Spawns dockerd in its namespace. */
  private async launch(): Promise<SpawnedDaemon> {
    const args = [`--net=${this.netnsFile}`, "--", DOCKERD, ...this.dockerdArgs()];
    this.options.log?.debug("lab.exec", ["nsenter", ...args].join(" "));
    // A daemon, so spawned rather than run(): nsenter execs dockerd (same pid) in the namespace.
    // Detached and unref'd: it behaves as a service, not as a child of whoever started it.
    const daemon = await spawnDaemon("nsenter", args, this.logFile);
    this.exited = daemon.ended;
    if (daemon.pid === undefined) {
      await daemon.ended;
      throw new AgentError(`could not start dockerd: ${daemon.exited()}`, "install util-linux (nsenter) and docker.io");
    }
    this.runningPid = daemon.pid;
    return daemon;
  }

  private dockerdArgs(): string[] {
    return privateDockerdArgs(this.options);
  }

  async kill(): Promise<void> {
    const pid = this.runningPid ?? (await readPid(this.pidFile));
    if (pid !== undefined) {
      this.options.log?.info("lab.dockerd-close", "killing private dockerd (the lab is closing)", { pid });
      await killAndWait([pid]);
    }
    await this.afterExit();
  }

  async stop(): Promise<void> {
    const pid = this.runningPid ?? (await readPid(this.pidFile));
    const stopTimeoutMs = this.options.stopTimeoutMs ?? 45_000;
    if (pid !== undefined) {
      this.options.log?.info("lab.dockerd-stop", "stopping private dockerd", { pid });
      signal(pid, "SIGTERM");
      if (!(await waitGone([pid], stopTimeoutMs))) {
        const message = `dockerd ignored SIGTERM for ${stopTimeoutMs} ms, killing it`;
        this.options.log?.warning("lab.dockerd-kill", message, { pid });
        await killAndWait([pid]);
      }
    }
    await this.afterExit();
  }

  /** Once dockerd is gone: its exit seen, what it left cleaned up. */
  private async afterExit(): Promise<void> {
    // The child is unref'd: a bare `await this.exited` would let node exit before the event
    // comes (nothing else keeps the loop alive), so wait on a timer too.
    if (this.exited) await Promise.race([this.exited, sleep(5000)]);
    this.runningPid = undefined;
    this.exited = undefined;
    await this.sweep(this.lastDataRoot);
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  async reload(): Promise<void> {
    const pid = this.runningPid;
    if (pid === undefined) throw new AgentError("dockerd is not running", "start docker first");
    const offset = (await stat(this.logFile)).size;
    signal(pid, "SIGHUP");
    // dockerd answers SIGHUP asynchronously; its log says when (and whether) the file was applied.
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      const text = await readLogTail(this.logFile, offset, Infinity);
      if (text.includes("Reloaded configuration")) return;
      const failure = /unable to configure the Docker daemon[^\n"]*/.exec(text);
      if (failure) throw new AgentError(`dockerd refused to reload: ${failure[0]}`, `fix ${this.configFile}`);
      await sleep(50);
    }
    throw new AgentError("dockerd did not report reloading its configuration", `see ${this.logFile}`);
  }

  async isActive(): Promise<boolean> {
    return this.runningPid !== undefined && (await ping(this.socket, 2000));
  }

  docker(args: readonly string[], options: RunOptions = {}): Promise<RunResult> {
    return run(DOCKER_CLI, ["-H", this.host, ...args], {
      log: this.options.log,
      ...options,
      // The client would otherwise read (and create) ~/.docker of whoever runs the lab.
      env: { DOCKER_CONFIG: join(this.root, "client"), ...options.env },
    });
  }

  async info(): Promise<DockerInfo> {
    const { status, body } = await engineGet(this.socket, "/info", 30_000);
    if (status !== 200) throw new AgentError(`docker info answered ${status}: ${body}`, `see ${this.logFile}`);
    const info = JSON.parse(body) as DockerInfo;
    info.Labels ??= [];
    return info;
  }

  /** Polls the API until it answers, the process dies or the deadline passes. */
  /**
   * Cleans up after a dockerd that is gone, as its own shutdown would have: kills what it left
   * (a killed dockerd takes containerd along (pdeathsig) but not the shims and containers),
   * unmounts what it left mounted (netns binds, container layers, and the self bind-mount of the
   * data-root it makes when the parent mount is not shared, flagged by `unmount-on-shutdown`),
   * removes its namespace and stale pidfiles. Stale pidfiles matter: dockerd takes a pidfile
   * naming a zombie (slow to be reaped by some inits) for a running daemon and waits for it.
   */
  private async sweep(dataRoot: string | undefined): Promise<void> {
    const leftovers = await findPrivateDockerdProcesses(this.root);
    if (leftovers.length > 0) {
      const pids = leftovers.map((entry) => entry.pid);
      this.options.log?.warning("lab.dockerd-leftovers", "killing processes dockerd left behind", {
        pids: pids.join(","),
      });
      if (!(await killAndWait(pids))) {
        throw new AgentError(
          `processes of the private dockerd survived SIGKILL: ${pids.join(" ")}`,
          "look for processes stuck in D state (ps -o pid,stat,wchan)",
        );
      }
      await removeKilledContainerCgroups(leftovers);
    }
    const mounts = [
      ...(await mountPointsUnder(this.execRoot)),
      ...(dataRoot ? await mountPointsUnder(join(dataRoot, "overlay2")) : []),
      ...(dataRoot ? await mountPointsUnder(join(dataRoot, "containers")) : []),
    ];
    if (await isMountPoint(this.netnsFile)) mounts.push(this.netnsFile);
    for (const mountPoint of mounts) await unmount(mountPoint, this.options.log);
    await rm(this.netnsFile, { force: true });
    const unmountMarker = join(this.execRoot, "unmount-on-shutdown");
    if (dataRoot && existsSync(unmountMarker) && (await isMountPoint(dataRoot))) {
      await unmount(dataRoot, this.options.log);
    }
    await rm(unmountMarker, { force: true });
    for (const pidFile of [this.pidFile, join(this.execRoot, "containerd", "containerd.pid")]) {
      if ((await readPid(pidFile)) === undefined) await rm(pidFile, { force: true });
    }
    await removeCreatedFolders(this.createdFolders ?? []);
  }
}

/**
 * Makes sure daemon.json keeps dockerd inside the root: adds `data-root` (`<root>/data`, the
 * lab's stand-in for /var/lib/docker) and `deprecated-key-path` when missing, keeps everything
 * else. A file that does not parse is left alone: dockerd refuses it, as on a real host.
 * Returns the data-root dockerd will use.
 */
async function prepareDaemonConfig(configFile: string, root: string, log?: Logger): Promise<string> {
  let config: Record<string, unknown> = {};
  let text: string | undefined;
  try {
    text = await readFile(configFile, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
  if (text !== undefined && text.trim() !== "") {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return join(root, "data");
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return join(root, "data");
    config = parsed as Record<string, unknown>;
  }
  const additions: Record<string, string> = {};
  if (typeof config["data-root"] !== "string") additions["data-root"] = join(root, "data");
  if (typeof config["deprecated-key-path"] !== "string") additions["deprecated-key-path"] = join(root, "key.json");
  if (Object.keys(additions).length > 0) {
    log?.debug("lab.dockerd-config", `adding ${Object.keys(additions).join(", ")} to ${configFile}`);
    await writeFile(configFile, JSON.stringify({ ...config, ...additions }, null, 2) + "\n");
  }
  return (config["data-root"] as string | undefined) ?? join(root, "data");
}

/** A network namespace kept alive by a bind mount on `file`, with its loopback up. */
async function createNetns(file: string): Promise<void> {
  if (!(await isMountPoint(file))) {
    await writeFile(file, "");
    await run("unshare", [`--net=${file}`, "true"], { remediation: "the lab needs root and util-linux's unshare" });
  }
  // Swarm listens on 127.0.0.1: a fresh namespace has its loopback down.
  await run("nsenter", [`--net=${file}`, "ip", "link", "set", "lo", "up"]);
}

async function unmount(mountPoint: string, log?: Logger): Promise<void> {
  const plain = await run("umount", [mountPoint], { check: false, log });
  if (plain.exitCode === 0) return;
  // Busy (a process we could not see holds it): detach it so the root can still be removed.
  await run("umount", ["-l", mountPoint], { log, remediation: `unmount ${mountPoint} by hand` });
}

/** Unique per root, so tasks of two private dockerds on one system containerd never mix. */
function containerdNamespace(root: string): string {
  return `ebs-lab-${createHash("sha256").update(root).digest("hex").slice(0, 12)}`;
}

function engineGet(socketPath: string, path: string, timeoutMs: number): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path, method: "GET", timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error(`no answer from ${socketPath} in ${timeoutMs} ms`)));
    req.on("error", reject);
    req.end();
  });
}

async function ping(socketPath: string, timeoutMs: number): Promise<boolean> {
  try {
    const { status, body } = await engineGet(socketPath, "/_ping", timeoutMs);
    return status === 200 && body === "OK";
  } catch {
    return false;
  }
}

async function readPid(pidFile: string): Promise<number | undefined> {
  try {
    const pid = Number((await readFile(pidFile, "utf8")).trim());
    return Number.isInteger(pid) && pid > 0 && (await isPidAlive(pid)) ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** The log written since `offset`; by default its last lines, for error messages. */
async function readLogTail(logFile: string, offset: number, lines = 5): Promise<string> {
  const handle = await open(logFile, "r");
  try {
    const { size } = await handle.stat();
    const buffer = Buffer.alloc(Math.max(0, size - offset));
    await handle.read(buffer, 0, buffer.length, offset);
    const text = buffer.toString("utf8");
    return lines === Infinity ? text : text.trim().split("\n").slice(-lines).join("\n");
  } finally {
    await handle.close();
  }
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ESRCH") throw error;
  }
}

/**
 * Removes the (empty) cgroups of killed containers, as the cgroupfs and systemd drivers name
 * them: runc removes a container's cgroups when it deletes the container; killed, nobody does.
 * The containers are known by their shims among `killed` (`containerd-shim… -id <container id>`).
 */
export async function removeKilledContainerCgroups(killed: readonly ProcessEntry[]): Promise<void> {
  const containerIds = killed.map((entry) => argAfter(entry.argv, "-id")).filter((id) => id !== undefined);
  if (containerIds.length === 0) return;
  const hierarchies = (await listMounts()).filter((m) => m.fsType === "cgroup" || m.fsType === "cgroup2");
  for (const id of containerIds) {
    if (!/^[0-9a-f]{64}$/.test(id)) continue;
    for (const { target } of hierarchies) {
      for (const dir of [join(target, "docker", id), join(target, "system.slice", `docker-${id}.scope`)]) {
        await rmdir(dir).catch(() => undefined);
      }
    }
  }
}

/** Waits until none of `pids` is alive; false if some still are at the deadline. */
async function waitGone(pids: readonly number[], timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (true) {
    const alive = await Promise.all(pids.map(isPidAlive));
    if (!alive.includes(true)) return true;
    if (Date.now() >= deadline) return false;
    await sleep(50);
  }
}

async function killAndWait(pids: readonly number[]): Promise<boolean> {
  for (const pid of pids) signal(pid, "SIGKILL");
  return waitGone(pids, 10_000);
}
