/**
 * The Docker Engine API over its unix socket, with node:http: no docker CLI is needed on the host.
 * Paths are unversioned, so the daemon answers with its own API version (docker 29 refuses API
 * versions below 1.44; 20.10 speaks up to 1.41).
 */
import { request } from "node:http";
import { isAbsolute } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { DockerEngine, DockerImages, ImageEntry } from "../agent/ports.ts";
import { AgentError, ConfigError, describeError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { validateLabelKey, validateLabelValue } from "./labels.ts";

/** Where images live: the graph driver's layout in the data-root, or containerd's snapshotters. */
export type ImageStore = "graphdriver" | "containerd";

/** `GET /info`, in the agent's words. */
export interface EngineInfo {
  id: string;
  serverVersion: string;
  dockerRootDir: string;
  driver: string;
  imageStore: ImageStore;
  swarm: { nodeId: string; controlAvailable: boolean; state: string };
  /** Engine labels, `key=value`. */
  labels: string[];
}

/** The fields of `GET /info` read here (the rest is kept, untyped). */
export interface RawDockerInfo {
  ID?: string;
  ServerVersion?: string;
  DockerRootDir?: string;
  Driver?: string;
  DriverStatus?: unknown;
  Labels?: string[] | null;
  Swarm?: { NodeID?: string; LocalNodeState?: string; ControlAvailable?: boolean };
  [field: string]: unknown;
}

/** The Docker API answered with an error status, or did not answer at all (`status` undefined). */
export class DockerApiError extends AgentError {
  readonly status: number | undefined;
  readonly apiMessage: string;
  readonly request: string;

  constructor(
    status: number | undefined,
    apiMessage: string,
    request: string,
    remediation: string,
    options?: { cause?: unknown },
  ) {
    super(
      status === undefined
        ? `docker API ${request}: ${apiMessage}`
        : `docker API ${request} answered ${status}: ${apiMessage}`,
      remediation,
      undefined,
      options,
    );
    this.status = status;
    this.apiMessage = apiMessage;
    this.request = request;
  }
}

/** The engine as the agent uses it: the DockerEngine contract plus readiness and node-label reads. */
export interface DockerEngineClient extends DockerEngine, DockerImages {
  readonly socketPath: string;
  info(): Promise<EngineInfo>;
  /** `GET /info` as docker sent it. */
  rawInfo(): Promise<RawDockerInfo>;
  /** True when `/_ping` answers OK now. */
  ping(): Promise<boolean>;
  /** Polls `/_ping` until it answers OK (after a start or restart); throws at the deadline. */
  waitUntilReady(timeoutMs: number): Promise<void>;
  /** The node's `Spec.Labels` (needs a manager). */
  nodeLabels(nodeId: string): Promise<Record<string, string>>;
}

export interface DockerEngineOptions {
  /** `unix:///run/docker.sock` (or the lab's private socket). */
  host: string;
  log?: Logger;
  /** Bounds one API call (default 30 s). */
  requestTimeoutMs?: number;
}

const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
/** An image id, `repo:tag` or `repo@digest` as docker lists them: printable, no spaces, bounded. */
const IMAGE_REFERENCE = /^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}$/;

/** The fields of `GET /images/json` the prune reads. */
interface RawImage {
  Id?: string;
  ParentId?: string;
  RepoTags?: string[] | null;
  RepoDigests?: string[] | null;
  Created?: number;
  Size?: number;
  SharedSize?: number;
}

/** An image as the agent sees it; `<none>` placeholders dropped, SharedSize -1 (not computed) left out. */
export function toImageEntry(raw: RawImage): ImageEntry {
  const size = raw.Size ?? 0;
  const shared = raw.SharedSize ?? -1;
  return {
    id: raw.Id ?? "",
    repoTags: (raw.RepoTags ?? []).filter((tag) => !tag.includes("<none>")),
    repoDigests: (raw.RepoDigests ?? []).filter((digest) => !digest.startsWith("<none>")),
    ...(raw.ParentId ? { parentId: raw.ParentId } : {}),
    created: raw.Created ?? 0,
    sizeBytes: size,
    ...(shared >= 0 ? { uniqueBytes: Math.max(0, size - shared) } : {}),
  };
}
const MAX_BODY_BYTES = 64 * 1024 * 1024;

/**
 * Which image store a daemon uses, from `GET /info`: containerd when a snapshotter reports itself
 * (`DriverStatus` holds `["driver-type", "io.containerd.snapshotter.v1"]`, docker 24+), or when the
 * driver is `overlayfs` (containerd's snapshotter; the graph driver is `overlay2`); graphdriver
 * otherwise. Docker 29 uses the containerd store by default on a fresh install.
 */
