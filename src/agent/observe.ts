/**
 * Observing before planning: a fixed number of server-side filtered EC2 calls, whatever the
 * pool's size (one DescribeVolumes per family, one DescribeSnapshots).
 */
import { VolumeKind, VolumeTag } from "../tags.ts";
import type { BootObservation, BootSettings } from "./plan.ts";
import type { CloudVolumes, Identity } from "./ports.ts";

/** The tags that select a pool's volumes and snapshots. */
export function poolSelector(settings: Pick<BootSettings, "pool" | "imageSet">): Record<string, string> {
  return {
    [VolumeTag.managed]: "true",
    [VolumeTag.kind]: VolumeKind.pool,
    [VolumeTag.pool]: settings.pool,
    ...(settings.imageSet ? { [VolumeTag.imageSet]: settings.imageSet } : {}),
  };
}

/** Gathers what the planner needs. */
export async function observeBoot(cloud: CloudVolumes, identity: Identity, settings: BootSettings): Promise<BootObservation> {
  if (!settings.enabled) return { identity, attached: [], workspace: [], pool: [] };
  const zone = identity.availabilityZone;
  const [attached, workspace, pool, snapshot] = await Promise.all([
    cloud.findVolumes({ tags: { [VolumeTag.managed]: "true" }, attachedTo: identity.instanceId }),
    settings.workspace
      ? cloud.findVolumes({
          tags: {
            [VolumeTag.managed]: "true",
            [VolumeTag.kind]: VolumeKind.workspace,
            [VolumeTag.userId]: settings.workspace.userId,
            [VolumeTag.projectId]: settings.workspace.projectId,
            [VolumeTag.nodeId]: settings.workspace.nodeId,
          },
          availabilityZone: zone,
          status: ["available"],
        })
      : Promise.resolve([]),
    cloud.findVolumes({ tags: poolSelector(settings), availabilityZone: zone, status: ["available"] }),
    // The pool's snapshot also makes new workspace volumes (workspace.create = snapshot).
    settings.createFromSnapshot || (settings.workspace && settings.workspaceCreate === "snapshot")
      ? cloud.newestSnapshot(poolSelector(settings))
      : Promise.resolve(undefined),
  ]);
  return { identity, attached, workspace, pool, ...(snapshot ? { snapshot } : {}) };
}
