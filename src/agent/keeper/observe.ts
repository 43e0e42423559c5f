/**
 * What the keeper looks at: the pool's volumes (one filtered DescribeVolumes, all pages), its
 * snapshots (one filtered DescribeSnapshots, all pages: the current generation's snapshot, which
 * new volumes come from, and the generation of volumes without a built-at of their own), and
 * EBS's initialization of the available volumes not yet tagged `ebs-cache:initialized`. Reads only.
 */
import { VolumeTag } from "../../tags.ts";
import { currentSnapshot } from "../generation.ts";
import type { InitializationStatus, KeeperCloud } from "../ports.ts";
import { keeperVolumeSelector, type KeeperObservation, type KeeperSettings } from "./plan.ts";

/** Everything planKeeper() needs; `withInitialization: false` skips EBS's initialization (a recount, where only creates follow). */
export async function observeKeeper(
  cloud: KeeperCloud,
  settings: KeeperSettings,
  options: { now: Date; withInitialization?: boolean },
): Promise<KeeperObservation> {
  // Every image set's snapshots of the pool: the generation of any of its volumes may be needed.
  const [volumes, snapshots] = await Promise.all([cloud.findVolumes({ tags: keeperVolumeSelector(settings) }), cloud.findSnapshots(keeperVolumeSelector(settings))]);
  const snapshot = currentSnapshot(snapshots, settings.imageSet);

  const initialization: Record<string, InitializationStatus | null> = {};
  if (options.withInitialization !== false) {
    const pending = volumes.filter(
      (v) => v.state === "available" && !v.attachment && v.snapshotId !== undefined && v.tags[VolumeTag.initialized] === undefined && settings.zones.includes(v.availabilityZone),
    );
    // One DescribeVolumeStatus per volume, a few at a time: the pool is tens of volumes, not thousands.
    for (let i = 0; i < pending.length; i += 5) {
      await Promise.all(
        pending.slice(i, i + 5).map(async (v) => {
          initialization[v.volumeId] = (await cloud.initializationStatus(v.volumeId)) ?? null;
        }),
      );
    }
  }
  return { now: options.now, volumes, ...(snapshot ? { snapshot } : {}), snapshots, initialization };
}
