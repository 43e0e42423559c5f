/**
 * CloudVolumes over the EC2 SDK: the domain operations (find, claim, wait, release) written
 * against the narrow `Ec2Api`. EC2 error codes become outcomes here (`claimed` / `taken`,
 * "already detached" = success) or typed errors with a remediation (see `errors.ts`).
 *
 * Decisions written down:
 * - Credentials: static (the lab), else the environment's, else the instance profile fetched
 *   with the agent's IMDS timeouts and retries (credentials.ts), once per client.
 * - Throttling and 5xx are retried by the SDK's standard retry strategy (`createEc2Client`);
 *   a call that still fails with an unknown outcome is settled by describing the volume.
 * - AttachVolume is the lock. A VolumeInUse / IncorrectState on the call's first attempt, for a
 *   volume the caller knows was not attached here (`notHeldHere`: a candidate of a listing, the
 *   instance holding nothing), is another instance's claim: `taken`, with no describe (a herd
 *   of losers must not double its calls). Otherwise, after a retried attempt (the SDK's `$metadata.attempts` > 1) or an
 * unknown outcome,
 *   the volume's attachment decides: attached (or attaching) to this instance = `claimed`, so a
 *   call that EC2 applied although it answered 500 (and whose retry then got VolumeInUse)
 *   counts as claimed.
 * - A volume this process has just created may be unknown to AttachVolume for a few seconds
 *   (EC2's eventual consistency): NotFound then is retried until a deadline, not `taken`.
 * - A device name already used on this instance is not an error of the volume: the next free
 *   name of /dev/sdf…/dev/sdp is tried (bounded, each failure a cheap 400 that changed nothing).
 * - CreateVolume carries a ClientToken so an SDK retry after a lost answer cannot make a second
 *   volume, and TagSpecifications so the volume is never visible untagged. EC2 answers a token it
 *   remembers with the volume it made first, gone or not: an answered volume created more than
 *   CREATED_VISIBLE_MS before EC2's time now that EC2 no longer knows (or deletes) is a spent
 *   token (ClientTokenSpentError), not EC2's eventual consistency, and is not waited for.
 * - An AttachVolume failure with an unknown outcome (5xx or network after the SDK's retries)
 *   whose volume then shows no attachment at all is `taken` (left available for another try):
 *   the claim moves on rather than fail the boot.
 * - waitForAttachment polls the attachment itself (`waitUntilVolumeInUse` looks only at the
 *   volume state). Attached to another instance fails at once (AttachmentLostError); no
 *   attachment yet is polled until the deadline (EC2 is eventually consistent).
 * - DetachVolume is never forced. NotFound (volume or attachment) and IncorrectState are
 *   success unless a describe shows the volume still attaching/attached to this instance.
 * - DeleteTags without keys would delete every tag: `untagVolume([])` sends nothing.
 */
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import {
  EC2Client,
  type CreateVolumeCommandInput,
  type DescribeVolumesCommandInput,
  type Instance,
  type Filter,
  type Snapshot,
  type Tag,
  type Volume,
  type VolumeAttachment,
} from "@aws-sdk/client-ec2";
import type {
  AttachmentState,
  Cancellable,
  CreateOptions,
  ClaimOptions,
  ClaimOutcome,
  CloudClock,
  CloudVolumes,
  InstanceInfo,
  SnapshotInfo,
  VolumeInfo,
  VolumeQuery,
  VolumeState,
} from "../agent/ports.ts";
import type { AwsCredentialIdentityProvider } from "@smithy/types";
import { createLogger, type Logger } from "../log.ts";
import { cloudClockOf } from "./cloud-clock.ts";
import { agentCredentials, type InstanceProfileOptions, type StaticCredentials } from "./credentials.ts";
import { isEc2Client, sdkEc2Api, type Ec2Api } from "./ec2-api.ts";
import {
  AttachmentLimitError,
  ClientTokenSpentError,
  AttachmentLostError,
  AttachmentTimeoutError,
  DeviceNameError,
  VolumeCreateError,
  classifyEc2Error,
  ec2CallError,
  outcomeUnknown,
  type Ec2Failure,
} from "./errors.ts";
import { DEFAULT_IMDS_ENDPOINT } from "./imds.ts";
import { DEFAULT_MAX_ATTEMPTS } from "./max-attempts.ts";

