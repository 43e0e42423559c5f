/**
 * Volume chores of the lab's tests and benches, through the EC2 emulator as an instance would
 * see them: create (blank, or from a snapshot, optionally with VolumeInitializationRate),
 * attach to a host (waiting for the device), detach, mount XFS, and a snapshot of an XFS volume
 * holding a given amount of incompressible data (so the allocated part of a volume is known).
 */
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import {
  AttachVolumeCommand,
  CreateSnapshotCommand,
  CreateVolumeCommand,
  DescribeVolumesCommand,
  DetachVolumeCommand,
  waitUntilSnapshotCompleted,
  waitUntilVolumeAvailable,
  type EC2Client,
} from "@aws-sdk/client-ec2";
import { run } from "../../exec.ts";
import { FS_LABEL } from "../../layout.ts";
import type { Lab, LabHost } from "../lab.ts";

/**
 * How the lab's own set-up waits on the emulator (the SDK's waiters, in seconds): its state
 * changes take 50-100 ms (src/lab/lab.ts), so polling from 50 ms rather than the waiters' 15 s
 * (or the 1 s the lab used before) costs a lab file no second per volume or snapshot made.
 */
export const LAB_WAIT = { minDelay: 0.05, maxDelay: 0.5, maxWaitTime: 120 };
const WAIT = LAB_WAIT;

export async function waitAttached(ec2: EC2Client, volumeId: string): Promise<void> {
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    const out = await ec2.send(new DescribeVolumesCommand({ VolumeIds: [volumeId] }));
    if (out.Volumes?.[0]?.Attachments?.[0]?.State === "attached") return;
    await sleep(50);
  }
  throw new Error(`${volumeId} did not reach attached`);
}

let deviceNames = 0;

/** Attaches the volume to the host and returns its device. */
export async function attach(lab: Lab, ec2: EC2Client, volumeId: string, host: LabHost): Promise<string> {
  // A new EC2 device name each time: a host may hold several volumes.
  const device = `/dev/sd${"fghijklmnop"[deviceNames++ % 11]}`;
  await ec2.send(new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: host.instance.instanceId, Device: device }));
  await waitAttached(ec2, volumeId);
  return lab.backend.deviceReady(volumeId);
}

export async function detach(ec2: EC2Client, volumeId: string, host: LabHost): Promise<void> {
  await ec2.send(new DetachVolumeCommand({ VolumeId: volumeId, InstanceId: host.instance.instanceId }));
  await waitUntilVolumeAvailable({ client: ec2, ...WAIT }, { VolumeIds: [volumeId] });
}

/** Mounts an XFS device (nouuid: clones of one snapshot share the UUID) at `<mountRoot>/<name>`. */
export async function mountXfs(device: string, host: LabHost, name: string): Promise<string> {
  const mountPoint = join(host.paths.mountRoot, name);
  await mkdir(mountPoint, { recursive: true });
  await run("mount", ["-o", "noatime,nouuid", device, mountPoint]);
  return mountPoint;
}

/** Creates a volume (blank, or from a snapshot) and waits until it is available. */
export async function createVolume(
  ec2: EC2Client,
  zone: string,
  options: { snapshotId?: string; sizeGiB?: number; rate?: number; tags?: Record<string, string> } = {},
): Promise<string> {
  const created = await ec2.send(
    new CreateVolumeCommand({
      AvailabilityZone: zone,
      VolumeType: "gp3",
      ...(options.snapshotId ? { SnapshotId: options.snapshotId } : {}),
      ...(options.sizeGiB ? { Size: options.sizeGiB } : {}),
      ...(options.rate ? { VolumeInitializationRate: options.rate } : {}),
      ...(options.tags
        ? {
            TagSpecifications: [
              { ResourceType: "volume", Tags: Object.entries(options.tags).map(([Key, Value]) => ({ Key, Value })) },
            ],
          }
        : {}),
    }),
  );
  await waitUntilVolumeAvailable({ client: ec2, ...WAIT }, { VolumeIds: [created.VolumeId!] });
  return created.VolumeId!;
}

/**
 * A blank XFS volume of `sizeGiB` with `files` files of incompressible data (`dataMiB` in all)
 * under `docker/`, written on a builder host, then snapshotted. Returns the snapshot id.
 */
export async function makeDataSnapshot(
  lab: Lab,
  ec2: EC2Client,
  options: {
    sizeGiB: number;
    dataMiB: number;
    files: number;
    /** Writes more onto the volume (mounted there) after the data files, before the snapshot. */
    addContent?: (mountPoint: string) => Promise<void>;
  },
): Promise<string> {
  const builder = await lab.addHost({ tags: { Name: "data-builder" } });
  const volumeId = await createVolume(ec2, builder.instance.availabilityZone, { sizeGiB: options.sizeGiB });
  const device = await attach(lab, ec2, volumeId, builder);
  await run("mkfs.xfs", ["-q", "-L", FS_LABEL, "-m", "crc=1", "-n", "ftype=1", device]);
  const mountPoint = await mountXfs(device, builder, "data");
  try {
    const dir = join(mountPoint, "docker", "overlay2");
    await mkdir(dir, { recursive: true });
    const perFileMiB = Math.max(1, Math.floor(options.dataMiB / options.files));
    for (let i = 0; i < options.files; i++) {
      await run("dd", [
        "if=/dev/urandom",
        `of=${join(dir, `layer-${i}.bin`)}`,
        "bs=1M",
        `count=${perFileMiB}`,
        "status=none",
      ]);
    }
    await options.addContent?.(mountPoint);
  } finally {
    await run("umount", [mountPoint]);
  }
  await detach(ec2, volumeId, builder);
  const snapshot = await ec2.send(new CreateSnapshotCommand({ VolumeId: volumeId }));
  await waitUntilSnapshotCompleted({ client: ec2, ...WAIT }, { SnapshotIds: [snapshot.SnapshotId!] });
  return snapshot.SnapshotId!;
}
