/**
 * The private dockerd of `snapshot build`: its own config file, socket, pidfile and exec-root
 * under the build's folder, its data-root on the image being built, no bridge and no iptables
 * rules; so the machine's docker (/var/run/docker.sock, /etc/docker, /var/lib/docker, docker0)
 * is never touched, and a docker running there goes on undisturbed. It runs in the machine's
 * network namespace: the pulls reach the registry as any client would. It runs no container:
 * it only loads, pulls, lists and removes images.
 *
 * The graphdriver store: with a system containerd (/run/containerd/containerd.sock), dockerd
 * connects to it: its namespace is then the build's own, so nothing of it mixes with the
 * machine's. Without one, dockerd starts its own, with state under the exec-root and the
 * data-root (stripped after). The containerd store keeps the images in containerd's root: the
 * build starts a containerd of its own with its root on the image (build-containerd.ts), and
 * dockerd uses it, in the namespace a host's dockerd reads (`moby`, the default).
 */
import { containerdRootOnVolume } from "../layout.ts";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { request } from "node:http";
import { dirname, join } from "node:path";
import { AgentError } from "../errors.ts";
import { run, type RunOptions, type RunResult } from "../exec.ts";
import type { Logger } from "../log.ts";
import { startBuildContainerd, stopLeftoverBuildContainerd, type BuildContainerd } from "./build-containerd.ts";
import { leftoverPid, spawnDaemon, stopProcess, waitUntilServing } from "./build-process.ts";
import { detectImageStore, type ImageStore } from "./engine.ts";
import { missingFolders, PLUGIN_DISCOVERY_DIR, removeCreatedFolders } from "./plugin-discovery-dir.ts";

const DOCKERD = "dockerd";
const DOCKER_CLI = "docker";
const SYSTEM_CONTAINERD_SOCKET = "/run/containerd/containerd.sock";
/** sun_path holds 107 bytes; the longest socket is containerd's ttrpc one under the exec-root. */
const LONGEST_SOCKET_TAIL = "/x/containerd/containerd.sock.ttrpc";
export const MAX_DOCKERD_ROOT_LENGTH = 107 - LONGEST_SOCKET_TAIL.length;
/**
 * What the build's dockerd leaves in its data-root besides the images and what the boot's own
 * cleanup removes (data-root.ts): the build cache, the runtimes' scratch and pid files, its
 * temporary files and, with the graphdriver store, the state of the containerd it started
 * itself (its instance id among it). Two hosts must not start from one machine's copy of these.
 */
export const BUILD_LOCAL_STATE = ["buildkit", "runtimes", "tmp"] as const;
export const BUILD_LOCAL_STATE_GRAPHDRIVER = ["containerd"] as const;

export interface BuildDockerdOptions {
  /** The build's dockerd folder: config, socket, pidfile, exec-root (`x`), log. */
  root: string;
  dataRoot: string;
  imageStore: ImageStore;
  log?: Logger;
  /** How long start waits for the API (default 60 s) and stop for the exit (default 60 s). */
  readyTimeoutMs?: number;
  stopTimeoutMs?: number;
}

/** The running build dockerd. */
export interface BuildDockerd {
  readonly engineVersion: string;
  readonly imageStore: ImageStore;
  /** Its API's unix socket (a pull's JSON progress stream: src/docker/pull-stream.ts). */
  readonly socket: string;
  /** `docker -H <its socket> args…`. */
  docker(args: readonly string[], options?: RunOptions): Promise<RunResult>;
  stop(): Promise<void>;
}

function paths(root: string) {
  return {
    config: join(root, "daemon.json"),
    socket: join(root, "docker.sock"),
    pidFile: join(root, "dockerd.pid"),
    execRoot: join(root, "x"),
    logFile: join(root, "dockerd.log"),
    keyFile: join(root, "key.json"),
    /** The folders of /run/docker/plugins dockerd found missing (plugin-discovery-dir.ts): its own to remove. */
    createdFolders: join(root, "created-folders.json"),
  };
}

