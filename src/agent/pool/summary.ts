/**
 * The pool at a glance, for `pool` (src/cli/pool.ts): per pool and zone, the volumes by state and
 * by generation, their GiB and what they cost a month, the snapshots' cost, and the keeper's
 * target where the keeper stocks the zone. Pure: volumes and snapshots in, a serializable report
 * out (`pool --json`, schema/pool.schema.json).
 */
import { VolumeKind, VolumeTag } from "../../tags.ts";
import { isQuarantined } from "../boot/plan.ts";
import { compareGenerations, currentGeneration, generationName, isSuperseded, volumeGeneration, type Generation } from "../generation.ts";
import type { SnapshotInfo, VolumeInfo } from "../ports.ts";
import { snapshotMonthlyCost, usd, volumeMonthlyCost, type Prices } from "./cost.ts";
import { poolRows, type PoolRow } from "./rows.ts";

/** What `pool` needs of the configuration. */
export interface PoolViewSettings {
  /** `claim.quarantineHours`. */
  quarantineHours: number;
  prices: Prices;
  /** The configured pool and its image set: that pool's current generation is of this image set. */
  pool: string;
  imageSet: string | null;
  /** `keeper.*` when the keeper stocks zones of the configured pool (keeper.zones not empty), else null. */
  keeper: KeeperTarget | null;
}

export interface KeeperTarget {
  zones: readonly string[];
  minAvailable: number;
  maxAvailable: number;
  maxVolumes: number;
  maxGiB: number;
}

/** The view's settings from the configuration. */
export function poolViewSettingsFrom(config: {
  pool: string;
  imageSet: string | null;
  claim: { quarantineHours: number };
  cost: Prices;
  keeper: KeeperTarget;
}): PoolViewSettings {
  const { zones, minAvailable, maxAvailable, maxVolumes, maxGiB } = config.keeper;
  return {
    quarantineHours: config.claim.quarantineHours,
    prices: { ...config.cost },
    pool: config.pool,
    imageSet: config.imageSet,
    keeper: zones.length > 0 ? { zones: [...zones], minAvailable, maxAvailable, maxVolumes, maxGiB } : null,
  };
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
  snapshots: { completed: number; gib: number; monthlyUsd: number };
  /** The keeper's pool-wide caps beside what the pool holds, for the configured pool when the keeper runs. */
  keeper: { zones: string[]; minAvailable: number; maxAvailable: number; maxVolumes: number; maxGiB: number; volumes: number; gib: number } | null;
  volumes: number;
  gib: number;
  volumesMonthlyUsd: number;
  snapshotsMonthlyUsd: number;
  monthlyUsd: number;
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
  total: { volumes: number; gib: number; snapshots: number; snapshotGiB: number; volumesMonthlyUsd: number; snapshotsMonthlyUsd: number; monthlyUsd: number };
  /** Where an estimate is partial (a volume type priced by its GiB only). */
  notes: string[];
  volumes: PoolVolume[];
}

const noStates = (): StateCounts => ({ available: 0, inUse: 0, creating: 0, other: 0, quarantined: 0 });
const emptyTally = (): Tally => ({ volumes: 0, gib: 0, monthlyUsd: 0, states: noStates() });

function stateOf(volume: VolumeInfo, now: Date, quarantineHours: number): keyof StateCounts {
  if (volume.state === "in-use" || (volume.state === "available" && volume.attachment)) return "inUse";
  if (volume.state === "available") return isQuarantined(volume, now, quarantineHours) ? "quarantined" : "available";
  if (volume.state === "creating") return "creating";
  return "other";
}

function add(tally: Tally, state: keyof StateCounts, gib: number, monthlyUsd: number): void {
  tally.volumes += 1;
  tally.gib += gib;
  tally.monthlyUsd += monthlyUsd;
  tally.states[state] += 1;
}

function rounded<T extends Tally>(tally: T): T {
  return { ...tally, monthlyUsd: usd(tally.monthlyUsd) };
}

const iso = (d: Date | null) => d?.toISOString() ?? null;
const poolOf = (v: VolumeInfo) => v.tags[VolumeTag.pool] ?? "";

