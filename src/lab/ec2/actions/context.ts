/**
 * What every action handler gets, and the lookups they share. Handlers are synchronous on
 * purpose: a request's checks and its change to the model happen in one turn of the event
 * loop, so concurrent requests can never interleave between "check" and "set".
 */
import type { Logger } from "../../../log.ts";
import { Ec2Error, invalidValue, missingParameter } from "../ec2-error.ts";
import type { FaultInjector } from "../faults.ts";
import { isWellFormed } from "../ids.ts";
import type { InitializationHold } from "../initialization-hold.ts";
import type { Delays, Lifecycle } from "../lifecycle.ts";
import type { InstanceRecord, NetworkInterfaceRecord, SnapshotRecord, VolumeRecord } from "../model.ts";
import type { Params, TagParam, TagSpecificationParam } from "../params.ts";
import type { StateStore } from "../state.ts";
import type { XmlObject } from "../xml.ts";

/**
 * IAM at the emulator's door, as the request handlers ask it (iam/enforcement.ts's LabIam answers;
 * declared here so that the IAM checks, which read the model through this context, form no cycle).
 */
export interface RequestIam {
  /** The refusal of an EC2 request signed with `accessKeyId`; undefined when it may go on. */
  ec2Refusal(ctx: ActionContext, params: Params, accessKeyId: string | undefined): Promise<Ec2Error | undefined>;
  /** The denial of an EBS direct request, as its message; undefined when it may go on. */
  ebsRefusal(
    ctx: ActionContext,
    action: string,
    snapshotId: string | undefined,
    body: Buffer,
    accessKeyId: string | undefined,
  ): Promise<string | undefined>;
}

export interface ActionContext {
  store: StateStore;
  lifecycle: Lifecycle;
  faults: FaultInjector;
  region: string;
  /** The region's availability zones (`${region}a|b|c`). */
  zones: readonly string[];
  attachmentLimit: number;
  delays: Delays;
  /** Multiplies the emulated volume-initialization rate (tests watch 0 → 100 % quickly). */
  initializationSpeedup: number;
  /** Holds provisioned-rate initialization while a test wants it to stand still. */
  initializationHold: InitializationHold;
  /** The emulator's clock (ms since the epoch) for timestamps and progress; tests may drive it. */
  now(): number;
  /** The folder standing for the root filesystem of an instance RunInstances launches. */
  launchedHostRoot(instanceId: string): string;
  /** Copies an instance's tags into its live LabInstance object after CreateTags/DeleteTags. */
  syncInstanceTags(instanceId: string): void;
  /** Who may do what: the installed access keys' policies, decided before a request is applied. */
  iam: RequestIam;
  log: Logger | undefined;
}

/** The clock's time as EC2 writes timestamps. */
export function isoNow(ctx: Pick<ActionContext, "now">): string {
  return new Date(ctx.now()).toISOString();
}

/** One action: reads parameters, changes the model, returns the response's members. */
export type ActionHandler = (ctx: ActionContext, params: Params) => XmlObject;

/** "The volume 'vol-1' does not exist." / "The volumes 'vol-1, vol-2' do not exist." */
function notFoundMessage(noun: string, ids: readonly string[]): string {
  return ids.length === 1
    ? `The ${noun} '${ids[0]}' does not exist.`
    : `The ${noun}s '${ids.join(", ")}' do not exist.`;
}

/** Raises InvalidVolumeID.Malformed for ids EC2 would not accept as volume ids. */
export function checkVolumeId(id: string): void {
  if (!isWellFormed("volume", id)) {
    throw new Ec2Error("InvalidVolumeID.Malformed", `Invalid id: "${id}" (expecting "vol-...")`);
  }
}

/** Raises InvalidSnapshotID.Malformed for ids EC2 would not accept as snapshot ids. */
export function checkSnapshotId(id: string): void {
  if (!isWellFormed("snapshot", id)) {
    throw new Ec2Error("InvalidSnapshotID.Malformed", `Invalid id: "${id}" (expecting "snap-...")`);
  }
}

/**
 * Whether `action` sees the volume yet: under the notFoundAfterCreateMs fault a volume younger
 * than the lag is invisible, as EC2's eventual consistency can make it right after CreateVolume.
 */
