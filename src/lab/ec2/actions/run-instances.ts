/**
 * RunInstances as osparc's autoscaler calls it (aws_library/ec2/_client.py `launch_instances`):
 * MinCount..MaxCount instances of one image and type in ONE reservation, each `pending` and then
 * `running`, each with what EC2 makes beside it: a root volume (`/dev/xvda`, gp3, 8 GiB,
 * DeleteOnTermination) and a primary network interface. TagSpecifications tag the instances, the
 * root volumes and the ENIs (ResourceType `instance`, `volume`, `network-interface`), each only
 * with its own specification's tags, as EC2 does; no specification for a type: no tags on it.
 *
 * The emulator has no capacity limit: it launches MaxCount. The UserData is kept as sent for the
 * lab's cloud-init (src/lab/machines/autoscaler.ts); the instance's folder is the lab's to make
 * (ActionContext.launchedHostRoot names it).
 */
import { imdsTagKeyProblem } from "../../../aws/imds.ts";
import { Ec2Error, invalidValue, missingParameter } from "../ec2-error.ts";
import { newId, OWNER_ID } from "../ids.ts";
import type { InstanceRecord, NetworkInterfaceRecord, VolumeRecord } from "../model.ts";
import type { TagSpecificationParam } from "../params.ts";
import { renderInstance } from "../render.ts";
import { checkTags, isoNow, MAX_TAGS, type ActionContext, type ActionHandler } from "./context.ts";

/** The resource types RunInstances tags at launch (of those the emulator keeps). */
const LAUNCH_TAGGED = ["instance", "volume", "network-interface"] as const;
type LaunchTagged = (typeof LAUNCH_TAGGED)[number];

/** A launched instance's root volume, as the AMI's block device mapping makes it. */
const ROOT = { device: "/dev/xvda", sizeGiB: 8, volumeType: "gp3", iops: 3000, throughput: 125 } as const;

/** EC2's ceiling on one request's MaxCount in the emulator (an account's vCPU limit stands behind it on EC2). */
const MAX_COUNT = 100;

/** The tags of each launch-tagged type; a type named twice, or one RunInstances cannot tag, is refused. */
function launchTags(specs: readonly TagSpecificationParam[]): Record<LaunchTagged, Record<string, string>> {
  const out: Record<LaunchTagged, Record<string, string>> = { instance: {}, volume: {}, "network-interface": {} };
  const seen = new Set<string>();
  for (const spec of specs) {
    if (spec.resourceType === undefined) throw missingParameter("TagSpecification.ResourceType");
    const type = LAUNCH_TAGGED.find((each) => each === spec.resourceType);
    if (!type) {
      throw new Ec2Error(
        "InvalidParameterValue",
        `'${spec.resourceType}' is not a valid taggable resource type for this operation.`,
      );
    }
    if (seen.has(type)) {
      throw new Ec2Error("InvalidParameterValue", `The resource type '${type}' is specified more than once.`);
    }
    seen.add(type);
    out[type] = checkTags(spec.tags);
    if (Object.keys(out[type]).length > MAX_TAGS) {
      throw new Ec2Error(
        "TagLimitExceeded",
        `The maximum number of tags (${MAX_TAGS}) for a resource has been reached.`,
      );
    }
  }
  return out;
}

/** MinCount and MaxCount: both required, 1 ≤ MinCount ≤ MaxCount. */
function counts(params: { int(name: string): number | undefined }): { min: number; max: number } {
  const min = params.int("MinCount");
  const max = params.int("MaxCount");
  if (min === undefined) throw missingParameter("MinCount");
  if (max === undefined) throw missingParameter("MaxCount");
  if (min < 1) throw invalidValue("MinCount", String(min), "Value for parameter minCount must be at least 1.");
  if (max < min) {
    throw invalidValue("MaxCount", String(max), `Value for parameter maxCount must be at least minCount (${min}).`);
  }
  if (min > MAX_COUNT) {
    throw new Ec2Error(
      "InstanceLimitExceeded",
      `You have requested more instances (${min}) than your current instance limit of ${MAX_COUNT} allows.`,
    );
  }
  return { min, max: Math.min(max, MAX_COUNT) };
}