/** How to build the SDK client. */
export interface Ec2ClientOptions {
  region: string;
  /** Another endpoint than EC2's regional one (the lab's emulator, a VPC endpoint). */
  endpoint?: string;
  /** Attempts per call, first included (default DEFAULT_MAX_ATTEMPTS). */
  maxAttempts?: number;
  /**
   * `standard` (default): jittered exponential backoff, throttling with a longer base delay.
   * `adaptive` adds a client-side rate limiter, which learns little from the agent's few
   * sequential calls; the jitter is what spreads a boot storm across instances.
   */
  retryMode?: "standard" | "adaptive";
  /** Static credentials (the lab, tests); else the environment's, else the instance profile. */
  credentials?: StaticCredentials;
  /**
   * How the instance profile's credentials are fetched (the agent's IMDS endpoint, timeouts and
   * budget). Default: the link-local IMDS (or AWS_EC2_METADATA_SERVICE_ENDPOINT), 5 s per
   * request, 60 s in all.
   */
  instanceProfile?: Partial<InstanceProfileOptions>;
  /**
   * Another source of credentials than the node's (static, environment, instance profile): the fleet
   * commands' standard chain (fleet-credentials.ts). Wins over `credentials` and `instanceProfile`.
   */
  credentialChain?: AwsCredentialIdentityProvider;
  /** Per-request socket timeout (default 30 s): a hung connection must not hang the boot. */
  requestTimeoutMs?: number;
}

/**
 * The EC2 client the agent uses, with a retry strategy fit for a boot storm and credentials fetched once per client.
 */
export function createEc2Client(options: Ec2ClientOptions): EC2Client {
  const instanceProfile: InstanceProfileOptions = {
    endpoint: process.env.AWS_EC2_METADATA_SERVICE_ENDPOINT ?? DEFAULT_IMDS_ENDPOINT,
    requestTimeoutMs: 5_000,
    budgetMs: 60_000,
    ...options.instanceProfile,
  };
  return new EC2Client({
    region: options.region,
    ...(options.endpoint !== undefined ? { endpoint: options.endpoint } : {}),
    // A provider function: the client memoizes it (one fetch for concurrent calls) and refreshes it before expiry.
    credentials:
      options.credentialChain ??
      agentCredentials({ ...(options.credentials ? { static: options.credentials } : {}), instanceProfile }),
    maxAttempts: options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
    retryMode: options.retryMode ?? "standard",
    requestHandler: {
      connectionTimeout: 5_000,
      requestTimeout: options.requestTimeoutMs ?? 30_000,
      // Without it the SDK only warns once the time is over and waits on: a hung endpoint hung the command.
      throwOnRequestTimeout: true,
    },
  });
}

/** How to build CloudVolumes. */
export interface CloudVolumesOptions {
  /** The SDK client (or the narrow interface over one). */
  client: EC2Client | Ec2Api;
  log?: Logger;
  /** Interval between DescribeVolumes while waiting for a state (default 1000 ms). */
  pollMs?: number;
  /** How long createVolume waits for `available` (default 5 min). */
  createTimeoutMs?: number;
  /** MaxResults of Describe* pages (EC2 accepts 5 or more), capped at what each action allows (default: the cap). */
  pageSize?: number;
  /** EC2's clock; default: the one the SDK client's answers teach (cloudClockOf). Required with an Ec2Api. */
  clock?: CloudClock;
  /**
   * One DescribeInstances per instance for the adapter's life (a command's): its identification and
   * its observation read the same answer; `fresh` asks again, a failed call is not remembered.
   * Default: every call asks EC2.
   */
  shareDescribeInstance?: boolean;
}

/** Device names the agent attaches at, in order (EC2's recommended range for EBS data volumes). */
export const DEVICE_NAMES: readonly string[] = "fghijklmnop".split("").map((letter) => `/dev/sd${letter}`);

const MAX_PAGE = { DescribeVolumes: 500, DescribeSnapshots: 1000 } as const;
/** EC2's smallest MaxResults for Describe* calls. */
const MIN_PAGE = 5;
/**
 * How a new volume is polled until `available`: from 100 ms, ×1.5, up to 250 ms, for the first
 * 30 s (a volume from a snapshot takes seconds to tens of seconds; each second of polling
 * interval is half a second of boot on average), then at `pollMs`. A 15 s creation costs 63
 * DescribeVolumes (at 1 s it was 16): ~4 per second, a fifth of the 20 per second that refill an
 * account's DescribeVolumes bucket (EC2's request throttling, per account and region), and only
 * while a boot creates a volume.
 */
export const CREATE_POLL = { firstMs: 100, factor: 1.5, maxMs: 250, fastForMs: 30_000 } as const;

/** The pause before the next poll of a volume being created, `elapsedMs` into the wait. */
export function createPollPause(previousMs: number | undefined, elapsedMs: number, pollMs: number): number {
  if (elapsedMs >= CREATE_POLL.fastForMs) return pollMs;
  const cap = Math.min(CREATE_POLL.maxMs, pollMs);
  return previousMs === undefined
    ? Math.min(CREATE_POLL.firstMs, cap)
    : Math.min(cap, Math.round(previousMs * CREATE_POLL.factor));
}

/** How long a volume this process created may stay invisible to AttachVolume (eventual consistency). */
const CREATED_VISIBLE_MS = 30_000;

