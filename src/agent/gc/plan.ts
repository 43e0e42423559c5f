/**
 * Expiry, planned: which managed volumes gc deletes, which it tags so they can expire, which
 * superseded pool volumes it retires, and why every other one is left alone. Pure: the volumes,
 * the pools' snapshots and the time come in, a verdict per volume goes out (`gc --dry-run`
 * prints it).
 */
import { VolumeKind, VolumeTag } from "../../tags.ts";
import {
  compareGenerations,
  currentSnapshot,
  generationName,
  isQuarantined,
  isSuperseded,
  parseTimestamp,
  snapshotGeneration,
  volumeGeneration,
  type Generation,
} from "../volume-rules.ts";
import type { SnapshotInfo, VolumeInfo } from "../ports.ts";
import { recordedTtlHours, TTL_HOURS } from "../volume-intent.ts";

export type GcVerdict =
  /** Managed, available, past expires-at, not kept: deleted (within the cap). */
  | "delete"
  /**
   * An available pool volume of a superseded generation, once the pool's current generation has
   * been out for the grace period: deleted (within the cap).
   */
  | "superseded"
  /** Expired or superseded, but this run's cap is reached: next run. */
  | "over-cap"
  /**
   * Available and claimed by an instance, but never released (the instance died, or its
   * release was killed between detach and tagging): tagged released-at / expires-at now, the
   * expiry by the TTL its instance recorded at the claim (`ebs-cache:ttl-hours`), else gc's.
   * (A keep recorded at the claim made it `kept` already.)
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

/** gc's plan: a decision for every volume it was shown, in the order they came. */
export type GcPlan = GcDecision[];

export interface GcPlanOptions {
  now: Date;
  ttlHours: number;
  maxDeletes: number;
  /** Retiring superseded pool volumes; absent: gc judges expiry only. */
  retire?: RetireOptions;
}

/** What gc needs to tell a superseded pool volume. */
export interface RetireOptions {
  /** The managed pool snapshots of the region, every pool, any state (one DescribeSnapshots). */
  snapshots: readonly SnapshotInfo[];
  /** `gc.supersededGraceHours`: how long the current generation is out before the older ones go; null: never. */
  graceHours: number | null;
  /** `claim.quarantineHours`: a volume in quarantine is kept for whoever looks into its error. */
  quarantineHours: number;
  /**
   * This host's pool and image set (config `pool`, `imageSet`). Hosts configured like this one
   * claim only that image set, so its newest snapshot is that pool's current generation; any
   * other pool's current generation is its newest snapshot of any image set (what a boot
   * without an image set prefers).
   */
  pool?: { name: string; imageSet: string | null };
}

/** A pool's current generation and since when it is out: its snapshot's start, or its build time if later. */
interface PoolCurrent {
  generation: Generation;
  since: Date;
}

/** What judging generations needs, worked out once per run. */
interface Generations {
  current: ReadonlyMap<string, PoolCurrent>;
  snapshots: ReadonlyMap<string, SnapshotInfo>;
}

/** Decides for one volume, the cap aside. */
export function judgeVolume(
  volume: VolumeInfo,
  options: Pick<GcPlanOptions, "now" | "ttlHours" | "retire">,
): GcDecision {
  const decision = judgeExpiry(volume, options);
  return options.retire
    ? judgeGeneration(volume, decision, options.now, options.retire, generationsOf(options.retire))
    : decision;
}

