/**
 * The pool keeper, planned: per configured zone, how many volumes to create from the pool's
 * newest snapshot (up to `minAvailable`, within the pool's caps), which surplus available
 * volumes to delete (beyond `maxAvailable`, oldest first), and which volumes EBS reports fully
 * initialized so they get tagged. Pure: the observation comes in, a serializable plan goes out
 * (`pool fill --dry-run` prints it).
 *
 * Several keepers may run at once (a timer on each manager). Each create carries a ClientToken
 * derived from what the keepers agree on when they see the same pool: the pool, the zone, the
 * slot (how many live volumes of the pool the zone has), the snapshot, the zone's volume ids and
 * an hour bucket. Two keepers planning from the same pool get the same token for the same slot,
 * and EC2 makes one volume for both; once it exists, the zone's ids differ and so does the next
 * token. The ids keep a token from being reused after a claim (same count, other availability)
 * or a deletion; the bucket keeps tokens from living forever (EC2 forgets them after a while).
 */
import { createHash } from "node:crypto";
import { CONTENT_TAGS, VolumeKind, VolumeTag } from "../../tags.ts";
import { isQuarantined, poolSelector } from "../boot/plan.ts";
import type { InitializationStatus, SnapshotInfo, VolumeInfo } from "../ports.ts";

/** What the keeper needs of the configuration (`keeper.*`, the pool, the volume type). */
export interface KeeperSettings {
  pool: string;
  imageSet: string | null;
  volumeType: string;
  zones: readonly string[];
  minAvailable: number;
  maxAvailable: number;
  maxVolumes: number;
  maxGiB: number;
  initializationRateMiBps: number | null;
  /** `claim.quarantineHours`: a quarantined volume is no stock (boots skip it) and is never trimmed. */
  quarantineHours: number;
}

/** What observe() found. */
export interface KeeperObservation {
  now: Date;
  /** Every volume tagged as this pool's (`managed`, kind `pool`, `pool`), all zones, all states. */
  volumes: VolumeInfo[];
  /** The pool's newest completed snapshot (with the image set when configured). */
  snapshot?: SnapshotInfo;
  /** Start times (ISO) of the pool's snapshots by id: the trim order. */
  snapshotStarts: Record<string, string>;
  /** EBS's initialization of the available, not yet tagged volumes made from a snapshot (null: EC2 gave none). */
  initialization: Record<string, InitializationStatus | null>;
}

export interface CreateStep {
  step: "create";
  zone: string;
  /** The zone's live volumes of the pool when planned: the slot this volume fills. */
  slot: number;
  clientToken: string;
  snapshotId: string;
  sizeGiB: number;
  volumeType: string;
  initializationRateMiBps: number | null;
  tags: Record<string, string>;
}

export type KeeperStep =
  | CreateStep
  | { step: "tag-initialized"; volumeId: string; zone: string; reason: string }
  | { step: "trim"; volumeId: string; zone: string; reason: string };

/** One zone's count and what the plan does about it. */
export interface ZoneView {
  zone: string;
  /** Available, unattached, not quarantined (what a boot may claim). */
  available: number;
  /** Being created: stock already on its way. */
  creating: number;
  /** Every live volume of the pool in the zone (in use included). */
  total: number;
  create: number;
  trim: number;
  /** Why fewer are created than the zone lacks (a cap, no snapshot), if so. */
  short?: string;
}

export interface KeeperPlan {
  pool: string;
  snapshotId: string | null;
  totals: { volumes: number; gib: number; maxVolumes: number; maxGiB: number };
  zones: ZoneView[];
  steps: KeeperStep[];
}

/** How long a slot's token stands: keepers that straddle the hour make a volume each at worst. */
export const TOKEN_BUCKET_MS = 3600_000;

const GONE = new Set(["deleting", "deleted"]);

const isPoolVolume = (settings: KeeperSettings, v: VolumeInfo) =>
  v.tags[VolumeTag.managed] === "true" && v.tags[VolumeTag.kind] === VolumeKind.pool && v.tags[VolumeTag.pool] === settings.pool;

/** A volume of the pool's current selection (the image set when configured) that a boot may claim now. */
function isStock(settings: KeeperSettings, v: VolumeInfo, now: Date): boolean {
  if (settings.imageSet !== null && v.tags[VolumeTag.imageSet] !== settings.imageSet) return false;
  if (v.state === "creating") return true;
  return v.state === "available" && !v.attachment && !isQuarantined(v, now, settings.quarantineHours);
}

/** The tags of a keeper's volume: a pool volume's, with what the snapshot says of its contents. */
export function keeperVolumeTags(pool: string, snapshot: SnapshotInfo): Record<string, string> {
  const tags: Record<string, string> = { [VolumeTag.managed]: "true", [VolumeTag.kind]: VolumeKind.pool, [VolumeTag.pool]: pool };
  // Never `created-by`: that tag allows formatting, and this volume holds the snapshot's data.
  for (const key of CONTENT_TAGS) {
    const value = snapshot.tags[key];
    if (value !== undefined) tags[key] = value;
  }
  return tags;
}

