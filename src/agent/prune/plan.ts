/**
 * The prune, planned: when the cache filesystem is fuller than the threshold and the volume is a
 * pool volume, which images to remove so that it falls below the target. Pure: the observed
 * volume, fill, images and containers come in, a verdict and one decision per image go out
 * (`prune --dry-run` prints them).
 *
 * What is never removed: an image of the current generation (the pool's newest completed
 * snapshot's `ebs-cache:images`, else the volume's own), an image osparc pulled into this
 * machine (its `io.simcore.autoscaling.pre_pulled_images` instance tag: osparc pulls again only
 * when the wanted list differs from the tag, so an image removed behind it is never pulled
 * again), an image any container uses (running or stopped, by image id, so every tag of that id
 * is kept), and the parents of kept images. A workspace volume is pruned of images only (its
 * user's images outside those, above the threshold), never of docker volumes or other data.
 */
import { VolumeKind, VolumeTag } from "../../tags.ts";
import { withLatest } from "../volume-rules.ts";
import type { FilesystemFill, ImageEntry } from "../ports.ts";

export interface PruneSettings {
  /** Prune only above this fill (percent of used + available). */
  thresholdPercent: number;
  /** Remove images until the fill is estimated at or below this (below the threshold: src/config/validate.ts). */
  targetPercent: number;
}

/** Where the current generation's image list came from. */
export type CurrentImagesSource = "snapshot" | "volume" | "none";

export interface PruneObservation {
  /** The cache volume the last boot mounted; undefined: no boot on a volume recorded. */
  volume?: { volumeId: string; mountPoint: string; dataRoot: string };
  /** Its tags as EC2 describes them now; undefined: EC2 does not know the volume. */
  tags?: Record<string, string>;
  /** The fill of the filesystem mounted at the volume's mount point; undefined: nothing mounted there. */
  fill?: FilesystemFill;
  /** The data-root docker runs on now. */
  dockerRootDir?: string;
  /** A background pre-warm reads the volume's files now: removing them under it would fail its reads. */
  prewarmRunning?: boolean;
  /** The current generation's image references, as tagged, and where they came from. */
  current: { images: string[]; source: CurrentImagesSource; generation?: string };
  /**
   * What osparc's `pre_pulled_images` instance tag lists (either form, src/agent/pre-pulled.ts);
   * `problem` when the tag is there but cannot be read: then nothing outside the generation is
   * removed, since any image may be one osparc pulled.
   */
  prePulled?: { images: string[] } | { problem: string };
  images: ImageEntry[];
  /** Image ids of every container, running or stopped. */
  containerImageIds: string[];
  /** Only the fill was observed: it was at or below the threshold (the timer's run asks nothing else then). */
  fillOnly?: boolean;
}

export type PruneVerdict =
  /** Images are removed (or would be, on a dry run). */
  | "prune"
  | "below-threshold"
  /** Above the threshold, but every image is kept (current, in use, or a parent of one). */
  | "nothing-to-remove"
  | "no-volume"
  | "not-mounted"
  /** Docker does not run on the volume's data-root: its images are not the volume's. */
  | "docker-elsewhere"
  /** The background pre-warm is reading the volume: the prune waits for the next run. */
  | "prewarm-running"
  /** Not `ebs-cache:managed=true`, or EC2 does not know the volume. */
  | "not-managed"
  | "workspace"
  /** Neither the pool's snapshot nor the volume names the current images: nothing can be told apart. */
  | "no-generation";

export type ImageVerdict = "remove" | "current" | "pre-pulled" | "in-use" | "parent-of-kept" | "spared";

export interface ImageDecision {
  id: string;
  references: string[];
  sizeBytes: number;
  /** What removing it frees, as estimated (bytes no other image shares, else its size). */
  freesBytes: number;
  created: string;
  verdict: ImageVerdict;
  reason: string;
}

export interface PrunePlan {
  verdict: PruneVerdict;
  reason: string;
  volumeId?: string;
  mountPoint?: string;
  usedRatio?: number;
  /** The fill the removals should leave, as estimated. */
  projectedUsedRatio?: number;
  currentSource: CurrentImagesSource;
  generation?: string;
  /** Every image, with what the prune does with it (empty when the verdict stops before looking). */
  images: ImageDecision[];
  /** The images to remove, in order (oldest first, then largest). */
  removals: ImageDecision[];
}

