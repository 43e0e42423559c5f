/**
 * Image-set generations: which build of a pool's images a snapshot or volume holds, and which
 * one is current. A generation is the image set's name and the time it was built
 * (`ebs-cache:image-set`, `ebs-cache:built-at`); the pool's current generation is its newest
 * completed snapshot's. A volume of an older generation is *superseded*: boots prefer current
 * volumes, the keeper trims superseded ones first, gc retires them after a grace period. Pure.
 *
 * Snapshots and volumes made before `built-at` existed still have an order: a snapshot's start
 * time stands in for its build time, and a volume without the tag takes the generation of the
 * snapshot it was made from, when that snapshot is known. A volume whose build time cannot be
 * learned at all is the oldest generation there is.
 */
import { VolumeTag } from "../tags.ts";
import { parseTimestamp } from "./gc/plan.ts";
import type { SnapshotInfo, VolumeInfo } from "./ports.ts";

export interface Generation {
  imageSet: string | null;
  /** When the image set was built; null: unknown (the oldest of all). */
  builtAt: Date | null;
}

/** A stable name for a generation, for logs, labels and grouping: `platform-7@2026-12-01T10:00:00.000Z`. */
export function generationName(generation: Generation): string {
  return `${generation.imageSet ?? "-"}@${generation.builtAt?.toISOString() ?? "unknown"}`;
}

/** The build time a tag set records, if it parses (a malformed `built-at` counts as absent). */
function builtAtTag(tags: Readonly<Record<string, string>>): Date | null {
  const text = tags[VolumeTag.builtAt];
  return text === undefined ? null : (parseTimestamp(text) ?? null);
}

/** A snapshot's generation: its `built-at`, else its start time. */
export function snapshotGeneration(snapshot: Pick<SnapshotInfo, "tags" | "startTime">): Generation {
  return {
    imageSet: snapshot.tags[VolumeTag.imageSet] ?? null,
    builtAt: builtAtTag(snapshot.tags) ?? snapshot.startTime ?? null,
  };
}

/**
 * A volume's generation: its `built-at`, else that of the snapshot it was made from when that
 * snapshot is among `snapshots`, else unknown.
 */
export function volumeGeneration(
  volume: Pick<VolumeInfo, "tags" | "snapshotId">,
  snapshots: ReadonlyMap<string, Pick<SnapshotInfo, "tags" | "startTime">> = new Map(),
): Generation {
  const own = builtAtTag(volume.tags);
  const imageSet = volume.tags[VolumeTag.imageSet] ?? null;
  if (own) return { imageSet, builtAt: own };
  const source = volume.snapshotId === undefined ? undefined : snapshots.get(volume.snapshotId);
  return { imageSet, builtAt: source ? snapshotGeneration(source).builtAt : null };
}

/** Newer first; unknown build times last; ties by image-set name, so the order is total. */
export function compareGenerations(a: Generation, b: Generation): number {
  const time = (g: Generation) => g.builtAt?.getTime() ?? -Infinity;
  return time(b) - time(a) || (a.imageSet ?? "").localeCompare(b.imageSet ?? "") || 0;
}

/**
 * The snapshot of the pool's current generation: the newest completed one by `built-at` (else
 * its start time), restricted to `imageSet` when the configuration names one. New volumes
 * (boot's cold path, the keeper) come from it. Undefined when the pool has no completed snapshot.
 */
export function currentSnapshot<S extends Pick<SnapshotInfo, "state" | "tags" | "startTime">>(
  snapshots: readonly S[],
  imageSet: string | null = null,
): S | undefined {
  const byStart = (s: S) => s.startTime?.getTime() ?? -Infinity;
  return (
    snapshots
      .filter((s) => s.state === "completed" && (imageSet === null || s.tags[VolumeTag.imageSet] === imageSet))
      // The same generation snapshotted twice: the later snapshot, as before generations existed.
      .sort((a, b) => compareGenerations(snapshotGeneration(a), snapshotGeneration(b)) || byStart(b) - byStart(a))[0]
  );
}

/**
 * The pool's current generation: its newest completed snapshot's (restricted to `imageSet` when
 * the configuration names one). Undefined when the pool has no completed snapshot.
 */
export function currentGeneration(
  snapshots: readonly Pick<SnapshotInfo, "state" | "tags" | "startTime">[],
  imageSet: string | null = null,
): Generation | undefined {
  const snapshot = currentSnapshot(snapshots, imageSet);
  return snapshot && snapshotGeneration(snapshot);
}

/**
 * Whether a generation is older than the current one. Nothing is superseded while the current
 * generation's build time is unknown (no order to judge by).
 */
export function isSuperseded(generation: Generation, current: Generation | undefined): boolean {
  if (!current?.builtAt) return false;
  return generation.builtAt === null || generation.builtAt.getTime() < current.builtAt.getTime();
}

/** The image references a snapshot's or volume's `ebs-cache:images` tag lists (comma-separated), as written. */
export function imagesOf(tags: Readonly<Record<string, string>>): string[] {
  return (tags[VolumeTag.images] ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
}

/** An image reference as docker lists it: `:latest` added when it names no tag or digest. */
export function withLatest(image: string): string {
  return /:[^/]+$/.test(image) || image.includes("@") ? image : `${image}:latest`;
}
