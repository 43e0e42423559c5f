/**
 * The pool keeper, planned: per configured zone, how many volumes to create from the snapshot of
 * the pool's current generation (up to `minAvailable` volumes of that generation, within the
 * pool's caps), which surplus available volumes to delete (beyond `maxAvailable`, superseded
 * generations first, oldest first), and which volumes EBS reports fully initialized so they get
 * tagged. Pure: the observation comes in, a serializable plan goes out
 * (`pool fill --dry-run` prints it).
 *
 * Several keepers may run at once (a timer on each manager). Each create carries a ClientToken
 * derived from what the keepers agree on when they see the same pool, and from nothing else:
 * what the slot is (the pool, the zone, the slot: how many live volumes of the pool the zone has,
 * the snapshot and everything the request sends) and what the zone holds (its volume ids). Never
 * from when it is asked: two keepers that plan on either side of an hour, or whose clocks differ,
 * get the same token for the same slot, and EC2 makes one volume for both; once it exists, the
 * zone's ids differ and so does the next token. The ids keep a token from being reused after a
 * claim (same count, other availability) or a deletion. The one case they cannot tell, the
 * slot's own volume deleted and the zone as it was before it (EC2 remembers a token for a day at
 * least, and answers it with the deleted volume), the create step settles from EC2's answer: the
 * next token names the volume it replaces (replacingToken, src/agent/volume-creation.ts).
 */
import { createHash } from "node:crypto";
import { CONTENT_TAGS, VolumeKind, VolumeTag } from "../../tags.ts";
import {
  compareGenerations,
  generationName,
  isClaimable as claimableAt,
  isInTransit,
  isSuperseded,
  matchesSelector,
  poolSelector,
  snapshotGeneration,
  volumeGeneration,
  type Generation,
} from "../volume-rules.ts";
import type {
  CloudVolumes,
  InitializationStatus,
  InstanceInfo,
  SnapshotInfo,
  VolumeCreation,
  VolumeInfo,
} from "../ports.ts";
import { volumesHeldByStopped } from "../pool/stopped.ts";
import { sentCreationParameters } from "../volume-creation.ts";

/** What the keeper needs of the configuration (`keeper.*`, the pool, the volume type). */
export interface KeeperSettings {
  pool: string;
  /**
   * The size of the pool's volumes (config `instanceTypePools`); absent: the snapshot's. Below
   * the snapshot's size, no volume is made (EC2 would refuse) and the plan says why (`problem`).
   */
  sizeGiB?: number;
  imageSet: string | null;
  volumeType: string;
  zones: readonly string[];
  minAvailable: number;
  maxAvailable: number;
  maxVolumes: number;
  maxGiB: number;
  initializationRateMiBps: number | null;
  /** Config `volumes` (encryption, KMS key, IOPS, throughput, the operator's tags); absent: EC2's defaults. */
  creation?: VolumeCreation;
  /** `claim.quarantineHours`: a quarantined volume is no stock (boots skip it) and is never trimmed. */
  quarantineHours: number;
  /**
   * `keeper.reclaimStoppedAfterDays`: detach (never forced) a pool volume from an instance stopped
   * longer than this, and tag it released, so it is stock again; null: never (the default).
   */
  reclaimStoppedAfterDays?: number | null;
  /** `ttlHours`: the expiry a reclaimed volume gets, as a release would give it (default 24). */
  ttlHours?: number;
}

/** What observe() found. */
export interface KeeperObservation {
  /** EC2's time when observed (its clock, after the listing's answers). */
  now: Date;
  /** Every volume tagged as this pool's (`managed`, kind `pool`, `pool`), all zones, all states. */
  volumes: VolumeInfo[];
  /**
   * The snapshot of the pool's current generation (currentSnapshot: the newest usable one by
   * built-at, with the image set when configured): new volumes come from it, and volumes of an
   * older generation are no stock.
   */
  snapshot?: SnapshotInfo;
  /** The pool's snapshots in any state: the generation of a volume that carries no built-at of its own. */
  snapshots: SnapshotInfo[];
  /** EBS's initialization of the available, not yet tagged volumes made from a snapshot (null: EC2 gave none). */
  initialization: Record<string, InitializationStatus | null>;
  /**
   * Those whose initialization could not be read (DescribeVolumeStatus failed), with why: they
   * are not tagged this run, and nothing else of the plan depends on it.
   */
  unread?: Record<string, string>;
  /** The instances the pool's attached volumes are attached to (their state, since when stopped); absent: not asked. */
  instances?: InstanceInfo[];
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
  /** Config `volumes`, as sent (absent: none configured). */
  creation?: VolumeCreation;
}

