/**
 * Expiry, planned: which managed volumes gc deletes, which it tags so they can expire, and why
 * every other one is left alone. Pure: the volumes and the time come in, a verdict per volume
 * goes out (`gc --dry-run` prints it).
 */
import { VolumeTag } from "../../tags.ts";
import type { VolumeInfo } from "../ports.ts";

export type GcVerdict =
  /** Managed, available, past expires-at, not kept: deleted (within the cap). */
  | "delete"
  /** Expired, but this run's cap is reached: next run. */
  | "over-cap"
  /**
   * Available and claimed by an instance, but never released (the instance died, or its
   * release was killed between detach and tagging): tagged released-at / expires-at now.
   */
  | "tag-expiry"
  | "not-expired"
  | "kept"
  | "in-use"
  /** Available with no expiry and never claimed: a pool volume waiting for its first machine. */
  | "never-claimed"
  /** A tag gc needs is malformed: skipped, reported. */
  | "malformed"
  /** Not carrying `ebs-cache:managed=true`: never touched. */
  | "foreign";

export interface GcDecision {
  volumeId: string;
  verdict: GcVerdict;
  reason: string;
  /** For tag-expiry: the tags to set. */
  tags?: Record<string, string>;
}

export interface GcPlanOptions {
  now: Date;
  ttlHours: number;
  maxDeletes: number;
}

/** Parses an ISO 8601 timestamp as the agent writes it; undefined when malformed. */
export function parseTimestamp(text: string): Date | undefined {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(text)) return undefined;
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? undefined : date;
}

/** Decides for one volume, the cap aside. */
export function judgeVolume(volume: VolumeInfo, options: Pick<GcPlanOptions, "now" | "ttlHours">): GcDecision {
  const { tags, volumeId } = volume;
  const decide = (verdict: GcVerdict, reason: string, extra: Partial<GcDecision> = {}): GcDecision => ({ volumeId, verdict, reason, ...extra });
  if (tags[VolumeTag.managed] !== "true") return decide("foreign", "not managed by the agent");
  if (volume.state !== "available" || volume.attachment) return decide("in-use", `state ${volume.state}`);

  const keep = tags[VolumeTag.keep];
  if (keep !== undefined && keep !== "true" && keep !== "false") return decide("malformed", `${VolumeTag.keep}=${JSON.stringify(keep)} is not true or false`);
  if (keep === "true") return decide("kept", `${VolumeTag.keep}=true`);

  const expiresText = tags[VolumeTag.expiresAt];
  const claimedBy = tags[VolumeTag.claimedBy];
  // Claimed after its last release (an instance died between its CreateTags and the DeleteTags
  // of the old expiry): that expiry belonged to the earlier release, not to this claim.
  const claimedAt = parseTimestamp(tags[VolumeTag.claimedAt] ?? "");
  const releasedAt = parseTimestamp(tags[VolumeTag.releasedAt] ?? "");
  const claimedSinceRelease = claimedBy !== undefined && claimedAt !== undefined && releasedAt !== undefined && claimedAt > releasedAt;
  if (expiresText === undefined || claimedSinceRelease) {
    if (claimedBy !== undefined && (tags[VolumeTag.releasedAt] === undefined || claimedSinceRelease)) {
      const expires = new Date(options.now.getTime() + options.ttlHours * 3600_000);
      return decide("tag-expiry", `claimed by ${claimedBy} but never released; expires ${expires.toISOString()}`, {
        tags: { [VolumeTag.releasedAt]: options.now.toISOString(), [VolumeTag.expiresAt]: expires.toISOString() },
      });
    }
    return decide("never-claimed", "no expiry: waiting for its first machine");
  }
  const expires = parseTimestamp(expiresText);
  if (!expires) return decide("malformed", `${VolumeTag.expiresAt}=${JSON.stringify(expiresText)} is not an ISO 8601 time`);
  if (expires.getTime() > options.now.getTime()) return decide("not-expired", `expires ${expires.toISOString()}`);
  return decide("delete", `expired ${expires.toISOString()}`);
}

/** Decides for every volume; deletes beyond `maxDeletes` become `over-cap` (oldest expiry first). */
export function planGc(volumes: readonly VolumeInfo[], options: GcPlanOptions): GcDecision[] {
  const decisions = volumes.map((volume) => judgeVolume(volume, options));
  const expiry = (d: GcDecision) => parseTimestamp(volumes.find((v) => v.volumeId === d.volumeId)?.tags[VolumeTag.expiresAt] ?? "")?.getTime() ?? 0;
  const deletions = decisions.filter((d) => d.verdict === "delete").sort((a, b) => expiry(a) - expiry(b));
  for (const extra of deletions.slice(Math.max(0, options.maxDeletes))) {
    extra.verdict = "over-cap";
    extra.reason += `; over this run's cap of ${options.maxDeletes}`;
  }
  return decisions;
}
