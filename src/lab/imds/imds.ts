/**
 * IMDSv2 emulator: the instance metadata service as the agent (and the AWS SDK's default
 * credential chain) sees it on EC2, served over HTTP on 127.0.0.1.
 *
 * Behaviour copied from the real service: `PUT /latest/api/token` hands out session tokens
 * (TTL 1–21600 s, 400 otherwise, 403 when the request carries X-Forwarded-For); with IMDSv1
 * disabled every GET needs a valid token (401 otherwise); an invalid or expired token is a 401
 * even when IMDSv1 is allowed; tags are served only when the instance allows metadata tags.
 * The instance is read on every request, so CreateTags on the emulated instance shows up at once.
 * With metadata tags allowed EC2 refuses tag keys IMDS could not serve (`imdsTagKeyProblem`:
 * the EC2 emulator's registration applies it); a key that got past that anyway is listed as
 * it is, and one holding "/" cannot be read, as a path.
 *
 * Faults for the instance-profile credentials (what a fleet booting at once met): answers
 * delayed (`slowCredentials`), and a number of failures before they answer (`credentialsFailFor`).
 *
 * A spot interruption notice (`setSpotInstanceAction`) is served at
 * `/latest/meta-data/spot/instance-action` as EC2 does for the two minutes before it stops,
 * hibernates or terminates a spot instance; without one that path is a 404.
 */
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "../../log.ts";
import { LAB_INSTANCE_TYPE, type LabInstance } from "../types.ts";

const TOKEN_PATH = "/latest/api/token";
const TTL_HEADER = "x-aws-ec2-metadata-token-ttl-seconds";
const TOKEN_HEADER = "x-aws-ec2-metadata-token";
const MAX_TOKEN_TTL_SECONDS = 21600;
/** Instance-profile credentials last 6 h on EC2 and are rotated well before they expire. */
const CREDENTIALS_LIFETIME_MS = 6 * 3600_000;
/** Paths of the instance-profile credentials (the role listing and the role's document). */
const CREDENTIALS_PREFIX = "/latest/meta-data/iam/security-credentials";
const MAX_RECORDED_REQUESTS = 1000;

/** How to start the emulator: which instance it describes and how strict it is. */
export interface ImdsEmulatorOptions {
  /** The instance this IMDS belongs to; called on every request (tags are live). */
  instance: () => LabInstance | Promise<LabInstance>;
  /** Serve requests without a token (HttpTokens=optional). Default false, as IMDSv2-only hosts. */
  imdsV1?: boolean;
  /** Port on 127.0.0.1; 0 (default) picks a free one. */
  port?: number;
  log?: Logger;
  /** Account in the identity document and the instance-profile ARN. */
  accountId?: string;
  /** Role of the instance profile; null means no profile is attached (no `iam/` tree). */
  iamRole?: string | null;
  /** Fixed credentials to hand out; random ones (stable for the emulator's life) otherwise. */
  credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  /**
   * How long handed-out credentials last (default 6 h, as on EC2); they are rotated when a
   * sixth of that is left (1 h on EC2). Short lifetimes test a client's refresh.
   */
  credentialsLifetimeSeconds?: number;
}

/** One request as the emulator answered it, for tests that count retries. */
export interface ImdsRequestRecord {
  method: string;
  path: string;
  /** HTTP status sent, or "reset" when the connection was dropped on purpose. */
  status: number | "reset";
}