export type KeeperStep =
  | CreateStep
  | { step: "tag-initialized"; volumeId: string; zone: string; reason: string }
  | { step: "trim"; volumeId: string; zone: string; reason: string }
  /** Detach from a long-stopped instance (re-checked `stopped` right before), then tag released. */
  | { step: "reclaim"; volumeId: string; zone: string; instanceId: string; reason: string };

/** One zone's count and what the plan does about it. */
export interface ZoneView {
  zone: string;
  /** Available, unattached, not quarantined, of the current generation (what a boot should claim). */
  available: number;
  /**
   * Available, unattached, not quarantined, of a superseded generation: claimed only when no
   * current one is left, trimmed first, and no stock toward `minAvailable`.
   */
  superseded: number;
  /** Being created: stock already on its way. */
  creating: number;
  /** Every live volume of the pool in the zone (in use included). */
  total: number;
  /**
   * Attached to a stopped instance (a sleeping warm buffer, a leaked machine): counted in `total`
   * and the caps, never stock; `oldestStoppedDays` is the longest such stop (null: none, or EC2
   * does not say since when).
   */
  heldByStopped: number;
  oldestStoppedDays: number | null;
  create: number;
  trim: number;
  /** Why fewer are created than the zone lacks (a cap, no snapshot), if so. */
  short?: string;
}

export interface KeeperPlan {
  pool: string;
  snapshotId: string | null;
  /** The current generation (generationName), null with no completed snapshot. */
  generation: string | null;
  totals: { volumes: number; gib: number; maxVolumes: number; maxGiB: number };
  zones: ZoneView[];
  steps: KeeperStep[];
  /** A configuration that keeps the keeper from stocking the pool (a size below the snapshot's): the run fails. */
  problem?: string;
}

const GONE = new Set(["deleting", "deleted"]);

/** A volume of the pool, every image set: keeperVolumeSelector's, as EC2 filtered them. */
const isPoolVolume = (settings: KeeperSettings, v: VolumeInfo) =>
  matchesSelector(v.tags, keeperVolumeSelector(settings));

/** A volume of the pool's selection (the image set when configured), whatever its generation. */
const isSelected = (settings: KeeperSettings, v: VolumeInfo) =>
  settings.imageSet === null || v.tags[VolumeTag.imageSet] === settings.imageSet;

/**
 * Available to a boot, in any zone, for any instance (volume-rules.ts isClaimable): unattached,
 * not quarantined, not another instance's on its way (a boot skips those; and one a release has
 * just detached, or a boot has just made, must never be trimmed under it).
 */
const isClaimable = (settings: KeeperSettings, v: VolumeInfo, now: Date) =>
  claimableAt(v, { now, quarantineHours: settings.quarantineHours });

/** How the plan sees one volume's generation. */
interface Generations {
  current: Generation | undefined;
  of: (v: VolumeInfo) => Generation;
}

function generationsOf(observed: KeeperObservation): Generations {
  const byId = new Map(observed.snapshots.map((s) => [s.snapshotId, s]));
  const current = observed.snapshot?.state === "completed" ? snapshotGeneration(observed.snapshot) : undefined;
  return { current, of: (v) => volumeGeneration(v, byId) };
}

/** A volume of the pool's current generation that a boot may claim now, or one being created (stock on its way). */
function isStock(settings: KeeperSettings, v: VolumeInfo, now: Date, generations: Generations): boolean {
  if (!isSelected(settings, v) || isSuperseded(generations.of(v), generations.current)) return false;
  return (v.state === "creating" && !isInTransit(v, now)) || isClaimable(settings, v, now);
}

/** An available volume of an older generation: a boot takes it only when no current one is left. */
function isSupersededStock(settings: KeeperSettings, v: VolumeInfo, now: Date, generations: Generations): boolean {
  return (
    isSelected(settings, v) && isClaimable(settings, v, now) && isSuperseded(generations.of(v), generations.current)
  );
}

/** The tags of a keeper's volume: a pool volume's, with what the snapshot says of its contents. */
export function keeperVolumeTags(pool: string, snapshot: SnapshotInfo): Record<string, string> {
  const tags: Record<string, string> = {
    [VolumeTag.managed]: "true",
    [VolumeTag.kind]: VolumeKind.pool,
    [VolumeTag.pool]: pool,
  };
  // Never `created-by`: that tag allows formatting, and this volume holds the snapshot's data.
  for (const key of CONTENT_TAGS) {
    const value = snapshot.tags[key];
    if (value !== undefined) tags[key] = value;
  }
  return tags;
}

