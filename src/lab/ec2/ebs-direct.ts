/**
 * The EBS direct APIs (REST + JSON under `/snapshots`) on the EC2 emulator's server and model:
 * StartSnapshot, PutSnapshotBlock, CompleteSnapshot, ListSnapshotBlocks, ListChangedBlocks,
 * GetSnapshotBlock. A snapshot written here is a snapshot of the EC2 model (DescribeSnapshots
 * lists it; CreateVolume makes volumes holding exactly its blocks), its image kept by the
 * backend's BlockSnapshotStore. Checked as EBS checks: 512 KiB blocks, each put's SHA-256,
 * indices within the size, the count of changed blocks and the LINEAR aggregate at completion,
 * ClientToken idempotency, a parent that must be completed and no larger; and refuses what
 * StartSnapshot's model refuses (Encrypted with ParentSnapshotId, a Timeout outside 10-4320).
 * A pending snapshot with no put for its Timeout is failed (`error`), as EBS cancels it, by the
 * emulator's clock. The fault injector's throttling and applyThen500 apply to these calls too,
 * by their action names (StartSnapshot, PutSnapshotBlock, …).
 */
import { createHash } from "node:crypto";
import type { BlockSnapshotStore } from "../types.ts";
import { isoNow, type ActionContext } from "./actions/context.ts";
import { newId, OWNER_ID } from "./ids.ts";
import { defaultEbsKey, kmsKeyArn } from "./kms.ts";
import type { SnapshotRecord } from "./model.ts";

export const EBS_BLOCK_BYTES = 512 * 1024;
const GiB = 1024 ** 3;
/** EBS's largest snapshot through these APIs (64 TiB). */
const MAX_VOLUME_GIB = 65536;
/** StartSnapshot's Timeout (minutes): 10 to 4320, 60 when not given. */
const TIMEOUT_MINUTES = { min: 10, max: 4320, default: 60 } as const;
/** A snapshot a StartSnapshot made: what was put, for CompleteSnapshot's checks. */
interface Upload {
  written: Map<number, string>;
  blockCount: number;
  /** Its Timeout (ms), and when it last saw a put (or its start): EBS fails it once the one passes the other. */
  timeoutMs: number;
  lastActivity: number;
}

export interface EbsAnswer {
  status: number;
  headers: Record<string, string>;
  body: string | Buffer;
}

class EbsError extends Error {
  readonly status: number;
  readonly type: string;
  readonly reason?: string;

  constructor(status: number, type: string, message: string, reason?: string) {
    super(message);
    this.status = status;
    this.type = type;
    this.reason = reason;
  }
}

const validation = (message: string, reason?: string) => new EbsError(400, "ValidationException", message, reason);
const notFound = (message: string) => new EbsError(404, "ResourceNotFoundException", message, "SNAPSHOT_NOT_FOUND");

function json(status: number, body: unknown, headers: Record<string, string> = {}): EbsAnswer {
  return { status, headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) };
}

function sha256b64(data: Buffer): string {
  return createHash("sha256").update(data).digest("base64");
}

/** Whether `pathname` belongs to the EBS direct APIs. */
export function isEbsDirectPath(pathname: string): boolean {
  return pathname === "/snapshots" || pathname.startsWith("/snapshots/");
}