/** An attachment this instance holds (or is getting). */
const HELD: readonly AttachmentState[] = ["attaching", "attached", "busy"];

type VolumeSpec = Parameters<CloudVolumes["createVolume"]>[0];

/** What every operation of CloudVolumes shares: the API, the log, EC2's clock and the timing settings. */
interface Ec2Context {
  api: Ec2Api;
  log: Logger;
  clock: CloudClock;
  pollMs: number;
  createTimeoutMs: number;
  /** MaxResults for an action's pages: the configured page size, capped at what the action allows. */
  pageSize: (action: keyof typeof MAX_PAGE) => number;
}

/** CloudVolumes backed by EC2. */
export function createCloudVolumes(options: CloudVolumesOptions): CloudVolumes {
  const clock = options.clock ?? (isEc2Client(options.client) ? cloudClockOf(options.client, options.log) : undefined);
  if (!clock) throw new Error("createCloudVolumes: an Ec2Api needs the clock its answers teach");
  const ctx: Ec2Context = {
    api: isEc2Client(options.client) ? sdkEc2Api(options.client) : options.client,
    log: options.log ?? createLogger(() => undefined),
    clock,
    pollMs: options.pollMs ?? 1000,
    createTimeoutMs: options.createTimeoutMs ?? 300_000,
    pageSize: (action) => Math.min(options.pageSize ?? MAX_PAGE[action], MAX_PAGE[action]),
  };
  const cloud: CloudVolumes = {
    clock,
    findVolumes: (query, options) => findVolumes(ctx, query, options),
    describeVolume: (volumeId, options) => describeVolume(ctx, volumeId, options),
    describeInstance: (instanceId, options) => describeInstance(ctx, instanceId, options),
    describeInstances: (instanceIds, options) => describeInstances(ctx, instanceIds, options),
    findSnapshots: (tags, options) => findSnapshots(ctx, tags, options),
    createVolume: (spec, options) => createVolume(ctx, spec, options),
    claimVolume: (volumeId, instanceId, device, options) => claimVolume(ctx, volumeId, instanceId, device, options),
    waitForAttachment: (volumeId, instanceId, state, timeoutMs, options) =>
      waitForAttachment(ctx, volumeId, instanceId, state, timeoutMs, options),
    detachVolume: (volumeId, instanceId, options) => detachVolume(ctx, volumeId, instanceId, options),
    deleteVolume: (volumeId) => deleteVolume(ctx, volumeId),
    tagVolume: async (volumeId, tags, options) => {
      if (Object.keys(tags).length === 0) return;
      await call("CreateTags", () => ctx.api.createTags({ Resources: [volumeId], Tags: toTags(tags) }, options));
    },
    untagVolume: async (volumeId, keys, options) => {
      // A tag with a Value is deleted only while it has that value (see CloudVolumes.untagVolume).
      const tags: Tag[] = Array.isArray(keys) ? keys.map((Key) => ({ Key })) : toTags(keys);
      // DeleteTags without Tag entries deletes every tag of the resource.
      if (tags.length === 0) return;
      await call("DeleteTags", () => ctx.api.deleteTags({ Resources: [volumeId], Tags: tags }, options));
    },
    initializationStatus: (volumeId) => initializationStatus(ctx, volumeId),
  };
  return options.shareDescribeInstance ? sharingDescribeInstance(cloud) : cloud;
}

/** CloudVolumes whose describeInstance answers each instance once (see shareDescribeInstance). */
function sharingDescribeInstance(cloud: CloudVolumes): CloudVolumes {
  const answers = new Map<string, ReturnType<CloudVolumes["describeInstance"]>>();
  return {
    ...cloud,
    describeInstance(instanceId, call) {
      let answer = call?.fresh ? undefined : answers.get(instanceId);
      if (!answer) {
        answer = cloud.describeInstance(instanceId, call);
        answers.set(instanceId, answer);
        answer.catch(() => answers.delete(instanceId));
      }
      return answer;
    },
  };
}

/** Aborted waits end at once: the caller (a boot cancelled by SIGTERM) undoes what it did. */
function pause(ms: number, options?: Cancellable): Promise<void> {
  return sleep(ms, undefined, options?.signal ? { signal: options.signal } : {});
}

/** Runs one EC2 call (or walks one listing); failures become typed errors naming the action. */
async function call<T>(action: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    if (isAbort(error)) throw error;
    throw ec2CallError(action, error);
  }
}

/** The server-side filters of a volume query. */
function volumeFilters(query: VolumeQuery): Filter[] {
  const filters: Filter[] = tagFilters(query.tags);
  if (query.availabilityZone !== undefined)
    filters.push({ Name: "availability-zone", Values: [query.availabilityZone] });
  if (query.status !== undefined && query.status.length > 0)
    filters.push({ Name: "status", Values: [...query.status] });
  if (query.attachedTo !== undefined) filters.push({ Name: "attachment.instance-id", Values: [query.attachedTo] });
  return filters;
}

