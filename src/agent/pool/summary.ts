/**
 * The pool at a glance, for `pool` (src/cli/pool.ts): per pool and zone, the volumes by state and
 * by generation, their GiB and what they cost a month, the snapshots' cost, and the keeper's
 * target where the keeper stocks the zone. Pure: volumes and snapshots in, a serializable report
 * out (`pool --json`, schema/pool.schema.json).
 */
import { SnapshotTag, VolumeKind, VolumeTag } from "../../tags.ts";
import {
  compareGenerations,
  currentGeneration,
  generationName,
  isQuarantined,
  isSuperseded,
  snapshotGeneration,
  volumeGeneration,
  type Generation,
} from "../volume-rules.ts";
import type { InstanceInfo, SnapshotInfo, VolumeInfo } from "../ports.ts";
import { snapshotMonthlyCost, usd, volumeMonthlyCost, type Prices } from "./cost.ts";
import { poolRows, type PoolRow } from "./rows.ts";
import { parseInstanceTypePools, stockedPools } from "../../config/instance-type-pools.ts";

/** What `pool` needs of the configuration. */
export interface PoolViewSettings {
  /** `claim.quarantineHours`. */
  quarantineHours: number;
  prices: Prices;
  /** The configured pool and its image set: that pool's current generation is of this image set. */
  pool: string;
  imageSet: string | null;
  /** `keeper.*` when the keeper stocks zones (keeper.zones not empty), else null: the target of each stocked pool. */
  keeper: KeeperTarget | null;
  /**
   * The pools the keeper stocks, each with its volume size: `pool` and each pool of config
   * `instanceTypePools` (only the listed one with `pool --pool`). Absent: `pool` alone.
   */
  stocked?: readonly StockedPool[];
}

/** A pool the keeper stocks, and the size of its volumes (null: its snapshot's). */
export interface StockedPool {
  pool: string;
  sizeGiB: number | null;
}

export interface KeeperTarget {
  zones: readonly string[];
  minAvailable: number;
  maxAvailable: number;
  maxVolumes: number;
  maxGiB: number;
}

/**
 * The view's settings from the configuration. `listed`: the one pool `pool --pool` lists; the
 * keeper's target shows only when the keeper stocks that pool (`pool` or a pool of
 * `instanceTypePools`).
 */
export function poolViewSettingsFrom(
  config: {
    pool: string;
    imageSet: string | null;
    claim: { quarantineHours: number };
    cost: Prices;
    keeper: KeeperTarget;
    instanceTypePools?: readonly string[];
  },
  listed?: string,
): PoolViewSettings {
  const { zones, minAvailable, maxAvailable, maxVolumes, maxGiB } = config.keeper;
  const stocked = stockedPools(config.pool, parseInstanceTypePools(config.instanceTypePools ?? []))
    .filter(({ pool }) => listed === undefined || listed === pool)
    .map(({ pool, sizeGiB }) => ({ pool, sizeGiB: sizeGiB ?? null }));
  const keeps = zones.length > 0 && stocked.length > 0;
  return {
    quarantineHours: config.claim.quarantineHours,
    prices: { ...config.cost },
    pool: config.pool,
    imageSet: config.imageSet,
    keeper: keeps ? { zones: [...zones], minAvailable, maxAvailable, maxVolumes, maxGiB } : null,
    stocked: keeps ? stocked : [],
  };
}

/** The pools the keeper stocks, by name, with their volume size (none when the keeper does not run). */
function stockedByName(settings: PoolViewSettings): Map<string, number | null> {
  if (!settings.keeper) return new Map();
  const stocked = settings.stocked ?? [{ pool: settings.pool, sizeGiB: null }];
  return new Map(stocked.map(({ pool, sizeGiB }) => [pool, sizeGiB]));
}

/**
 * How volumes count. `available`: what a boot may claim (available, unattached, not
 * quarantined); `quarantined`: available but out of the selection after a failed boot.
 */
export interface StateCounts {
  available: number;
  inUse: number;
  creating: number;
  other: number;
  quarantined: number;
}

export interface Tally {
  volumes: number;
  gib: number;
  monthlyUsd: number;
  states: StateCounts;
}

export interface GenerationGroup extends Tally {
  kind: string;
  /** generationName(): `set@built-at`. */
  generation: string;
  imageSet: string | null;
  builtAt: string | null;
  current: boolean;
  /** Older than the pool's current generation: boots pass it over, the keeper trims it first. */
  superseded: boolean;
}

