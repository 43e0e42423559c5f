/**
 * Model records as EC2's XML items. Element names are the `xmlName`s of the EC2 API model
 * (e.g. a volume's state is `<status>`, its attachments `<attachmentSet>`), which is what
 * both the SDK's and botocore's parsers look for.
 */
import { LAB_INSTANCE_TYPE } from "../types.ts";
import { OWNER_ID } from "./ids.ts";
import {
  INSTANCE_STATE_CODE,
  type AttachmentRecord,
  type InstanceRecord,
  type InstanceState,
  type NetworkInterfaceRecord,
  type SnapshotRecord,
  type VolumeRecord,
} from "./model.ts";
import type { XmlObject } from "./xml.ts";

/** A `tagSet`. */
export function renderTags(tags: Record<string, string>): XmlObject[] {
  return Object.entries(tags).map(([key, value]) => ({ key, value }));
}

/** One `VolumeAttachment` (also the whole AttachVolume / DetachVolume result). */
export function renderAttachment(volumeId: string, attachment: AttachmentRecord): XmlObject {
  return {
    volumeId,
    instanceId: attachment.instanceId,
    device: attachment.device,
    status: attachment.state,
    attachTime: attachment.attachTime,
    deleteOnTermination: attachment.deleteOnTermination ?? false,
  };
}

/** One `Volume` (also the whole CreateVolume result). */
export function renderVolume(volume: VolumeRecord): XmlObject {
  return {
    volumeId: volume.volumeId,
    size: volume.sizeGiB,
    snapshotId: volume.snapshotId ?? "",
    availabilityZone: volume.availabilityZone,
    status: volume.state,
    createTime: volume.createTime,
    attachmentSet: volume.attachment ? [renderAttachment(volume.volumeId, volume.attachment)] : [],
    tagSet: renderTags(volume.tags),
    volumeType: volume.volumeType,
    iops: volume.iops,
    throughput: volume.throughput,
    encrypted: volume.encrypted,
    kmsKeyId: volume.kmsKeyId ?? undefined,
    multiAttachEnabled: false,
    volumeInitializationRate: volume.initializationRate,
  };
}

/** Snapshot progress as EC2 shows it: `0%` … `100%`, estimated from the elapsed time. */
export function snapshotProgress(snapshot: SnapshotRecord, snapshotMs: number, now: number): string {
  if (snapshot.state === "completed") return "100%";
  if (snapshot.state === "error" || snapshotMs <= 0) return "0%";
  const elapsed = now - Date.parse(snapshot.startTime);
  return `${Math.max(0, Math.min(99, Math.floor((elapsed / snapshotMs) * 100)))}%`;
}

/** One `Snapshot` (also the whole CreateSnapshot result). */
export function renderSnapshot(snapshot: SnapshotRecord, progress: string): XmlObject {
  return {
    snapshotId: snapshot.snapshotId,
    volumeId: snapshot.volumeId,
    status: snapshot.state,
    statusMessage: snapshot.error ?? undefined,
    startTime: snapshot.startTime,
    completionTime: snapshot.completionTime,
    progress,
    ownerId: OWNER_ID,
    volumeSize: snapshot.volumeSize,
    description: snapshot.description,
    encrypted: snapshot.encrypted === true,
    kmsKeyId: snapshot.kmsKeyId ?? undefined,
    storageTier: "standard",
    tagSet: renderTags(snapshot.tags),
  };
}

/** An `InstanceState` element: `{ code, name }`. */
export function renderInstanceState(state: InstanceState): XmlObject {
  return { code: INSTANCE_STATE_CODE[state], name: state };
}

/** One item of StoppingInstances / StartingInstances / TerminatingInstances. */
export function renderStateChange(instanceId: string, previous: InstanceState, current: InstanceState): XmlObject {
  return { instanceId, currentState: renderInstanceState(current), previousState: renderInstanceState(previous) };
}

/** One `NetworkInterface` (DescribeNetworkInterfaces): the primary interface of its instance. */
export function renderNetworkInterface(eni: NetworkInterfaceRecord): XmlObject {
  return {
    networkInterfaceId: eni.networkInterfaceId,
    availabilityZone: eni.availabilityZone,
    interfaceType: "interface",
    status: "in-use",
    ownerId: OWNER_ID,
    attachment: {
      attachmentId: eni.networkInterfaceId.replace(/^eni-/, "eni-attach-"),
      instanceId: eni.instanceId,
      deviceIndex: 0,
      status: "attached",
      deleteOnTermination: true,
    },
    tagSet: renderTags(eni.tags),
  };
}

/**
 * One `Instance` with the volumes attached to it as its block device mapping, and its network
 * interfaces (a launched instance's primary one; a registered instance has none).
 */
export function renderInstance(
  instance: InstanceRecord,
  attached: readonly VolumeRecord[],
  interfaces: readonly NetworkInterfaceRecord[] = [],
): XmlObject {
  return {
    instanceId: instance.instanceId,
    imageId: instance.imageId ?? "ami-00000000000000000",
    instanceState: renderInstanceState(instance.state),
    instanceType: instance.instanceType ?? LAB_INSTANCE_TYPE,
    launchTime: instance.launchTime,
    // DescribeInstances' <reason> is StateTransitionReason (the SDK's query name for it).
    reason: instance.stateTransitionReason ?? "",
    placement: { availabilityZone: instance.availabilityZone, tenancy: "default" },
    rootDeviceType: "ebs",
    rootDeviceName: "/dev/xvda",
    blockDeviceMapping: attached.flatMap((volume) =>
      volume.attachment
        ? [
            {
              deviceName: volume.attachment.device,
              ebs: {
                volumeId: volume.volumeId,
                status: volume.attachment.state,
                attachTime: volume.attachment.attachTime,
                deleteOnTermination: volume.attachment.deleteOnTermination ?? false,
              },
            },
          ]
        : [],
    ),
    networkInterfaceSet: interfaces.map((eni) => ({
      networkInterfaceId: eni.networkInterfaceId,
      status: "in-use",
      attachment: { deviceIndex: 0, status: "attached", deleteOnTermination: true },
    })),
    tagSet: renderTags(instance.tags),
  };
}