/**
 * The volumes matching a query. With `firstPage`, one bounded page of candidates: one call
 * however large the pool (a boot's EC2 calls stay constant); otherwise every page.
 */
async function findVolumes(
  ctx: Ec2Context,
  query: VolumeQuery,
  options?: Cancellable & { firstPage?: number },
): Promise<VolumeInfo[]> {
  const filters = volumeFilters(query);
  let volumes: Volume[];
  if (query.volumeIds !== undefined) {
    if (query.volumeIds.length === 0) return [];
    // EC2 refuses MaxResults together with VolumeIds: a query by id is one answer anyway.
    volumes = await call("DescribeVolumes", () =>
      allVolumes(ctx, { Filters: filters, VolumeIds: query.volumeIds }, options),
    );
  } else if (options?.firstPage !== undefined) {
    const maxResults = Math.max(MIN_PAGE, Math.min(options.firstPage, ctx.pageSize("DescribeVolumes")));
    const out = await call("DescribeVolumes", () =>
      ctx.api.describeVolumes({ Filters: filters, MaxResults: maxResults }, options),
    );
    volumes = out.Volumes ?? [];
  } else {
    const maxResults = Math.max(MIN_PAGE, ctx.pageSize("DescribeVolumes"));
    volumes = await call("DescribeVolumes", () =>
      allVolumes(ctx, { Filters: filters, MaxResults: maxResults }, options),
    );
  }
  const launchDisks = volumes.filter(isLaunchDisk);
  ctx.log.debug("ec2.find-volumes", `${volumes.length - launchDisks.length} volumes match`, {
    filters: JSON.stringify(filters),
    ...(launchDisks.length > 0 ? { ignoredLaunchDisks: launchDisks.map((v) => v.VolumeId).join(",") } : {}),
  });
  return volumes.filter((v) => !isLaunchDisk(v)).map(toVolumeInfo);
}

async function allVolumes(
  ctx: Ec2Context,
  input: DescribeVolumesCommandInput,
  options?: Cancellable,
): Promise<Volume[]> {
  const volumes: Volume[] = [];
  for await (const page of ctx.api.describeVolumesPages(input, options)) volumes.push(...(page.Volumes ?? []));
  return volumes;
}

async function describeVolume(
  ctx: Ec2Context,
  volumeId: string,
  options?: Cancellable,
): Promise<VolumeInfo | undefined> {
  try {
    const out = await ctx.api.describeVolumes({ VolumeIds: [volumeId] }, options);
    const found = out.Volumes?.find((v) => v.VolumeId === volumeId);
    return found && toVolumeInfo(found);
  } catch (error) {
    if (isAbort(error)) throw error;
    if (classifyEc2Error(error).kind === "not-found") return undefined;
    throw ec2CallError("DescribeVolumes", error);
  }
}

async function describeInstance(ctx: Ec2Context, instanceId: string, options?: Cancellable): Promise<InstanceInfo> {
  const out = await call("DescribeInstances", () => ctx.api.describeInstances({ InstanceIds: [instanceId] }, options));
  const instance = out.Reservations?.flatMap((r) => r.Instances ?? []).find((i) => i.InstanceId === instanceId);
  if (!instance) throw ec2CallError("DescribeInstances", new Error(`the answer does not describe ${instanceId}`));
  return instanceInfo(instance);
}

/** Instances by id, 100 ids a call; ids EC2 does not know (terminated long ago) are left out. */
async function describeInstances(
  ctx: Ec2Context,
  instanceIds: readonly string[],
  options?: Cancellable,
): Promise<InstanceInfo[]> {
  const found: InstanceInfo[] = [];
  const ids = [...new Set(instanceIds)];
  for (let i = 0; i < ids.length; i += 100) {
    // Filtered by instance-id rather than InstanceIds: one unknown id does not fail the whole call.
    const out = await call("DescribeInstances", () =>
      ctx.api.describeInstances({ Filters: [{ Name: "instance-id", Values: ids.slice(i, i + 100) }] }, options),
    );
    for (const instance of out.Reservations?.flatMap((r) => r.Instances ?? []) ?? [])
      if (instance.InstanceId) found.push(instanceInfo(instance));
  }
  return found;
}

function instanceInfo(instance: Instance): InstanceInfo {
  const instanceId = instance.InstanceId!;
  const root = instance.RootDeviceName;
  return {
    instanceId,
    state: instance.State?.Name ?? "unknown",
    tags: tagRecord(instance.Tags),
    volumes: (instance.BlockDeviceMappings ?? [])
      .filter((m) => m.Ebs?.VolumeId && m.DeviceName !== root && m.Ebs.Status !== "detached")
      .map((m) => ({ volumeId: m.Ebs!.VolumeId!, device: m.DeviceName ?? "", status: m.Ebs!.Status ?? "attached" })),
    ...(instance.LaunchTime ? { launchTime: instance.LaunchTime.toISOString() } : {}),
    ...(instance.StateTransitionReason ? { stateTransitionReason: instance.StateTransitionReason } : {}),
  };
}

