/** CreateSnapshot, DescribeSnapshots, DeleteSnapshot. */
import { Ec2Error } from "../ec2-error.ts";
import { applyFilters, type FilterFields } from "../filters.ts";
import { newId, OWNER_ID } from "../ids.ts";
import type { SnapshotRecord } from "../model.ts";
import { paginate } from "../pagination.ts";
import { renderSnapshot, snapshotProgress } from "../render.ts";
import {
  checkSnapshotId,
  getSnapshot,
  getVolume,
  isoNow,
  pickByIds,
  tagsFromSpecifications,
  type ActionContext,
  type ActionHandler,
} from "./context.ts";

function render(ctx: ActionContext, snapshot: SnapshotRecord) {
  return renderSnapshot(snapshot, snapshotProgress(snapshot, ctx.delays.snapshotMs, ctx.now()));
}

export const createSnapshot: ActionHandler = (ctx, params) => {
  const volume = getVolume(ctx, params.required("VolumeId"), params.action);
  if (volume.state !== "available" && volume.state !== "in-use") {
    throw new Ec2Error("IncorrectState", `The volume '${volume.volumeId}' is '${volume.state}'.`);
  }
  const tags = tagsFromSpecifications(params.tagSpecifications(), "snapshot");
  const snapshot: SnapshotRecord = {
    snapshotId: newId("snapshot"),
    seq: ctx.store.nextSeq(),
    volumeId: volume.volumeId,
    volumeSize: volume.sizeGiB,
    state: "pending",
    startTime: isoNow(ctx),
    completionTime: null,
    description: params.str("Description") ?? "",
    tags,
    // A snapshot of an encrypted volume is encrypted with the volume's key.
    ...(volume.encrypted ? { encrypted: true, kmsKeyId: volume.kmsKeyId ?? null } : {}),
    error: null,
  };
  ctx.store.model.snapshots[snapshot.snapshotId] = snapshot;
  ctx.store.commit();
  ctx.lifecycle.snapshotStarted(snapshot.snapshotId);
  return render(ctx, snapshot);
};

/** The DescribeSnapshots filters (besides `tag:<key>`, `tag-key`, `tag-value`). */
const SNAPSHOT_FILTERS = (ctx: ActionContext): FilterFields<SnapshotRecord> => ({
  "snapshot-id": (s) => [s.snapshotId],
  "volume-id": (s) => [s.volumeId],
  status: (s) => [s.state],
  "volume-size": (s) => [s.volumeSize],
  description: (s) => [s.description],
  "owner-id": () => [OWNER_ID],
  "start-time": (s) => [s.startTime],
  progress: (s) => [snapshotProgress(s, ctx.delays.snapshotMs, ctx.now())],
  encrypted: (s) => [s.encrypted === true],
  "storage-tier": () => ["standard"],
});

export const describeSnapshots: ActionHandler = (ctx, params) => {
  const ids = params.list("SnapshotId");
  const limits = { min: 5, max: 1000, idsParam: "SnapshotId", idsName: "snapshotSet" };
  paginate([], params, limits);
  // Every snapshot here is the emulated account's own: `self` or the account id select them,
  // any other owner (e.g. `amazon`) selects none.
  const owners = [...params.list("Owner"), ...params.list("OwnerId")];
  const ours = owners.length === 0 || owners.some((o) => o === "self" || o === OWNER_ID);
  let selected =
    ids.length > 0
      ? pickByIds(ids, (id) => ctx.store.snapshot(id), checkSnapshotId, "InvalidSnapshot.NotFound", "snapshot")
      : ctx.store.snapshots();
  if (!ours) selected = [];
  const page = paginate(
    applyFilters(selected, params.filters(), SNAPSHOT_FILTERS(ctx), (s) => s.tags),
    params,
    limits,
  );
  return { snapshotSet: page.items.map((s) => render(ctx, s)), nextToken: page.nextToken };
};

export const deleteSnapshot: ActionHandler = (ctx, params) => {
  const snapshot = getSnapshot(ctx, params.required("SnapshotId"));
  // Volumes still being made from it are left alone: the backend deletes the image only
  // after their copies are done (see Lifecycle.snapshotDeleted).
  delete ctx.store.model.snapshots[snapshot.snapshotId];
  ctx.store.commit();
  ctx.lifecycle.snapshotDeleted(snapshot.snapshotId);
  return { return: true };
};