/** What a create step asks of the volume: each of it shapes the volume EC2 makes. */
export type VolumeShape = Pick<
  CreateStep,
  "snapshotId" | "sizeGiB" | "volumeType" | "initializationRateMiBps" | "tags" | "creation"
>;

/**
 * The ClientToken of a slot (at most 64 ASCII characters, as EC2 requires). It covers the whole
 * shape of the volume: EC2 answers a repeated token with the volume it made first, so a token
 * that outlived a change of the pool's size (instanceTypePools) or volume type would get back a
 * volume of the old shape. Keepers that agree on the slot, the shape and the zone's volumes agree
 * on the token, whenever they ask. Config `volumes` is part of the shape: the token is final
 * here, and sent as it is.
 */
export function slotToken(
  pool: string,
  zone: string,
  slot: number,
  volume: VolumeShape,
  zoneVolumeIds: readonly string[],
): string {
  const ids = [...zoneVolumeIds].sort().join(",");
  const shape = JSON.stringify([
    volume.snapshotId,
    volume.sizeGiB,
    volume.volumeType,
    volume.initializationRateMiBps,
    Object.entries(volume.tags).sort(([a], [b]) => a.localeCompare(b)),
    ...creationShape(volume.creation),
  ]);
  const digest = createHash("sha256").update(`${pool}\0${zone}\0${slot}\0${shape}\0${ids}`).digest("hex");
  return `ebs-cache-keeper-${digest.slice(0, 40)}`;
}

/**
 * Config `volumes` for the token: the parameters it sends, by name; nothing when it sends nothing
 * (the defaults), so the token stays that of keepers that did not know config `volumes`.
 */
function creationShape(creation: VolumeCreation | undefined): unknown[] {
  const sent = sentCreationParameters(creation);
  return sent.length > 0 ? [sent] : [];
}

/**
 * The create step of a slot: the whole CreateVolume request and its token. `pool fill --dry-run`
 * prints it, and the create handler sends it as it is (createVolumeSpec), so the two never differ.
 */
export function createStep(
  settings: KeeperSettings,
  snapshot: SnapshotInfo,
  slot: { zone: string; slot: number; zoneVolumeIds: readonly string[] },
): CreateStep {
  const volume: VolumeShape = {
    snapshotId: snapshot.snapshotId,
    sizeGiB: settings.sizeGiB ?? snapshot.volumeSizeGiB,
    volumeType: settings.volumeType,
    initializationRateMiBps: settings.initializationRateMiBps,
    tags: keeperVolumeTags(settings.pool, snapshot),
    ...(settings.creation ? { creation: settings.creation } : {}),
  };
  return {
    step: "create",
    zone: slot.zone,
    slot: slot.slot,
    clientToken: slotToken(settings.pool, slot.zone, slot.slot, volume, slot.zoneVolumeIds),
    ...volume,
  };
}

/** The CreateVolume spec of a create step: every field of the step that shapes the volume, and its token. */
export function createVolumeSpec(step: CreateStep): Parameters<CloudVolumes["createVolume"]>[0] {
  return {
    availabilityZone: step.zone,
    snapshotId: step.snapshotId,
    sizeGiB: step.sizeGiB,
    volumeType: step.volumeType,
    tags: step.tags,
    clientToken: step.clientToken,
    ...(step.initializationRateMiBps !== null ? { initializationRateMiBps: step.initializationRateMiBps } : {}),
    ...(step.creation ? { creation: step.creation } : {}),
  };
}

/**
 * Trim order: superseded generations before the current one, the oldest generation first (a
 * volume of unknown generation is the oldest), then the oldest volume, then by id.
 */
function trimOrder(generations: Generations): (a: VolumeInfo, b: VolumeInfo) => number {
  const created = (v: VolumeInfo) => v.createTime?.getTime() ?? 0;
  return (a, b) =>
    compareGenerations(generations.of(b), generations.of(a)) ||
    created(a) - created(b) ||
    a.volumeId.localeCompare(b.volumeId);
}

/** What every decision of a round reads: the settings, the pool's live volumes, their generations. */
interface KeeperRound {
  settings: KeeperSettings;
  observed: KeeperObservation;
  now: Date;
  live: VolumeInfo[];
  generations: Generations;
}