/** Every snapshot of the account with these tags, whatever its state (the keeper orders by start time). */
async function findSnapshots(
  ctx: Ec2Context,
  tags: Record<string, string>,
  options?: Cancellable,
): Promise<SnapshotInfo[]> {
  const input = { OwnerIds: ["self"], Filters: tagFilters(tags), MaxResults: ctx.pageSize("DescribeSnapshots") };
  return call("DescribeSnapshots", async () => {
    const snapshots: SnapshotInfo[] = [];
    for await (const page of ctx.api.describeSnapshotsPages(input, options)) {
      for (const snapshot of page.Snapshots ?? []) snapshots.push(toSnapshotInfo(snapshot));
    }
    return snapshots;
  });
}

/**
 * The CreateVolume request for a spec, as the caller built it (its config `volumes` and its token
 * included): nothing is added here, so what the caller planned is what EC2 receives.
 */
export function createVolumeInput(spec: VolumeSpec & { clientToken: string }): CreateVolumeCommandInput {
  const creation = spec.creation;
  const input: CreateVolumeCommandInput = {
    AvailabilityZone: spec.availabilityZone,
    VolumeType: spec.volumeType as CreateVolumeCommandInput["VolumeType"],
    // The operator's tags first: the agent's own (disjoint by the config's check) are the spec's.
    TagSpecifications: [{ ResourceType: "volume", Tags: toTags({ ...creation?.tags, ...spec.tags }) }],
    ClientToken: spec.clientToken,
  };
  if (spec.snapshotId !== undefined) input.SnapshotId = spec.snapshotId;
  if (spec.sizeGiB !== undefined) input.Size = spec.sizeGiB;
  if (spec.initializationRateMiBps !== undefined) input.VolumeInitializationRate = spec.initializationRateMiBps;
  if (creation?.encrypted) input.Encrypted = true;
  if (creation?.kmsKeyId !== undefined) input.KmsKeyId = creation.kmsKeyId;
  if (creation?.iops !== undefined) input.Iops = creation.iops;
  if (creation?.throughputMiBps !== undefined) input.Throughput = creation.throughputMiBps;
  return input;
}

async function createVolume(ctx: Ec2Context, spec: VolumeSpec, options?: CreateOptions): Promise<VolumeInfo> {
  // The same token on every SDK retry of this call: EC2 makes one volume, not one per attempt.
  const clientToken = spec.clientToken ?? randomUUID();
  const input = createVolumeInput({ ...spec, clientToken });
  const created = await call("CreateVolume", () => ctx.api.createVolume(input, options));
  const volumeId = created.VolumeId;
  if (!volumeId) throw ec2CallError("CreateVolume", new Error("the answer names no volume id"));
  if (created.CreateTime && ctx.clock.now().getTime() - created.CreateTime.getTime() > CREATED_VISIBLE_MS) {
    // An earlier request's volume, long enough ago for any describe to see it: gone means spent.
    const now = await describeVolume(ctx, volumeId, options);
    if (!now || now.state === "deleting" || now.state === "deleted") {
      ctx.log.info("ec2.create-volume", "the client token answered a volume that is gone: no volume made", {
        volumeId,
        clientToken,
        state: now?.state ?? "not found",
      });
      throw new ClientTokenSpentError(clientToken, volumeId);
    }
  }
  ctx.log.info("ec2.create-volume", "volume created, waiting until available", {
    volumeId,
    zone: spec.availabilityZone,
    snapshotId: spec.snapshotId,
    initializationRate: spec.initializationRateMiBps,
  });
  const timeoutMs = ctx.createTimeoutMs;
  // Not found at first is EC2's eventual consistency: keep polling.
  const ready = await pollVolume(
    ctx,
    volumeId,
    timeoutMs,
    (volume) => volume !== undefined && volume.state !== "creating",
    (last) =>
      new VolumeCreateError(
        volumeId,
        `still ${last ? `'${last.state}'` : "not visible"} after ${Math.round(timeoutMs / 1000)} s`,
      ),
    {
      ...(options?.signal ? { signal: options.signal } : {}),
      ...(options?.onWait ? { onPoll: options.onWait } : {}),
      interval: (previousMs, elapsedMs) => createPollPause(previousMs, elapsedMs, ctx.pollMs),
    },
  );
  // `in-use`: another agent claimed it already (it carries pool tags); the caller's claim will say so.
  if (!ready || (ready.state !== "available" && ready.state !== "in-use")) {
    throw new VolumeCreateError(volumeId, `EC2 reports it '${ready?.state ?? "gone"}'`);
  }
  ctx.log.info("ec2.create-volume", "volume available", { volumeId });
  return ready;
}

