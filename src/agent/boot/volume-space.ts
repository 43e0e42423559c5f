/**
 * A full volume is not a broken one. When a step on the volume fails, the error's class
 * (src/disk-errors.ts) and the volume's fill, measured right after the failure, tell a
 * filesystem with no room left (the volume is handed back unquarantined: a workspace stays its
 * user's, a pool volume stays in the pool) from one the kernel made read-only (XFS shuts a
 * filesystem down after a metadata I/O error or corruption: a broken volume, quarantined) and from
 * a full disk elsewhere (the host's: not the volume's fault). Pure.
 */
import { describeDiskError, type DiskErrorKind } from "../../disk-errors.ts";
import type { FilesystemFill } from "../ports.ts";

/**
 * Below this much free space (or with no free inode) a filesystem counts as full: docker's start
 * and the agent's marker need little, but a data-root with less than this cannot take a container's
 * first writes.
 */
export const FULL_BELOW_BYTES = 64 * 1024 ** 2;

/** Whether the fill is that of a full filesystem (FULL_BELOW_BYTES). */
export function isFilesystemFull(fill: Pick<FilesystemFill, "availableBytes" | "inodes" | "freeInodes">): boolean {
  return fill.availableBytes < FULL_BELOW_BYTES || (fill.inodes > 0 && fill.freeInodes === 0);
}

/** `12 MiB free of 2.0 GiB`, for a reason. */
export function describeFill(fill: Pick<FilesystemFill, "availableBytes" | "sizeBytes">): string {
  const mib = Math.floor(fill.availableBytes / 1024 ** 2);
  return `${mib} MiB free of ${(fill.sizeBytes / 1024 ** 3).toFixed(1)} GiB`;
}

/** What a failure on the volume turns out to be, when space or writability explains it. */
export type SpaceFailure =
  /** The volume's filesystem has no room: handed back unquarantined, never a quarantine. */
  | { kind: "volume-full"; detail: string }
  /** No room, and the volume has plenty: the host's disk (docker's run or containerd's folders). */
  | { kind: "host-full"; detail: string }
  /** The volume's filesystem takes no write: the kernel's verdict on a broken volume. */
  | { kind: "read-only"; detail: string };

/**
 * Judges a failed step. `onVolume`: a step that writes only on the volume (prepare-data-root and
 * the other volume steps), whose no-space is the volume's whatever its fill says (XFS refuses an
 * inode chunk on fragmented free space while df shows room); otherwise a step of docker on the
 * volume, whose no-space is the volume's only when the volume is full (or its fill unknown).
 */
export function judgeSpace(
  errorKind: DiskErrorKind | undefined,
  fill: FilesystemFill | undefined,
  options: { onVolume: boolean },
): SpaceFailure | undefined {
  if (errorKind === "read-only" && options.onVolume)
    return { kind: "read-only", detail: "its filesystem is read-only" };
  if (fill && isFilesystemFull(fill))
    return { kind: "volume-full", detail: `its filesystem is full (${describeFill(fill)})` };
  if (errorKind !== "no-space") return undefined;
  if (options.onVolume || !fill)
    return {
      kind: "volume-full",
      detail: `its filesystem has ${describeDiskError(errorKind)}${fill ? ` (${describeFill(fill)})` : ""}`,
    };
  return {
    kind: "host-full",
    detail: `${describeDiskError(errorKind)} on the host, not on the volume (${describeFill(fill)})`,
  };
}
