/**
 * What the keeper looks at: the pool's volumes (one filtered DescribeVolumes, all pages), its
 * snapshots (one filtered DescribeSnapshots, all pages: the current generation's snapshot, which
 * new volumes come from, and the generation of volumes without a built-at of their own), and
 * EBS's initialization of the available volumes not yet tagged `ebs-cache:initialized`. Reads only.
 *
 * The initialization only decides a tag: when EC2 will not say it (DescribeVolumeStatus refused
 * by a trimmed IAM policy, an endpoint that lacks the call), those volumes stay untagged for this
 * run, with one warning, and the keeper still stocks and trims the pool.
 */
import { describeError } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import { VolumeTag } from "../../tags.ts";
import { currentSnapshot } from "../generation.ts";
import type { InitializationStatus, KeeperCloud } from "../ports.ts";
import { keeperVolumeSelector, type KeeperObservation, type KeeperSettings } from "./plan.ts";

/** Everything planKeeper() needs; `withInitialization: false` skips EBS's initialization (a recount, where only creates follow). */
export async function observeKeeper(
  cloud: KeeperCloud,
  settings: KeeperSettings,
  options: { now: Date; withInitialization?: boolean; log?: Logger },
): Promise<KeeperObservation> {
  // Every image set's snapshots of the pool: the generation of any of its volumes may be needed.
  const [volumes, snapshots] = await Promise.all([cloud.findVolumes({ tags: keeperVolumeSelector(settings) }), cloud.findSnapshots(keeperVolumeSelector(settings))]);
  const snapshot = currentSnapshot(snapshots, settings.imageSet);

  const initialization: Record<string, InitializationStatus | null> = {};
  if (options.withInitialization !== false) {
    const pending = volumes.filter(
      (v) => v.state === "available" && !v.attachment && v.snapshotId !== undefined && v.tags[VolumeTag.initialized] === undefined && settings.zones.includes(v.availabilityZone),
    );
    const unknown: string[] = [];
    let firstError: unknown;
    // One DescribeVolumeStatus per volume, a few at a time: the pool is tens of volumes, not thousands.
    for (let i = 0; i < pending.length; i += 5) {
      await Promise.all(
        pending.slice(i, i + 5).map(async (v) => {
          try {
            initialization[v.volumeId] = (await cloud.initializationStatus(v.volumeId)) ?? null;
          } catch (error) {
            initialization[v.volumeId] = null;
            unknown.push(v.volumeId);
            firstError ??= error;
          }
        }),
      );
    }
    if (unknown.length > 0) {
      options.log?.warning("keeper.initialization-unknown", `EC2 did not tell the initialization of ${unknown.length} volume(s): ${describeError(firstError)}; they are not tagged initialized this run`, {
        volumes: unknown.sort().join(","),
        remediation: "allow ec2:DescribeVolumeStatus to the keeper (iam/ebs-cache-agent-policy.json) and check the EC2 endpoint",
      });
    }
  }
  return { now: options.now, volumes, ...(snapshot ? { snapshot } : {}), snapshots, initialization };
}