/**
 * Polls the volume until `done` holds; returns the last volume seen, or throws `onTimeout`'s
 * error. Every `pollMs`, or as `interval` says (given the previous pause and the time waited).
 */
async function pollVolume(
  ctx: Ec2Context,
  volumeId: string,
  timeoutMs: number,
  done: (volume: VolumeInfo | undefined) => boolean,
  onTimeout: (last: VolumeInfo | undefined) => Error,
  options?: Cancellable & {
    interval?: (previousMs: number | undefined, elapsedMs: number) => number;
    /** Told each look at the volume that is not yet what is awaited. */
    onPoll?: (volume: VolumeInfo | undefined) => void;
  },
): Promise<VolumeInfo | undefined> {
  const started = Date.now();
  const deadline = started + timeoutMs;
  const call = options?.signal ? { signal: options.signal } : {};
  let previous: number | undefined;
  for (;;) {
    const volume = await describeVolume(ctx, volumeId, call);
    if (done(volume)) return volume;
    options?.onPoll?.(volume);
    const remaining = deadline - Date.now();
    if (remaining <= 0) throw onTimeout(volume);
    previous = options?.interval ? options.interval(previous, Date.now() - started) : ctx.pollMs;
    await pause(Math.min(previous, remaining), call);
  }
}

/** AttachVolume as the lock: `claimed`, `taken` (move on), or a typed error. */
async function claimVolume(
  ctx: Ec2Context,
  volumeId: string,
  instanceId: string,
  device: string,
  options?: ClaimOptions,
): Promise<ClaimOutcome> {
  const { api, log } = ctx;
  const tried: string[] = [];
  let name = device;
  const notFoundUntil = Date.now() + (options?.justCreated ? CREATED_VISIBLE_MS : 0);
  for (let round = 1; ; round++) {
    tried.push(name);
    try {
      await api.attachVolume({ VolumeId: volumeId, InstanceId: instanceId, Device: name }, options);
      log.info("ec2.claim", "AttachVolume accepted: claimed", { volumeId, instanceId, device: name });
      return { kind: "claimed" };
    } catch (error) {
      if (isAbort(error)) throw error;
      const failure = classifyEc2Error(error);
      switch (failure.kind) {
        case "volume-in-use":
        case "incorrect-state":
        case "zone-mismatch": {
          // Refused at the call's first attempt, for a volume the caller knows was not
          // attached here before: EC2 changed nothing, so another instance holds it.
          if (options?.notHeldHere && attemptsOf(error) === 1 && tried.length === 1 && round === 1) {
            log.info("ec2.claim", "taken", { volumeId, instanceId, code: failure.code });
            return { kind: "taken", reason: `${failure.code}: ${volumeId} is held by another instance` };
          }
          const outcome = await settleClaim(ctx, volumeId, instanceId, failure, options);
          if (outcome.kind === "taken")
            log.info("ec2.claim", "taken", { volumeId, instanceId, reason: outcome.reason });
          return outcome;
        }
        case "not-found":
          if (Date.now() < notFoundUntil) {
            log.info(
              "ec2.claim",
              "the new volume is not visible to AttachVolume yet (EC2's eventual consistency): retrying",
              { volumeId },
            );
            tried.pop();
            await pause(Math.min(ctx.pollMs, 1000) * Math.min(round, 4), options);
            continue;
          }
          return { kind: "taken", reason: `${failure.code}: ${volumeId} does not exist (any more)` };
        case "device-in-use": {
          const next = DEVICE_NAMES.find((candidate) => !tried.includes(candidate));
          if (next === undefined) throw new DeviceNameError(instanceId, volumeId, tried, error);
          log.info("ec2.claim", "device name in use on this instance, trying the next", {
            volumeId,
            device: name,
            next,
          });
          name = next;
          continue;
        }
        case "invalid-device":
          throw new DeviceNameError(instanceId, volumeId, tried, error);
        case "attachment-limit": {
          // Unless the volume is one of those attachments (an earlier run's claim).
          const outcome = await settleClaim(ctx, volumeId, instanceId, failure, options);
          if (outcome.kind === "claimed") return outcome;
          throw new AttachmentLimitError(instanceId, volumeId, error);
        }
        default: {
          if (!outcomeUnknown(failure)) throw ec2CallError("AttachVolume", error);
          log.warning("ec2.claim", "AttachVolume outcome unknown, describing the volume", {
            volumeId,
            instanceId,
            code: failure.code,
          });
          const outcome = await settleClaim(ctx, volumeId, instanceId, failure, options);
          if (outcome.kind === "taken")
            log.warning("ec2.claim", "taken", { volumeId, instanceId, reason: outcome.reason });
          return outcome;
        }
      }
    }
  }
}