/** A running emulator, with knobs for the failures tests need. */
export interface ImdsEmulator {
  /** Base URL, e.g. `http://127.0.0.1:41234` (what AWS_EC2_METADATA_SERVICE_ENDPOINT takes). */
  readonly endpoint: string;
  readonly port: number;
  /** Requests answered so far (the last 1000), oldest first. */
  readonly requests: readonly ImdsRequestRecord[];
  /**
   * Makes tokens issued from now on expire after `seconds`, whatever TTL the client asked for
   * (the response still echoes the requested TTL, as a client would not notice). `undefined`
   * restores normal behaviour. For tests of the agent's handling of a token expiring early.
   */
  setTokenTtlOverride(seconds: number | undefined): void;
  /** Invalidates every token issued so far (the next request with one gets a 401). */
  revokeTokens(): void;
  /**
   * Makes the next `n` requests fail as IMDS does early in boot: the connection is reset
   * (`"reset"`, default) or answered with 503.
   */
  unavailableFor(n: number, how?: "reset" | "503"): void;
  /**
   * Delays every answer under `/latest/meta-data/iam/security-credentials` (the role listing and
   * the role's credentials) by `ms`, as IMDS handing out a role's first credentials during a
   * boot storm; `undefined` restores normal answers. A client that gives up first sees no answer.
   */
  slowCredentials(ms: number | undefined): void;
  /**
   * Makes the next `n` requests under `/latest/meta-data/iam/security-credentials` fail (503,
   * default, or a reset connection), then answer again.
   */
  credentialsFailFor(n: number, how?: "reset" | "503"): void;
  /** Serves a spot interruption notice from now on (`undefined`: none, the path is a 404). */
  setSpotInstanceAction(notice: SpotInstanceAction | undefined): void;
  close(): Promise<void>;
}

/** EC2's spot interruption notice: `{"action": "terminate", "time": "2017-09-18T08:22:00Z"}`. */
export interface SpotInstanceAction {
  action: "stop" | "hibernate" | "terminate";
  /** When EC2 acts, ISO 8601 in UTC without milliseconds. */
  time: string;
}

/** A metadata directory: leaves are strings, sub-directories are nested trees. */
type MetadataTree = { [name: string]: string | MetadataTree };

interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken: string;
  issuedAt: number;
}

