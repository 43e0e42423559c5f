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
 *   of losers must not double its calls). Otherwise, after a retried attempt (the SDK's `$metadata.attempts` > 1) or an unknown outcome,
 *   the volume's attachment decides: attached (or attaching) to this instance = `claimed`, so a
 *   call that EC2 applied although it answered 500 (and whose retry then got VolumeInUse)
 *   counts as claimed.
 * - A volume this process has just created may be unknown to AttachVolume for a few seconds
 *   (EC2's eventual consistency): NotFound then is retried until a deadline, not `taken`.
 * - A device name already used on this instance is not an error of the volume: the next free
 *   name of /dev/sdf…/dev/sdp is tried (bounded, each failure a cheap 400 that changed nothing).
 * - CreateVolume carries a ClientToken so an SDK retry after a lost answer cannot make a second
 *   volume, and TagSpecifications so the volume is never visible untagged.
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
  type Filter,
  type Snapshot,
  type Tag,
  type Volume,
  type VolumeAttachment,
} from "@aws-sdk/client-ec2";
import type {
  AttachmentState,
  Cancellable,
  ClaimOptions,
  ClaimOutcome,
  CloudVolumes,
  InstanceInfo,
  SnapshotInfo,
  VolumeInfo,
  VolumeQuery,
  VolumeState,
} from "../agent/ports.ts";
import { createLogger, type Logger } from "../log.ts";
import { agentCredentials, type InstanceProfileOptions, type StaticCredentials } from "./credentials.ts";
import { isEc2Client, sdkEc2Api, type Ec2Api } from "./ec2-api.ts";
import {
  AttachmentLimitError,
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

/** Attempts per EC2 call: enough to ride out throttling while a fleet boots at once (~1 min of backoff). */
export const DEFAULT_MAX_ATTEMPTS = 10;

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
  /** Per-request socket timeout (default 30 s): a hung connection must not hang the boot. */
  requestTimeoutMs?: number;
}

/** The EC2 client the agent uses, with a retry strategy fit for a boot storm and credentials fetched once per client. */
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
    credentials: agentCredentials({ ...(options.credentials ? { static: options.credentials } : {}), instanceProfile }),
    maxAttempts: options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
    retryMode: options.retryMode ?? "standard",
    requestHandler: { connectionTimeout: 5_000, requestTimeout: options.requestTimeoutMs ?? 30_000 },
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
  return previousMs === undefined ? Math.min(CREATE_POLL.firstMs, cap) : Math.min(cap, Math.round(previousMs * CREATE_POLL.factor));
}

/** How long a volume this process created may stay invisible to AttachVolume (eventual consistency). */
const CREATED_VISIBLE_MS = 30_000;

/** An attachment this instance holds (or is getting). */
const HELD: readonly AttachmentState[] = ["attaching", "attached", "busy"];