export function detectImageStore(info: { Driver?: unknown; DriverStatus?: unknown }): ImageStore {
  const status = Array.isArray(info.DriverStatus) ? (info.DriverStatus as unknown[]) : [];
  const snapshotter = status.some(
    (pair) => Array.isArray(pair) && pair[0] === "driver-type" && pair[1] === "io.containerd.snapshotter.v1",
  );
  return snapshotter || info.Driver === "overlayfs" ? "containerd" : "graphdriver";
}

/** Maps `GET /info` to the agent's EngineInfo. */
export function toEngineInfo(raw: RawDockerInfo): EngineInfo {
  return {
    id: raw.ID ?? "",
    serverVersion: raw.ServerVersion ?? "",
    dockerRootDir: raw.DockerRootDir ?? "",
    driver: raw.Driver ?? "",
    imageStore: detectImageStore(raw),
    swarm: {
      nodeId: raw.Swarm?.NodeID ?? "",
      controlAvailable: raw.Swarm?.ControlAvailable === true,
      state: raw.Swarm?.LocalNodeState ?? "inactive",
    },
    labels: raw.Labels ?? [],
  };
}

/** What every call to the engine takes: its socket, how long a call may take, the log. */
interface EngineContext {
  socketPath: string;
  timeoutMs: number;
  log: Logger | undefined;
}

/** A client for the Docker Engine API at `host`. */
export function createDockerEngine(options: DockerEngineOptions): DockerEngineClient {
  const ctx: EngineContext = {
    socketPath: socketOf(options.host),
    timeoutMs: options.requestTimeoutMs ?? 30_000,
    log: options.log,
  };
  const engine: DockerEngineClient = {
    socketPath: ctx.socketPath,
    rawInfo: () => call<RawDockerInfo>(ctx, "GET", "/info"),
    info: async () => toEngineInfo(await engine.rawInfo()),
    async images() {
      const list = await call<Array<{ RepoTags?: string[] | null }>>(ctx, "GET", "/images/json");
      const tags = list.flatMap((image) => image.RepoTags ?? []).filter((tag) => !tag.includes("<none>"));
      return [...new Set(tags)].sort();
    },
    async imageEntries() {
      const list = await call<RawImage[]>(ctx, "GET", "/images/json?shared-size=1");
      return list.map(toImageEntry);
    },
    async containerImageIds() {
      const list = await call<Array<{ ImageID?: string }>>(ctx, "GET", "/containers/json?all=1");
      return [...new Set(list.map((c) => c.ImageID ?? "").filter(Boolean))];
    },
    removeImage: (reference) => removeImage(ctx, reference),
    ping: () => ping(ctx),
    waitUntilReady: (waitMs) => waitUntilReady(ctx, waitMs),
    async nodeLabels(nodeId) {
      const { spec } = await node(ctx, nodeId);
      return { ...((spec.Labels as Record<string, string> | undefined) ?? {}) };
    },
    setNodeLabels: (nodeId, add, remove) => setNodeLabels(ctx, nodeId, add, remove),
  };
  return engine;
}

/** One API call; its answer's JSON, or a DockerApiError that says what to do. */
async function call<T>(
  ctx: EngineContext,
  method: "GET" | "POST" | "DELETE",
  path: string,
  body?: unknown,
  callTimeoutMs = ctx.timeoutMs,
): Promise<T> {
  const { socketPath } = ctx;
  const label = `${method} ${path}`;
  ctx.log?.debug("docker.api", label, { socket: socketPath });
  let answer: { status: number; text: string };
  try {
    answer = await send(socketPath, method, path, body, callTimeoutMs);
  } catch (cause) {
    throw new DockerApiError(
      undefined,
      `no answer on ${socketPath} (${describeError(cause)})`,
      label,
      "start docker (systemctl start docker) and see why it is down: journalctl -u docker -n 100",
      { cause },
    );
  }
  if (answer.status < 200 || answer.status >= 300) {
    const message = apiMessage(answer.text);
    throw new DockerApiError(answer.status, message, label, remediationFor(answer.status));
  }
  if (answer.text === "") return undefined as T;
  try {
    return JSON.parse(answer.text) as T;
  } catch (cause) {
    throw new DockerApiError(answer.status, "the answer is not JSON", label, "check that the socket is docker's", {
      cause,
    });
  }
}

async function node(ctx: EngineContext, nodeId: string): Promise<{ version: number; spec: Record<string, unknown> }> {
  if (!NODE_ID.test(nodeId)) throw new ConfigError([`${JSON.stringify(nodeId)} is not a swarm node id`]);
  const raw = await call<{ Version?: { Index?: number }; Spec?: Record<string, unknown> }>(
    ctx,
    "GET",
    `/nodes/${encodeURIComponent(nodeId)}`,
  );
  const version = raw.Version?.Index;
  if (typeof version !== "number" || !raw.Spec) {
    throw new DockerApiError(
      200,
      "the node has no version or spec",
      `GET /nodes/${nodeId}`,
      "check the docker version",
    );
  }
  return { version, spec: raw.Spec };
}

