/**
 * Who a block device is: the EBS NVMe serial (the volume id without its dash) read from sysfs,
 * checked against the volume the agent expects before anything touches the device. Modelled on
 * aws-ebs-csi-driver's `verifyVolumeSerialMatch`: the device path is allow-listed first, then the
 * serial is compared, and a refusal names the device, the serial found and the volume expected.
 */
import { readFile, stat } from "node:fs/promises";
import { basename, join } from "node:path";
import { AgentError } from "../errors.ts";

/** Volume ids as EC2 mints them: the old 8-digit and the current 17-digit forms. */
const VOLUME_ID = /^vol-(?:[0-9a-f]{8}|[0-9a-f]{17})$/;

/** Device paths the agent will touch: a node directly under /dev, letters and digits only. */
const DEVICE_PATH = /^\/dev\/[A-Za-z0-9]+$/;

/** A volume id that is not of EC2's shape: it never reaches a path or a command. */
export class InvalidVolumeIdError extends AgentError {
  readonly volumeId: string;

  constructor(volumeId: string) {
    super(
      `invalid volume id ${JSON.stringify(volumeId)}: expected vol- and 8 or 17 lowercase hex digits`,
      "check where the volume id came from (tags, configuration): it must be an EC2 volume id",
    );
    this.volumeId = volumeId;
  }
}

/** A device path outside the allow-list (`/dev/<letters and digits>`): refused before any command runs. */
export class DevicePathError extends AgentError {
  readonly device: string;

  constructor(device: string) {
    super(
      `refusing device path ${JSON.stringify(device)}: only /dev/<letters and digits> is accepted`,
      "pass the device path waitForDevice/findDevice returned (e.g. /dev/nvme1n1), not a link or a partition path",
    );
    this.device = device;
  }
}

/**
 * The device found for a volume is not that volume (or cannot be shown to be): a stale by-id link
 * once made another driver mount the wrong volume, so nothing may be written to it.
 */
export class DeviceIdentityError extends AgentError {
  readonly volumeId: string;
  /** What the link resolved to (may be a path outside /dev when refused for that). */
  readonly device: string;
  /** The serial read from the device, when one could be read. */
  readonly serial: string | undefined;
  readonly reason: string;

  constructor(volumeId: string, device: string, serial: string | undefined, reason: string) {
    super(
      `device ${device} is not volume ${volumeId}: ${reason}` +
        (` (serial found ${serial === undefined ? "none" : JSON.stringify(serial)}, expected ` +
          `${JSON.stringify(ebsSerial(volumeId))})`),
      "do not use this device: check the volume's attachment (aws ec2 describe-volumes) and the udev links " +
        "(ls -l /dev/disk/by-id; udevadm trigger --subsystem-match=block), then run the agent again",
    );
    this.volumeId = volumeId;
    this.device = device;
    this.serial = serial;
    this.reason = reason;
  }
}

/** Throws InvalidVolumeIdError unless `volumeId` has EC2's shape. */
export function assertVolumeId(volumeId: string): void {
  if (!VOLUME_ID.test(volumeId)) throw new InvalidVolumeIdError(volumeId);
}

/** Throws DevicePathError unless `device` is `/dev/<letters and digits>`. */
export function assertDevicePath(device: string): void {
  if (!DEVICE_PATH.test(device)) throw new DevicePathError(device);
}

/** Whether `device` passes the allow-list. */
export function isAllowedDevicePath(device: string): boolean {
  return DEVICE_PATH.test(device);
}

/** The serial an EBS volume's NVMe device reports, trimmed: the volume id without its dash. */
export function ebsSerial(volumeId: string): string {
  return volumeId.replace("-", "");
}

/** The by-id link name udev gives an EBS volume on Nitro: `nvme-Amazon_Elastic_Block_Store_vol…`. */
export function ebsByIdName(volumeId: string): string {
  assertVolumeId(volumeId);
  return `nvme-Amazon_Elastic_Block_Store_${ebsSerial(volumeId)}`;
}

/** `<sysfsRoot>/class/block/<name>/device/serial` for an allow-listed device path. */
export function serialPath(sysfsRoot: string, device: string): string {
  assertDevicePath(device);
  return join(sysfsRoot, "class", "block", basename(device), "device", "serial");
}

/**
 * The device's serial from sysfs, with the padding spaces and newline trimmed; undefined when the
 * device has no serial attribute (not an NVMe device, or gone).
 */
export async function readDeviceSerial(sysfsRoot: string, device: string): Promise<string | undefined> {
  try {
    return (await readFile(serialPath(sysfsRoot, device), "utf8")).trim();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

/**
 * Verifies that `device` (already resolved, e.g. the realpath of a by-id link) is volume
 * `volumeId`: an allow-listed path, a block device, whose serial is the volume id without its
 * dash. Throws DeviceIdentityError naming the device, the serial found and the volume expected.
 */
export async function verifyVolumeSerialMatch(volumeId: string, device: string, sysfsRoot: string): Promise<void> {
  assertVolumeId(volumeId);
  if (!isAllowedDevicePath(device)) {
    throw new DeviceIdentityError(
      volumeId,
      device,
      undefined,
      "the path is not a device under /dev (malicious or stale link)",
    );
  }
  let isBlock: boolean;
  try {
    isBlock = (await stat(device)).isBlockDevice();
  } catch (error) {
    throw new DeviceIdentityError(
      volumeId,
      device,
      undefined,
      `the device cannot be read (${(error as Error).message})`,
    );
  }
  if (!isBlock) throw new DeviceIdentityError(volumeId, device, undefined, "not a block device");
  const serial = await readDeviceSerial(sysfsRoot, device);
  if (serial === undefined) throw new DeviceIdentityError(volumeId, device, undefined, "the device reports no serial");
  if (serial !== ebsSerial(volumeId)) throw new DeviceIdentityError(volumeId, device, serial, "serial mismatch");
}