/** CloudVolumes backed by EC2. */
export function createCloudVolumes(options: CloudVolumesOptions): CloudVolumes {
  const api = isEc2Client(options.client) ? sdkEc2Api(options.client) : options.client;
  const log = options.log ?? createLogger(() => undefined);
  const pollMs = options.pollMs ?? 1000;
  const createTimeoutMs = options.createTimeoutMs ?? 300_000;
  const pageSize = (action: keyof typeof MAX_PAGE) => Math.min(options.pageSize ?? MAX_PAGE[action], MAX_PAGE[action]);

  /** Aborted waits end at once: the caller (a boot cancelled by SIGTERM) undoes what it did. */
  const pause = (ms: number, options?: Cancellable) => sleep(ms, undefined, options?.signal ? { signal: options.signal } : {});

  /** Runs one EC2 call; failures become typed errors naming the action. */
  const call = async <T>(action: string, fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (error) {
      if (isAbort(error)) throw error;
      throw ec2CallError(action, error);
    }
  };

  const describeVolume = async (volumeId: string, options?: Cancellable): Promise<VolumeInfo | undefined> => {
    try {
      const out = await api.describeVolumes({ VolumeIds: [volumeId] }, options);
      const found = out.Volumes?.find((v) => v.VolumeId === volumeId);
      return found && toVolumeInfo(found);
    } catch (error) {
      if (isAbort(error)) throw error;
      if (classifyEc2Error(error).kind === "not-found") return undefined;
      throw ec2CallError("DescribeVolumes", error);
    }
  };

  /** After a failed AttachVolume: the volume's attachment says whether this instance holds it. */
  const settleClaim = async (volumeId: string, instanceId: string, failure: Ec2Failure, options?: Cancellable): Promise<ClaimOutcome> => {
    const volume = await describeVolume(volumeId, options);
    if (!volume) return { kind: "taken", reason: `${failure.code}: ${volumeId} no longer exists` };
    const attachment = volume.attachment;
    if (attachment?.instanceId === instanceId && HELD.includes(attachment.state)) {
      log.notice("ec2-claim", `AttachVolume answered ${failure.code}, yet the volume is ${attachment.state} here: claimed`, {
        volumeId,
        instanceId,
        device: attachment.device,
      });
      return { kind: "claimed" };
    }
    const where = attachment
      ? `${attachment.state} to ${attachment.instanceId}`
      : `'${volume.state}' in ${volume.availabilityZone}, not attached`;
    return { kind: "taken", reason: `${failure.code}: ${volumeId} is ${where}` };
  };

  /**
   * Polls the volume until `done` holds; returns the last volume seen, or throws `onTimeout`'s
   * error. Every `pollMs`, or as `interval` says (given the previous pause and the time waited).
   */
  const pollVolume = async (
    volumeId: string,
    timeoutMs: number,
    done: (volume: VolumeInfo | undefined) => boolean,
    onTimeout: (last: VolumeInfo | undefined) => Error,
    options?: Cancellable & { interval?: (previousMs: number | undefined, elapsedMs: number) => number },
  ): Promise<VolumeInfo | undefined> => {
    const started = Date.now();
    const deadline = started + timeoutMs;
    const call = options?.signal ? { signal: options.signal } : {};
    let previous: number | undefined;
    for (;;) {
      const volume = await describeVolume(volumeId, call);
      if (done(volume)) return volume;
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw onTimeout(volume);
      previous = options?.interval ? options.interval(previous, Date.now() - started) : pollMs;
      await pause(Math.min(previous, remaining), call);
    }
  };

  return {
    async findVolumes(query: VolumeQuery, options?: Cancellable & { firstPage?: number }): Promise<VolumeInfo[]> {
      const filters: Filter[] = tagFilters(query.tags);
      if (query.availabilityZone !== undefined) filters.push({ Name: "availability-zone", Values: [query.availabilityZone] });
      if (query.status !== undefined && query.status.length > 0) filters.push({ Name: "status", Values: [...query.status] });
      if (query.attachedTo !== undefined) filters.push({ Name: "attachment.instance-id", Values: [query.attachedTo] });
      const volumes: VolumeInfo[] = [];
      // EC2 refuses MaxResults together with VolumeIds: a query by id is one answer anyway.
      const byIds = query.volumeIds !== undefined;
      if (byIds && query.volumeIds!.length === 0) return [];
      const maxResults = byIds ? undefined : Math.max(MIN_PAGE, Math.min(options?.firstPage ?? pageSize("DescribeVolumes"), pageSize("DescribeVolumes")));
      let nextToken: string | undefined;
      do {
        const out = await call("DescribeVolumes", () =>
          api.describeVolumes(
            { Filters: filters, ...(byIds ? { VolumeIds: query.volumeIds } : { MaxResults: maxResults }), NextToken: nextToken },
            options,
          ),
        );
        for (const volume of out.Volumes ?? []) volumes.push(toVolumeInfo(volume));
        nextToken = out.NextToken || undefined;
        // A bounded page of candidates is one call, however large the pool.
        if (options?.firstPage !== undefined) break;
      } while (nextToken !== undefined);
      log.debug("ec2-find-volumes", `${volumes.length} volumes match`, { filters: JSON.stringify(filters) });
      return volumes;
    },

    describeVolume,

    async describeInstance(instanceId: string, options?: Cancellable): Promise<InstanceInfo> {
      const out = await call("DescribeInstances", () => api.describeInstances({ InstanceIds: [instanceId] }, options));
      const instance = out.Reservations?.flatMap((r) => r.Instances ?? []).find((i) => i.InstanceId === instanceId);
      if (!instance) throw ec2CallError("DescribeInstances", new Error(`the answer does not describe ${instanceId}`));
      const root = instance.RootDeviceName;
      return {
        instanceId,
        state: instance.State?.Name ?? "unknown",
        tags: tagRecord(instance.Tags),
        volumes: (instance.BlockDeviceMappings ?? [])
          .filter((m) => m.Ebs?.VolumeId && m.DeviceName !== root && m.Ebs.Status !== "detached")
          .map((m) => ({ volumeId: m.Ebs!.VolumeId!, device: m.DeviceName ?? "", status: m.Ebs!.Status ?? "attached" })),
      };
    },

    async newestSnapshot(tags: Record<string, string>, options?: Cancellable): Promise<SnapshotInfo | undefined> {
      const filters = [...tagFilters(tags), { Name: "status", Values: ["completed"] }];
      let newest: Snapshot | undefined;
      let nextToken: string | undefined;
      do {
        const out = await call("DescribeSnapshots", () =>
          api.describeSnapshots({
            OwnerIds: ["self"],
            Filters: filters,
            MaxResults: pageSize("DescribeSnapshots"),
            NextToken: nextToken,
          }, options),
        );
        for (const snapshot of out.Snapshots ?? []) {
          if (!newest || startTime(snapshot) > startTime(newest)) newest = snapshot;
        }
        nextToken = out.NextToken || undefined;
      } while (nextToken !== undefined);
      return newest && toSnapshotInfo(newest);
    },

    async createVolume(spec, options): Promise<VolumeInfo> {
      const input: CreateVolumeCommandInput = {
        AvailabilityZone: spec.availabilityZone,
        VolumeType: spec.volumeType as CreateVolumeCommandInput["VolumeType"],
        TagSpecifications: [{ ResourceType: "volume", Tags: toTags(spec.tags) }],
        // The same token on every SDK retry of this call: EC2 makes one volume, not one per attempt.
        ClientToken: spec.clientToken ?? randomUUID(),
      };
      if (spec.snapshotId !== undefined) input.SnapshotId = spec.snapshotId;
      if (spec.sizeGiB !== undefined) input.Size = spec.sizeGiB;
      if (spec.initializationRateMiBps !== undefined) input.VolumeInitializationRate = spec.initializationRateMiBps;
      const created = await call("CreateVolume", () => api.createVolume(input, options));
      const volumeId = created.VolumeId;
      if (!volumeId) throw ec2CallError("CreateVolume", new Error("the answer names no volume id"));
      log.info("ec2-create-volume", "volume created, waiting until available", {
        volumeId,
        zone: spec.availabilityZone,
        snapshotId: spec.snapshotId,
        initializationRate: spec.initializationRateMiBps,
      });
      // Not found at first is EC2's eventual consistency: keep polling.
      const ready = await pollVolume(
        volumeId,
        createTimeoutMs,
        (volume) => volume !== undefined && volume.state !== "creating",
        (last) => new VolumeCreateError(volumeId, `still ${last ? `'${last.state}'` : "not visible"} after ${Math.round(createTimeoutMs / 1000)} s`),
        { ...options, interval: (previousMs, elapsedMs) => createPollPause(previousMs, elapsedMs, pollMs) },
      );
      // `in-use`: another agent claimed it already (it carries pool tags); the caller's claim will say so.
      if (!ready || (ready.state !== "available" && ready.state !== "in-use")) {
        throw new VolumeCreateError(volumeId, `EC2 reports it '${ready?.state ?? "gone"}'`);
      }
      log.info("ec2-create-volume", "volume available", { volumeId });
      return ready;
    },

    async claimVolume(volumeId: string, instanceId: string, device: string, options?: ClaimOptions): Promise<ClaimOutcome> {
      const tried: string[] = [];
      let name = device;
      const notFoundUntil = Date.now() + (options?.justCreated ? CREATED_VISIBLE_MS : 0);
      for (let round = 1; ; round++) {
        tried.push(name);
        try {
          await api.attachVolume({ VolumeId: volumeId, InstanceId: instanceId, Device: name }, options);
          log.info("ec2-claim", "AttachVolume accepted: claimed", { volumeId, instanceId, device: name });
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
                log.info("ec2-claim", "taken", { volumeId, instanceId, code: failure.code });
                return { kind: "taken", reason: `${failure.code}: ${volumeId} is held by another instance` };
              }
              const outcome = await settleClaim(volumeId, instanceId, failure, options);
              if (outcome.kind === "taken") log.info("ec2-claim", "taken", { volumeId, instanceId, reason: outcome.reason });
              return outcome;
            }
            case "not-found":
              if (Date.now() < notFoundUntil) {
                log.info("ec2-claim", "the new volume is not visible to AttachVolume yet (EC2's eventual consistency): retrying", { volumeId });
                tried.pop();
                await pause(Math.min(pollMs, 1000) * Math.min(round, 4), options);
                continue;
              }
              return { kind: "taken", reason: `${failure.code}: ${volumeId} does not exist (any more)` };
            case "device-in-use": {
              const next = DEVICE_NAMES.find((candidate) => !tried.includes(candidate));
              if (next === undefined) throw new DeviceNameError(instanceId, volumeId, tried, error);
              log.info("ec2-claim", "device name in use on this instance, trying the next", { volumeId, device: name, next });
              name = next;
              continue;
            }
            case "invalid-device":
              throw new DeviceNameError(instanceId, volumeId, tried, error);
            case "attachment-limit": {
              // Unless the volume is one of those attachments (an earlier run's claim).
              const outcome = await settleClaim(volumeId, instanceId, failure, options);
              if (outcome.kind === "claimed") return outcome;
              throw new AttachmentLimitError(instanceId, volumeId, error);
            }
            default: {
              if (!outcomeUnknown(failure)) throw ec2CallError("AttachVolume", error);
              log.warning("ec2-claim", "AttachVolume outcome unknown, describing the volume", {
                volumeId,
                instanceId,
                code: failure.code,
              });
              const outcome = await settleClaim(volumeId, instanceId, failure, options);
              if (outcome.kind === "taken") log.warning("ec2-claim", "taken", { volumeId, instanceId, reason: outcome.reason });
              return outcome;
            }
          }
        }
      }
    },

    async waitForAttachment(volumeId, instanceId, state, timeoutMs, options): Promise<void> {
      const describe = (volume: VolumeInfo | undefined) => {
        if (!volume) return "volume not found";
        const a = volume.attachment;
        return a ? `${a.state} to ${a.instanceId}` : `'${volume.state}', no attachment`;
      };
      await pollVolume(
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
      log.info("ec2-attachment", `${volumeId} ${state}`, { volumeId, instanceId });
    },

    async detachVolume(volumeId: string, instanceId: string, options?: Cancellable): Promise<void> {
      try {
        // Never Force: on EC2 it can lose data, and a stuck detach needs a person, not the agent.
        await api.detachVolume({ VolumeId: volumeId, InstanceId: instanceId }, options);
        log.info("ec2-detach", "DetachVolume accepted", { volumeId, instanceId });
        return;
      } catch (error) {
        if (isAbort(error)) throw error;
        const failure = classifyEc2Error(error);
        if (failure.kind === "not-found" || failure.kind === "attachment-not-found") {
          log.info("ec2-detach", "not attached to this instance: nothing to detach", { volumeId, instanceId, code: failure.code });
          return;
        }
        if (failure.kind !== "incorrect-state" && !outcomeUnknown(failure)) throw ec2CallError("DetachVolume", error);
        // IncorrectState: already detached (or detaching). Unknown outcome: maybe applied.
        const attachment = (await describeVolume(volumeId, options))?.attachment;
        if (attachment?.instanceId === instanceId && HELD.includes(attachment.state)) {
          throw ec2CallError("DetachVolume", error);
        }
        log.info("ec2-detach", `DetachVolume answered ${failure.code}; the volume is not held here`, {
          volumeId,
          instanceId,
          attachment: attachment ? `${attachment.state} to ${attachment.instanceId}` : "none",
        });
      }
    },

    async deleteVolume(volumeId: string): Promise<"deleted" | "gone"> {
      try {
        await api.deleteVolume({ VolumeId: volumeId });
        log.info("ec2-delete", "DeleteVolume accepted", { volumeId });
        return "deleted";
      } catch (error) {
        if (classifyEc2Error(error).kind === "not-found") return "gone";
        throw ec2CallError("DeleteVolume", error);
      }
    },

    async tagVolume(volumeId: string, tags: Record<string, string>, options?: Cancellable): Promise<void> {
      if (Object.keys(tags).length === 0) return;
      await call("CreateTags", () => api.createTags({ Resources: [volumeId], Tags: toTags(tags) }, options));
    },

    async untagVolume(volumeId: string, keys: string[] | Record<string, string>, options?: Cancellable): Promise<void> {
      // A tag with a Value is deleted only while it has that value (see CloudVolumes.untagVolume).
      const tags: Tag[] = Array.isArray(keys) ? keys.map((Key) => ({ Key })) : toTags(keys);
      // DeleteTags without Tag entries deletes every tag of the resource.
      if (tags.length === 0) return;
      await call("DeleteTags", () => api.deleteTags({ Resources: [volumeId], Tags: tags }, options));
    },

    async initializationStatus(volumeId: string) {
      const out = await call("DescribeVolumeStatus", () => api.describeVolumeStatus({ VolumeIds: [volumeId] }));
      const details = out.VolumeStatuses?.find((s) => s.VolumeId === volumeId)?.InitializationStatusDetails;
      if (!details || details.Progress === undefined) return undefined;
      return {
        type: details.InitializationType ?? "default",
        progress: details.Progress,
        ...(details.EstimatedTimeToCompleteInSeconds !== undefined ? { etaSeconds: details.EstimatedTimeToCompleteInSeconds } : {}),
      };
    },
  };
}

