/** The pool and workspace volumes as rows, one a volume, for `ebs-cache-agent pool` (src/cli/pool.ts). Pure. */
import { VolumeTag } from "../../tags.ts";
import { isQuarantined } from "../volume-rules.ts";
import { workspaceIdsOfVolume, type WorkspaceIds } from "../workspace-ids.ts";
import type { InstanceInfo, VolumeInfo } from "../ports.ts";
import { volumesHeldByStopped } from "./stopped.ts";

export interface PoolRow {
  volumeId: string;
  kind: string;
  pool: string;
  zone: string;
  state: string;
  sizeGiB: number;
  claimedBy: string | null;
  /** Age in hours since creation (null when EC2 gave no time). */
  ageHours: number | null;
  /** ISO time, `never` (kept), or null (no expiry set). */
  expires: string | null;
  /** The ids a workspace volume was made for (`user-id`, `project-id`, …), or null. */
  workspace: WorkspaceIds | null;
  /** The last instance's error when it gave the volume back (`last-error`), or null. */
  lastError: { message: string; at: string | null; quarantined: boolean } | null;
  /** Attached to a stopped instance: which, and since when (null: EC2 does not say); null when not. */
  heldByStopped: { instanceId: string; since: string | null; days: number | null } | null;
}

/** Rows of the volumes; `quarantineHours` (config `claim.quarantineHours`) tells which are out of the selection. */
export function poolRows(
  volumes: readonly VolumeInfo[],
  now: Date,
  quarantineHours: number,
  instances: readonly InstanceInfo[] = [],
): PoolRow[] {
  const held = new Map(volumesHeldByStopped(volumes, instances, now).map((h) => [h.volumeId, h]));
  return volumes
    .map((v): PoolRow => {
      const stopped = held.get(v.volumeId);
      const tags = v.tags;
      const lastError = tags[VolumeTag.lastError];
      return {
        volumeId: v.volumeId,
        kind: tags[VolumeTag.kind] ?? "?",
        pool: tags[VolumeTag.pool] ?? "",
        zone: v.availabilityZone,
        state: v.attachment ? `${v.state} (${v.attachment.state})` : v.state,
        sizeGiB: v.sizeGiB,
        claimedBy: v.attachment?.instanceId ?? tags[VolumeTag.claimedBy] ?? null,
        ageHours: v.createTime ? Math.max(0, (now.getTime() - v.createTime.getTime()) / 3600_000) : null,
        expires: tags[VolumeTag.keep] === "true" ? "never" : (tags[VolumeTag.expiresAt] ?? null),
        workspace: workspaceIdsOfVolume(tags) ?? null,
        lastError:
          lastError !== undefined
            ? {
                message: lastError,
                at: tags[VolumeTag.lastErrorAt] ?? null,
                quarantined: isQuarantined(v, now, quarantineHours),
              }
            : null,
        heldByStopped: stopped
          ? { instanceId: stopped.instanceId, since: stopped.stoppedSince, days: stopped.stoppedDays }
          : null,
      };
    })
    .sort(
      (a, b) =>
        a.pool.localeCompare(b.pool) ||
        a.kind.localeCompare(b.kind) ||
        a.zone.localeCompare(b.zone) ||
        a.volumeId.localeCompare(b.volumeId),
    );
}
