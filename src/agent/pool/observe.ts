/**
 * What `pool` lists: the managed volumes of the region and their snapshots, of one pool when
 * asked (one filtered DescribeVolumes and one DescribeSnapshots, all pages).
 */
import { VolumeTag } from "../../tags.ts";
import type { CloudVolumes, SnapshotInfo, VolumeInfo } from "../ports.ts";

export interface PoolObservation {
  volumes: VolumeInfo[];
  /**
   * The snapshots tagged as the agent's: their cost, the pool's current generation, and the generation of volumes made
   * from them.
   */
  snapshots: SnapshotInfo[];
}

/** The volumes and snapshots tagged `ebs-cache:managed=true` (and `ebs-cache:pool=<pool>` when given). Reads only. */
export async function observePool(
  cloud: Pick<CloudVolumes, "findVolumes" | "findSnapshots">,
  options: { pool?: string } = {},
): Promise<PoolObservation> {
  const tags = { [VolumeTag.managed]: "true", ...(options.pool ? { [VolumeTag.pool]: options.pool } : {}) };
  const [volumes, snapshots] = await Promise.all([cloud.findVolumes({ tags }), cloud.findSnapshots(tags)]);
  return { volumes, snapshots };
}
