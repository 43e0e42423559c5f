/**
 * What `pool` lists: the managed volumes of the region and their snapshots, of one pool when
 * asked (one filtered DescribeVolumes and one DescribeSnapshots, all pages), and the instances the
 * attached ones are attached to (one DescribeInstances per 100).
 */
import { VolumeTag } from "../../tags.ts";
import { MANAGED } from "../volume-rules.ts";
import type { CloudVolumes, InstanceInfo, SnapshotInfo, VolumeInfo } from "../ports.ts";
import { attachedInstanceIds } from "./stopped.ts";

export interface PoolObservation {
  volumes: VolumeInfo[];
  /**
   * The snapshots tagged as the agent's: their cost, the pool's current generation, and the generation of volumes made
   * from them.
   */
  snapshots: SnapshotInfo[];
  /** The instances the attached volumes are attached to: which of them are stopped, since when. */
  instances: InstanceInfo[];
}

/** The volumes and snapshots tagged `ebs-cache:managed=true` (and `ebs-cache:pool=<pool>` when given). Reads only. */
export async function observePool(
  cloud: Pick<CloudVolumes, "findVolumes" | "findSnapshots" | "describeInstances">,
  options: { pool?: string } = {},
): Promise<PoolObservation> {
  const tags = { ...MANAGED, ...(options.pool ? { [VolumeTag.pool]: options.pool } : {}) };
  const [volumes, snapshots] = await Promise.all([cloud.findVolumes({ tags }), cloud.findSnapshots(tags)]);
  const attached = attachedInstanceIds(volumes);
  const instances = attached.length > 0 ? await cloud.describeInstances(attached) : [];
  return { volumes, snapshots, instances };
}
