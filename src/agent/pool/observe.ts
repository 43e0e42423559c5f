/** What `pool` lists: the managed volumes of the region, of one pool when asked (one filtered DescribeVolumes, all pages). */
import { VolumeTag } from "../../tags.ts";
import type { CloudVolumes, VolumeInfo } from "../ports.ts";

/** The volumes tagged `ebs-cache:managed=true` (and `ebs-cache:pool=<pool>` when given). Reads only. */
export function observePool(cloud: CloudVolumes, options: { pool?: string } = {}): Promise<VolumeInfo[]> {
  return cloud.findVolumes({
    tags: { [VolumeTag.managed]: "true", ...(options.pool ? { [VolumeTag.pool]: options.pool } : {}) },
  });
}