/** How many attempts the SDK made for a failed call (1: it refused the first, nothing was retried). */
function attemptsOf(error: unknown): number | undefined {
  return (error as { $metadata?: { attempts?: number } } | undefined)?.$metadata?.attempts;
}

/** An aborted call (cancellation), which is no EC2 failure and must not be classified as one. */
export function isAbort(error: unknown): boolean {
  return (error as { name?: unknown } | undefined)?.name === "AbortError";
}

/** EC2 filter values treat `*`, `?` and `\` as wildcards / escape: a literal value escapes them. */
export function escapeFilterValue(value: string): string {
  return value.replace(/[\\*?]/g, "\\$&");
}

/** One filter per tag: `tag:K` = the exact value, or `tag-key` = K for the value "*". */
export function tagFilters(tags: Record<string, string>): Filter[] {
  return Object.entries(tags).map(([key, value]) =>
    value === "*" ? { Name: "tag-key", Values: [escapeFilterValue(key)] } : { Name: `tag:${key}`, Values: [escapeFilterValue(value)] },
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

/** A volume as the agent sees it; EC2 volumes here are never multi-attach, so one attachment. */
export function toVolumeInfo(volume: Volume): VolumeInfo {
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
  return info;
}

function startTime(snapshot: Snapshot): number {
  return snapshot.StartTime?.getTime() ?? 0;
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
