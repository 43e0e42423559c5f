/**
 * The private containerd of `snapshot build` with the containerd image store. With that store
 * dockerd keeps the images in containerd's root (containerd-store.ts), so the build needs a
 * containerd whose root is the image's `containerd/` folder: its own, not the machine's (whose
 * root and images belong to the machine's docker). Its config file, socket, pidfile, log and
 * state (runtime state: sockets, task folders) are under the build's folder; only its root is on
 * the image. Nothing under /run/containerd, /var/lib/containerd or /etc/containerd is read or
 * written, and a containerd running there goes on undisturbed.
 *
 * It runs no container: the build's dockerd only imports, pulls, lists and removes images through
 * it. Plugins that would write outside its root and state (the `opt` plugin's /opt/containerd) or
 * serve nothing here (the CRI) are off.
 */
import { mkdir, rm, writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { join } from "node:path";
import { run } from "../exec.ts";
import type { Logger } from "../log.ts";
import { leftoverPid, spawnDaemon, stopProcess, waitUntilServing } from "./build-process.ts";

const CONTAINERD = "containerd";

/** Plugins the build's containerd does without: the CRI (kubelet's API), and /opt/containerd's. */
export const BUILD_CONTAINERD_DISABLED_PLUGINS = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.cri.v1.images",
  "io.containerd.cri.v1.runtime",
  "io.containerd.internal.v1.opt",
] as const;

/** Its files under the build's dockerd folder (short names: the socket's path holds 107 bytes). */
export function buildContainerdPaths(dockerdRoot: string) {
  const dir = join(dockerdRoot, "c");
  return {
    dir,
    config: join(dir, "config.toml"),
    socket: join(dir, "containerd.sock"),
    pidFile: join(dir, "containerd.pid"),
    state: join(dir, "state"),
    logFile: join(dockerdRoot, "containerd.log"),
  };
}

/** config.toml of the build's containerd: version 2 (containerd 1.7 reads it, 2.x migrates it). */
export function buildContainerdConfig(): string {
  return [
    "# The private containerd of `ebs-cache-agent snapshot build` (root, state and socket on its command line).",
    "version = 2",
    `disabled_plugins = [${BUILD_CONTAINERD_DISABLED_PLUGINS.map((p) => JSON.stringify(p)).join(", ")}]`,
    "",
  ].join("\n");
}

/** The containerd command line (after the program). */
export function buildContainerdArgs(dockerdRoot: string, containerdRoot: string): string[] {
  const p = buildContainerdPaths(dockerdRoot);
  return ["--config", p.config, "--address", p.socket, "--root", containerdRoot, "--state", p.state];
}

/** The running build containerd. */
export interface BuildContainerd {
  readonly socket: string;
  stop(): Promise<void>;
}

/** Starts the build's containerd with its root at `containerdRoot` and waits for its socket. */
export async function startBuildContainerd(options: {
  dockerdRoot: string;
  containerdRoot: string;
  log?: Logger;
  readyTimeoutMs?: number;
  stopTimeoutMs?: number;
}): Promise<BuildContainerd> {
  const { dockerdRoot, containerdRoot, log } = options;
  const p = buildContainerdPaths(dockerdRoot);
  await run(CONTAINERD, ["--version"], { log, remediation: "install containerd on this machine" });
  await mkdir(p.state, { recursive: true });
  await mkdir(containerdRoot, { recursive: true, mode: 0o711 });
  await writeFile(p.config, buildContainerdConfig());
  // A socket a killed build left would answer no one, and containerd refuses to listen over it.
  await rm(p.socket, { force: true });
  await rm(`${p.socket}.ttrpc`, { force: true });

  log?.info("docker.build-containerd-start", "starting the build's private containerd", { root: containerdRoot });
  const daemon = await spawnDaemon(CONTAINERD, buildContainerdArgs(dockerdRoot, containerdRoot), p.logFile);
  const pid = daemon.pid;
  if (pid !== undefined) await writeFile(p.pidFile, `${pid}\n`);
  const stop = async () => {
    if (pid !== undefined) await stopProcess(pid, "the build's containerd", options.stopTimeoutMs ?? 60_000, log);
    await rm(p.pidFile, { force: true });
  };
  await waitUntilServing(daemon, () => answers(p.socket), {
    what: "the build's containerd",
    logFile: p.logFile,
    timeoutMs: options.readyTimeoutMs ?? 60_000,
    stop,
  });
  log?.info("docker.build-containerd-ready", "the build's containerd is up", { pid, socket: p.socket });
  return { socket: p.socket, stop };
}

/** Stops the containerd a killed build left running (its pidfile, its socket on its command line). */
export async function stopLeftoverBuildContainerd(dockerdRoot: string, log?: Logger): Promise<void> {
  const p = buildContainerdPaths(dockerdRoot);
  const pid = await leftoverPid(p.pidFile, p.socket);
  if (pid !== undefined) {
    log?.warning("docker.build-containerd-leftover", "stopping the containerd a killed build left", { pid });
    await stopProcess(pid, "the build's containerd", 60_000, log);
  }
  await rm(p.pidFile, { force: true });
}

function answers(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ path: socketPath });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}