/** After a failed AttachVolume: the volume's attachment says whether this instance holds it. */
async function settleClaim(
  ctx: Ec2Context,
  volumeId: string,
  instanceId: string,
  failure: Ec2Failure,
  options?: Cancellable,
): Promise<ClaimOutcome> {
  const volume = await describeVolume(ctx, volumeId, options);
  if (!volume) return { kind: "taken", reason: `${failure.code}: ${volumeId} no longer exists` };
  const attachment = volume.attachment;
  if (attachment?.instanceId === instanceId && HELD.includes(attachment.state)) {
    ctx.log.notice(
      "ec2.claim",
      `AttachVolume answered ${failure.code}, yet the volume is ${attachment.state} here: claimed`,
      {
        volumeId,
        instanceId,
        device: attachment.device,
      },
    );
    return { kind: "claimed" };
  }
  const where = attachment
    ? `${attachment.state} to ${attachment.instanceId}`
    : `'${volume.state}' in ${volume.availabilityZone}, not attached`;
  return { kind: "taken", reason: `${failure.code}: ${volumeId} is ${where}` };
}

async function waitForAttachment(
  ctx: Ec2Context,
  volumeId: string,
  instanceId: string,
  state: "attached" | "detached",
  timeoutMs: number,
  options?: Cancellable,
): Promise<void> {
  const describe = (volume: VolumeInfo | undefined) => {
    if (!volume) return "volume not found";
    const a = volume.attachment;
    return a ? `${a.state} to ${a.instanceId}` : `'${volume.state}', no attachment`;
  };
  await pollVolume(
    ctx,
    volumeId,
    timeoutMs,
    (volume) => {
      const attachment = volume?.attachment;
      if (state === "detached") {
        return attachment === undefined || attachment.instanceId !== instanceId || attachment.state === "detached";
      }
      if (attachment && attachment.instanceId !== instanceId) {
        throw new AttachmentLostError(volumeId, instanceId, attachment.instanceId);
      }
      return attachment?.state === "attached" || attachment?.state === "busy";
    },
    (last) => new AttachmentTimeoutError(volumeId, instanceId, state, describe(last), timeoutMs),
    options,
  );
  ctx.log.info("ec2.attachment", `${volumeId} ${state}`, { volumeId, instanceId });
}

async function detachVolume(
  ctx: Ec2Context,
  volumeId: string,
  instanceId: string,
  options?: Cancellable,
): Promise<void> {
  try {
    // Never Force: on EC2 it can lose data, and a stuck detach needs a person, not the agent.
    await ctx.api.detachVolume({ VolumeId: volumeId, InstanceId: instanceId }, options);
    ctx.log.info("ec2.detach", "DetachVolume accepted", { volumeId, instanceId });
    return;
  } catch (error) {
    if (isAbort(error)) throw error;
    const failure = classifyEc2Error(error);
    if (failure.kind === "not-found" || failure.kind === "attachment-not-found") {
      ctx.log.info("ec2.detach", "not attached to this instance: nothing to detach", {
        volumeId,
        instanceId,
        code: failure.code,
      });
      return;
    }
    if (failure.kind !== "incorrect-state" && !outcomeUnknown(failure)) throw ec2CallError("DetachVolume", error);
    // IncorrectState: already detached (or detaching). Unknown outcome: maybe applied.
    const attachment = (await describeVolume(ctx, volumeId, options))?.attachment;
    if (attachment?.instanceId === instanceId && HELD.includes(attachment.state)) {
      throw ec2CallError("DetachVolume", error);
    }
    ctx.log.info("ec2.detach", `DetachVolume answered ${failure.code}; the volume is not held here`, {
      volumeId,
      instanceId,
      attachment: attachment ? `${attachment.state} to ${attachment.instanceId}` : "none",
    });
  }
}

async function deleteVolume(ctx: Ec2Context, volumeId: string): Promise<"deleted" | "gone"> {
  try {
    await ctx.api.deleteVolume({ VolumeId: volumeId });
    ctx.log.info("ec2.delete", "DeleteVolume accepted", { volumeId });
    return "deleted";
  } catch (error) {
    if (classifyEc2Error(error).kind === "not-found") return "gone";
    throw ec2CallError("DeleteVolume", error);
  }
}

async function initializationStatus(ctx: Ec2Context, volumeId: string) {
  const out = await call("DescribeVolumeStatus", () => ctx.api.describeVolumeStatus({ VolumeIds: [volumeId] }));
  const details = out.VolumeStatuses?.find((s) => s.VolumeId === volumeId)?.InitializationStatusDetails;
  if (!details || details.Progress === undefined) return undefined;
  return {
    type: details.InitializationType ?? "default",
    progress: details.Progress,
    ...(details.EstimatedTimeToCompleteInSeconds !== undefined
      ? { etaSeconds: details.EstimatedTimeToCompleteInSeconds }
      : {}),
  };
}

