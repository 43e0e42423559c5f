/**
 * What the prune looks at: the volume the last boot mounted (its record), that volume's tags and
 * the pool's snapshots (one DescribeVolumes, one DescribeSnapshots), the filesystem's fill
 * (statfs), docker's data-root, images and containers. Reads only.
 */
import { describeError } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import { VolumeKind, VolumeTag } from "../../tags.ts";
import { currentGeneration, generationName, imagesOf, snapshotGeneration } from "../generation.ts";
import type { CloudVolumes, DockerImages, FilesystemFill, SnapshotInfo } from "../ports.ts";
import type { PruneObservation } from "./plan.ts";

/** The adapters the prune reads and acts through (built in src/agent/wiring.ts). */
export interface PruneDeps {
  /** The cache volume the last boot mounted, from its record; undefined when none is recorded. */
  mountedVolume(): Promise<{ volumeId: string; mountPoint: string; dataRoot: string } | undefined>;
  cloud: Pick<CloudVolumes, "describeVolume" | "findSnapshots">;
  /** statfs of the filesystem mounted exactly there (src/host/fill.ts). */
  fill(mountPoint: string): Promise<FilesystemFill | undefined>;
  docker: DockerImages;
  /** Whether a background pre-warm reads the volume now (its state file and process). Absent: never. */
  prewarmRunning?(): Promise<boolean>;
  log: Logger;
}

/** The current generation's images: the pool's newest completed snapshot's list, else the volume's own. */
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
          (s) =>
            s.state === "completed" && generationName(snapshotGeneration(s)) === name && imagesOf(s.tags).length > 0,
        );
  if (snapshot) return { images: imagesOf(snapshot.tags), source: "snapshot", generation: name! };
  const own = imagesOf(tags);
  return own.length > 0 ? { images: own, source: "volume" } : { images: [], source: "none" };
}

/** Everything planPrune() needs. A pool snapshot listing EC2 refuses falls back to the volume's own list (logged). */
export async function observePrune(deps: PruneDeps, options: { imageSet: string | null }): Promise<PruneObservation> {
  const { log } = deps;
  const volume = await deps.mountedVolume();
  const empty: PruneObservation = { current: { images: [], source: "none" }, images: [], containerImageIds: [] };
  if (!volume) return empty;
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
  // The snapshots, images and containers matter only for a pool volume docker runs on.
  if (!fill || !tags || tags[VolumeTag.kind] !== VolumeKind.pool || info.dockerRootDir !== volume.dataRoot) return base;
  const pool = tags[VolumeTag.pool];
  let snapshots: SnapshotInfo[] | undefined;
  if (pool) {
    const selector = {
      [VolumeTag.managed]: "true",
      [VolumeTag.kind]: VolumeKind.pool,
      [VolumeTag.pool]: pool,
      ...(options.imageSet ? { [VolumeTag.imageSet]: options.imageSet } : {}),
    };
    snapshots = await deps.cloud.findSnapshots(selector).catch((error: unknown) => {
      log.warning(
        "prune.snapshots",
        `could not list the pool's snapshots: ${describeError(error)}; the volume's own image list stands for ` +
          `the current generation`,
        { pool },
      );
      return undefined;
    });
  }
  const [images, containerImageIds, prewarmRunning] = await Promise.all([
    deps.docker.imageEntries(),
    deps.docker.containerImageIds(),
    deps.prewarmRunning?.() ?? Promise.resolve(false),
  ]);
  return {
    ...base,
    current: currentImages(tags, snapshots, options.imageSet),
    images,
    containerImageIds,
    prewarmRunning,
  };
}
