/**
 * The instance's own NVMe instance-store disks, found and reported, never written: an AMI may
 * run docker on one (osparc's mounts the largest disk it finds at /mnt/docker), and an operator
 * sizing pool volumes should see what the node already has. Read from sysfs only: each
 * `class/block/nvme<N>n<M>` whose controller's model is EC2's instance-store model. The agent's
 * own volumes are EBS (model `Amazon Elastic Block Store`) and are identified by their serial
 * elsewhere (serial.ts); nothing here decides a write.
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";

/** The model an instance-store NVMe controller reports (`/sys/class/nvme/nvme1/model`, padded). */
export const INSTANCE_STORE_MODEL = "Amazon EC2 NVMe Instance Storage";

export interface InstanceStoreDisk {
  /** `/dev/nvme1n1` */
  device: string;
  sizeBytes: number;
}

const NVME_NAMESPACE = /^nvme\d+n\d+$/;

/**
 * The instance-store disks under `sysfsRoot` (config `paths.sysfsRoot`, /sys on a host), by
 * device name; none on a host without any. No default: `status` and the boot's metrics read the
 * same tree.
 */
export async function findInstanceStoreDisks(sysfsRoot: string): Promise<InstanceStoreDisk[]> {
  const block = join(sysfsRoot, "class", "block");
  const names = await readdir(block).catch(() => [] as string[]);
  const disks: InstanceStoreDisk[] = [];
  for (const name of names.filter((n) => NVME_NAMESPACE.test(n)).sort()) {
    const model = await readFile(join(block, name, "device", "model"), "utf8").catch(() => "");
    if (model.trim() !== INSTANCE_STORE_MODEL) continue;
    // `size` counts 512-byte sectors whatever the device's block size.
    const sectors = Number((await readFile(join(block, name, "size"), "utf8").catch(() => "0")).trim());
    disks.push({ device: `/dev/${name}`, sizeBytes: Number.isFinite(sectors) ? sectors * 512 : 0 });
  }
  return disks;
}