export function createEbsDirect(ctx: ActionContext, store: BlockSnapshotStore | undefined) {
  const uploads = new Map<string, Upload>();
  const clientTokens = new Map<string, { snapshotId: string; request: string }>();

  const blockStore = () => {
    if (!store) throw new EbsError(501, "InternalServerException", "this lab's storage keeps no snapshot blocks");
    return store;
  };
  const completedSnapshot = (id: string): SnapshotRecord => {
    const snapshot = ctx.store.snapshot(id);
    if (!snapshot) throw notFound(`The snapshot '${id}' does not exist.`);
    if (snapshot.state !== "completed")
      throw validation(`The snapshot '${id}' is not completed.`, "SNAPSHOT_NOT_FOUND");
    return snapshot;
  };
  const blockIndex = (text: string, snapshot: SnapshotRecord): number => {
    const index = /^(0|[1-9][0-9]{0,9})$/.test(text) ? Number(text) : Number.NaN;
    if (!Number.isSafeInteger(index) || index >= (snapshot.volumeSize * GiB) / EBS_BLOCK_BYTES)
      throw validation(`BlockIndex ${text} is outside the snapshot`, "INVALID_BLOCK");
    return index;
  };

  async function startSnapshot(body: Buffer): Promise<EbsAnswer> {
    let request: Record<string, unknown>;
    try {
      request = JSON.parse(body.toString("utf8") || "{}") as Record<string, unknown>;
    } catch {
      throw validation("the request body is not JSON");
    }
    const size = request.VolumeSize;
    if (!Number.isSafeInteger(size) || (size as number) < 1 || (size as number) > MAX_VOLUME_GIB)
      throw validation("VolumeSize must be 1 to 65536 GiB", "INVALID_VOLUME_SIZE");
    const timeout = request.Timeout ?? TIMEOUT_MINUTES.default;
    if (
      !Number.isSafeInteger(timeout) ||
      (timeout as number) < TIMEOUT_MINUTES.min ||
      (timeout as number) > TIMEOUT_MINUTES.max
    )
      throw validation(
        `Timeout must be ${TIMEOUT_MINUTES.min} to ${TIMEOUT_MINUTES.max} minutes`,
        "INVALID_PARAMETER_VALUE",
      );
    if (request.Encrypted !== undefined && request.ParentSnapshotId !== undefined)
      throw validation(
        "You can't specify ParentSnapshotId and Encrypted in the same request",
        "INVALID_PARAMETER_VALUE",
      );
    const token = typeof request.ClientToken === "string" ? request.ClientToken : undefined;
    const fingerprint = JSON.stringify({ ...request, ClientToken: undefined });
    if (token !== undefined) {
      const earlier = clientTokens.get(token);
      if (earlier && earlier.request !== fingerprint)
        throw new EbsError(409, "ConflictException", "the ClientToken was used with other parameters");
      const snapshot = earlier && ctx.store.snapshot(earlier.snapshotId);
      if (snapshot) {
        expireIfIdle(snapshot);
        return json(201, describe(snapshot));
      }
    }
    const parentId = typeof request.ParentSnapshotId === "string" ? request.ParentSnapshotId : undefined;
    const parent = parentId === undefined ? undefined : completedSnapshot(parentId);
    if (parent && parent.volumeSize > (size as number))
      throw validation(
        `VolumeSize ${size} is smaller than the parent's ${parent.volumeSize} GiB`,
        "INVALID_VOLUME_SIZE",
      );
    const tags = Array.isArray(request.Tags)
      ? Object.fromEntries(
          (request.Tags as { Key?: unknown; Value?: unknown }[]).map((t) => [String(t.Key), String(t.Value ?? "")]),
        )
      : {};
    const givenKey = typeof request.KmsKeyArn === "string" ? request.KmsKeyArn : undefined;
    const encrypted = request.Encrypted === true || givenKey !== undefined || parent?.encrypted === true;
    if (givenKey !== undefined && request.Encrypted !== true)
      throw validation("KmsKeyArn is given without Encrypted", "INVALID_PARAMETER_VALUE");
    const keyArn = givenKey !== undefined ? kmsKeyArn(ctx.region, givenKey) : undefined;
    if (givenKey !== undefined && keyArn === undefined) throw validation(`KmsKeyArn '${givenKey}' is not a key`);
    const snapshot: SnapshotRecord = {
      snapshotId: newId("snapshot"),
      seq: ctx.store.nextSeq(),
      // EBS direct snapshots name no volume.
      volumeId: "vol-ffffffff",
      volumeSize: size as number,
      state: "pending",
      startTime: isoNow(ctx),
      completionTime: null,
      description: typeof request.Description === "string" ? request.Description : "",
      tags,
      ...(encrypted ? { encrypted: true, kmsKeyId: keyArn ?? parent?.kmsKeyId ?? defaultEbsKey(ctx.region) } : {}),
      error: null,
      imageReady: true,
    };
    await blockStore().start(snapshot.snapshotId, size as number, parent?.snapshotId);
    ctx.store.model.snapshots[snapshot.snapshotId] = snapshot;
    ctx.store.commit();
    uploads.set(snapshot.snapshotId, {
      written: new Map(),
      blockCount: (snapshot.volumeSize * GiB) / EBS_BLOCK_BYTES,
      timeoutMs: (timeout as number) * 60_000,
      lastActivity: ctx.now(),
    });
    if (token !== undefined) clientTokens.set(token, { snapshotId: snapshot.snapshotId, request: fingerprint });
    ctx.log?.info("lab.ebs-direct", "snapshot started", { snapshotId: snapshot.snapshotId, parent: parentId });
    return json(201, describe(snapshot));
  }

  function describe(snapshot: SnapshotRecord) {
    return {
      SnapshotId: snapshot.snapshotId,
      OwnerId: OWNER_ID,
      Status: snapshot.state,
      StartTime: Date.parse(snapshot.startTime) / 1000,
      VolumeSize: snapshot.volumeSize,
      BlockSize: EBS_BLOCK_BYTES,
      Description: snapshot.description,
      Tags: Object.entries(snapshot.tags).map(([Key, Value]) => ({ Key, Value })),
      SseType: snapshot.encrypted ? "sse-ebs" : "none",
      ...(snapshot.kmsKeyId ? { KmsKeyArn: snapshot.kmsKeyId } : {}),
    };
  }

  /** A pending snapshot of these APIs idle past its Timeout is failed, as EBS cancels it. */
  const expireIfIdle = (snapshot: SnapshotRecord) => {
    const upload = uploads.get(snapshot.snapshotId);
    if (snapshot.state !== "pending" || !upload || ctx.now() - upload.lastActivity <= upload.timeoutMs) return;
    snapshot.state = "error";
    snapshot.error = "the snapshot's Timeout passed without a put";
    ctx.store.commit();
    uploads.delete(snapshot.snapshotId);
    ctx.log?.info("lab.ebs-direct", "snapshot timed out", { snapshotId: snapshot.snapshotId });
  };

  const pendingUpload = (id: string): { snapshot: SnapshotRecord; upload: Upload } => {
    const snapshot = ctx.store.snapshot(id);
    if (!snapshot) throw notFound(`The snapshot '${id}' does not exist.`);
    expireIfIdle(snapshot);
    if (snapshot.state !== "pending")
      throw validation(`The snapshot '${id}' is ${snapshot.state}.`, "INVALID_SNAPSHOT_STATE");
    // A snapshot pending but not started here (CreateSnapshot's, or one from before an emulator restart).
    const upload = uploads.get(id);
    if (!upload) throw validation(`The snapshot '${id}' does not take blocks.`, "INVALID_SNAPSHOT_STATE");
    return { snapshot, upload };
  };

  async function putBlock(id: string, indexText: string, headers: Headers, body: Buffer): Promise<EbsAnswer> {
    const { snapshot, upload } = pendingUpload(id);
    const index = blockIndex(indexText, snapshot);
    if (headers.get("x-amz-checksum-algorithm") !== "SHA256")
      throw validation("ChecksumAlgorithm must be SHA256", "INVALID_CHECKSUM_ALGORITHM");
    if (Number(headers.get("x-amz-data-length")) !== EBS_BLOCK_BYTES || body.length !== EBS_BLOCK_BYTES)
      throw validation(`DataLength must be ${EBS_BLOCK_BYTES}`, "INVALID_DATA_LENGTH");
    const checksum = sha256b64(body);
    if (headers.get("x-amz-checksum") !== checksum)
      throw validation("the checksum does not match the data", "INVALID_CHECKSUM");
    await blockStore().put(id, index, body);
    upload.written.set(index, checksum);
    upload.lastActivity = ctx.now();
    return { status: 201, headers: { "x-amz-checksum": checksum, "x-amz-checksum-algorithm": "SHA256" }, body: "" };
  }

  function completeSnapshot(id: string, headers: Headers): EbsAnswer {
    const { snapshot, upload } = pendingUpload(id);
    const count = Number(headers.get("x-amz-changedblockscount"));
    if (!Number.isSafeInteger(count) || count !== upload.written.size)
      throw validation(
        `ChangedBlocksCount ${headers.get("x-amz-changedblockscount")} ` +
          `is not the ${upload.written.size} blocks written`,
        "INVALID_CHANGED_BLOCKS_COUNT",
      );
    const aggregate = headers.get("x-amz-checksum");
    if (aggregate !== null) {
      if (
        headers.get("x-amz-checksum-aggregation-method") !== "LINEAR" ||
        headers.get("x-amz-checksum-algorithm") !== "SHA256"
      )
        throw validation("only SHA256 with LINEAR aggregation", "INVALID_CHECKSUM_ALGORITHM");
      const digests = [...upload.written.entries()].sort(([a], [b]) => a - b).map(([, c]) => Buffer.from(c, "base64"));
      if (sha256b64(Buffer.concat(digests)) !== aggregate)
        throw validation("the aggregate checksum does not match", "INVALID_CHECKSUM");
    }
    snapshot.state = "completed";
    snapshot.completionTime = isoNow(ctx);
    ctx.store.commit();
    uploads.delete(id);
    ctx.log?.info("lab.ebs-direct", "snapshot completed", { snapshotId: id, blocks: upload.written.size });
    return json(202, { Status: "completed" });
  }

  async function listBlocks(id: string, query: URLSearchParams): Promise<EbsAnswer> {
    const snapshot = completedSnapshot(id);
    const all = await blockStore().blocks(id, EBS_BLOCK_BYTES);
    return json(200, { ...page(all, query, (i) => ({ BlockIndex: i, BlockToken: `${id}.${i}` })), ...sizes(snapshot) });
  }

  async function listChanged(second: string, query: URLSearchParams): Promise<EbsAnswer> {
    const first = query.get("firstSnapshotId");
    const secondSnapshot = completedSnapshot(second);
    const store = blockStore();
    const secondBlocks = await store.blocks(second, EBS_BLOCK_BYTES);
    let changed = secondBlocks;
    if (first !== null) {
      completedSnapshot(first);
      const firstBlocks = await store.blocks(first, EBS_BLOCK_BYTES);
      const union = [...new Set([...firstBlocks, ...secondBlocks])].sort((x, y) => x - y);
      changed = [];
      for (const i of union) {
        const [inFirst, inSecond] = [
          await store.read(first, i, EBS_BLOCK_BYTES),
          await store.read(second, i, EBS_BLOCK_BYTES),
        ];
        if (!inFirst.equals(inSecond)) changed.push(i);
      }
    }
    const item = (i: number) => ({
      BlockIndex: i,
      ...(first !== null ? { FirstBlockToken: `${first}.${i}` } : {}),
      SecondBlockToken: `${second}.${i}`,
    });
    const { Blocks, NextToken } = page(changed, query, item);
    return json(200, { ChangedBlocks: Blocks, ...(NextToken ? { NextToken } : {}), ...sizes(secondSnapshot) });
  }

  async function getBlock(id: string, indexText: string, query: URLSearchParams): Promise<EbsAnswer> {
    const snapshot = completedSnapshot(id);
    const index = blockIndex(indexText, snapshot);
    if (query.get("blockToken") !== `${id}.${index}`)
      throw validation("the BlockToken is not this block's", "INVALID_BLOCK_TOKEN");
    const data = await blockStore().read(id, index, EBS_BLOCK_BYTES);
    return {
      status: 200,
      headers: {
        "content-type": "application/octet-stream",
        "x-amz-data-length": String(data.length),
        "x-amz-checksum": sha256b64(data),
        "x-amz-checksum-algorithm": "SHA256",
      },
      body: data,
    };
  }

  /** The action a request names, for the fault injector (undefined: no EBS direct call). */
  const actionOf = (method: string, parts: string[]): string | undefined => {
    if (method === "POST" && parts.length === 1) return "StartSnapshot";
    if (method === "POST" && parts[1] === "completion" && parts.length === 3) return "CompleteSnapshot";
    if (method === "PUT" && parts[2] === "blocks" && parts.length === 4) return "PutSnapshotBlock";
    if (method === "GET" && parts[2] === "blocks" && parts.length === 3) return "ListSnapshotBlocks";
    if (method === "GET" && parts[2] === "blocks" && parts.length === 4) return "GetSnapshotBlock";
    if (method === "GET" && parts[2] === "changedblocks" && parts.length === 3) return "ListChangedBlocks";
    return undefined;
  };

  const route = async (
    action: string | undefined,
    method: string,
    parts: string[],
    url: URL,
    headers: Headers,
    body: Buffer,
  ): Promise<EbsAnswer> => {
    switch (action) {
      case "StartSnapshot":
        return startSnapshot(body);
      case "CompleteSnapshot":
        return completeSnapshot(parts[2]!, headers);
      case "PutSnapshotBlock":
        return putBlock(parts[1]!, parts[3]!, headers, body);
      case "ListSnapshotBlocks":
        return listBlocks(parts[1]!, url.searchParams);
      case "GetSnapshotBlock":
        return getBlock(parts[1]!, parts[3]!, url.searchParams);
      case "ListChangedBlocks":
        return listChanged(parts[1]!, url.searchParams);
      default:
        throw new EbsError(404, "ResourceNotFoundException", `no EBS direct call ${method} ${url.pathname}`);
    }
  };

  return {
    async handle(method: string, url: URL, headers: Headers, body: Buffer, accessKeyId?: string): Promise<EbsAnswer> {
      try {
        const parts = url.pathname.split("/").filter(Boolean).map(decodeURIComponent);
        const action = actionOf(method, parts);
        if (action !== undefined) {
          const latency = ctx.faults.latencyMs(action);
          if (latency > 0) await new Promise((resolve) => setTimeout(resolve, latency));
          if (ctx.faults.throttle(action))
            throw new EbsError(400, "RequestThrottledException", "Rate exceeded", "RESOURCE_LEVEL_THROTTLE");
          const refusal = ctx.faults.errorCode(action);
          if (refusal !== undefined) throw new EbsError(400, refusal, `refused with ${refusal} (a fault of the lab)`);
          const snapshotId = action === "CompleteSnapshot" ? parts[2] : parts[1];
          const denied = await ctx.iam.ebsRefusal(ctx, action, snapshotId, body, accessKeyId);
          if (denied !== undefined) throw new EbsError(403, "AccessDeniedException", denied, "UNAUTHORIZED_ACCOUNT");
        }
        const answer = await route(action, method, parts, url, headers, body);
        if (action !== undefined && ctx.faults.applyThen500(action))
          throw new EbsError(500, "InternalServerException", "an internal error (the lab's fault)");
        return answer;
      } catch (error) {
        if (!(error instanceof EbsError)) throw error;
        return json(
          error.status,
          { Message: error.message, ...(error.reason ? { Reason: error.reason } : {}) },
          {
            "x-amzn-errortype": error.type,
          },
        );
      }
    },
  };
}

function sizes(snapshot: SnapshotRecord) {
  return { VolumeSize: snapshot.volumeSize, BlockSize: EBS_BLOCK_BYTES, ExpiryTime: Date.now() / 1000 + 7 * 24 * 3600 };
}

/** maxResults (100–10000, default 10000), startingBlockIndex and pageToken (the next index), as EBS pages. */
function page<T>(
  indices: number[],
  query: URLSearchParams,
  item: (i: number) => T,
): { Blocks: T[]; NextToken?: string } {
  const max = Math.min(10000, Math.max(100, Number(query.get("maxResults") ?? 10000) || 10000));
  const from = Math.max(Number(query.get("pageToken") ?? 0) || 0, Number(query.get("startingBlockIndex") ?? 0) || 0);
  const rest = indices.filter((i) => i >= from);
  const shown = rest.slice(0, max);
  return { Blocks: shown.map(item), ...(rest.length > max ? { NextToken: String(rest[max]) } : {}) };
}

export type EbsDirect = ReturnType<typeof createEbsDirect>;