/** The references of the current generation, normalized as docker lists them. */
function currentReferences(images: readonly string[]): Set<string> {
  const set = new Set<string>();
  for (const image of images) {
    set.add(withLatest(image));
    // `repo:tag@sha256:…` is listed by docker as `repo@sha256:…` among RepoDigests.
    if (image.includes("@")) set.add(image.replace(/:[^/@]+@/, "@"));
  }
  return set;
}

/** The ids of `kept` and of every image they were built on. */
function withAncestors(kept: ReadonlySet<string>, byId: ReadonlyMap<string, ImageEntry>): Set<string> {
  const all = new Set<string>();
  for (const id of kept) {
    let next: string | undefined = id;
    while (next !== undefined && !all.has(next)) {
      all.add(next);
      next = byId.get(next)?.parentId;
    }
  }
  return all;
}

/** Decides the prune. */
export function planPrune(settings: PruneSettings, observed: PruneObservation): PrunePlan {
  const { volume, fill } = observed;
  const base = {
    currentSource: observed.current.source,
    ...(observed.current.generation ? { generation: observed.current.generation } : {}),
    images: [],
    removals: [],
  };
  const stop = (verdict: PruneVerdict, reason: string, extra: Partial<PrunePlan> = {}): PrunePlan => ({
    ...base,
    verdict,
    reason,
    ...(volume ? { volumeId: volume.volumeId, mountPoint: volume.mountPoint } : {}),
    ...(fill ? { usedRatio: fill.usedRatio } : {}),
    ...extra,
  });
  if (!volume) return stop("no-volume", "no boot on a cache volume is recorded on this host");
  if (!fill) return stop("not-mounted", `nothing is mounted at ${volume.mountPoint}`);
  const refused = whyNotPrune(settings, observed, volume, fill);
  if (refused) return stop(refused.verdict, refused.reason);

  const percent = fill.usedRatio * 100;
  const decisions = imageDecisions(observed);
  const { removals, projectedUsedRatio } = chooseRemovals(settings, fill, decisions);
  if (removals.length === 0) {
    return stop(
      "nothing-to-remove",
      `${percent.toFixed(1)} % used, above ${settings.thresholdPercent} %, but every image is current, ` +
        `pre-pulled by osparc, in use, or a parent of one`,
      { images: decisions },
    );
  }
  const freed = removals.reduce((sum, d) => sum + d.freesBytes, 0);
  return stop(
    "prune",
    `${percent.toFixed(1)} % used, above ${settings.thresholdPercent} %: ${removals.length} image(s) outside the ` +
      `current generation, about ${(freed / 2 ** 20).toFixed(0)} MiB`,
    { images: decisions, removals, projectedUsedRatio },
  );
}

/**
 * Why the mounted volume is not pruned now (docker elsewhere, not a pool volume the agent
 * manages, the pre-warm reading it, below the threshold, no generation to tell images apart);
 * undefined when it is.
 */