/** Plans one round of the keeper. */
export function planKeeper(settings: KeeperSettings, observed: KeeperObservation): KeeperPlan {
  const { now } = observed;
  const live = observed.volumes.filter((v) => isPoolVolume(settings, v) && !GONE.has(v.state));
  const round: KeeperRound = { settings, observed, now, live, generations: generationsOf(observed) };
  const totals = {
    volumes: live.length,
    gib: live.reduce((sum, v) => sum + v.sizeGiB, 0),
    maxVolumes: settings.maxVolumes,
    maxGiB: settings.maxGiB,
  };
  const held = volumesHeldByStopped(live, observed.instances ?? [], now);
  const zones = settings.zones.map((zone) => zoneView(round, zone, held));
  const steps: KeeperStep[] = [...initializedTags(round), ...reclaims(round, held), ...trims(round, zones)];

  // Shortage: the zone furthest below its target first, within what the caps leave.
  const snapshot = observed.snapshot?.state === "completed" ? observed.snapshot : undefined;
  const tooSmall =
    snapshot && settings.sizeGiB !== undefined && settings.sizeGiB < snapshot.volumeSizeGiB
      ? `instanceTypePools gives pool ${settings.pool} ${settings.sizeGiB} GiB volumes, below its snapshot ` +
        `${snapshot.snapshotId}'s ${snapshot.volumeSizeGiB} GiB: no volume made (raise the rule's size to at least ` +
        `${snapshot.volumeSizeGiB})`
      : undefined;
  const lacking = (view: ZoneView) => settings.minAvailable - (view.available + view.creating + view.create);
  if (zones.some((view) => lacking(view) > 0)) {
    if (!snapshot) {
      for (const view of zones) if (lacking(view) > 0) view.short = "the pool has no completed snapshot";
    } else if (tooSmall) {
      for (const view of zones) if (lacking(view) > 0) view.short = tooSmall;
    } else {
      steps.push(...creates(round, snapshot, zones, totals));
    }
  }
  return {
    pool: settings.pool,
    snapshotId: snapshot?.snapshotId ?? null,
    generation: round.generations.current ? generationName(round.generations.current) : null,
    totals,
    zones,
    steps,
    ...(tooSmall ? { problem: tooSmall } : {}),
  };
}

/** A volume EBS has finished initializing, not yet tagged so. */
function initializedTags({ live, observed }: KeeperRound): KeeperStep[] {
  const steps: KeeperStep[] = [];
  for (const v of live) {
    const status = observed.initialization[v.volumeId];
    if (
      v.state === "available" &&
      !v.attachment &&
      v.tags[VolumeTag.initialized] === undefined &&
      status &&
      status.progress >= 100
    ) {
      steps.push({
        step: "tag-initialized",
        volumeId: v.volumeId,
        zone: v.availabilityZone,
        reason: `EBS reports the ${status.type} initialization at 100 %`,
      });
    }
  }
  return steps;
}

/** A zone's stock as the round finds it (nothing planned yet). */
function zoneView(round: KeeperRound, zone: string, held: ReturnType<typeof volumesHeldByStopped>): ZoneView {
  const { settings, now, generations } = round;
  const inZone = round.live.filter((v) => v.availabilityZone === zone);
  const stock = inZone.filter((v) => isStock(settings, v, now, generations));
  const creating = stock.filter((v) => v.state === "creating").length;
  const superseded = inZone.filter((v) => isSupersededStock(settings, v, now, generations)).length;
  const heldHere = held.filter((h) => inZone.some((v) => v.volumeId === h.volumeId));
  const days = heldHere.flatMap((h) => (h.stoppedDays === null ? [] : [h.stoppedDays]));
  return {
    zone,
    available: stock.length - creating,
    superseded,
    creating,
    total: inZone.length,
    heldByStopped: heldHere.length,
    oldestStoppedDays: days.length > 0 ? Math.max(...days) : null,
    create: 0,
    trim: 0,
  };
}

/**
 * Reclaim (opt-in): a volume asleep on a long-stopped instance goes back to the pool. A stop
 * whose time EC2 does not give is never old enough. The step re-checks the state before it acts.
 */
