/**
 * What a volume or snapshot costs a month at the configured prices (`cost.*`). An estimate for
 * `pool`, not a bill: list prices, a whole month, no discounts. Pure.
 *
 * Only gp3 is priced in full (storage, and IOPS and throughput above its free baseline), since
 * it is what the agent and the keeper create. Another type is priced by its GiB at the same
 * price and carries a note, so an operator sees that its figure is a floor, not an answer.
 */
import type { SnapshotInfo, VolumeInfo } from "../ports.ts";

/** The `cost` config group: USD per month. */
export interface Prices {
  /** Per provisioned GiB-month. */
  gibMonthUsd: number;
  /** Per provisioned IOPS-month of gp3 above GP3_FREE_IOPS. */
  iopsMonthUsd: number;
  /** Per provisioned MiB/s-month of gp3 above GP3_FREE_THROUGHPUT_MIBPS. */
  throughputMonthUsd: number;
  /** Per GiB-month of a standard-tier snapshot. */
  snapshotGibMonthUsd: number;
}

/** What every gp3 volume gets without paying for it (EBS's baseline). */
export const GP3_FREE_IOPS = 3000;
export const GP3_FREE_THROUGHPUT_MIBPS = 125;

export interface VolumeCost {
  /** Storage + IOPS + throughput, unrounded (round once, at the total: usd()). */
  monthlyUsd: number;
  storageUsd: number;
  iopsUsd: number;
  throughputUsd: number;
  /** Why the figure is partial, when it is (a type other than gp3). */
  note?: string;
}

/** A volume's monthly cost: its GiB, and for gp3 the IOPS and throughput provisioned above the baseline. */
export function volumeMonthlyCost(
  volume: Pick<VolumeInfo, "sizeGiB" | "volumeType" | "iops" | "throughputMiBps">,
  prices: Prices,
): VolumeCost {
  const storageUsd = volume.sizeGiB * prices.gibMonthUsd;
  const type = volume.volumeType;
  if (type !== undefined && type !== "gp3") {
    const provisioned = type === "io1" || type === "io2" ? " and provisioned IOPS" : "";
    return {
      monthlyUsd: storageUsd,
      storageUsd,
      iopsUsd: 0,
      throughputUsd: 0,
      note: `${type}: priced per GiB at cost.gibMonthUsd only; ${type}'s own GiB price${provisioned} not counted`,
    };
  }
  const iopsUsd = Math.max(0, (volume.iops ?? GP3_FREE_IOPS) - GP3_FREE_IOPS) * prices.iopsMonthUsd;
  const throughputUsd =
    Math.max(0, (volume.throughputMiBps ?? GP3_FREE_THROUGHPUT_MIBPS) - GP3_FREE_THROUGHPUT_MIBPS) *
    prices.throughputMonthUsd;
  return {
    monthlyUsd: storageUsd + iopsUsd + throughputUsd,
    storageUsd,
    iopsUsd,
    throughputUsd,
    ...(type === undefined ? { note: "type not reported: priced as gp3" } : {}),
  };
}

/**
 * A snapshot's monthly cost at its volume size. EBS bills only the blocks a snapshot stores
 * (incremental, compressed), which EC2 does not report: this is the most it can cost.
 */
export function snapshotMonthlyCost(snapshot: Pick<SnapshotInfo, "volumeSizeGiB">, prices: Prices): number {
  return snapshot.volumeSizeGiB * prices.snapshotGibMonthUsd;
}

/** Dollars to whole cents, as reported: sums are made unrounded and rounded once. */
export function usd(amount: number): number {
  return Math.round((amount + Number.EPSILON) * 100) / 100;
}

/** `12.30` for people (no currency sign: the column or line says USD). */
export function formatUsd(amount: number): string {
  return usd(amount).toFixed(2);
}