/** Expiry alone: released volumes past expires-at, never-released ones tagged to expire. */
function judgeExpiry(volume: VolumeInfo, options: Pick<GcPlanOptions, "now" | "ttlHours">): GcDecision {
  const { tags, volumeId } = volume;
  const decide = (verdict: GcVerdict, reason: string, extra: Partial<GcDecision> = {}): GcDecision => ({
    volumeId,
    verdict,
    reason,
    ...extra,
  });
  if (tags[VolumeTag.managed] !== "true") return decide("foreign", "not managed by the agent");
  if (volume.state !== "available" || volume.attachment) return decide("in-use", `state ${volume.state}`);

  const keep = tags[VolumeTag.keep];
  if (keep !== undefined && keep !== "true" && keep !== "false")
    return decide("malformed", `${VolumeTag.keep}=${JSON.stringify(keep)} is not true or false`);
  if (keep === "true") return decide("kept", `${VolumeTag.keep}=true`);

  const expiresText = tags[VolumeTag.expiresAt];
  const claimedBy = tags[VolumeTag.claimedBy];
  // Claimed after its last release (an instance died between its CreateTags and the DeleteTags
  // of the old expiry): that expiry belonged to the earlier release, not to this claim.
  const claimedAt = parseTimestamp(tags[VolumeTag.claimedAt] ?? "");
  const releasedAt = parseTimestamp(tags[VolumeTag.releasedAt] ?? "");
  const claimedSinceRelease =
    claimedBy !== undefined && claimedAt !== undefined && releasedAt !== undefined && claimedAt > releasedAt;
  if (expiresText === undefined || claimedSinceRelease) {
    if (claimedBy !== undefined && (tags[VolumeTag.releasedAt] === undefined || claimedSinceRelease)) {
      // The TTL its instance asked for, recorded at the claim (its keep was judged above).
      const recorded = recordedTtlHours(tags);
      if (recorded.kind === "malformed")
        return decide(
          "malformed",
          `${VolumeTag.ttlHours}=${JSON.stringify(recorded.text)} is not a number of hours from ${TTL_HOURS.min} ` +
            `to ${TTL_HOURS.max}`,
        );
      const ttlHours = recorded.kind === "hours" ? recorded.hours : options.ttlHours;
      const expires = new Date(options.now.getTime() + ttlHours * 3600_000);
      const ttl =
        recorded.kind === "hours"
          ? `its instance's TTL of ${ttlHours} h`
          : `gc's TTL of ${ttlHours} h (no ${VolumeTag.ttlHours} recorded)`;
      return decide(
        "tag-expiry",
        `claimed by ${claimedBy} but never released; expires ${expires.toISOString()}, ${ttl}`,
        {
          tags: { [VolumeTag.releasedAt]: options.now.toISOString(), [VolumeTag.expiresAt]: expires.toISOString() },
        },
      );
    }
    return decide("never-claimed", "no expiry: waiting for its first machine");
  }
  const expires = parseTimestamp(expiresText);
  if (!expires)
    return decide("malformed", `${VolumeTag.expiresAt}=${JSON.stringify(expiresText)} is not an ISO 8601 time`);
  if (expires.getTime() > options.now.getTime()) return decide("not-expired", `expires ${expires.toISOString()}`);
  return decide("delete", `expired ${expires.toISOString()}`);
}

function generationsOf(retire: RetireOptions): Generations {
  return { current: currentByPool(retire), snapshots: new Map(retire.snapshots.map((s) => [s.snapshotId, s])) };
}

/** Each pool's current generation, by pool name. */
function currentByPool(retire: RetireOptions): Map<string, PoolCurrent> {
  const byPool = new Map<string, SnapshotInfo[]>();
  for (const snapshot of retire.snapshots) {
    const pool = snapshot.tags[VolumeTag.pool];
    if (pool !== undefined) byPool.set(pool, [...(byPool.get(pool) ?? []), snapshot]);
  }
  const current = new Map<string, PoolCurrent>();
  for (const [pool, snapshots] of byPool) {
    const snapshot = currentSnapshot(snapshots, retire.pool?.name === pool ? retire.pool.imageSet : null);
    if (!snapshot) continue;
    const generation = snapshotGeneration(snapshot);
    const times = [snapshot.startTime, generation.builtAt]
      .filter((d): d is Date => d instanceof Date)
      .map((d) => d.getTime());
    if (times.length > 0) current.set(pool, { generation, since: new Date(Math.max(...times)) });
  }
  return current;
}

/** The verdicts a superseded volume may turn from: it sits in the pool, released cleanly or never claimed. */
const IN_STOCK = new Set<GcVerdict>(["never-claimed", "not-expired"]);

/**
 * Retires an available pool volume of a superseded generation once the current one has been
 * out for the grace period. Only a volume that sits in the pool (never claimed, or released and
 * not yet expired) of a known generation: a kept, in-use, quarantined, foreign, malformed or
 * never-released (in doubt) one, a workspace volume, or one whose build time cannot be learned,
 * keeps the verdict expiry gave it.
 */
