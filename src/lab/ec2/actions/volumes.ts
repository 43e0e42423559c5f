/** DescribeVolumes, CreateVolume, DeleteVolume. */
import { Ec2Error, invalidValue, missingParameter } from "../ec2-error.ts";
import { applyFilters, type FilterFields } from "../filters.ts";
import { clientToken, earlierRequest, fingerprint, rememberToken } from "../idempotency.ts";
import { newId } from "../ids.ts";
import { volumeEncryption } from "../kms.ts";
import type { VolumeRecord } from "../model.ts";
import { paginate } from "../pagination.ts";
import { renderVolume } from "../render.ts";
import type { XmlObject } from "../xml.ts";
import {
  checkVolumeId,
  getSnapshot,
  getVolume,
  isoNow,
  lookupVolume,
  pickByIds,
  tagsFromSpecifications,
  visibleVolumes,
  type ActionHandler,
} from "./context.ts";

/** The DescribeVolumes filters (besides `tag:<key>`, `tag-key`, `tag-value`). */
export const VOLUME_FILTERS: FilterFields<VolumeRecord> = {
  "volume-id": (v) => [v.volumeId],
  "availability-zone": (v) => [v.availabilityZone],
  status: (v) => [v.state],
  size: (v) => [v.sizeGiB],
  "snapshot-id": (v) => [v.snapshotId ?? ""],
  "volume-type": (v) => [v.volumeType],
  "create-time": (v) => [v.createTime],
  encrypted: (v) => [v.encrypted],
  "multi-attach-enabled": () => [false],
  "fast-restored": () => [false],
  "attachment.instance-id": (v) => [v.attachment?.instanceId],
  "attachment.status": (v) => [v.attachment?.state],
  "attachment.device": (v) => [v.attachment?.device],
  "attachment.attach-time": (v) => [v.attachment?.attachTime],
  "attachment.delete-on-termination": (v) => [v.attachment ? (v.attachment.deleteOnTermination ?? false) : undefined],
};

export const describeVolumes: ActionHandler = (ctx, params) => {
  const ids = params.list("VolumeId");
  const limits = { min: 5, max: 500, idsParam: "VolumeId", idsName: "volumeSet" };
  paginate([], params, limits); // parameter checks come before the lookups, as on EC2
  const selected =
    ids.length > 0
      ? pickByIds(ids, (id) => lookupVolume(ctx, params.action, id), checkVolumeId, "InvalidVolume.NotFound", "volume")
      : visibleVolumes(ctx, params.action);
  const page = paginate(
    applyFilters(selected, params.filters(), VOLUME_FILTERS, (v) => v.tags),
    params,
    limits,
  );
  return { volumeSet: page.items.map(renderVolume), nextToken: page.nextToken };
};

/** Size limits (GiB) per volume type. */
const SIZE_RANGE: Record<string, [number, number]> = {
  gp3: [1, 16384],
  gp2: [1, 16384],
  io1: [4, 16384],
  io2: [4, 65536],
  st1: [125, 16384],
  sc1: [125, 16384],
  standard: [1, 1024],
};

export const createVolume: ActionHandler = (ctx, params) => {
  // A repeat of an earlier request (same token, same parameters) answers what that one made.
  const token = clientToken(params);
  const print = token === undefined ? "" : fingerprint(params);
  const earlier = token === undefined ? undefined : earlierRequest(ctx.store.model, token, print, ctx.now());
  if (earlier) {
    ctx.store.event({ kind: "idempotent-replay", volumeId: earlier.volumeId, detail: "CreateVolume" });
    ctx.store.commit();
    const now = ctx.store.volume(earlier.volumeId);
    return now ? renderVolume(now) : (earlier.response as XmlObject);
  }

  const zone = params.str("AvailabilityZone");
  if (zone === undefined || zone === "") {
    if (params.has("AvailabilityZoneId")) {
      throw new Ec2Error("InvalidParameterValue", "The emulator supports AvailabilityZone, not AvailabilityZoneId");
    }
    throw missingParameter("AvailabilityZone");
  }
  // What EC2 answers for CreateVolume in a zone that does not exist (not InvalidParameterValue).
  if (!ctx.zones.includes(zone)) throw new Ec2Error("InvalidZone.NotFound", `The zone '${zone}' does not exist.`);

  const volumeType = params.str("VolumeType") ?? "gp3";
  const range = SIZE_RANGE[volumeType];
  if (!range) throw invalidValue("volumeType", volumeType);

  const snapshotId = params.str("SnapshotId") || undefined;
  const snapshot = snapshotId === undefined ? undefined : getSnapshot(ctx, snapshotId);
  if (snapshot && snapshot.state !== "completed") {
    throw new Ec2Error("IncorrectState", `Snapshot is in invalid state - ${snapshot.state}`);
  }
  let size = params.int("Size");
  if (size === undefined) {
    if (!snapshot) throw missingParameter("size");
    size = snapshot.volumeSize;
  }
  if (snapshot && size < snapshot.volumeSize) {
    throw new Ec2Error(
      "InvalidParameterValue",
      `Volume of size ${size}GB is smaller than snapshot '${snapshot.snapshotId}', ` +
        `expect size>= ${snapshot.volumeSize}GB`,
    );
  }
  if (size < range[0] || size > range[1]) {
    throw invalidValue("size", String(size), `Volumes of type ${volumeType} must be ${range[0]}-${range[1]} GiB.`);
  }

  const rate = params.int("VolumeInitializationRate");
  if (rate !== undefined) {
    if (!snapshot) {
      throw new Ec2Error(
        "InvalidParameterValue",
        "The volume initialization rate can be specified only when creating a volume from a snapshot.",
      );
    }
    if (rate < 100 || rate > 300) {
      throw invalidValue("VolumeInitializationRate", String(rate), "Expecting a value between 100 and 300 MiB/s.");
    }
  }

  const throughput = params.int("Throughput");
  if (throughput !== undefined && volumeType !== "gp3") {
    throw new Ec2Error(
      "InvalidParameterCombination",
      `The parameter throughput is not supported for volume type ${volumeType}`,
    );
  }
  let iops = params.int("Iops");
  if (iops !== undefined && !PROVISIONED_IOPS.has(volumeType)) {
    throw new Ec2Error("InvalidParameterCombination", `The parameter iops is not supported for ${volumeType} volumes.`);
  }
  if (iops === undefined) {
    if (volumeType === "io1" || volumeType === "io2") throw missingParameter("iops");
    if (volumeType === "gp3") iops = GP3_LIMITS.baselineIops;
    if (volumeType === "gp2") iops = Math.min(16000, Math.max(100, size * 3));
  }
  if (volumeType === "gp3") checkGp3(size, iops!, throughput ?? GP3_LIMITS.baselineThroughput);

  const encryption = volumeEncryption(
    ctx.region,
    { encrypted: params.bool("Encrypted"), kmsKeyId: params.str("KmsKeyId") },
    snapshot,
  );
  const tags = tagsFromSpecifications(params.tagSpecifications(), "volume");
  const volume: VolumeRecord = {
    volumeId: newId("volume"),
    seq: ctx.store.nextSeq(),
    sizeGiB: size,
    snapshotId: snapshot?.snapshotId ?? null,
    sourceSizeGiB: snapshot?.volumeSize ?? null,
    availabilityZone: zone,
    state: "creating",
    createTime: isoNow(ctx),
    volumeType,
    iops: iops ?? null,
    throughput: throughput ?? (volumeType === "gp3" ? 125 : null),
    encrypted: encryption.encrypted,
    kmsKeyId: encryption.kmsKeyId,
    initializationRate: rate ?? null,
    tags,
    attachment: null,
    forceDetachCount: 0,
    error: null,
  };
  ctx.store.model.volumes[volume.volumeId] = volume;
  const response = renderVolume(volume);
  if (token !== undefined) {
    rememberToken(ctx.store.model, token, { volumeId: volume.volumeId, fingerprint: print, response, at: isoNow(ctx) });
  }
  if (encryption.keyProblem !== undefined) {
    // EC2 checks the key after answering: the volume fails instead of becoming available.
    volume.state = "error";
    volume.error = encryption.keyProblem;
    ctx.store.commit();
    return response;
  }
  ctx.store.commit();
  ctx.lifecycle.volumeCreated(volume.volumeId);
  return response;
};