function reclaims({ settings, live }: KeeperRound, held: ReturnType<typeof volumesHeldByStopped>): KeeperStep[] {
  const reclaimAfter = settings.reclaimStoppedAfterDays ?? null;
  if (reclaimAfter === null) return [];
  const steps: KeeperStep[] = [];
  for (const h of held) {
    if (h.stoppedDays === null || h.stoppedDays < reclaimAfter) continue;
    const zone = live.find((v) => v.volumeId === h.volumeId)!.availabilityZone;
    steps.push({
      step: "reclaim",
      volumeId: h.volumeId,
      zone,
      instanceId: h.instanceId,
      reason:
        `attached to ${h.instanceId}, stopped since ${h.stoppedSince} (${h.stoppedDays.toFixed(1)} days, ` +
        `reclaim after ${reclaimAfter})`,
    });
  }
  return steps;
}

/**
 * Surplus: the current stock beyond maxAvailable goes, oldest first. Superseded volumes count
 * toward maxAvailable too, and go before any current one, but only once the current stock has
 * reached minAvailable: until then they are what a boot gets warm. Never kept, quarantined or
 * attached ones; never a current volume to make room for a superseded one. Counts each zone's
 * trims in its view.
 */
function trims(round: KeeperRound, zones: ZoneView[]): KeeperStep[] {
  const { settings, live, now, generations } = round;
  const steps: KeeperStep[] = [];
  for (const view of zones) {
    const current = view.available + view.creating;
    const trimmable = (which: (v: VolumeInfo) => boolean) =>
      live
        .filter(
          (v) =>
            v.availabilityZone === view.zone &&
            v.state === "available" &&
            v.tags[VolumeTag.keep] !== "true" &&
            which(v),
        )
        .sort(trimOrder(generations));
    const currentTrims = trimmable((v) => isStock(settings, v, now, generations)).slice(
      0,
      Math.max(0, current - settings.maxAvailable),
    );
    const room = current - currentTrims.length + view.superseded - settings.maxAvailable;
    const supersededTrims =
      current >= settings.minAvailable && room > 0
        ? trimmable((v) => isSupersededStock(settings, v, now, generations)).slice(0, room)
        : [];
    const inStock = `${current} current + ${view.superseded} superseded in stock, at most ${settings.maxAvailable}`;
    for (const v of supersededTrims) {
      steps.push({
        step: "trim",
        volumeId: v.volumeId,
        zone: view.zone,
        reason: `${inStock}: superseded generations go first (this one ${generationName(generations.of(v))})`,
      });
    }
    for (const v of currentTrims) {
      steps.push({
        step: "trim",
        volumeId: v.volumeId,
        zone: view.zone,
        reason: `${inStock}: the oldest current ones go`,
      });
    }
    view.trim = supersededTrims.length + currentTrims.length;
  }
  return steps;
}

/**
 * Shortage, with a snapshot to make volumes from: one volume at a time to the zone furthest
 * below minAvailable, until none lacks or the caps leave no room (then every zone still lacking
 * says so). Counts each zone's creates in its view.
 */
function creates(
  round: KeeperRound,
  snapshot: SnapshotInfo,
  zones: ZoneView[],
  totals: KeeperPlan["totals"],
): CreateStep[] {
  const { settings, live } = round;
  const lacking = (view: ZoneView) => settings.minAvailable - (view.available + view.creating + view.create);
  const steps: CreateStep[] = [];
  const size = settings.sizeGiB ?? snapshot.volumeSizeGiB;
  let room = Math.max(
    0,
    Math.min(
      settings.maxVolumes - totals.volumes,
      size > 0 ? Math.floor((settings.maxGiB - totals.gib) / size) : Infinity,
    ),
  );
  for (;;) {
    const next = zones.filter((view) => lacking(view) > 0).sort((a, b) => lacking(b) - lacking(a))[0];
    if (!next) break;
    if (room <= 0) {
      for (const view of zones) {
        if (lacking(view) > 0)
          view.short =
            `the pool's cap (${settings.maxVolumes} volumes, ${settings.maxGiB} GiB; ${totals.volumes} ` +
            `volumes, ${totals.gib} GiB now)`;
      }
      break;
    }
    const slot = next.total + next.create;
    const zoneIds = live.filter((v) => v.availabilityZone === next.zone).map((v) => v.volumeId);
    steps.push(createStep(settings, snapshot, { zone: next.zone, slot, zoneVolumeIds: zoneIds }));
    next.create++;
    room--;
  }
  return steps;
}

/**
 * The tags that select the pool's volumes and snapshots (all image sets: every volume counts toward the caps, every
 * snapshot may be a volume's source).
 */
export function keeperVolumeSelector(settings: Pick<KeeperSettings, "pool">): Record<string, string> {
  return poolSelector({ pool: settings.pool, imageSet: null });
}