export function volumeVisible(ctx: ActionContext, action: string | undefined, volume: VolumeRecord): boolean {
  const lag = ctx.faults.notFoundAfterCreateMs(action ?? "");
  return lag <= 0 || ctx.now() - Date.parse(volume.createTime) >= lag;
}

/** The volume with this id as `action` sees it (undefined: absent, or not visible yet). */
export function lookupVolume(ctx: ActionContext, action: string | undefined, id: string): VolumeRecord | undefined {
  const volume = ctx.store.volume(id);
  return volume && volumeVisible(ctx, action, volume) ? volume : undefined;
}

/** Every volume `action` sees, in creation order. */
export function visibleVolumes(ctx: ActionContext, action: string | undefined): VolumeRecord[] {
  return ctx.store.volumes().filter((v) => volumeVisible(ctx, action, v));
}

/** The volume named `id`; InvalidVolume.NotFound when it does not exist (for `action`, see volumeVisible). */
export function getVolume(ctx: ActionContext, id: string, action?: string): VolumeRecord {
  checkVolumeId(id);
  const volume = lookupVolume(ctx, action, id);
  if (!volume) throw new Ec2Error("InvalidVolume.NotFound", notFoundMessage("volume", [id]));
  return volume;
}

export function getSnapshot(ctx: ActionContext, id: string): SnapshotRecord {
  checkSnapshotId(id);
  const snapshot = ctx.store.snapshot(id);
  if (!snapshot) throw new Ec2Error("InvalidSnapshot.NotFound", notFoundMessage("snapshot", [id]));
  return snapshot;
}

export function getInstance(ctx: ActionContext, id: string): InstanceRecord {
  const instance = ctx.store.instance(id);
  if (!instance) throw new Ec2Error("InvalidInstanceID.NotFound", notFoundMessage("instance ID", [id]));
  return instance;
}

export function getNetworkInterface(ctx: ActionContext, id: string): NetworkInterfaceRecord {
  const eni = ctx.store.networkInterface(id);
  if (!eni) {
    throw new Ec2Error("InvalidNetworkInterfaceID.NotFound", `The networkInterface ID '${id}' does not exist`);
  }
  return eni;
}

/** The records named by a `VolumeId.N`-style list, all of which must exist (else one NotFound for all missing). */
export function pickByIds<T>(
  ids: readonly string[],
  lookup: (id: string) => T | undefined,
  check: (id: string) => void,
  code: string,
  noun: string,
): T[] {
  for (const id of ids) check(id);
  const missing = [...new Set(ids)].filter((id) => lookup(id) === undefined);
  if (missing.length > 0) throw new Ec2Error(code, notFoundMessage(noun, missing));
  return [...new Set(ids)].map((id) => lookup(id) as T);
}

/** Tag rules EC2 enforces on every resource. */
export const MAX_TAGS = 50;

/** Validates tags to be set; returns them as a record (a missing value is the empty string). */
export function checkTags(tags: readonly TagParam[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const { key, value } of tags) {
    if (key === "" || key.length > 128) throw invalidValue("Tag.Key", key, "Tag keys must be 1 to 128 characters.");
    if (key.toLowerCase().startsWith("aws:")) {
      throw new Ec2Error("InvalidParameterValue", "Tag keys starting with 'aws:' are reserved for internal use");
    }
    if ((value ?? "").length > 256) {
      throw invalidValue("Tag.Value", value ?? "", "Tag values may be up to 256 characters.");
    }
    out[key] = value ?? "";
  }
  return out;
}

/** The tags of the TagSpecifications of a create call, all of which must be for `resourceType`. */
export function tagsFromSpecifications(
  specs: readonly TagSpecificationParam[],
  resourceType: string,
): Record<string, string> {
  const tags: Record<string, string> = {};
  for (const spec of specs) {
    if (spec.resourceType === undefined) throw missingParameter("TagSpecification.ResourceType");
    if (spec.resourceType !== resourceType) {
      throw new Ec2Error(
        "InvalidParameterValue",
        `'${spec.resourceType}' is not a valid taggable resource type for this operation.`,
      );
    }
    Object.assign(tags, checkTags(spec.tags));
  }
  if (Object.keys(tags).length > MAX_TAGS) {
    throw new Ec2Error("TagLimitExceeded", `The maximum number of tags (${MAX_TAGS}) for a resource has been reached.`);
  }
  return tags;
}
