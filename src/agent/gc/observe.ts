/**
 * What gc looks at: every managed volume of the region (one filtered DescribeVolumes, all pages)
 * and every managed pool snapshot (one filtered DescribeSnapshots, all pages: each pool's
 * current generation, and the generation of volumes without a built-at of their own).
 */
import { VolumeKind, VolumeTag } from "../../tags.ts";
import { MANAGED } from "../volume-rules.ts";
import type { CloudVolumes, SnapshotInfo, VolumeInfo } from "../ports.ts";

export interface GcObservation {
  volumes: VolumeInfo[];
  snapshots: SnapshotInfo[];
}

/** The volumes tagged `ebs-cache:managed=true` (gc never sees any other) and the pools' snapshots. */
export async function observeGc(cloud: Pick<CloudVolumes, "findVolumes" | "findSnapshots">): Promise<GcObservation> {
  const [volumes, snapshots] = await Promise.all([
    cloud.findVolumes({ tags: MANAGED }),
    cloud.findSnapshots({ ...MANAGED, [VolumeTag.kind]: VolumeKind.pool }),
  ]);
  return { volumes, snapshots };
}
