/**
 * What an instance asks of the volume it holds — keep it (`ebs-cache:keep`: its instance tag or
 * `<labels.prefix>.keep` in osparc's labels tag) and for how long after it lets go (its TTL:
 * config `ttlHours` or the `ebs-cache:ttl-hours` instance tag) — and how that is written on the
 * volume's own tags. The claim writes it (boot's tag-claim), a stop writes it again, the release
 * ends it: so a volume whose instance dies without a release (terminated while stopped, power
 * loss, a crash) is judged by gc as its release would have tagged it. Pure.
 *
 * `keep` applies to workspace volumes only (a kept pool volume would never leave the pool's
 * count). The claim marks the keep it writes with `ebs-cache:keep-by=<instance>`: only that
 * instance takes it back, when it no longer asks it. A keep without the mark, or marked by an
 * instance that no longer holds the volume, is nobody's to take back: it stays until a person
 * removes it (gc never deletes a kept volume).
 */
import { VolumeKind, VolumeTag } from "../tags.ts";
import type { VolumeInfo } from "./ports.ts";
import { describeWorkspace, volumeMatchesWorkspace, workspaceIdsOfVolume, type WorkspaceIds } from "./workspace-ids.ts";

export interface VolumeIntent {
  keep: boolean;
  ttlHours: number;
}

/** The bounds of a TTL (config `ttlHours`): a recorded one outside them is malformed. */
export const TTL_HOURS = { min: 1, max: 8760 } as const;

/** Whether the instance's keep applies to a volume of this kind. */
export function keepApplies(kind: string | undefined, intent: Pick<VolumeIntent, "keep">): boolean {
  return intent.keep && kind === VolumeKind.workspace;
}

/** Tags to set, and tag keys to remove, on a volume; both empty when nothing is to change. */
export interface TagChanges {
  set: Record<string, string>;
  remove: string[];
}

/**
 * The changes that make a volume this instance holds carry its intent: `ttl-hours`; `keep` with
 * this instance's `keep-by` when asked and not there yet; this instance's own keep removed when
 * no longer asked; another instance's `keep-by` dropped (its keep stays, now nobody's to take
 * back). Nothing when the tags say it already.
 */
export function intentChanges(
  tags: Readonly<Record<string, string>>,
  instanceId: string,
  intent: VolumeIntent,
): TagChanges {
  const changes: TagChanges = { set: {}, remove: [] };
  const ttl = String(intent.ttlHours);
  if (tags[VolumeTag.ttlHours] !== ttl) changes.set[VolumeTag.ttlHours] = ttl;
  const by = tags[VolumeTag.keepBy];
  if (keepApplies(tags[VolumeTag.kind], intent) && tags[VolumeTag.keep] !== "true") {
    changes.set[VolumeTag.keep] = "true";
    changes.set[VolumeTag.keepBy] = instanceId;
  } else if (by === instanceId && !keepApplies(tags[VolumeTag.kind], intent)) {
    changes.remove.push(VolumeTag.keep, VolumeTag.keepBy);
  } else if (by !== undefined && by !== instanceId) {
    changes.remove.push(VolumeTag.keepBy);
  }
  return changes;
}

/**
 * Who asks the keep a release writes, and for which volume it may: the instance's own
 * `ebs-cache:keep` tag (a malformed one counts as keep) holds for whatever workspace the instance
 * holds; osparc's labels — the labels tag, or the first boot phase's record of it — hold only for a
 * workspace volume of exactly their ids (another task may have rewritten the tag since, and a
 * record may be lost); `nobody` when neither is known (no instance tag, no record of this
 * activation, no usable labels tag).
 */
export type KeepAsked =
  | { by: "instance"; keep: boolean }
  | { by: "labels"; keep: boolean; ids?: WorkspaceIds; origin: string }
  | { by: "nobody" };

/**
 * The keep a release writes on this volume: what was asked, where the asker may speak for it;
 * otherwise what the volume's claim recorded (its `keep` marked `keep-by` this instance), so
 * that a tag of another task neither puts a keep on this user's workspace nor takes theirs away.
 * Labels whose ids are not the volume's give a warning (one line naming both sets of ids) and
 * change nothing. Pure.
 */
export function keepFor(
  volume: Pick<VolumeInfo, "volumeId" | "tags">,
  instanceId: string,
  asked: KeepAsked,
): { keep: boolean; warning?: string } {
  const { tags } = volume;
  const claimed = tags[VolumeTag.keep] === "true" && tags[VolumeTag.keepBy] === instanceId;
  if (asked.by === "instance") return { keep: asked.keep };
  if (asked.by === "nobody") return { keep: claimed };
  // A pool volume is never kept (keepApplies), whoever asks: nothing to tell apart.
  if (tags[VolumeTag.kind] !== VolumeKind.workspace) return { keep: asked.keep };
  if (asked.ids && volumeMatchesWorkspace(tags, asked.ids)) return { keep: asked.keep };
  const own = workspaceIdsOfVolume(tags);
  return {
    keep: claimed,
    warning:
      `${volume.volumeId} is the workspace of ${own ? describeWorkspace(own) : "ids it does not record"}, and ` +
      `the labels (${asked.origin}) name ${asked.ids ? describeWorkspace(asked.ids) : "no workspace"}: their keep ` +
      `is not applied to it; it keeps what its claim recorded (${claimed ? "keep" : "no keep"})`,
  };
}

/**
 * The TTL a claim recorded on the volume: `absent` (claimed by an agent that did not record one),
 * the hours, or `malformed` (not a number of hours within TTL_HOURS).
 */
export function recordedTtlHours(
  tags: Readonly<Record<string, string>>,
): { kind: "absent" } | { kind: "hours"; hours: number } | { kind: "malformed"; text: string } {
  const text = tags[VolumeTag.ttlHours];
  if (text === undefined) return { kind: "absent" };
  const hours = /^\d+(\.\d+)?$/.test(text) ? Number(text) : NaN;
  return hours >= TTL_HOURS.min && hours <= TTL_HOURS.max ? { kind: "hours", hours } : { kind: "malformed", text };
}
