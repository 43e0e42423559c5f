/**
 * DescribeVolumeStatus, including the initialization of volumes made from snapshots: with a
 * VolumeInitializationRate (provisioned-rate) progress grows linearly from the creation time
 * at that rate over the snapshot's size; without one (default) progress is what the storage
 * has fetched so far (the lab's cold layer: warm chunks / all chunks), as EBS reports the
 * blocks it has loaded from S3, and 100 % where the storage does not track it. A test can hold
 * provisioned-rate progress (Ec2Emulator.holdInitialization).
 */
import { applyFilters, type FilterFields } from "../filters.ts";
import type { VolumeRecord } from "../model.ts";
import { paginate } from "../pagination.ts";
import type { XmlObject } from "../xml.ts";
import {
  checkVolumeId,
  lookupVolume,
  pickByIds,
  visibleVolumes,
  type ActionContext,
  type ActionHandler,
} from "./context.ts";

/** Initialization progress of a volume, or undefined for a volume not made from a snapshot. */
export function initialization(
  volume: VolumeRecord,
  speedup: number,
  now: number,
  fetched?: { done: number; total: number },
  heldMs = 0,
): { type: "default" | "provisioned-rate"; progress: number; etaSeconds: number | undefined } | undefined {
  if (volume.snapshotId === null) return undefined;
  if (volume.initializationRate === null || volume.sourceSizeGiB === null) {
    // EC2 gives no time estimate for default initialization: it depends on how the volume is read.
    const progress =
      fetched === undefined || fetched.total <= 0
        ? 100
        : Math.max(0, Math.min(100, Math.floor((fetched.done * 100) / fetched.total)));
    return { type: "default", progress, etaSeconds: undefined };
  }
  const totalMiB = volume.sourceSizeGiB * 1024;
  // Time under a hold (see ../initialization-hold.ts) does not count.
  const elapsedSeconds = Math.max(0, (now - Date.parse(volume.createTime) - heldMs) / 1000) * speedup;
  const doneMiB = Math.min(totalMiB, elapsedSeconds * volume.initializationRate);
  // The epsilons keep floating-point noise (e.g. 59.999…) from moving a value across an integer.
  const progress = totalMiB === 0 ? 100 : Math.floor((doneMiB * 100) / totalMiB + 1e-9);
  const etaSeconds = Math.max(0, Math.ceil((totalMiB - doneMiB) / volume.initializationRate / speedup - 1e-9));
  return { type: "provisioned-rate", progress, etaSeconds };
}

/** A volume's initialization as the emulator reports it now. */
function initializationOf(ctx: ActionContext, volume: VolumeRecord) {
  const fetched =
    volume.snapshotId !== null && volume.initializationRate === null
      ? ctx.lifecycle.initializationProgress(volume.volumeId)
      : undefined;
  const now = ctx.now();
  const heldMs = ctx.initializationHold.heldMs(Date.parse(volume.createTime), now);
  return initialization(volume, ctx.initializationSpeedup, now, fetched, heldMs);
}

function statusItem(ctx: ActionContext, volume: VolumeRecord): XmlObject {
  const init = initializationOf(ctx, volume);
  // A backend failure shows as impaired I/O, so whoever watches status sees something is wrong.
  const impaired = volume.error !== null;
  const details: XmlObject[] = [
    { name: "io-enabled", status: impaired ? "failed" : "passed" },
    { name: "io-performance", status: "not-applicable" },
  ];
  if (init) details.push({ name: "initialization-state", status: init.progress >= 100 ? "completed" : "initializing" });
  return {
    volumeId: volume.volumeId,
    availabilityZone: volume.availabilityZone,
    volumeStatus: { status: impaired ? "impaired" : "ok", details },
    actionsSet: [],
    eventsSet: [],
    attachmentStatuses: volume.attachment
      ? [{ instanceId: volume.attachment.instanceId, ioPerformance: "normal" }]
      : undefined,
    initializationStatusDetails: init
      ? { initializationType: init.type, progress: init.progress, estimatedTimeToCompleteInSeconds: init.etaSeconds }
      : undefined,
  };
}

/** The DescribeVolumeStatus filters this emulator supports. */
const STATUS_FILTERS: FilterFields<VolumeRecord> = {
  "availability-zone": (v) => [v.availabilityZone],
  "volume-status.status": (v) => [v.error !== null ? "impaired" : "ok"],
  "volume-status.details-name": (v) => [
    "io-enabled",
    "io-performance",
    ...(v.snapshotId !== null ? ["initialization-state"] : []),
  ],
  "volume-status.details-status": (v) => [v.error !== null ? "failed" : "passed", "not-applicable"],
};

export const describeVolumeStatus: ActionHandler = (ctx, params) => {
  const ids = params.list("VolumeId");
  const limits = { min: 5, max: 1000, idsParam: "VolumeId", idsName: "volumeSet" };
  paginate([], params, limits);
  const selected =
    ids.length > 0
      ? pickByIds(ids, (id) => lookupVolume(ctx, params.action, id), checkVolumeId, "InvalidVolume.NotFound", "volume")
      : visibleVolumes(ctx, params.action).filter((v) => v.state !== "deleting");
  const page = paginate(applyFilters(selected, params.filters(), STATUS_FILTERS), params, limits);
  return { volumeStatusSet: page.items.map((v) => statusItem(ctx, v)), nextToken: page.nextToken };
};
