/**
 * The acceptance run, planned (pure): what it creates (a small volume from the pool's snapshot and
 * a blank one, in this zone), what that can cost at most, the tags that make a killed run's
 * leftovers findable (`ebs-cache:acceptance=<run id>`) and deletable by gc (managed, with an
 * `expires-at` an hour after creation, in EC2's time), the clean-up of earlier runs' leftovers, and
 * the calibration file made from what was measured (schema/ebs-model.schema.json; `blockKiB` is
 * left out: the run does not measure EBS's fetch unit, and its absence means the 512 KiB of EBS
 * snapshots).
 */
import { VolumeTag, TAG_PREFIX } from "../../tags.ts";
import type { Prices } from "../pool/cost.ts";
import type { VolumeInfo } from "../ports.ts";

/** Marks every volume an acceptance run creates, with the run's id as its value. */
export const ACCEPTANCE_TAG = `${TAG_PREFIX}acceptance`;
/** How long a run's volumes may live: past this, gc deletes what a killed run left (expires-at). */
export const ACCEPTANCE_LIFETIME_HOURS = 1;
/** The volumes' size: the smallest EBS allows for a volume from a snapshot is the snapshot's. */
export const BLANK_GIB = 1;
/** Hours in a month, as EBS's monthly prices count them. */
const HOURS_PER_MONTH = 730;

/** A volume the run will create. */
export interface AcceptanceVolume {
  role: "from-snapshot" | "blank";
  sizeGiB: number;
  volumeType: "gp3";
  availabilityZone: string;
  snapshotId?: string;
  tags: Record<string, string>;
}

export interface AcceptancePlan {
  runId: string;
  volumes: AcceptanceVolume[];
  /** The most the run's volumes can cost (USD), were they to live their whole lifetime. */
  costBoundUsd: number;
  /** The run's lines before it starts: every resource, the cost bound. */
  announcement: string[];
}

/** The tags of a run's volume: managed (the agent's policy and gc), the run, when gc may delete it. */
export function acceptanceTags(runId: string, cloudNow: Date): Record<string, string> {
  return {
    [VolumeTag.managed]: "true",
    [ACCEPTANCE_TAG]: runId,
    [VolumeTag.expiresAt]: new Date(cloudNow.getTime() + ACCEPTANCE_LIFETIME_HOURS * 3600_000).toISOString(),
  };
}

/** The run's volumes and cost bound, from the pool's current snapshot and this instance's zone. */
export function planAcceptance(input: {
  runId: string;
  zone: string;
  snapshot: { snapshotId: string; volumeSizeGiB: number };
  cloudNow: Date;
  prices: Pick<Prices, "gibMonthUsd">;
}): AcceptancePlan {
  const tags = acceptanceTags(input.runId, input.cloudNow);
  const volumes: AcceptanceVolume[] = [
    {
      role: "from-snapshot",
      sizeGiB: input.snapshot.volumeSizeGiB,
      volumeType: "gp3",
      availabilityZone: input.zone,
      snapshotId: input.snapshot.snapshotId,
      tags,
    },
    { role: "blank", sizeGiB: BLANK_GIB, volumeType: "gp3", availabilityZone: input.zone, tags },
  ];
  const gib = volumes.reduce((sum, v) => sum + v.sizeGiB, 0);
  const costBoundUsd = (gib * input.prices.gibMonthUsd * ACCEPTANCE_LIFETIME_HOURS) / HOURS_PER_MONTH;
  const announcement = [
    `acceptance run ${input.runId} in ${input.zone} will create, attach to this instance, read and delete:`,
    ...volumes.map(
      (v) =>
        `  a ${v.sizeGiB} GiB ${v.volumeType} volume ${v.snapshotId ? `from ${v.snapshotId}` : "(blank)"}, ` +
        `tagged ${ACCEPTANCE_TAG}=${input.runId}`,
    ),
    `cost bound: $${costBoundUsd.toFixed(4)} (${gib} GiB for at most ${ACCEPTANCE_LIFETIME_HOURS} h at ` +
      `$${input.prices.gibMonthUsd}/GiB-month; a killed run's volumes are deleted by the next run or by gc after ` +
      `${ACCEPTANCE_LIFETIME_HOURS} h)`,
  ];
  return { runId: input.runId, volumes, costBoundUsd, announcement };
}