export interface ZoneKeeper {
  minAvailable: number;
  maxAvailable: number;
  /** The keeper's stock: available + creating pool volumes. */
  stock: number;
  /** Volumes the zone lacks to reach minAvailable (the keeper creates them, caps allowing). */
  belowMin: number;
  /** Available volumes beyond maxAvailable (the keeper trims them). */
  aboveMax: number;
}

export interface ZoneSummary extends Tally {
  zone: string;
  generations: GenerationGroup[];
  keeper: ZoneKeeper | null;
}

export interface PoolSummary {
  pool: string;
  currentGeneration: { generation: string; imageSet: string | null; builtAt: string | null } | null;
  zones: ZoneSummary[];
  snapshots: {
    completed: number;
    gib: number;
    monthlyUsd: number;
    /**
     * The pool's snapshots tagged `ebs-cache:unverified`, oldest first: an upload that has not read
     * them back yet (running, or killed before its check) or found them wrong. None is ever the
     * current generation (isUsableSnapshot); each still costs what a snapshot costs.
     */
    unverified: UnverifiedSnapshot[];
  };
  /** The keeper's pool-wide caps beside what the pool holds, for each pool the keeper stocks. */
  keeper: {
    /** The size of the pool's volumes the keeper makes (config `instanceTypePools`); null: the snapshot's. */
    sizeGiB: number | null;
    zones: string[];
    minAvailable: number;
    maxAvailable: number;
    maxVolumes: number;
    maxGiB: number;
    volumes: number;
    gib: number;
  } | null;
  volumes: number;
  gib: number;
  volumesMonthlyUsd: number;
  snapshotsMonthlyUsd: number;
  monthlyUsd: number;
}

/** A snapshot the pool has that is not verified (`ebs-cache:unverified`): never its current generation. */
export interface UnverifiedSnapshot {
  snapshotId: string;
  /** EC2's state: `pending` while its upload puts blocks, `completed` once it completed it. */
  state: SnapshotInfo["state"];
  /** The generation it would carry once verified (generationName). */
  generation: string;
}

/** A volume's row, with what it is worth knowing about its generation and cost. */
export interface PoolVolume extends PoolRow {
  volumeType: string | null;
  iops: number | null;
  throughputMiBps: number | null;
  generation: string;
  superseded: boolean;
  monthlyUsd: number;
}

export interface PoolReport {
  schemaVersion: 1;
  generatedAt: string;
  prices: Prices;
  pools: PoolSummary[];
  total: {
    volumes: number;
    gib: number;
    snapshots: number;
    snapshotGiB: number;
    volumesMonthlyUsd: number;
    snapshotsMonthlyUsd: number;
    monthlyUsd: number;
  };
  /** Where an estimate is partial (a volume type priced by its GiB only). */
  notes: string[];
  volumes: PoolVolume[];
}

const noStates = (): StateCounts => ({ available: 0, inUse: 0, creating: 0, other: 0, quarantined: 0 });
const emptyTally = (): Tally => ({ volumes: 0, gib: 0, monthlyUsd: 0, states: noStates() });
const iso = (d: Date | null) => d?.toISOString() ?? null;
const poolOf = (tags: Readonly<Record<string, string>>) => tags[VolumeTag.pool] ?? "";
const sum = <T>(items: readonly T[], of: (item: T) => number) => items.reduce((total, item) => total + of(item), 0);

/** One volume as the summary counts it. */
interface Assessed {
  volume: VolumeInfo;
  kind: string;
  state: keyof StateCounts;
  /** Unrounded. */
  monthlyUsd: number;
  generation: Generation;
  current: boolean;
  superseded: boolean;
}

function stateOf(volume: VolumeInfo, now: Date, quarantineHours: number): keyof StateCounts {
  if (volume.state === "in-use" || (volume.state === "available" && volume.attachment)) return "inUse";
  if (volume.state === "available") return isQuarantined(volume, now, quarantineHours) ? "quarantined" : "available";
  if (volume.state === "creating") return "creating";
  return "other";
}

function count(tally: Tally, a: Assessed): void {
  tally.volumes += 1;
  tally.gib += a.volume.sizeGiB;
  tally.monthlyUsd += a.monthlyUsd;
  tally.states[a.state] += 1;
}

