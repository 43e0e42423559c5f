/** AttachVolume and DetachVolume: the checks EC2 makes, then the attachment state machine. */
import { Ec2Error } from "../ec2-error.ts";
import { renderAttachment } from "../render.ts";
import { getInstance, getVolume, isoNow, type ActionContext, type ActionHandler } from "./context.ts";

/**
 * Device names EC2 accepts for EBS on (HVM, Nitro) Linux instances, from "Device names for
 * volumes on Amazon EC2 instances": /dev/sd[a-z], /dev/xvd[e-z], /dev/xvd[a-d][a-z] (but not
 * /dev/xvddy and /dev/xvddz), plus the root names /dev/sda1 and /dev/xvda (taken by the root
 * volume, so "in use" rather than invalid). Partition-style names (/dev/sdf1) are paravirtual
 * only, and a name without /dev/ is refused here: the agent always gives the full path.
 */
const DEVICE_NAME = /^\/dev\/(?:sd[a-z]|sda1|xvda|xvd[e-z]|xvd[a-c][a-z]|xvdd[a-x])$/;

/** Names taken on every instance by its root volume (which the emulator does not model). */
const ROOT_DEVICES = ["/dev/xvda", "/dev/sda1"];

function attachmentsOf(ctx: ActionContext, instanceId: string) {
  return ctx.store.volumes().flatMap((v) => (v.attachment?.instanceId === instanceId ? [v.attachment] : []));
}

export const attachVolume: ActionHandler = (ctx, params) => {
  const volumeId = params.required("VolumeId");
  const instanceId = params.required("InstanceId");
  const device = params.required("Device");
  // A malformed name is a bad parameter whatever the volume's state: checked before any lookup.
  if (!DEVICE_NAME.test(device)) {
    throw new Ec2Error(
      "InvalidParameterValue",
      `Value (${device}) for parameter device is invalid. ${device} is not a valid EBS device name.`,
    );
  }
  const volume = getVolume(ctx, volumeId, params.action);
  const instance = getInstance(ctx, instanceId);
  // EC2 attaches to a running or a stopped instance (the device shows at the next start).
  if (instance.state !== "running" && instance.state !== "stopped") {
    throw new Ec2Error(
      "IncorrectInstanceState",
      `The instance '${instanceId}' is not in a valid state for this operation.`,
    );
  }
  // The check-and-set below runs in one synchronous turn: of many concurrent calls for one
  // volume, the first sets the attachment and every later one sees it and gets VolumeInUse.
  if (volume.attachment || volume.state === "in-use") {
    throw new Ec2Error("VolumeInUse", `${volumeId} is already attached to an instance`);
  }
  if (volume.state !== "available") {
    throw new Ec2Error("IncorrectState", `${volumeId} is not 'available'.`);
  }
  if (volume.availabilityZone !== instance.availabilityZone) {
    throw new Ec2Error(
      "InvalidVolume.ZoneMismatch",
      `The volume '${volumeId}' is not in the same availability zone as instance '${instanceId}'`,
    );
  }
  const existing = attachmentsOf(ctx, instanceId);
  if (ROOT_DEVICES.includes(device) || existing.some((a) => a.device === device)) {
    throw new Ec2Error(
      "InvalidParameterValue",
      `Invalid value '${device}' for unixDevice. Attachment point ${device} is already in use`,
    );
  }
  // The limit counts volumes besides the root (which a launched instance has: RunInstances).
  if (existing.filter((a) => !ROOT_DEVICES.includes(a.device)).length >= ctx.attachmentLimit) {
    throw new Ec2Error(
      "AttachmentLimitExceeded",
      `The maximum number of volume attachments (${ctx.attachmentLimit}) ` +
        `for instance '${instanceId}' has been reached.`,
    );
  }
  volume.state = "in-use";
  volume.error = null;
  volume.attachment = {
    instanceId,
    device,
    state: "attaching",
    attachTime: isoNow(ctx),
    token: ctx.store.nextSeq(),
  };
  ctx.store.commit();
  ctx.lifecycle.attachStarted(volumeId);
  return renderAttachment(volumeId, volume.attachment);
};

export const detachVolume: ActionHandler = (ctx, params) => {
  const volume = getVolume(ctx, params.required("VolumeId"), params.action);
  const attachment = volume.attachment;
  if (!attachment) {
    // What EC2 answers for detaching a volume that is not attached (not InvalidAttachment.NotFound).
    throw new Ec2Error("IncorrectState", `Volume '${volume.volumeId}' is in the '${volume.state}' state.`);
  }
  const instanceId = params.str("InstanceId");
  if (instanceId !== undefined && instanceId !== "") {
    getInstance(ctx, instanceId);
    if (attachment.instanceId !== instanceId) {
      throw new Ec2Error(
        "InvalidAttachment.NotFound",
        `The volume '${volume.volumeId}' is not attached to instance '${instanceId}'.`,
      );
    }
  }
  const device = params.str("Device");
  if (device !== undefined && device !== "" && device !== attachment.device) {
    throw new Ec2Error("InvalidAttachment.NotFound", `The volume '${volume.volumeId}' is not attached at '${device}'.`);
  }
  if (params.bool("Force")) {
    // Kept so tests can assert the agent never forces a detach (it risks data loss on EC2).
    volume.forceDetachCount++;
    attachment.forced = true;
    ctx.store.event({ kind: "force-detach", volumeId: volume.volumeId, instanceId: attachment.instanceId });
  }
  if (attachment.state === "busy") {
    // Already waiting for the device to be free; a forced detach is picked up by that wait.
    ctx.store.commit();
  } else if (attachment.state !== "detaching") {
    attachment.state = "detaching";
    delete attachment.stuck;
    ctx.store.commit();
    ctx.lifecycle.detachStarted(volume.volumeId);
  } else if (attachment.error !== undefined) {
    // The backend failed to remove the device last time: another DetachVolume tries again.
    delete attachment.error;
    ctx.store.commit();
    ctx.lifecycle.detachStarted(volume.volumeId);
  } else {
    ctx.store.commit();
  }
  return renderAttachment(volume.volumeId, attachment);
};
