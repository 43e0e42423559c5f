/**
 * A private image registry for the lab: Debian's `docker-registry` (distribution 2.8), run as a
 * plain process on 127.0.0.1:<port> inside a lab host's dockerd network namespace (the only
 * loopback that dockerd sees), with its own config and storage in a temp folder: never the
 * system's registry service. dockerd treats 127.0.0.1 registries as insecure, so no TLS is
 * needed. The storage outlives the process: a registry stopped and started again in another
 * namespace (a dockerd restart makes a new one) serves the same images.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, open, readFile, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { AgentError, describeError } from "../../errors.ts";
import { run } from "../../exec.ts";
import type { Logger } from "../../log.ts";
import { registerLabProcess, unregisterLabProcess } from "../reaper/cleanup.ts";
import { BUSYBOX } from "./images.ts";
import type { LabHost } from "../lab.ts";

export const REGISTRY_BIN = "/usr/bin/docker-registry";

export interface LabRegistry {
  port: number;
  /** `127.0.0.1:<port>`, the prefix of the images it serves. */
  address: string;
  stop(): Promise<void>;
}

export interface LabRegistryOptions {
  /** The lab's root (its reaper stops the registry if this process dies). */
  labRoot: string;
  /** Where the config, log and (unless `storage`) the blobs go. */
  dir: string;
  /** The blobs' folder (default `<dir>/storage`); reuse it to serve the same images again. */
  storage?: string;
  /** The network namespace file to listen in (a lab host's dockerd's: labRegistryNetns). */
  netns: string;
  /** Default: a port free on the host's loopback now. */
  port?: number;
  log?: Logger;
}

/**
 * The network namespace of a lab host's private dockerd (src/lab/docker/dockerd.ts: `<root>/net.ns`); new at each
 * dockerd
 * start.
 */
export function labRegistryNetns(host: LabHost): string {
  return join(host.paths.dockerdRoot, "net.ns");
}

/** A TCP port free on the host's loopback now (a fresh namespace has nothing bound at all). */
export async function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() =>
        typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port")),
      );
    });
  });
}

/** Starts the registry and waits until it answers `/v2/`. */
export async function startLabRegistry(options: LabRegistryOptions): Promise<LabRegistry> {
  if (!existsSync(REGISTRY_BIN))
    throw new AgentError(
      `${REGISTRY_BIN} is missing`,
      "install it: apt-get install -y docker-registry (scripts/setup.sh does)",
    );
  const { dir, netns, log } = options;
  const port = options.port ?? (await freeLoopbackPort());
  const storage = options.storage ?? join(dir, "storage");
  await mkdir(storage, { recursive: true });
  const config = join(dir, `registry-${port}.yml`);
  // JSON is YAML: no YAML writer needed.
  const settings = {
    version: 0.1,
    log: { level: "warn", accesslog: { disabled: true }, fields: { service: "registry" } },
    storage: {
      filesystem: { rootdirectory: storage },
      cache: { blobdescriptor: "inmemory" },
      delete: { enabled: true },
    },
    http: { addr: `127.0.0.1:${port}` },
    health: { storagedriver: { enabled: false } },
  };
  await writeFile(config, JSON.stringify(settings, null, 2) + "\n");
  const logFile = join(dir, `registry-${port}.log`);
  const logHandle = await open(logFile, "a");
  let child: ChildProcess;
  try {
    // nsenter execs the registry: the child's pid is the registry's.
    child = spawn("nsenter", [`--net=${netns}`, "--", REGISTRY_BIN, "serve", config], {
      stdio: ["ignore", logHandle.fd, logHandle.fd],
    });
  } catch (error) {
    await logHandle.close();
    throw error;
  }
  // Listened to before anything is awaited: an exit event with no listener yet is not told again.
  let exited: string | undefined;
  const gone = new Promise<void>((done) => {
    child.once("exit", (code, signal) => {
      exited = String(code ?? signal);
      done();
    });
    child.once("error", (error) => {
      exited = describeError(error);
      done();
    });
  });
  await logHandle.close();
  const name = `registry-${port}`;
  const stop = async () => {
    if (exited === undefined) {
      child.kill("SIGTERM");
      await Promise.race([gone, sleep(5000)]);
      if (exited === undefined) {
        child.kill("SIGKILL");
        await Promise.race([gone, sleep(5000)]);
      }
    }
    await unregisterLabProcess(options.labRoot, name);
  };
  try {
    if (child.pid !== undefined) await registerLabProcess(options.labRoot, name, child.pid).catch(() => undefined);
    const deadline = Date.now() + 20_000;
    while (true) {
      if (exited !== undefined)
        throw new AgentError(
          `docker-registry exited (${exited}): ${(await readFile(logFile, "utf8")).slice(-500)}`,
          `see ${logFile}`,
        );
      const probe = await run(
        "nsenter",
        [`--net=${netns}`, "--", BUSYBOX, "wget", "-q", "-O", "/dev/null", `http://127.0.0.1:${port}/v2/`],
        { check: false },
      );
      if (probe.exitCode === 0) break;
      if (Date.now() > deadline)
        throw new AgentError(`docker-registry did not answer on 127.0.0.1:${port} within 20 s`, `see ${logFile}`);
      await sleep(100);
    }
  } catch (error) {
    await stop();
    throw error;
  }
  log?.info("lab.registry", "docker-registry up", { port, netns, storage });
  return { port, address: `127.0.0.1:${port}`, stop };
}