function rounded<T extends Tally>(tally: T): T {
  return { ...tally, monthlyUsd: usd(tally.monthlyUsd) };
}

/**
 * A pool's current generation: that of its current pool snapshot (currentSnapshot: the newest usable one; of the
 * configured image set, for the configured pool and each pool the keeper stocks, as the keeper and the boot choose).
 */
function currentOf(
  pool: string,
  snapshots: readonly SnapshotInfo[],
  settings: PoolViewSettings,
  stocked: ReadonlyMap<string, number | null>,
): Generation | undefined {
  const own = snapshots.filter((s) => (s.tags[VolumeTag.kind] ?? VolumeKind.pool) === VolumeKind.pool);
  return currentGeneration(own, pool === settings.pool || stocked.has(pool) ? settings.imageSet : null);
}

/** A zone's volumes in groups of one kind and generation, newest generation first. */
function generationGroups(assessed: readonly Assessed[]): GenerationGroup[] {
  const groups = new Map<string, GenerationGroup>();
  for (const a of assessed) {
    const name = generationName(a.generation);
    const key = `${a.kind} ${name}`;
    let group = groups.get(key);
    if (!group) {
      group = {
        kind: a.kind,
        generation: name,
        imageSet: a.generation.imageSet,
        builtAt: iso(a.generation.builtAt),
        current: a.current,
        superseded: a.superseded,
        ...emptyTally(),
      };
      groups.set(key, group);
    }
    count(group, a);
  }
  return [...groups.values()]
    .sort((x, y) => x.kind.localeCompare(y.kind) || compareGenerations(groupGeneration(x), groupGeneration(y)))
    .map(rounded);
}

function groupGeneration(group: GenerationGroup): Generation {
  return { imageSet: group.imageSet, builtAt: group.builtAt === null ? null : new Date(group.builtAt) };
}

/** The keeper's view of a zone: its stock is the available and creating pool volumes, as the keeper counts them. */
function zoneKeeper(assessed: readonly Assessed[], keeper: KeeperTarget): ZoneKeeper {
  const pool = assessed.filter((a) => a.kind === VolumeKind.pool);
  const available = pool.filter((a) => a.state === "available").length;
  const stock = available + pool.filter((a) => a.state === "creating").length;
  return {
    minAvailable: keeper.minAvailable,
    maxAvailable: keeper.maxAvailable,
    stock,
    belowMin: Math.max(0, keeper.minAvailable - stock),
    aboveMax: Math.max(0, available - keeper.maxAvailable),
  };
}

function summarizePool(
  pool: string,
  assessed: readonly Assessed[],
  snapshots: readonly SnapshotInfo[],
  current: Generation | undefined,
  keeper: (KeeperTarget & { sizeGiB: number | null }) | null,
  prices: Prices,
): PoolSummary {
  const zoneNames = [...new Set([...assessed.map((a) => a.volume.availabilityZone), ...(keeper?.zones ?? [])])].sort();
  const zones = zoneNames.map((zone): ZoneSummary => {
    const inZone = assessed.filter((a) => a.volume.availabilityZone === zone);
    const tally = emptyTally();
    for (const a of inZone) count(tally, a);
    return {
      zone,
      ...rounded(tally),
      generations: generationGroups(inZone),
      keeper: keeper?.zones.includes(zone) ? zoneKeeper(inZone, keeper) : null,
    };
  });
  const completed = snapshots.filter((s) => s.state === "completed");
  const volumesUsd = sum(assessed, (a) => a.monthlyUsd);
  const snapshotsUsd = sum(completed, (s) => snapshotMonthlyCost(s, prices));
  const byStart = (s: SnapshotInfo) => s.startTime?.getTime() ?? -Infinity;
  const unverified = snapshots
    .filter((s) => Object.hasOwn(s.tags, SnapshotTag.unverified))
    .sort((a, b) => byStart(a) - byStart(b) || a.snapshotId.localeCompare(b.snapshotId))
    .map((s) => ({ snapshotId: s.snapshotId, state: s.state, generation: generationName(snapshotGeneration(s)) }));
  // What the keeper's caps count: the pool's volumes of kind pool, every state.
  const poolKind = assessed.filter((a) => a.kind === VolumeKind.pool);
  return {
    pool,
    currentGeneration: current
      ? { generation: generationName(current), imageSet: current.imageSet, builtAt: iso(current.builtAt) }
      : null,
    zones,
    snapshots: {
      completed: completed.length,
      gib: sum(completed, (s) => s.volumeSizeGiB),
      monthlyUsd: usd(snapshotsUsd),
      unverified,
    },
    keeper: keeper
      ? { ...keeper, zones: [...keeper.zones], volumes: poolKind.length, gib: sum(poolKind, (a) => a.volume.sizeGiB) }
      : null,
    volumes: assessed.length,
    gib: sum(assessed, (a) => a.volume.sizeGiB),
    volumesMonthlyUsd: usd(volumesUsd),
    snapshotsMonthlyUsd: usd(snapshotsUsd),
    monthlyUsd: usd(volumesUsd + snapshotsUsd),
  };
}