export const runInstances: ActionHandler = (ctx, params) => {
  const imageId = params.required("ImageId");
  const { max } = counts(params);
  const tags = launchTags(params.tagSpecifications());
  const zone = params.str("Placement.AvailabilityZone") ?? ctx.zones[0] ?? `${ctx.region}a`;
  if (!ctx.zones.includes(zone)) {
    throw invalidValue("Placement.AvailabilityZone", zone, `Invalid availability zone: [${zone}]`);
  }
  // MetadataOptions.InstanceMetadataTags: tags in IMDS only when asked (osparc does not ask).
  const metadataTags = params.str("MetadataOptions.InstanceMetadataTags") === "enabled";
  if (metadataTags) {
    const bad = Object.keys(tags.instance).find((key) => imdsTagKeyProblem(key));
    if (bad !== undefined) throw new Ec2Error("InvalidParameterValue", imdsTagKeyProblem(bad) ?? bad);
  }
  const instanceType = params.str("InstanceType");
  const userData = params.str("UserData");
  const reservationId = newId("reservation");
  const now = isoNow(ctx);
  const launched: InstanceRecord[] = [];
  const interfaces = (ctx.store.model.networkInterfaces ??= {});
  for (let i = 0; i < max; i++) {
    const instanceId = newId("instance");
    const instance: InstanceRecord = {
      instanceId,
      seq: ctx.store.nextSeq(),
      reservationId,
      region: ctx.region,
      availabilityZone: zone,
      tags: { ...tags.instance },
      metadataTags,
      hostRoot: ctx.launchedHostRoot(instanceId),
      ...(instanceType !== undefined ? { instanceType } : {}),
      state: "pending",
      launchTime: now,
      stateTransitionReason: "",
      imageId,
      ...(userData !== undefined ? { userData } : {}),
    };
    ctx.store.model.instances[instanceId] = instance;
    const root: VolumeRecord = {
      volumeId: newId("volume"),
      seq: ctx.store.nextSeq(),
      sizeGiB: ROOT.sizeGiB,
      snapshotId: null,
      sourceSizeGiB: null,
      availabilityZone: zone,
      state: "in-use",
      createTime: now,
      volumeType: ROOT.volumeType,
      iops: ROOT.iops,
      throughput: ROOT.throughput,
      encrypted: false,
      kmsKeyId: null,
      initializationRate: null,
      tags: { ...tags.volume },
      // The instance's root disk is its folder in the lab: no image, no device to make or remove.
      attachment: {
        instanceId,
        device: ROOT.device,
        state: "attached",
        attachTime: now,
        token: ctx.store.nextSeq(),
        deviceUp: false,
        deleteOnTermination: true,
      },
      forceDetachCount: 0,
      error: null,
      imageReady: true,
    };
    ctx.store.model.volumes[root.volumeId] = root;
    const eni: NetworkInterfaceRecord = {
      networkInterfaceId: newId("network-interface"),
      seq: ctx.store.nextSeq(),
      availabilityZone: zone,
      instanceId,
      tags: { ...tags["network-interface"] },
    };
    interfaces[eni.networkInterfaceId] = eni;
    launched.push(instance);
  }
  ctx.store.commit();
  for (const instance of launched) ctx.lifecycle.instanceStarting(instance.instanceId);
  ctx.log?.info("lab.ec2-emulator", `RunInstances launched ${launched.length}`, {
    reservation: reservationId,
    instances: launched.map((i) => i.instanceId).join(","),
  });
  return {
    reservationId,
    ownerId: OWNER_ID,
    groupSet: [],
    instancesSet: launched.map((instance) => renderInstance(instance, rootOf(ctx, instance), eniOf(ctx, instance))),
  };
};

function rootOf(ctx: ActionContext, instance: InstanceRecord): VolumeRecord[] {
  return ctx.store.volumes().filter((v) => v.attachment?.instanceId === instance.instanceId);
}

function eniOf(ctx: ActionContext, instance: InstanceRecord): NetworkInterfaceRecord[] {
  return ctx.store.networkInterfaces().filter((n) => n.instanceId === instance.instanceId);
}
