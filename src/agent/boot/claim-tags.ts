/**
 * The tags of a claim, planned from the volume's tags as last described: `claimed-by` /
 * `claimed-at`, the instance's intent (keep, TTL: ../volume-intent.ts), and the removal of what
 * an earlier tenancy left (a release's expiry, an instance's error). Pure: one CreateTags and one
 * DeleteTags carry it out, and a rerun after a kill between them (or after both) plans only what
 * is still missing.
 */
import { VolumeTag } from "../../tags.ts";
import { intentChanges, type TagChanges, type VolumeIntent } from "../volume-intent.ts";

/**
 * Tags a claim removes: an earlier release's expiry (were this instance to die without a release,
 * gc would otherwise delete the volume at that old time instead of giving it its TTL), and an
 * earlier instance's error once this one uses the volume.
 */
export const CLAIM_CLEARS = [
  VolumeTag.releasedAt,
  VolumeTag.expiresAt,
  VolumeTag.lastError,
  VolumeTag.lastErrorAt,
] as const;

/** What to set and remove so the volume's tags say: claimed by this instance, with its intent. */
export function claimTagChanges(
  tags: Readonly<Record<string, string>>,
  instanceId: string,
  intent: VolumeIntent,
  now: Date,
): TagChanges {
  const intended = intentChanges(tags, instanceId, intent);
  // A volume this boot created carries its claimed-by from the creation, not yet the time.
  const claimed = tags[VolumeTag.claimedBy] === instanceId && tags[VolumeTag.claimedAt] !== undefined;
  const claim: Record<string, string> = claimed
    ? {}
    : { [VolumeTag.claimedBy]: instanceId, [VolumeTag.claimedAt]: now.toISOString() };
  return {
    set: { ...claim, ...intended.set },
    remove: [...CLAIM_CLEARS.filter((key) => tags[key] !== undefined), ...intended.remove],
  };
}