function judgeGeneration(
  volume: VolumeInfo,
  decision: GcDecision,
  now: Date,
  retire: RetireOptions,
  generations: Generations,
): GcDecision {
  if (!IN_STOCK.has(decision.verdict) || volume.tags[VolumeTag.kind] !== VolumeKind.pool) return decision;
  const pool = generations.current.get(volume.tags[VolumeTag.pool] ?? "");
  const generation = volumeGeneration(volume, generations.snapshots);
  if (!pool || generation.builtAt === null || !isSuperseded(generation, pool.generation)) return decision;
  if (isQuarantined(volume, now, retire.quarantineHours))
    return { ...decision, reason: `${decision.reason}; superseded, but in quarantine` };
  const by = `generation ${generationName(generation)} superseded by ${generationName(pool.generation)}`;
  if (retire.graceHours === null)
    return { ...decision, reason: `${decision.reason}; ${by} (gc.supersededGraceHours is null: never retired)` };
  const from = new Date(pool.since.getTime() + retire.graceHours * 3600_000);
  if (now.getTime() < from.getTime())
    return { ...decision, reason: `${decision.reason}; ${by}, retired from ${from.toISOString()}` };
  return {
    volumeId: volume.volumeId,
    verdict: "superseded",
    reason: `${by}, out since ${pool.since.toISOString()} (grace ${retire.graceHours} h)`,
  };
}

/** The verdicts gc deletes on. */
export const DELETING = new Set<GcVerdict>(["delete", "superseded"]);

/** The tags whose change since the plan spares a volume: a keep, a claim, a release, a new expiry. */
const SPARING_TAGS = [
  VolumeTag.managed,
  VolumeTag.keep,
  VolumeTag.claimedBy,
  VolumeTag.claimedAt,
  VolumeTag.releasedAt,
  VolumeTag.expiresAt,
] as const;

/**
 * Why a volume planned for deletion is spared after all, judged on EC2's answer right before its
 * DeleteVolume (`fresh`; undefined: it is gone); undefined: it still goes. Anything that changed
 * since it was observed and may mean someone wants it spares it — its state or an attachment, a
 * keep, a claim, a release, a new expiry — and so does a verdict of its own that is no longer a
 * deletion. Pure.
 */
export function sparedSince(
  observed: VolumeInfo,
  fresh: VolumeInfo,
  options: Pick<GcPlanOptions, "now" | "ttlHours" | "retire">,
): string | undefined {
  if (fresh.state !== observed.state || fresh.attachment) {
    return `now ${fresh.attachment ? `attached to ${fresh.attachment.instanceId}` : fresh.state}`;
  }
  const changed = SPARING_TAGS.filter((key) => fresh.tags[key] !== observed.tags[key]);
  if (changed.length > 0) {
    const tagNow = (key: string) => (fresh.tags[key] === undefined ? "(removed)" : JSON.stringify(fresh.tags[key]));
    return `${changed.map((key) => `${key}=${tagNow(key)}`).join(", ")} since it was judged`;
  }
  const again = judgeVolume(fresh, options);
  return DELETING.has(again.verdict) ? undefined : `now ${again.verdict}: ${again.reason}`;
}

/**
 * Decides for every volume; deletions beyond `maxDeletes` become `over-cap`: expired ones first
 * (oldest expiry first), then superseded ones (oldest generation first).
 */
export function planGc(volumes: readonly VolumeInfo[], options: GcPlanOptions): GcPlan {
  const { retire } = options;
  const generations = retire ? generationsOf(retire) : undefined;
  const decisions = volumes.map((volume) => {
    const decision = judgeExpiry(volume, options);
    return retire && generations ? judgeGeneration(volume, decision, options.now, retire, generations) : decision;
  });
  const byId = new Map(volumes.map((v) => [v.volumeId, v]));
  const expiry = (d: GcDecision) =>
    parseTimestamp(byId.get(d.volumeId)?.tags[VolumeTag.expiresAt] ?? "")?.getTime() ?? 0;
  const generation = (d: GcDecision) => volumeGeneration(byId.get(d.volumeId)!, generations?.snapshots);
  const deletions = [
    ...decisions.filter((d) => d.verdict === "delete").sort((a, b) => expiry(a) - expiry(b)),
    ...decisions
      .filter((d) => d.verdict === "superseded")
      .sort((a, b) => compareGenerations(generation(b), generation(a))),
  ];
  for (const extra of deletions.slice(Math.max(0, options.maxDeletes))) {
    extra.verdict = "over-cap";
    extra.reason += `; over this run's cap of ${options.maxDeletes}`;
  }
  return decisions;
}