/** The ClientToken of a slot (at most 64 ASCII characters, as EC2 requires). */
export function slotToken(pool: string, zone: string, slot: number, snapshotId: string, zoneVolumeIds: readonly string[], now: Date): string {
  const bucket = Math.floor(now.getTime() / TOKEN_BUCKET_MS);
  const ids = [...zoneVolumeIds].sort().join(",");
  const digest = createHash("sha256").update(`${pool}\0${zone}\0${slot}\0${snapshotId}\0${bucket}\0${ids}`).digest("hex");
  return `ebs-cache-keeper-${digest.slice(0, 40)}`;
}

/** Oldest first: by the snapshot's start time (unknown: oldest), then the volume's create time, then id. */
function trimOrder(observed: KeeperObservation): (a: VolumeInfo, b: VolumeInfo) => number {
  const started = (v: VolumeInfo) => Date.parse(observed.snapshotStarts[v.snapshotId ?? ""] ?? "") || 0;
  const created = (v: VolumeInfo) => v.createTime?.getTime() ?? 0;
  return (a, b) => started(a) - started(b) || created(a) - created(b) || a.volumeId.localeCompare(b.volumeId);
}

/** Plans one round of the keeper. */
export function planKeeper(settings: KeeperSettings, observed: KeeperObservation): KeeperPlan {
  const { now } = observed;
  const live = observed.volumes.filter((v) => isPoolVolume(settings, v) && !GONE.has(v.state));
  const totals = {
    volumes: live.length,
    gib: live.reduce((sum, v) => sum + v.sizeGiB, 0),
    maxVolumes: settings.maxVolumes,
    maxGiB: settings.maxGiB,
  };
  const steps: KeeperStep[] = [];

  for (const v of live) {
    const status = observed.initialization[v.volumeId];
    if (v.state === "available" && !v.attachment && v.tags[VolumeTag.initialized] === undefined && status && status.progress >= 100) {
      steps.push({ step: "tag-initialized", volumeId: v.volumeId, zone: v.availabilityZone, reason: `EBS reports the ${status.type} initialization at 100 %` });
    }
  }

  const zones: ZoneView[] = settings.zones.map((zone) => {
    const inZone = live.filter((v) => v.availabilityZone === zone);
    const stock = inZone.filter((v) => isStock(settings, v, now));
    const creating = stock.filter((v) => v.state === "creating").length;
    return { zone, available: stock.length - creating, creating, total: inZone.length, create: 0, trim: 0 };
  });

  // Surplus: only available volumes go, never kept, quarantined (not stock) or attached ones.
  for (const view of zones) {
    const surplus = view.available + view.creating - settings.maxAvailable;
    if (surplus <= 0) continue;
    const trimmable = live
      .filter((v) => v.availabilityZone === view.zone && isStock(settings, v, now) && v.state === "available" && v.tags[VolumeTag.keep] !== "true")
      .sort(trimOrder(observed))
      .slice(0, surplus);
    for (const v of trimmable) {
      steps.push({ step: "trim", volumeId: v.volumeId, zone: view.zone, reason: `${view.available + view.creating} in stock, at most ${settings.maxAvailable}: the oldest go` });
    }
    view.trim = trimmable.length;
  }

  // Shortage: the zone furthest below its target first, within what the caps leave.
  const snapshot = observed.snapshot?.state === "completed" ? observed.snapshot : undefined;
  const lacking = (view: ZoneView) => settings.minAvailable - (view.available + view.creating + view.create);
  if (zones.some((view) => lacking(view) > 0)) {
    if (!snapshot) {
      for (const view of zones) if (lacking(view) > 0) view.short = "the pool has no completed snapshot";
    } else {
      const size = snapshot.volumeSizeGiB;
      let room = Math.max(0, Math.min(settings.maxVolumes - totals.volumes, size > 0 ? Math.floor((settings.maxGiB - totals.gib) / size) : Infinity));
      for (;;) {
        const next = zones.filter((view) => lacking(view) > 0).sort((a, b) => lacking(b) - lacking(a))[0];
        if (!next) break;
        if (room <= 0) {
          for (const view of zones) {
            if (lacking(view) > 0) view.short = `the pool's cap (${settings.maxVolumes} volumes, ${settings.maxGiB} GiB; ${totals.volumes} volumes, ${totals.gib} GiB now)`;
          }
          break;
        }
        const slot = next.total + next.create;
        const zoneIds = live.filter((v) => v.availabilityZone === next.zone).map((v) => v.volumeId);
        steps.push({
          step: "create",
          zone: next.zone,
          slot,
          clientToken: slotToken(settings.pool, next.zone, slot, snapshot.snapshotId, zoneIds, now),
          snapshotId: snapshot.snapshotId,
          sizeGiB: size,
          volumeType: settings.volumeType,
          initializationRateMiBps: settings.initializationRateMiBps,
          tags: keeperVolumeTags(settings.pool, snapshot),
        });
        next.create++;
        room--;
      }
    }
  }
  return { pool: settings.pool, snapshotId: snapshot?.snapshotId ?? null, totals, zones, steps };
}

/** The tags that select the pool's volumes (all image sets: every one counts toward the caps). */
export function keeperVolumeSelector(settings: Pick<KeeperSettings, "pool">): Record<string, string> {
  return { [VolumeTag.managed]: "true", [VolumeTag.kind]: VolumeKind.pool, [VolumeTag.pool]: settings.pool };
}

/** The tags that select the snapshot new volumes come from. */
export function keeperSnapshotSelector(settings: Pick<KeeperSettings, "pool" | "imageSet">): Record<string, string> {
  return poolSelector(settings);
}