/** The report of the volumes and snapshots observePool() found. */
export function poolReport(
  observation: {
    volumes: readonly VolumeInfo[];
    snapshots: readonly SnapshotInfo[];
    instances?: readonly InstanceInfo[];
  },
  settings: PoolViewSettings,
  now: Date,
): PoolReport {
  const { volumes, snapshots } = observation;
  const { prices } = settings;
  const snapshotsById = new Map(snapshots.map((s) => [s.snapshotId, s]));
  const poolNames = new Set([...volumes.map((v) => poolOf(v.tags)), ...snapshots.map((s) => poolOf(s.tags))]);
  const stocked = stockedByName(settings);
  for (const pool of stocked.keys()) poolNames.add(pool);
  const current = new Map(
    [...poolNames].map((pool) => [
      pool,
      currentOf(
        pool,
        snapshots.filter((s) => poolOf(s.tags) === pool),
        settings,
        stocked,
      ),
    ]),
  );

  const notes: string[] = [];
  const assessed = volumes.map((volume): Assessed => {
    const cost = volumeMonthlyCost(volume, prices);
    if (cost.note) notes.push(`${volume.volumeId}: ${cost.note}`);
    const generation = volumeGeneration(volume, snapshotsById);
    const cur = current.get(poolOf(volume.tags));
    return {
      volume,
      kind: volume.tags[VolumeTag.kind] ?? "?",
      state: stateOf(volume, now, settings.quarantineHours),
      monthlyUsd: cost.monthlyUsd,
      generation,
      current: cur !== undefined && compareGenerations(generation, cur) === 0,
      superseded: isSuperseded(generation, cur),
    };
  });
  const byId = new Map(assessed.map((a) => [a.volume.volumeId, a]));
  const pools = [...poolNames].sort().map((pool) =>
    summarizePool(
      pool,
      assessed.filter((a) => poolOf(a.volume.tags) === pool),
      snapshots.filter((s) => poolOf(s.tags) === pool),
      current.get(pool),
      settings.keeper && stocked.has(pool) ? { ...settings.keeper, sizeGiB: stocked.get(pool) ?? null } : null,
      prices,
    ),
  );

  // Totals from the unrounded figures, so they are not off by the sum of the rounding.
  const completed = snapshots.filter((s) => s.state === "completed");
  const volumesUsd = sum(assessed, (a) => a.monthlyUsd);
  const snapshotsUsd = sum(completed, (s) => snapshotMonthlyCost(s, prices));
  return {
    schemaVersion: 1,
    generatedAt: now.toISOString(),
    prices: { ...prices },
    pools,
    total: {
      volumes: volumes.length,
      gib: sum(volumes, (v) => v.sizeGiB),
      snapshots: completed.length,
      snapshotGiB: sum(completed, (s) => s.volumeSizeGiB),
      volumesMonthlyUsd: usd(volumesUsd),
      snapshotsMonthlyUsd: usd(snapshotsUsd),
      monthlyUsd: usd(volumesUsd + snapshotsUsd),
    },
    notes,
    volumes: poolRows(volumes, now, settings.quarantineHours, observation.instances ?? []).map((row): PoolVolume => {
      const { volume, generation, superseded, monthlyUsd } = byId.get(row.volumeId)!;
      return {
        ...row,
        volumeType: volume.volumeType ?? null,
        iops: volume.iops ?? null,
        throughputMiBps: volume.throughputMiBps ?? null,
        generation: generationName(generation),
        superseded,
        monthlyUsd: usd(monthlyUsd),
      };
    }),
  };
}