/** The report of the volumes and snapshots observePool() found. */
export function poolReport(observation: { volumes: readonly VolumeInfo[]; snapshots: readonly SnapshotInfo[] }, settings: PoolViewSettings, now: Date): PoolReport {
  const { volumes, snapshots } = observation;
  const { prices } = settings;
  const snapshotsById = new Map(snapshots.map((s) => [s.snapshotId, s]));
  const poolNames = [...new Set([...volumes.map(poolOf), ...snapshots.map((s) => s.tags[VolumeTag.pool] ?? "")])];
  if (settings.keeper && !poolNames.includes(settings.pool)) poolNames.push(settings.pool);
  const notes: string[] = [];

  const current = new Map<string, Generation | undefined>();
  for (const pool of poolNames) {
    const own = snapshots.filter((s) => (s.tags[VolumeTag.pool] ?? "") === pool && (s.tags[VolumeTag.kind] ?? VolumeKind.pool) === VolumeKind.pool);
    current.set(pool, currentGeneration(own, pool === settings.pool ? settings.imageSet : null));
  }

  const rows = new Map(poolRows(volumes, now, settings.quarantineHours).map((r) => [r.volumeId, r]));
  const detailed: PoolVolume[] = [];
  const pools: PoolSummary[] = poolNames.sort().map((pool) => {
    const cur = current.get(pool);
    const keeper = pool === settings.pool ? settings.keeper : null;
    const zones = new Map<string, { tally: Tally; groups: Map<string, GenerationGroup>; stock: number; availableStock: number }>();
    const zoneOf = (zone: string) => {
      let z = zones.get(zone);
      if (!z) zones.set(zone, (z = { tally: emptyTally(), groups: new Map(), stock: 0, availableStock: 0 }));
      return z;
    };
    for (const zone of keeper?.zones ?? []) zoneOf(zone);

    let poolVolumes = 0;
    let poolGiB = 0;
    let volumesUsd = 0;
    for (const v of volumes.filter((x) => poolOf(x) === pool)) {
      const state = stateOf(v, now, settings.quarantineHours);
      const cost = volumeMonthlyCost(v, prices);
      if (cost.note) notes.push(`${v.volumeId}: ${cost.note}`);
      const generation = volumeGeneration(v, snapshotsById);
      const name = generationName(generation);
      const superseded = isSuperseded(generation, cur);
      const kind = v.tags[VolumeTag.kind] ?? "?";
      const z = zoneOf(v.availabilityZone);
      add(z.tally, state, v.sizeGiB, cost.monthlyUsd);
      const key = `${kind} ${name}`;
      let group = z.groups.get(key);
      if (!group) {
        group = {
          kind,
          generation: name,
          imageSet: generation.imageSet,
          builtAt: iso(generation.builtAt),
          current: cur !== undefined && compareGenerations(generation, cur) === 0,
          superseded,
          ...emptyTally(),
        };
        z.groups.set(key, group);
      }
      add(group, state, v.sizeGiB, cost.monthlyUsd);
      if (kind === VolumeKind.pool && (state === "available" || state === "creating")) {
        z.stock += 1;
        if (state === "available") z.availableStock += 1;
      }
      poolVolumes += 1;
      poolGiB += v.sizeGiB;
      volumesUsd += cost.monthlyUsd;
      const row = rows.get(v.volumeId)!;
      detailed.push({
        ...row,
        volumeType: v.volumeType ?? null,
        iops: v.iops ?? null,
        throughputMiBps: v.throughputMiBps ?? null,
        generation: name,
        superseded,
        monthlyUsd: usd(cost.monthlyUsd),
      });
    }

    const completed = snapshots.filter((s) => (s.tags[VolumeTag.pool] ?? "") === pool && s.state === "completed");
    const snapshotsUsd = completed.reduce((sum, s) => sum + snapshotMonthlyCost(s, prices), 0);
    const zoneSummaries = [...zones.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([zone, z]): ZoneSummary => {
        const generations = [...z.groups.values()]
          .sort((a, b) => a.kind.localeCompare(b.kind) || compareGenerations(groupGeneration(a), groupGeneration(b)))
          .map(rounded);
        const inKeeper = keeper !== null && keeper.zones.includes(zone);
        return {
          zone,
          ...rounded(z.tally),
          generations,
          keeper: inKeeper
            ? {
                minAvailable: keeper.minAvailable,
                maxAvailable: keeper.maxAvailable,
                stock: z.stock,
                belowMin: Math.max(0, keeper.minAvailable - z.stock),
                aboveMax: Math.max(0, z.availableStock - keeper.maxAvailable),
              }
            : null,
        };
      });
    const poolKind = volumes.filter((v) => poolOf(v) === pool && v.tags[VolumeTag.kind] === VolumeKind.pool);
    return {
      pool,
      currentGeneration: cur ? { generation: generationName(cur), imageSet: cur.imageSet, builtAt: iso(cur.builtAt) } : null,
      zones: zoneSummaries,
      snapshots: { completed: completed.length, gib: completed.reduce((sum, s) => sum + s.volumeSizeGiB, 0), monthlyUsd: usd(snapshotsUsd) },
      keeper: keeper
        ? {
            zones: [...keeper.zones],
            minAvailable: keeper.minAvailable,
            maxAvailable: keeper.maxAvailable,
            maxVolumes: keeper.maxVolumes,
            maxGiB: keeper.maxGiB,
            // What the keeper's caps count: the pool's volumes of kind pool, every state.
            volumes: poolKind.length,
            gib: poolKind.reduce((sum, v) => sum + v.sizeGiB, 0),
          }
        : null,
      volumes: poolVolumes,
      gib: poolGiB,
      volumesMonthlyUsd: usd(volumesUsd),
      snapshotsMonthlyUsd: usd(snapshotsUsd),
      monthlyUsd: usd(volumesUsd + snapshotsUsd),
    };
  });

  // Totals from the unrounded figures, so they are not off by the sum of the rounding.
  const volumesUsd = volumes.reduce((sum, v) => sum + volumeMonthlyCost(v, prices).monthlyUsd, 0);
  const completed = snapshots.filter((s) => s.state === "completed");
  const snapshotsUsd = completed.reduce((sum, s) => sum + snapshotMonthlyCost(s, prices), 0);
  const order = new Map([...rows.keys()].map((id, i) => [id, i]));
  return {
    schemaVersion: 1,
    generatedAt: now.toISOString(),
    prices: { ...prices },
    pools,
    total: {
      volumes: volumes.length,
      gib: volumes.reduce((sum, v) => sum + v.sizeGiB, 0),
      snapshots: completed.length,
      snapshotGiB: completed.reduce((sum, s) => sum + s.volumeSizeGiB, 0),
      volumesMonthlyUsd: usd(volumesUsd),
      snapshotsMonthlyUsd: usd(snapshotsUsd),
      monthlyUsd: usd(volumesUsd + snapshotsUsd),
    },
    notes,
    volumes: detailed.sort((a, b) => order.get(a.volumeId)! - order.get(b.volumeId)!),
  };
}

function groupGeneration(group: GenerationGroup): Generation {
  return { imageSet: group.imageSet, builtAt: group.builtAt === null ? null : new Date(group.builtAt) };
}