/** How many attempts the SDK made for a failed call (1: it refused the first, nothing was retried). */
function attemptsOf(error: unknown): number | undefined {
  return (error as { $metadata?: { attempts?: number } } | undefined)?.$metadata?.attempts;
}

/** An aborted call (cancellation), which is no EC2 failure and must not be classified as one. */
function isAbort(error: unknown): boolean {
  return (error as { name?: unknown } | undefined)?.name === "AbortError";
}

/** EC2 filter values treat `*`, `?` and `\` as wildcards / escape: a literal value escapes them. */
export function escapeFilterValue(value: string): string {
  return value.replace(/[\\*?]/g, "\\$&");
}

/** One filter per tag: `tag:K` = the exact value, or `tag-key` = K for the value "*". */
export function tagFilters(tags: Record<string, string>): Filter[] {
  return Object.entries(tags).map(([key, value]) =>
    value === "*"
      ? { Name: "tag-key", Values: [escapeFilterValue(key)] }
      : { Name: `tag:${key}`, Values: [escapeFilterValue(value)] },
  );
}

function toTags(tags: Record<string, string>): Tag[] {
  return Object.entries(tags).map(([Key, Value]) => ({ Key, Value }));
}

function tagRecord(tags: Tag[] | undefined): Record<string, string> {
  const record: Record<string, string> = {};
  for (const tag of tags ?? []) if (tag.Key !== undefined) record[tag.Key] = tag.Value ?? "";
  return record;
}

function toAttachment(attachment: VolumeAttachment): VolumeInfo["attachment"] {
  return {
    instanceId: attachment.InstanceId ?? "",
    device: attachment.Device ?? "",
    state: (attachment.State ?? "attaching") as AttachmentState,
  };
}

/** The device names an AMI's root volume sits at (Amazon Linux's and Debian's / Ubuntu's). */
const ROOT_DEVICE_NAMES: readonly string[] = ["/dev/xvda", "/dev/sda1", "/dev/sda", "/dev/nvme0n1"];

/**
 * Whether a volume is a disk of its instance's launch (the AMI's root, or another disk of its block
 * device mapping): EC2 deletes it with the instance, or it sits at a root device name. osparc's
 * RunInstances copies every instance tag onto those disks (`launch_instances`' `volume`
 * TagSpecification), so `ebs-cache:*` tags given through EC2_INSTANCES_CUSTOM_TAGS land on them too.
 * The agent attaches its volumes with DeleteOnTermination false, at /dev/sdf…/dev/sdp only: such a
 * disk is never one of its own, whatever its tags say, and no listing returns it.
 */
export function isLaunchDisk(volume: Pick<Volume, "Attachments">): boolean {
  return (volume.Attachments ?? []).some(
    (a) => a.State !== "detached" && (a.DeleteOnTermination === true || ROOT_DEVICE_NAMES.includes(a.Device ?? "")),
  );
}

/** A volume as the agent sees it; EC2 volumes here are never multi-attach, so one attachment. */
function toVolumeInfo(volume: Volume): VolumeInfo {
  const attachment = volume.Attachments?.find((a) => a.State !== "detached");
  const info: VolumeInfo = {
    volumeId: volume.VolumeId ?? "",
    availabilityZone: volume.AvailabilityZone ?? "",
    state: (volume.State ?? "error") as VolumeState,
    sizeGiB: volume.Size ?? 0,
    tags: tagRecord(volume.Tags),
  };
  // EC2 answers an empty SnapshotId for a volume not made from a snapshot.
  if (volume.SnapshotId) info.snapshotId = volume.SnapshotId;
  if (volume.CreateTime) info.createTime = volume.CreateTime;
  if (attachment) info.attachment = toAttachment(attachment);
  if (volume.VolumeType) info.volumeType = volume.VolumeType;
  if (volume.Iops !== undefined) info.iops = volume.Iops;
  if (volume.Throughput !== undefined) info.throughputMiBps = volume.Throughput;
  if (volume.Encrypted !== undefined) info.encrypted = volume.Encrypted;
  if (volume.KmsKeyId) info.kmsKeyId = volume.KmsKeyId;
  return info;
}

function toSnapshotInfo(snapshot: Snapshot): SnapshotInfo {
  const info: SnapshotInfo = {
    snapshotId: snapshot.SnapshotId ?? "",
    state: (snapshot.State ?? "error") as SnapshotInfo["state"],
    volumeSizeGiB: snapshot.VolumeSize ?? 0,
    tags: tagRecord(snapshot.Tags),
  };
  if (snapshot.StartTime) info.startTime = snapshot.StartTime;
  return info;
}