/** One step of cleaning up what earlier (killed) runs left. */
export type CleanupStep =
  | { kind: "detach"; volumeId: string; reason: string }
  | { kind: "delete"; volumeId: string; reason: string }
  | { kind: "leave"; volumeId: string; reason: string };

/**
 * What to do with each volume tagged `ebs-cache:acceptance`: one attached here is detached (once
 * nothing mounts it: the caller checks) then deleted; an available one deleted; one attached to
 * another instance (its run may still go on) or not managed by the agent left alone.
 */
export function planCleanup(volumes: readonly VolumeInfo[], instanceId: string): CleanupStep[] {
  const steps: CleanupStep[] = [];
  for (const volume of volumes) {
    const run = volume.tags[ACCEPTANCE_TAG];
    const id = volume.volumeId;
    if (run === undefined) continue;
    if (volume.tags[VolumeTag.managed] !== "true") {
      steps.push({ kind: "leave", volumeId: id, reason: `tagged ${ACCEPTANCE_TAG} but not managed by the agent` });
    } else if (volume.attachment && volume.attachment.instanceId !== instanceId) {
      steps.push({ kind: "leave", volumeId: id, reason: `attached to ${volume.attachment.instanceId} (its run)` });
    } else if (volume.attachment) {
      steps.push({ kind: "detach", volumeId: id, reason: `run ${run} left it attached here` });
      steps.push({ kind: "delete", volumeId: id, reason: `run ${run} left it` });
    } else if (volume.state === "available") {
      steps.push({ kind: "delete", volumeId: id, reason: `run ${run} left it` });
    } else {
      steps.push({ kind: "leave", volumeId: id, reason: `${volume.state}: the next run takes it` });
    }
  }
  return steps;
}

/** What the run measured. */
export interface AcceptanceMeasurements {
  /** AttachVolume sent → the device identified by its NVMe serial (seconds), per volume. */
  attachSeconds: number[];
  /** Latencies (ms) of single first reads of never-read blocks, per queue depth. */
  firstReadMs: { qd1: number[]; qd8: number[]; qd32: number[] };
  /** Reads per second of never-read blocks at queue depth 32 and 1 (fio's IOPS). */
  firstReadIops: { qd1: number; qd32: number };
  /** Throughput of the initialized volume (MiB/s). */
  warmThroughputMiBps: number;
}

/** The middle value (the mean of the two middle ones for an even count). */
export function median(values: readonly number[]): number {
  if (values.length === 0) throw new RangeError("no value to take the median of");
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

const round = (value: number, digits: number) => Number(value.toFixed(digits));

/**
 * The calibration file (schema/ebs-model.schema.json, origin measured). Concurrency, the first
 * reads EBS serves at once, is how much more a depth of 32 reads per second than a depth of 1
 * (32 at most, 1 at least): reads beyond it wait.
 */
export function calibrationOf(
  measured: AcceptanceMeasurements,
  where: { instanceType: string; region: string; date: Date; runId: string; note?: string },
): Record<string, unknown> {
  const concurrency = Math.min(32, Math.max(1, Math.round(measured.firstReadIops.qd32 / measured.firstReadIops.qd1)));
  return {
    schemaVersion: 1,
    origin: "measured",
    source: `ebs-cache-agent acceptance run ${where.runId}${where.note ? `: ${where.note}` : ""}`,
    instanceType: where.instanceType,
    region: where.region,
    date: where.date.toISOString(),
    attachSeconds: round(median(measured.attachSeconds), 3),
    firstReadLatencyMs: {
      qd1: round(median(measured.firstReadMs.qd1), 3),
      qd8: round(median(measured.firstReadMs.qd8), 3),
      qd32: round(median(measured.firstReadMs.qd32), 3),
    },
    concurrency,
    warmThroughputMiBps: round(measured.warmThroughputMiBps, 1),
  };
}
