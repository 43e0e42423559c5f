/**
 * What the prune looks at: the volume the last boot mounted (its record), that volume's tags and
 * the pool's snapshots (one DescribeVolumes, one DescribeSnapshots), the filesystem's fill
 * (statfs), docker's data-root, images and containers. Reads only.
 */
import { describeError } from "../../errors.ts";
import { VolumeKind, VolumeTag } from "../../tags.ts";
import {
  currentGeneration,
  generationName,
  imagesOf,
  isUsableSnapshot,
  poolSelector,
  snapshotGeneration,
} from "../volume-rules.ts";
import type { SnapshotInfo } from "../ports.ts";
import { prePulledImages } from "../pre-pulled.ts";
import type { PruneObservation } from "./plan.ts";
import type { LastBoot, PrewarmActivity, PruneDeps } from "./deps.ts";

/**
 * The cache volume the last boot mounted, from its result: only a boot that came up (`ready`,
 * `warming`) left docker on it, and only with the volume, its mount point and data-root known.
 */
export function mountedVolumeOf(
  lastBoot: LastBoot | undefined,
): { volumeId: string; mountPoint: string; dataRoot: string } | undefined {
  if (!lastBoot || (lastBoot.outcome !== "ready" && lastBoot.outcome !== "warming")) return undefined;
  const { volumeId, mountPoint, dataRoot } = lastBoot;
  return volumeId && mountPoint && dataRoot ? { volumeId, mountPoint, dataRoot } : undefined;
}

/**
 * Whether a background pre-warm reads the volume now: its process lives and it initializes or follows EBS's loading.
 */
export function prewarmReads(prewarm: PrewarmActivity | undefined): boolean {
  return (
    prewarm !== undefined && prewarm.running && (prewarm.phase === "initializing" || prewarm.phase === "following")
  );
}

/** The current generation's images: the pool's current snapshot's list (currentSnapshot), else the volume's own. */
export function currentImages(
  tags: Readonly<Record<string, string>>,
  snapshots: readonly SnapshotInfo[] | undefined,
  imageSet: string | null,
): PruneObservation["current"] {
  const generation = snapshots ? currentGeneration(snapshots, imageSet) : undefined;
  const name = generation ? generationName(generation) : undefined;
  const snapshot =
    name === undefined
      ? undefined
      : snapshots?.find(
          (s) => isUsableSnapshot(s) && generationName(snapshotGeneration(s)) === name && imagesOf(s.tags).length > 0,
        );
  if (snapshot) return { images: imagesOf(snapshot.tags), source: "snapshot", generation: name! };
  const own = imagesOf(tags);
  return own.length > 0 ? { images: own, source: "volume" } : { images: [], source: "none" };
}

/** Everything planPrune() needs. A pool snapshot listing EC2 refuses falls back to the volume's own list (logged). */
export async function observePrune(
  deps: PruneDeps,
  options: { imageSet: string | null; fillFirstBelowPercent?: number; prePulledImagesTag?: string | null },
): Promise<PruneObservation> {
  const { log } = deps;
  const volume = mountedVolumeOf(await deps.lastBoot());
  const empty: PruneObservation = { current: { images: [], source: "none" }, images: [], containerImageIds: [] };
  if (!volume) return empty;
  if (options.fillFirstBelowPercent !== undefined) {
    // The timer's hourly run on every node: below the threshold, statfs alone answers, and
    // neither EC2 nor docker is asked anything.
    const fill = await deps.fill(volume.mountPoint);
    if (fill && fill.usedRatio * 100 <= options.fillFirstBelowPercent)
      return { ...empty, volume, fill, fillOnly: true };
  }
  const [fill, info, described] = await Promise.all([
    deps.fill(volume.mountPoint),
    deps.docker.info(),
    deps.cloud.describeVolume(volume.volumeId),
  ]);
  const base: PruneObservation = {
    ...empty,
    volume,
    dockerRootDir: info.dockerRootDir,
    ...(fill ? { fill } : {}),
    ...(described ? { tags: described.tags } : {}),
  };
  const tags = described?.tags;
  // The snapshots, images and containers matter only for a pool or workspace volume docker runs on.
  const kind = tags?.[VolumeTag.kind];
  if (!fill || !tags || (kind !== VolumeKind.pool && kind !== VolumeKind.workspace)) return base;
  if (info.dockerRootDir !== volume.dataRoot) return base;
  const pool = tags[VolumeTag.pool];
  let snapshots: SnapshotInfo[] | undefined;
  if (pool) {
    snapshots = await deps.cloud
      .findSnapshots(poolSelector({ pool, imageSet: options.imageSet }))
      .catch((error: unknown) => {
        log.warning(
          "prune.snapshots",
          `could not list the pool's snapshots: ${describeError(error)}; the volume's own image list stands for the ` +
            `current generation`,
          { pool },
        );
        return undefined;
      });
  }
  const key = options.prePulledImagesTag;
  const [images, containerImageIds, prewarmRunning, prePulled] = await Promise.all([
    deps.docker.imageEntries(),
    deps.docker.containerImageIds(),
    deps.prewarm ? deps.prewarm().then(prewarmReads) : Promise.resolve(false),
    key && deps.instanceTags ? readPrePulled(deps.instanceTags, key) : Promise.resolve(undefined),
  ]);
  return {
    ...base,
    ...(prePulled ? { prePulled } : {}),
    current: currentImages(tags, snapshots, options.imageSet),
    images,
    containerImageIds,
    prewarmRunning,
  };
}

/** The pre-pulled images of the instance's tags; a problem when unreadable (the prune then removes nothing). */
async function readPrePulled(
  instanceTags: () => Promise<Record<string, string>>,
  key: string,
): Promise<NonNullable<PruneObservation["prePulled"]>> {
  let tags: Record<string, string>;
  try {
    tags = await instanceTags();
  } catch (error) {
    return { problem: `the instance's tags could not be read (${describeError(error)})` };
  }
  return prePulledImages(tags, key);
}
