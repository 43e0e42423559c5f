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
