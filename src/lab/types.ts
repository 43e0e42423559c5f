/**
 * Contracts between the lab's parts: the EC2 emulator (`src/lab/ec2/`), the loop-device volume
 * backend (`src/lab/volumes/loopdev.ts`), the IMDS emulator (`src/lab/imds/imds.ts`) and the private dockerd
 * (`src/lab/docker/dockerd.ts`). The lab (`src/lab/lab.ts`) wires them together.
 */

/** An emulated EC2 instance. Each has its own folder standing for its root filesystem. */
export interface LabInstance {
  instanceId: string;
  region: string;
  availabilityZone: string;
  /** Instance tags (live: CreateTags on the instance changes them). */
  tags: Record<string, string>;
  /** Whether IMDS serves tags under /latest/meta-data/tags/instance (InstanceMetadataTags). */
  metadataTags: boolean;
  /** Where this instance's devices appear: `<hostRoot>/dev/disk/by-id`, `<hostRoot>/sys`. */
  hostRoot: string;
  /** Its EC2 instance type (IMDS `instance-type`, DescribeInstances); absent: LAB_INSTANCE_TYPE. */
  instanceType?: string;
}

/** The instance type of a lab instance registered without one. */
export const LAB_INSTANCE_TYPE = "m6i.large";

/** Where the devices of an instance appear, as the agent is configured to look for them. */
export function byIdDir(hostRoot: string): string {
  return `${hostRoot}/dev/disk/by-id`;
}
export function sysfsRoot(hostRoot: string): string {
  return `${hostRoot}/sys`;
}

/** The by-id link name udev gives an EBS volume on Nitro (NVMe): the id without its dash. */
export function ebsByIdName(volumeId: string): string {
  return `nvme-Amazon_Elastic_Block_Store_${volumeId.replace("-", "")}`;
}

/**
 * Storage and devices behind the emulated volumes. The EC2 emulator calls it; the loop-device
 * implementation keeps each volume as a sparse file and attaches it as a loop device.
 */
export interface VolumeBackend {
  /** Creates the volume's sparse image (a copy of the snapshot's image when given). */
  createVolume(volumeId: string, sizeGiB: number, fromSnapshotId?: string): Promise<void>;
  deleteVolume(volumeId: string): Promise<void>;
  /** Takes a point-in-time sparse copy of a volume's image. */
  createSnapshot(snapshotId: string, volumeId: string): Promise<void>;
  deleteSnapshot(snapshotId: string): Promise<void>;
  /** Makes the volume appear on the instance: loop device, by-id link, serial in sysfs. */
  attach(volumeId: string, instance: LabInstance): Promise<void>;
  /** Removes the volume's device from the instance. */
  detach(volumeId: string, instance: LabInstance): Promise<void>;
  /**
   * Whether the volume's device is in use on the instance (mounted, or held by another block
   * device): a detach that is not forced then waits in `busy`, as on EC2. Absent: never in use.
   */
  inUse?(volumeId: string, instance: LabInstance): Promise<boolean>;
  /**
   * How much of a volume made from a snapshot the storage has fetched (units done / all), for
   * DescribeVolumeStatus's default initialization; undefined when the storage does not track
   * it (the volume then counts as initialized). Synchronous: actions answer in one turn.
   */
  initializationProgress?(volumeId: string): { done: number; total: number } | undefined;
  /**
   * The EBS direct APIs' side of the storage (StartSnapshot, PutSnapshotBlock,
   * GetSnapshotBlock): a snapshot image written and read block by block, which volumes are then
   * created from as from any snapshot. Absent: the emulator refuses those calls.
   */
  blockSnapshots?: BlockSnapshotStore;
}

/** A snapshot's image, block by block (see VolumeBackend.blockSnapshots). */
export interface BlockSnapshotStore {
  /** A new snapshot image of `sizeGiB`: the parent's blocks, or zeros. */
  start(snapshotId: string, sizeGiB: number, parentSnapshotId?: string): Promise<void>;
  put(snapshotId: string, index: number, data: Buffer): Promise<void>;
  /** One block (zeros where nothing was written). */
  read(snapshotId: string, index: number, blockSize: number): Promise<Buffer>;
  /** The indices of the blocks holding data, ascending. */
  blocks(snapshotId: string, blockSize: number): Promise<number[]>;
}