/** The first docker whose dockerd can keep images in containerd (`features.containerd-snapshotter`). */
export const CONTAINERD_STORE_MIN_MAJOR = 24;

/**
 * The dockerd command line (after the program), known before it starts. `containerdSocket`: the
 * build's own containerd (the containerd store), used in its default namespace.
 */
export function buildDockerdArgs(root: string, containerdSocket?: string): string[] {
  const p = paths(root);
  const namespace = `ebs-cache-build-${createHash("sha256").update(root).digest("hex").slice(0, 12)}`;
  const containerd =
    containerdSocket !== undefined
      ? ["--containerd", containerdSocket]
      : existsSync(SYSTEM_CONTAINERD_SOCKET)
        ? ["--containerd-namespace", namespace, "--containerd-plugins-namespace", `${namespace}-plugins`]
        : [];
  return [
    ...["--config-file", p.config, "--exec-root", p.execRoot, "--pidfile", p.pidFile],
    ...["-H", `unix://${p.socket}`, "--bridge=none", "--iptables=false", "--ip6tables=false"],
    ...containerd,
  ];
}

/**
 * The daemon.json of the build's dockerd: the data-root, the image store asked for (written out
 * both ways: docker 29 defaults to containerd's), and on docker before 23 the trust key kept in
 * the build's folder (it would otherwise go to /etc/docker/key.json; later engines refuse the key).
 */
export function buildDaemonConfig(dataRoot: string, imageStore: ImageStore, keyFile: string, engineMajor: number) {
  return {
    "data-root": dataRoot,
    ...(engineMajor >= 24 ? { features: { "containerd-snapshotter": imageStore === "containerd" } } : {}),
    ...(engineMajor < 23 ? { "deprecated-key-path": keyFile } : {}),
  };
}

