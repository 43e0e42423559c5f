/**
 * What the refresh reads before it plans: the attached volume, its pool's snapshots, docker's images. Through ports
 * only.
 */
import { VolumeTag } from "../../tags.ts";
import type { DockerEngine, Identity, RefreshCloud } from "../ports.ts";
import { attachedCacheVolume, MANAGED, poolSelector } from "../volume-rules.ts";
import type { RefreshObservation } from "./plan.ts";

/**
 * Observes the refresh: the managed volume attached here; when it is a pool volume, the
 * snapshots of its pool (the volume's own `pool` tag: the pool it goes back to) and the images
 * docker lists.
 */
export async function observeRefresh(
  cloud: RefreshCloud,
  engine: Pick<DockerEngine, "images">,
  identity: Identity,
  imageSet: string | null,
): Promise<RefreshObservation> {
  const attached = await cloud.findVolumes({ tags: MANAGED, attachedTo: identity.instanceId });
  const volume = attachedCacheVolume(attached, identity.instanceId);
  const pool = volume?.tags[VolumeTag.pool];
  if (!volume || pool === undefined) return { volume, snapshots: [], instanceTags: identity.tags, present: [] };
  const [snapshots, present] = await Promise.all([
    cloud.findSnapshots(poolSelector({ pool, imageSet })),
    engine.images(),
  ]);
  return { volume, snapshots, instanceTags: identity.tags, present };
}
