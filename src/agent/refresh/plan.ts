/**
 * The refresh's plan: which images the cache volume should hold and lacks, and whether it may be
 * tagged as the current generation afterwards. Pure: observed state in, steps out (`refresh
 * --dry-run` prints them).
 *
 * Wanted = the images of the pool's current generation (its newest completed snapshot's
 * `ebs-cache:images`) ∪ the images of osparc's `pre_pulled_images` instance tag; the plan pulls
 * those docker does not list. Only pool volumes are refreshed: a workspace volume's content is
 * the user's (the agent never prunes it, so images added there would only fill it), and it never
 * goes back to the pool.
 */
import { VolumeKind, VolumeTag } from "../../tags.ts";
import {
  currentGeneration,
  generationName,
  imagesOf,
  isUsableSnapshot,
  snapshotGeneration,
  volumeGeneration,
  type Generation,
} from "../volume-rules.ts";
import type { SnapshotInfo, VolumeInfo } from "../ports.ts";
import { asListed, missingPrePulledListWarning, readPrePulledImages } from "./images.ts";

export interface RefreshSettings {
  /** Pulls at once (config refresh.concurrency). */
  concurrency: number;
  /** Longest time of one pull (config refresh.pullSeconds). */
  pullSeconds: number;
  /** osparc's pre-pulled images tag (config refresh.prePulledImagesTag); null: not read. */
  prePulledImagesTag: string | null;
  /** The image set the configuration names (restricts which snapshots count); null: any. */
  imageSet: string | null;
}

/** Why an image is wanted. */
export type RefreshSource = "generation" | "pre-pulled";

export interface WantedImage {
  image: string;
  sources: RefreshSource[];
}

/** What observe() found. */
export interface RefreshObservation {
  /** The managed volume attached to this instance, if any. */
  volume: Pick<VolumeInfo, "volumeId" | "tags" | "snapshotId"> | undefined;
  /** The snapshots of the volume's pool (any state). */
  snapshots: ReadonlyArray<Pick<SnapshotInfo, "snapshotId" | "state" | "tags" | "startTime">>;
  /** This instance's tags (osparc's `pre_pulled_images`). */
  instanceTags: Readonly<Record<string, string>>;
  /** `repo:tag` of every image docker lists now. */
  present: readonly string[];
}

export type RefreshStep =
  | { step: "pull"; image: string; sources: RefreshSource[] }
  /**
   * Tags the volume with the current generation's content tags, once every image of that
   * generation is listed: the volume then goes back to the pool as current. apply() lists the
   * images again first and tags nothing when one is missing.
   */
  | { step: "mark-current"; volumeId: string; generation: string; images: string[]; tags: Record<string, string> };

export interface RefreshPlan {
  volumeId: string | null;
  /** Why nothing is done (no volume, a workspace volume); null when the plan may have steps. */
  skipped: string | null;
  /** The pool's current generation (`set@iso`), null when the pool has no completed snapshot. */
  generation: string | null;
  wanted: WantedImage[];
  /** Wanted images docker already lists. */
  present: string[];
  warnings: string[];
  steps: RefreshStep[];
}

/** Plans the refresh of the attached volume. */
export function planRefresh(settings: RefreshSettings, observed: RefreshObservation): RefreshPlan {
  const volume = observed.volume;
  const empty = (skipped: string, warnings: string[] = []): RefreshPlan => ({
    volumeId: volume?.volumeId ?? null,
    skipped,
    generation: null,
    wanted: [],
    present: [],
    warnings,
    steps: [],
  });
  if (!volume) return empty("no cache volume is attached to this instance");
  if (volume.tags[VolumeTag.kind] !== VolumeKind.pool) {
    return empty(
      `${volume.volumeId} is a ${volume.tags[VolumeTag.kind] ?? "untyped"} volume: only pool volumes are ` +
        `refreshed (a workspace volume's content is the user's)`,
    );
  }

  const current = currentGeneration(observed.snapshots, settings.imageSet);
  const source = current ? snapshotOf(observed.snapshots, current) : undefined;
  const generationImages = source ? imagesOf(source.tags) : [];
  const prePulled =
    settings.prePulledImagesTag === null
      ? { images: [], warnings: [] }
      : readPrePulledImages(observed.instanceTags, settings.prePulledImagesTag);
  const warnings = [...prePulled.warnings];
  const missingList = missingPrePulledListWarning(observed.instanceTags, settings.prePulledImagesTag);
  if (missingList) warnings.push(missingList);
  if (!current) warnings.push("the pool has no completed snapshot: no current generation to follow");

  const wanted = new Map<string, WantedImage>();
  const want = (image: string, from: RefreshSource) => {
    const key = asListed(image);
    const entry = wanted.get(key) ?? { image, sources: [] };
    if (!entry.sources.includes(from)) entry.sources.push(from);
    wanted.set(key, entry);
  };
  for (const image of generationImages) want(image, "generation");
  for (const image of prePulled.images) want(image, "pre-pulled");

  const listed = new Set(observed.present.map(asListed));
  const present: string[] = [];
  const steps: RefreshStep[] = [];
  for (const [key, entry] of wanted) {
    if (listed.has(key)) present.push(entry.image);
    else steps.push({ step: "pull", image: entry.image, sources: entry.sources });
  }

  const mark = current && source ? markCurrent(volume, current, source, observed.snapshots) : undefined;
  if (mark) steps.push(mark);
  return {
    volumeId: volume.volumeId,
    skipped: null,
    generation: current ? generationName(current) : null,
    wanted: [...wanted.values()],
    present,
    warnings,
    steps,
  };
}

/** The usable snapshot (completed, not marked unverified) that carries the current generation. */
function snapshotOf(
  snapshots: RefreshObservation["snapshots"],
  current: Generation,
): RefreshObservation["snapshots"][number] | undefined {
  const name = generationName(current);
  return snapshots.find((s) => isUsableSnapshot(s) && generationName(snapshotGeneration(s)) === name);
}

/**
 * The step that tags the volume as the current generation, unless it already carries that
 * generation's tags. The tags are the snapshot's image set, build time and image list: what a
 * volume made from that snapshot would carry (CONTENT_TAGS), the image store and engine version
 * aside, which a pull does not change.
 */
function markCurrent(
  volume: NonNullable<RefreshObservation["volume"]>,
  current: Generation,
  source: RefreshObservation["snapshots"][number],
  snapshots: RefreshObservation["snapshots"],
): RefreshStep | undefined {
  if (!current.builtAt) return undefined;
  const tags: Record<string, string> = { [VolumeTag.builtAt]: current.builtAt.toISOString() };
  for (const key of [VolumeTag.imageSet, VolumeTag.images]) {
    const value = source.tags[key];
    if (value !== undefined) tags[key] = value;
  }
  const own = volumeGeneration(volume, new Map(snapshots.map((s) => [s.snapshotId, s])));
  const same = Object.entries(tags).every(([key, value]) => volume.tags[key] === value);
  if (same || (own.builtAt && own.builtAt.getTime() > current.builtAt.getTime())) return undefined;
  return {
    step: "mark-current",
    volumeId: volume.volumeId,
    generation: generationName(current),
    images: imagesOf(source.tags),
    tags,
  };
}