/** Starts the build's dockerd and checks it runs where and how it was asked. */
export async function startBuildDockerd(options: BuildDockerdOptions): Promise<BuildDockerd> {
  const { root, log } = options;
  if (root.length > MAX_DOCKERD_ROOT_LENGTH) {
    throw new AgentError(
      `the build's dockerd folder ${root} is too long for its unix sockets`,
      `give a --work-dir of at most ${MAX_DOCKERD_ROOT_LENGTH - 2} characters`,
    );
  }
  const p = paths(root);
  await mkdir(p.execRoot, { recursive: true });
  const version = await run(DOCKERD, ["--version"], { log, remediation: "install docker (dockerd) on this machine" });
  const major = Number(/version (\d+)\./i.exec(version.stdout)?.[1] ?? NaN);
  if (!Number.isInteger(major)) throw new AgentError(`dockerd --version printed ${version.stdout.trim()}`, "");
  if (options.imageStore === "containerd" && major < CONTAINERD_STORE_MIN_MAJOR) {
    throw new AgentError(
      `the containerd image store needs docker ${CONTAINERD_STORE_MIN_MAJOR} or later; this dockerd is ` +
        version.stdout.trim(),
      "build with a newer docker, or build the graphdriver store (--image-store graphdriver)",
    );
  }
  const config = buildDaemonConfig(options.dataRoot, options.imageStore, p.keyFile, major);
  await writeFile(p.config, JSON.stringify(config, null, 2) + "\n");

  // Kept in the build's folder, so that the cleanup after a killed build removes them too.
  const created = (await readCreatedFolders(p.createdFolders)) ?? missingFolders();
  await writeFile(p.createdFolders, JSON.stringify(created) + "\n");

  // The containerd store: containerd's root beside the data-root, as the boot puts it (containerd-store.ts).
  let containerd: BuildContainerd | undefined;
  if (options.imageStore === "containerd") {
    containerd = await startBuildContainerd({
      dockerdRoot: root,
      containerdRoot: containerdRootOnVolume(dirname(options.dataRoot)),
      log,
      ...(options.stopTimeoutMs !== undefined ? { stopTimeoutMs: options.stopTimeoutMs } : {}),
    });
  }
  const args = buildDockerdArgs(root, containerd?.socket);
  log?.info("docker.build-dockerd-start", "starting the build's private dockerd", { root, dataRoot: options.dataRoot });
  const daemon = await spawnDaemon(DOCKERD, args, p.logFile);
  const pid = daemon.pid;

  const docker = (args: readonly string[], runOptions: RunOptions = {}) =>
    run(DOCKER_CLI, ["-H", `unix://${p.socket}`, ...args], { log, ...runOptions });
  const stop = async () => {
    try {
      if (pid !== undefined) await stopProcess(pid, "the build's dockerd", options.stopTimeoutMs ?? 60_000, log);
      await removeCreatedFolders(created);
      await rm(p.createdFolders, { force: true });
    } finally {
      // After dockerd, its client; also when dockerd could not be stopped (containerd holds the image's root).
      await containerd?.stop();
    }
  };
  await waitUntilServing(daemon, () => ping(p.socket), {
    what: "the build's dockerd",
    logFile: p.logFile,
    timeoutMs: options.readyTimeoutMs ?? 60_000,
    stop,
  });
  try {
    const info = JSON.parse((await docker(["info", "--format", "{{json .}}"])).stdout) as {
      DockerRootDir?: string;
      ServerVersion?: string;
      Driver?: unknown;
      DriverStatus?: unknown;
    };
    const store = detectImageStore(info);
    if (info.DockerRootDir !== options.dataRoot || store !== options.imageStore) {
      throw new AgentError(
        `the build's dockerd runs on ${info.DockerRootDir} with the ${store} store, ` +
          `not on ${options.dataRoot} with the ${options.imageStore} store`,
        `see ${p.logFile}`,
      );
    }
    log?.info("docker.build-dockerd-ready", "the build's dockerd is up", { pid, version: info.ServerVersion });
    return { engineVersion: String(info.ServerVersion), imageStore: store, socket: p.socket, docker, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * Stops the dockerd a killed build left running (its pidfile under `root`, its command line
 * naming the build's socket), then the containerd it left (the containerd store); nothing to do
 * when there is none.
 */
export async function stopLeftoverBuildDockerd(root: string, log?: Logger): Promise<void> {
  const p = paths(root);
  const pid = await leftoverPid(p.pidFile, `unix://${p.socket}`);
  if (pid !== undefined) {
    log?.warning("docker.build-dockerd-leftover", "stopping the dockerd a killed build left", { pid, root });
    await stopProcess(pid, "the build's dockerd", 60_000, log);
  }
  await rm(p.pidFile, { force: true });
  await removeCreatedFolders((await readCreatedFolders(p.createdFolders)) ?? []);
  await rm(p.createdFolders, { force: true });
  await stopLeftoverBuildContainerd(root, log);
}

/** The folders a build's dockerd found missing, as its start wrote them; undefined when there is no record. */
async function readCreatedFolders(file: string): Promise<string[] | undefined> {
  const text = await readFile(file, "utf8").catch(() => undefined);
  if (text === undefined) return undefined;
  const list: unknown = JSON.parse(text);
  // Only the plugin-discovery folder's path: a damaged record must not name anything else to remove.
  if (
    !Array.isArray(list) ||
    !list.every((f) => typeof f === "string" && `${PLUGIN_DISCOVERY_DIR}/`.startsWith(`${f}/`))
  ) {
    throw new AgentError(`${file} is not a list of folders of ${PLUGIN_DISCOVERY_DIR}`, `remove ${file}`);
  }
  return list as string[];
}

function ping(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request({ socketPath, path: "/_ping", method: "GET", timeout: 1000 }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode === 200));
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolve(false));
    req.end();
  });
}