/** The volume types that take Iops. */
const PROVISIONED_IOPS = new Set(["gp3", "io1", "io2"]);

/** EC2's gp3 limits (CreateVolume): IOPS and throughput ranges, and their ratios to size and IOPS. */
export const GP3_LIMITS = {
  baselineIops: 3000,
  maxIops: 80000,
  maxIopsPerGiB: 500,
  baselineThroughput: 125,
  maxThroughput: 2000,
  maxMiBpsPerIops: 0.25,
} as const;

/** EC2's refusals of a gp3 volume's IOPS and throughput, in its words. */
function checkGp3(sizeGiB: number, iops: number, throughput: number): void {
  const gp3 = GP3_LIMITS;
  if (iops < gp3.baselineIops)
    throw new Ec2Error("InvalidParameterValue", `Volume iops of ${iops} is too low; minimum is ${gp3.baselineIops}.`);
  if (iops > gp3.maxIops)
    throw new Ec2Error("InvalidParameterValue", `Volume iops of ${iops} is too high; maximum is ${gp3.maxIops}.`);
  // The baseline is every gp3 volume's, whatever its size; only IOPS above it count against the ratio.
  if (iops > gp3.baselineIops && iops / sizeGiB > gp3.maxIopsPerGiB) {
    throw new Ec2Error(
      "InvalidParameterValue",
      `Iops to volume size ratio of ${(iops / sizeGiB).toFixed(6)} is too high; maximum is ` +
        `${gp3.maxIopsPerGiB.toFixed(6)}.`,
    );
  }
  if (throughput < gp3.baselineThroughput)
    throw new Ec2Error(
      "InvalidParameterValue",
      `Volume throughput of ${throughput} is too low; minimum is ${gp3.baselineThroughput}.`,
    );
  if (throughput > gp3.maxThroughput)
    throw new Ec2Error(
      "InvalidParameterValue",
      `Volume throughput of ${throughput} is too high; maximum is ${gp3.maxThroughput}.`,
    );
  if (throughput > gp3.baselineThroughput && throughput / iops > gp3.maxMiBpsPerIops) {
    throw new Ec2Error(
      "InvalidParameterValue",
      `Throughput (MiBps) to iops ratio of ${(throughput / iops).toFixed(6)} is too high; maximum is ` +
        `${gp3.maxMiBpsPerIops.toFixed(6)} MiBps per iops.`,
    );
  }
}

export const deleteVolume: ActionHandler = (ctx, params) => {
  const volume = getVolume(ctx, params.required("VolumeId"), params.action);
  if (volume.attachment) {
    throw new Ec2Error(
      "VolumeInUse",
      `Volume ${volume.volumeId} is currently attached to ${volume.attachment.instanceId}`,
    );
  }
  if (volume.state !== "available" && volume.state !== "error") {
    throw new Ec2Error("IncorrectState", `The volume '${volume.volumeId}' is '${volume.state}'.`);
  }
  volume.state = "deleting";
  ctx.store.commit();
  ctx.lifecycle.volumeDeleting(volume.volumeId);
  return { return: true };
};