/** Starts the emulator on 127.0.0.1 and resolves once it is listening. */
export async function startImdsEmulator(options: ImdsEmulatorOptions): Promise<ImdsEmulator> {
  const imdsV1 = options.imdsV1 ?? false;
  const accountId = options.accountId ?? "123456789012";
  const role = options.iamRole === undefined ? "ebs-cache-agent-lab" : options.iamRole;
  const startedAt = new Date();
  const tokens = new Map<string, number>();
  const requests: ImdsRequestRecord[] = [];
  let ttlOverride: number | undefined;
  let unavailable = { remaining: 0, how: "reset" as "reset" | "503" };
  let credentialsDelayMs: number | undefined;
  let credentialsFailures = { remaining: 0, how: "503" as "reset" | "503" };
  let spotNotice: SpotInstanceAction | undefined;
  const lifetimeMs = (options.credentialsLifetimeSeconds ?? CREDENTIALS_LIFETIME_MS / 1000) * 1000;
  let credentials = newCredentials(options.credentials);
  /** Aborts the delayed answers when the emulator closes. */
  const closing = new AbortController();

  const record = (req: IncomingMessage, status: number | "reset") => {
    requests.push({ method: req.method ?? "", path: req.url ?? "", status });
    if (requests.length > MAX_RECORDED_REQUESTS) requests.shift();
    options.log?.debug("lab.imds-request", `${req.method} ${req.url} -> ${status}`);
  };
  const reply = (
    req: IncomingMessage,
    res: ServerResponse,
    status: number,
    body: string,
    headers: Record<string, string> = {},
  ) => {
    record(req, status);
    // `Connection: close` on every answer, as EC2's IMDS sends it: a client's connection ends with
    // the answer. Kept alive, a connection whose error answer the client never read (the SDK's
    // MetadataService leaves a 404's body unread) kept that client's process from exiting until
    // the server's keep-alive timeout (5 s), an agent's release at shutdown included.
    res.writeHead(status, { "Content-Type": "text/plain", Server: "EC2ws", Connection: "close", ...headers });
    res.end(req.method === "HEAD" ? undefined : body);
  };

  const issueToken = (req: IncomingMessage, res: ServerResponse) => {
    if (req.headers["x-forwarded-for"] !== undefined) return reply(req, res, 403, "Forbidden");
    const ttlText = req.headers[TTL_HEADER];
    const ttl = typeof ttlText === "string" && /^\d+$/.test(ttlText.trim()) ? Number(ttlText.trim()) : NaN;
    if (!(ttl >= 1 && ttl <= MAX_TOKEN_TTL_SECONDS)) return reply(req, res, 400, "Bad Request");
    const token = randomBytes(42).toString("base64");
    tokens.set(token, Date.now() + (ttlOverride ?? ttl) * 1000);
    reply(req, res, 200, token, { [TTL_HEADER]: String(ttl) });
  };

  /** "ok", or why the request is refused: real IMDS rejects bad tokens even in IMDSv1 mode. */
  const checkToken = (req: IncomingMessage): "ok" | "unauthorized" => {
    const token = req.headers[TOKEN_HEADER];
    if (token === undefined) return imdsV1 ? "ok" : "unauthorized";
    const expiresAt = typeof token === "string" ? tokens.get(token) : undefined;
    if (expiresAt === undefined) return "unauthorized";
    if (Date.now() >= expiresAt) {
      tokens.delete(token as string);
      return "unauthorized";
    }
    return "ok";
  };

  const serveMetadata = async (req: IncomingMessage, res: ServerResponse, path: string) => {
    if (checkToken(req) !== "ok") return reply(req, res, 401, "Unauthorized");
    if (Date.now() > credentials.issuedAt + lifetimeMs - lifetimeMs / 6) {
      credentials = newCredentials(options.credentials);
    }
    const instance = await options.instance();
    const tree = metadataTree(instance, { accountId, role, credentials, lifetimeMs, startedAt, spotNotice });
    const found = lookup(tree, path);
    if (found === undefined) return reply(req, res, 404, "Not Found");
    reply(req, res, 200, found);
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    if (unavailable.remaining > 0) {
      unavailable.remaining -= 1;
      if (unavailable.how === "503") return reply(req, res, 503, "Service Unavailable");
      record(req, "reset");
      req.socket.destroy();
      return;
    }
    // Not `new URL()`: the SDK sends `//latest/...` (endpoint path "/" + path), which a URL parser
    // would read as a host name. IMDS itself collapses repeated slashes.
    const path = (req.url ?? "/").replace(/[?#].*$/, "").replace(/\/{2,}/g, "/");
    if (path === TOKEN_PATH) {
      if (req.method !== "PUT") return reply(req, res, 405, "Method Not Allowed", { Allow: "PUT" });
      return issueToken(req, res);
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      return reply(req, res, 405, "Method Not Allowed", { Allow: "GET, HEAD" });
    }
    if (path === CREDENTIALS_PREFIX || path.startsWith(`${CREDENTIALS_PREFIX}/`)) {
      if (credentialsFailures.remaining > 0) {
        credentialsFailures.remaining -= 1;
        if (credentialsFailures.how === "503") return reply(req, res, 503, "Service Unavailable");
        record(req, "reset");
        req.socket.destroy();
        return;
      }
      if (credentialsDelayMs !== undefined) {
        try {
          await sleep(credentialsDelayMs, undefined, { signal: closing.signal });
        } catch {
          return; // closing
        }
        // The client gave up meanwhile: nobody to answer.
        if (req.socket.destroyed) return record(req, "reset");
      }
    }
    await serveMetadata(req, res, path);
  };

  const server = createServer((req, res) => {
    // The body (if any) is irrelevant; drain it.
    req.resume();
    handle(req, res).catch((error: unknown) => {
      options.log?.warning("lab.imds-error", String(error), { path: req.url });
      if (!res.headersSent) reply(req, res, 500, "Internal Server Error");
      else res.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const endpoint = `http://127.0.0.1:${port}`;
  options.log?.info("lab.imds-started", "IMDS emulator listening", { endpoint, imdsV1 });

  return {
    endpoint,
    port,
    requests,
    setTokenTtlOverride(seconds) {
      ttlOverride = seconds;
    },
    revokeTokens() {
      tokens.clear();
    },
    unavailableFor(n, how = "reset") {
      unavailable = { remaining: n, how };
    },
    slowCredentials(ms) {
      credentialsDelayMs = ms;
    },
    credentialsFailFor(n, how = "503") {
      credentialsFailures = { remaining: n, how };
    },
    setSpotInstanceAction(notice) {
      spotNotice = notice ? { ...notice } : undefined;
    },
    close() {
      closing.abort();
      return new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
        // SDK clients keep connections alive; without this close() would wait for them.
        server.closeAllConnections();
      });
    },
  };
}

/** The metadata served for an instance, as a tree of directories and values. */
function metadataTree(
  instance: LabInstance,
  ctx: {
    accountId: string;
    role: string | null;
    credentials: Credentials;
    lifetimeMs: number;
    startedAt: Date;
    spotNotice: SpotInstanceAction | undefined;
  },
): MetadataTree {
  const metaData: MetadataTree = {
    "instance-id": instance.instanceId,
    "instance-type": instance.instanceType ?? LAB_INSTANCE_TYPE,
    placement: { "availability-zone": instance.availabilityZone, region: instance.region },
  };
  if (ctx.role !== null) {
    const { credentials } = ctx;
    const lastUpdated = isoSeconds(new Date(credentials.issuedAt));
    metaData.iam = {
      info: JSON.stringify(
        {
          Code: "Success",
          LastUpdated: lastUpdated,
          InstanceProfileArn: `arn:aws:iam::${ctx.accountId}:instance-profile/${ctx.role}`,
          InstanceProfileId: "AIPALABINSTANCEPROFILE",
        },
        null,
        2,
      ),
      "security-credentials": {
        [ctx.role]: JSON.stringify(
          {
            Code: "Success",
            LastUpdated: lastUpdated,
            Type: "AWS-HMAC",
            AccessKeyId: credentials.accessKeyId,
            SecretAccessKey: credentials.secretAccessKey,
            Token: credentials.sessionToken,
            Expiration: isoSeconds(new Date(credentials.issuedAt + ctx.lifetimeMs)),
          },
          null,
          2,
        ),
      },
    };
  }
  if (ctx.spotNotice) metaData.spot = { "instance-action": JSON.stringify(ctx.spotNotice) };
  if (instance.metadataTags) {
    // Listed as they are: EC2 keeps keys IMDS cannot serve off an instance with metadata tags
    // (imdsTagKeyProblem), and a "/" in a key that got past it makes it unreachable as a path.
    metaData.tags = { instance: { ...instance.tags } };
  }
  const identity = {
    accountId: ctx.accountId,
    architecture: process.arch === "arm64" ? "arm64" : "x86_64",
    availabilityZone: instance.availabilityZone,
    instanceId: instance.instanceId,
    instanceType: instance.instanceType ?? LAB_INSTANCE_TYPE,
    pendingTime: isoSeconds(ctx.startedAt),
    region: instance.region,
    version: "2017-09-30",
  };
  return {
    latest: {
      "meta-data": metaData,
      dynamic: { "instance-identity": { document: JSON.stringify(identity, null, 2) } },
    },
  };
}

/**
 * Finds a path in the tree: a value, or a directory listing (one name a line, sub-directories
 * with a trailing "/", as IMDS lists them). Undefined when nothing is there.
 */
function lookup(tree: MetadataTree, path: string): string | undefined {
  let node: string | MetadataTree = tree;
  for (const raw of path.split("/")) {
    if (raw === "") continue;
    if (typeof node === "string") return undefined;
    let name: string;
    try {
      name = decodeURIComponent(raw);
    } catch {
      return undefined;
    }
    if (!Object.hasOwn(node, name)) return undefined;
    node = node[name] as string | MetadataTree;
  }
  if (typeof node === "string") return node;
  return Object.entries(node)
    .map(([name, child]) => (typeof child === "string" ? name : `${name}/`))
    .join("\n");
}

function newCredentials(fixed: ImdsEmulatorOptions["credentials"]): Credentials {
  return {
    accessKeyId: fixed?.accessKeyId ?? `ASIA${randomBytes(8).toString("hex").toUpperCase()}`,
    secretAccessKey: fixed?.secretAccessKey ?? randomBytes(30).toString("base64"),
    sessionToken: fixed?.sessionToken ?? randomBytes(96).toString("base64"),
    issuedAt: Date.now(),
  };
}

/** IMDS timestamps have no milliseconds: `2024-05-01T12:00:00Z`. */
function isoSeconds(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, "Z");
}