async function ping(ctx: EngineContext, timeout = 2000): Promise<boolean> {
  try {
    const answer = await send(ctx.socketPath, "GET", "/_ping", undefined, timeout);
    return answer.status === 200 && answer.text === "OK";
  } catch {
    return false;
  }
}

async function waitUntilReady(ctx: EngineContext, waitMs: number): Promise<void> {
  const deadline = Date.now() + waitMs;
  while (true) {
    const left = deadline - Date.now();
    if (await ping(ctx, Math.max(100, Math.min(2000, left)))) return;
    if (Date.now() >= deadline) {
      throw new DockerApiError(
        undefined,
        `docker did not answer /_ping within ${waitMs} ms`,
        "GET /_ping",
        "see why docker did not come up: journalctl -u docker -n 100",
      );
    }
    await sleep(Math.min(200, Math.max(0, deadline - Date.now())));
  }
}

async function removeImage(ctx: EngineContext, reference: string): Promise<{ untagged: string[]; deleted: string[] }> {
  if (!IMAGE_REFERENCE.test(reference))
    throw new ConfigError([`${JSON.stringify(reference)} is not an image reference`]);
  // No force: docker itself refuses an image a container (running or stopped) uses.
  const answer = await call<Array<{ Untagged?: string; Deleted?: string }>>(
    ctx,
    "DELETE",
    `/images/${encodeURIComponent(reference)}?force=false&noprune=false`,
  );
  return {
    untagged: (answer ?? []).flatMap((item) => (item.Untagged ? [item.Untagged] : [])),
    deleted: (answer ?? []).flatMap((item) => (item.Deleted ? [item.Deleted] : [])),
  };
}

async function setNodeLabels(
  ctx: EngineContext,
  nodeId: string,
  add: Record<string, string>,
  remove: readonly string[],
): Promise<void> {
  const { log } = ctx;
  for (const [key, value] of Object.entries(add)) {
    validateLabelKey(key);
    validateLabelValue(key, value);
  }
  for (const key of remove) validateLabelKey(key);
  // The update names the version it read: a concurrent change makes it fail "out of sequence";
  // read again and retry once (a second conflict is reported: something keeps changing the node).
  for (let attempt = 1; ; attempt += 1) {
    const { version, spec } = await node(ctx, nodeId);
    const before = (spec.Labels as Record<string, string> | undefined) ?? {};
    const labels = { ...before };
    for (const key of remove) delete labels[key];
    Object.assign(labels, add);
    if (JSON.stringify(sorted(labels)) === JSON.stringify(sorted(before))) {
      log?.debug("labels.node-unchanged", "node labels already as wanted", { nodeId });
      return;
    }
    try {
      await call(ctx, "POST", `/nodes/${encodeURIComponent(nodeId)}/update?version=${version}`, {
        ...spec,
        Labels: labels,
      });
      log?.info("labels.node", "updated node labels", {
        nodeId,
        added: Object.keys(add).join(","),
        removed: remove.join(","),
      });
      return;
    } catch (error) {
      if (attempt >= 2 || !isVersionConflict(error)) throw error;
      log?.notice("labels.node-retry", "the node changed meanwhile, updating its labels again", {
        nodeId,
        version,
      });
    }
  }
}

function socketOf(host: string): string {
  const path = host.startsWith("unix://") ? host.slice("unix://".length) : undefined;
  if (path === undefined || !isAbsolute(path)) {
    throw new ConfigError([`docker host ${JSON.stringify(host)} is not unix:///absolute/path/to/docker.sock`]);
  }
  return path;
}

function isVersionConflict(error: unknown): boolean {
  return error instanceof DockerApiError && (error.status === 409 || /out of sequence/i.test(error.apiMessage));
}

function sorted(record: Record<string, string>): Array<[string, string]> {
  return Object.entries(record).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

function apiMessage(text: string): string {
  try {
    const parsed = JSON.parse(text) as { message?: unknown };
    if (typeof parsed.message === "string") return parsed.message;
  } catch {
    // not JSON: use the text itself
  }
  return text.trim().slice(0, 500) || "(empty answer)";
}

function remediationFor(status: number): string {
  if (status === 404) return "check the id: the object does not exist on this engine";
  if (status === 503)
    return (
      "this engine is not a swarm manager: publish engine labels instead (label mode engine), or join the swarm " +
      "first"
    );
  if (status === 409) return "retry: the object changed meanwhile";
  return "see the docker daemon's log: journalctl -u docker -n 100";
}

function send(
  socketPath: string,
  method: string,
  path: string,
  body: unknown,
  timeoutMs: number,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = request(
      {
        socketPath,
        path,
        method,
        timeout: timeoutMs,
        headers: {
          Host: "docker",
          ...(payload ? { "Content-Type": "application/json", "Content-Length": payload.length } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_BODY_BYTES) req.destroy(new Error(`answer larger than ${MAX_BODY_BYTES} bytes`));
          else chunks.push(chunk);
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }));
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.on("error", reject);
    req.end(payload);
  });
}
