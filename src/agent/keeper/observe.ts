/**
 * What the keeper looks at: the pool's volumes (one filtered DescribeVolumes, all pages), its
 * snapshots (one filtered DescribeSnapshots, all pages: the current generation's snapshot, which
 * new volumes come from, and the generation of volumes without a built-at of their own), and
 * EBS's initialization of the available volumes not yet tagged `ebs-cache:initialized` (a volume
 * whose status cannot be read is left untagged this run, see readInitialization). Reads only.
 */
import { describeError } from "../../errors.ts";
import { VolumeTag } from "../../tags.ts";
import { currentSnapshot } from "../volume-rules.ts";
import type { InitializationStatus, KeeperCloud } from "../ports.ts";
import { attachedInstanceIds } from "../pool/stopped.ts";
import { keeperVolumeSelector, type KeeperObservation, type KeeperSettings } from "./plan.ts";

/**
 * Everything planKeeper() needs; `withInitialization: false` skips EBS's initialization (a recount, where only creates
 * follow).
 */
export async function observeKeeper(
  cloud: KeeperCloud,
  settings: KeeperSettings,
  options: { withInitialization?: boolean } = {},
): Promise<KeeperObservation> {
  // Every image set's snapshots of the pool: the generation of any of its volumes may be needed.
  const [volumes, snapshots] = await Promise.all([
    cloud.findVolumes({ tags: keeperVolumeSelector(settings) }),
    cloud.findSnapshots(keeperVolumeSelector(settings)),
  ]);
  // EC2's time, known from those answers: claims on their way, quarantine and stops are judged in it.
  const now = cloud.clock.now();
  const snapshot = currentSnapshot(snapshots, settings.imageSet);
  // Who holds the attached ones: a stopped instance's volume is no stock, and may be reclaimed.
  const attached = attachedInstanceIds(volumes);
  const instances = attached.length > 0 ? await cloud.describeInstances(attached) : [];

  let status: InitializationRead = { initialization: {}, unread: {} };
  if (options.withInitialization !== false) {
    const pending = volumes.filter(
      (v) =>
        v.state === "available" &&
        !v.attachment &&
        v.snapshotId !== undefined &&
        v.tags[VolumeTag.initialized] === undefined &&
        settings.zones.includes(v.availabilityZone),
    );
    status = await readInitialization(
      pending.map((v) => v.volumeId),
      (volumeId) => cloud.initializationStatus(volumeId),
    );
  }
  return { now, volumes, ...(snapshot ? { snapshot } : {}), snapshots, ...status, instances };
}

/** What DescribeVolumeStatus said of each volume asked about, and why it could not say it of the others. */
export interface InitializationRead {
  /** By volume id; null: EC2 gave no initialization details. */
  initialization: Record<string, InitializationStatus | null>;
  /** By volume id: why its status could not be read (throttling past the retries, a 5xx). */
  unread: Record<string, string>;
}

/**
 * One DescribeVolumeStatus per volume, a few at a time (the pool is tens of volumes, not
 * thousands). A read that fails costs only that volume's `initialized` tag this run: it is
 * recorded in `unread`, never thrown, so the keeper still creates and trims.
 */
export async function readInitialization(
  volumeIds: readonly string[],
  read: (volumeId: string) => Promise<InitializationStatus | undefined>,
): Promise<InitializationRead> {
  const out: InitializationRead = { initialization: {}, unread: {} };
  for (let i = 0; i < volumeIds.length; i += 5) {
    await Promise.all(
      volumeIds.slice(i, i + 5).map(async (volumeId) => {
        try {
          out.initialization[volumeId] = (await read(volumeId)) ?? null;
        } catch (error) {
          out.unread[volumeId] = describeError(error);
        }
      }),
    );
  }
  return out;
}
