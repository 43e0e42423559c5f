/**
 * What the keeper looks at: the pool's volumes (one filtered DescribeVolumes, all pages), its
 * newest completed snapshot, the start times of its snapshots (the trim order), and EBS's
 * initialization of the available volumes not yet tagged `ebs-cache:initialized`. Reads only.
 */
import { VolumeTag } from "../../tags.ts";
import type { InitializationStatus, KeeperCloud } from "../ports.ts";
import { keeperSnapshotSelector, keeperVolumeSelector, type KeeperObservation, type KeeperSettings } from "./plan.ts";

/** Everything planKeeper() needs; `withSnapshots: false` skips the snapshot listing (a recount, where only creates follow). */
export async function observeKeeper(
  cloud: KeeperCloud,
  settings: KeeperSettings,
  options: { now: Date; withSnapshots?: boolean; withInitialization?: boolean },
): Promise<KeeperObservation> {
  const [volumes, snapshot, snapshots] = await Promise.all([
    cloud.findVolumes({ tags: keeperVolumeSelector(settings) }),
    cloud.newestSnapshot(keeperSnapshotSelector(settings)),
    options.withSnapshots === false ? Promise.resolve([]) : cloud.findSnapshots(keeperVolumeSelector(settings)),
  ]);
  const snapshotStarts: Record<string, string> = {};
  for (const s of snapshots) if (s.startTime) snapshotStarts[s.snapshotId] = s.startTime.toISOString();

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
  return { now: options.now, volumes, ...(snapshot ? { snapshot } : {}), snapshotStarts, initialization };
}