function whyNotPrune(
  settings: PruneSettings,
  observed: PruneObservation,
  volume: NonNullable<PruneObservation["volume"]>,
  fill: NonNullable<PruneObservation["fill"]>,
): { verdict: PruneVerdict; reason: string } | undefined {
  const { tags } = observed;
  const stop = (verdict: PruneVerdict, reason: string) => ({ verdict, reason });
  if (observed.fillOnly)
    return stop(
      "below-threshold",
      `${(fill.usedRatio * 100).toFixed(1)} % full, at or below ${settings.thresholdPercent} %: nothing else was ` +
        `looked at`,
    );
  if (observed.dockerRootDir !== volume.dataRoot) {
    return stop(
      "docker-elsewhere",
      `docker runs on ${observed.dockerRootDir ?? "an unknown data-root"}, not on the volume's ${volume.dataRoot}`,
    );
  }
  if (!tags || tags[VolumeTag.managed] !== "true")
    return stop("not-managed", `${volume.volumeId} is not a volume the agent manages`);
  const kind = tags[VolumeTag.kind];
  if (kind !== VolumeKind.pool && kind !== VolumeKind.workspace)
    return stop(
      "not-managed",
      `${volume.volumeId} has ${VolumeTag.kind}=${JSON.stringify(kind ?? null)}, neither pool nor workspace`,
    );
  const percent = fill.usedRatio * 100;
  if (observed.prewarmRunning && percent > settings.thresholdPercent) {
    return stop(
      "prewarm-running",
      "the background pre-warm is reading the volume's files; run `ebs-cache-agent prune` once it is done",
    );
  }
  if (percent <= settings.thresholdPercent) {
    return stop(
      "below-threshold",
      `${percent.toFixed(1)} % used, at or below the threshold of ${settings.thresholdPercent} %`,
    );
  }
  const prePulled = observed.prePulled;
  if (prePulled && "problem" in prePulled) {
    return stop(
      "nothing-to-remove",
      `${percent.toFixed(1)} % used, above ${settings.thresholdPercent} %, but ${prePulled.problem}: any image may ` +
        "be one osparc pulled here, none is removed",
    );
  }
  if (observed.current.images.length === 0) {
    return stop(
      "no-generation",
      "neither the pool's newest snapshot nor the volume lists its images (ebs-cache:images): nothing can be " +
        "told apart",
    );
  }
  return undefined;
}

/** Each image's verdict: in use, current, pre-pulled by osparc, a kept image's parent, or to remove. */
function imageDecisions(observed: PruneObservation): ImageDecision[] {
  const current = currentReferences(observed.current.images);
  const prePulled = observed.prePulled;
  const pulled = currentReferences(prePulled && "images" in prePulled ? prePulled.images : []);
  const byId = new Map(observed.images.map((image) => [image.id, image]));
  const inUse = new Set(observed.containerImageIds);
  const listedIn = (refs: ReadonlySet<string>) => (image: ImageEntry) =>
    [...image.repoTags, ...image.repoDigests].some((ref) => refs.has(ref));
  const isCurrent = listedIn(current);
  const isPrePulled = listedIn(pulled);
  const kept = withAncestors(
    new Set(
      observed.images
        .filter((image) => inUse.has(image.id) || isCurrent(image) || isPrePulled(image))
        .map((image) => image.id),
    ),
    byId,
  );

  return observed.images.map((image) => {
    const decide = (verdict: ImageVerdict, reason: string): ImageDecision => ({
      id: image.id,
      references: image.repoTags,
      sizeBytes: image.sizeBytes,
      freesBytes: image.uniqueBytes ?? image.sizeBytes,
      created: new Date(image.created * 1000).toISOString(),
      verdict,
      reason,
    });
    if (inUse.has(image.id)) return decide("in-use", "a container (running or stopped) uses it");
    if (isCurrent(image)) return decide("current", "in the current generation's image list");
    if (isPrePulled(image)) return decide("pre-pulled", "osparc pulled it here (the pre_pulled_images instance tag)");
    if (kept.has(image.id)) return decide("parent-of-kept", "a kept image is built on it");
    return decide("remove", "outside the current generation, no container uses it");
  });
}

/**
 * The images to remove until the fill reaches the target: oldest first (the generations furthest
 * behind), the largest first among equals; those the target spares are marked so.
 */
function chooseRemovals(
  settings: PruneSettings,
  fill: NonNullable<PruneObservation["fill"]>,
  decisions: ImageDecision[],
): { removals: ImageDecision[]; projectedUsedRatio: number } {
  const candidates = decisions
    .filter((d) => d.verdict === "remove")
    .sort((a, b) => a.created.localeCompare(b.created) || b.freesBytes - a.freesBytes || a.id.localeCompare(b.id));
  const capacity = fill.usedBytes + fill.availableBytes;
  const targetBytes = (settings.targetPercent / 100) * capacity;
  let used = fill.usedBytes;
  const removals: ImageDecision[] = [];
  for (const candidate of candidates) {
    if (used <= targetBytes) {
      candidate.verdict = "spared";
      candidate.reason = `the removals before it reach the target of ${settings.targetPercent} %`;
      continue;
    }
    removals.push(candidate);
    used -= candidate.freesBytes;
  }
  return { removals, projectedUsedRatio: capacity > 0 ? Math.max(0, used) / capacity : 0 };
}
