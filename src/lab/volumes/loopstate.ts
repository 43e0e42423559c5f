/**
 * The loop backend's record of attachments, kept in `<root>/state/loopdev.json` as well as in
 * memory, so that cleanup after a crash also finds device entries made outside the root (an
 * instance's hostRoot may live elsewhere). Cleanup never trusts it alone: loop devices and
 * mounts are found from the kernel's lists; this record only adds the links to remove.
 */
import { readFile, readlink, rm, unlink } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "../../fs-atomic.ts";
import { labPaths } from "../reaper/labdir.ts";

/** One attached volume, as recorded once its device appeared. */
export interface AttachmentRecord {
  volumeId: string;
  instanceId: string;
  hostRoot: string;
  /** `/dev/loopN` */
  device: string;
  /** `<hostRoot>/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol…` */
  link: string;
  /** `<hostRoot>/sys/class/block/loopN` */
  sysfsDir: string;
}

/** `<root>/state/loopdev.json` */
export function loopStatePath(root: string): string {
  return join(labPaths(root).state, "loopdev.json");
}

/** Reads the recorded attachments; an absent or unreadable file counts as none. */
export async function readAttachmentRecords(root: string): Promise<AttachmentRecord[]> {
  try {
    const parsed = JSON.parse(await readFile(loopStatePath(root), "utf8")) as { attachments?: unknown };
    if (!Array.isArray(parsed.attachments)) return [];
    return parsed.attachments.filter(isAttachmentRecord);
  } catch {
    return [];
  }
}

function isAttachmentRecord(value: unknown): value is AttachmentRecord {
  if (typeof value !== "object" || value === null) return false;
  const record = value as Record<string, unknown>;
  return ["volumeId", "instanceId", "hostRoot", "device", "link", "sysfsDir"].every(
    (key) => typeof record[key] === "string",
  );
}

/** Replaces the record file atomically: a crash leaves the old or the new one. */
export async function writeAttachmentRecords(root: string, records: readonly AttachmentRecord[]): Promise<void> {
  const path = loopStatePath(root);
  await writeFileAtomic(path, JSON.stringify({ attachments: records }, null, 2) + "\n");
}

/**
 * Removes an attachment's by-id link (only while it still points at the recorded device, so a
 * newer attachment's link is left alone) and its sysfs-like entry. Safe to repeat.
 */
export async function removeDeviceEntries(
  record: Pick<AttachmentRecord, "device" | "link" | "sysfsDir">,
): Promise<void> {
  try {
    if ((await readlink(record.link)) === record.device) await unlink(record.link);
  } catch {
    // Already gone (ENOENT) or not a link: nothing of ours to remove.
  }
  await rm(record.sysfsDir, { recursive: true, force: true });
}
