/**
 * What the kernel says is mounted and which loop devices exist. Cleanup works from these
 * observations, never from the lab's own records alone: after a crash the records may be
 * missing or behind, while the kernel's view is always current.
 */
import { readFile } from "node:fs/promises";
import { run } from "../../exec.ts";
import type { Logger } from "../../log.ts";

/** One line of /proc/self/mountinfo, reduced to what cleanup needs. */
export interface MountEntry {
  target: string;
  source: string;
  fsType: string;
}

/** mountinfo escapes space, tab, newline and backslash as octal (`\040`). */
function unescapeMountField(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

/** Parses /proc/self/mountinfo text. */
export function parseMountInfo(text: string): MountEntry[] {
  const entries: MountEntry[] = [];
  for (const line of text.split("\n")) {
    if (!line) continue;
    const fields = line.split(" ");
    const separator = fields.indexOf("-", 6);
    const target = fields[4];
    const fsType = fields[separator + 1];
    const source = fields[separator + 2];
    if (separator < 0 || target === undefined || fsType === undefined || source === undefined) continue;
    entries.push({ target: unescapeMountField(target), source: unescapeMountField(source), fsType });
  }
  return entries;
}

/** The mounts of this process's mount namespace. */
export async function listMounts(): Promise<MountEntry[]> {
  return parseMountInfo(await readFile("/proc/self/mountinfo", "utf8"));
}

/** Mount points strictly below `dir`, deepest first (the order to unmount them in). */
export async function mountPointsUnder(dir: string): Promise<string[]> {
  return (await listMounts())
    .map((mount) => mount.target)
    .filter((target) => target !== dir && isUnder(target, dir))
    .sort((a, b) => b.length - a.length);
}

/** Whether something is mounted on `path`. */
export async function isMountPoint(path: string): Promise<boolean> {
  return (await listMounts()).some((mount) => mount.target === path);
}

/** A loop device and the file behind it. */
export interface LoopDevice {
  device: string;
  /** Backing file path, without the " (deleted)" the kernel appends once the file is unlinked. */
  backingFile: string;
  /**
   * The backing file's identity (`<major:minor of its filesystem>/<inode>`), when listed: unlike
   * its path, it stays the same when the mount holding the file is detached or the file renamed.
   */
  backingId?: string;
}

type LosetupEntry = {
  name?: string;
  "back-file"?: string | null;
  "back-ino"?: number | null;
  "back-maj:min"?: string | null;
};

/** Parses `losetup -J -l -O NAME,BACK-FILE[,BACK-INO,BACK-MAJ:MIN]` output (empty output means no loop devices). */
export function parseLosetupJson(text: string): LoopDevice[] {
  if (!text.trim()) return [];
  const parsed = JSON.parse(text) as { loopdevices?: LosetupEntry[] };
  const devices: LoopDevice[] = [];
  for (const entry of parsed.loopdevices ?? []) {
    if (!entry.name || !entry["back-file"]) continue;
    const inode = entry["back-ino"];
    const filesystem = entry["back-maj:min"]?.trim();
    devices.push({
      device: entry.name,
      backingFile: entry["back-file"].replace(/ \(deleted\)$/, ""),
      ...(typeof inode === "number" && filesystem ? { backingId: `${filesystem}/${inode}` } : {}),
    });
  }
  return devices;
}

const LOSETUP_COLUMNS = ["-J", "-l", "-O", "NAME,BACK-FILE,BACK-INO,BACK-MAJ:MIN"];

/** Every configured loop device with its backing file. */
export async function listLoopDevices(log?: Logger): Promise<LoopDevice[]> {
  const result = await run("losetup", LOSETUP_COLUMNS, {
    log,
    remediation: "install util-linux (losetup)",
  });
  return parseLosetupJson(result.stdout);
}

/** What backs one loop device now, or undefined when none is set up there. */
export async function currentLoop(device: string, log?: Logger): Promise<LoopDevice | undefined> {
  const result = await run("losetup", [...LOSETUP_COLUMNS, device], { log, check: false });
  if (result.exitCode !== 0) return undefined;
  return parseLosetupJson(result.stdout).find((loop) => loop.device === device);
}

/**
 * Whether `now` is still the loop device `listed` was: the same backing file, by identity when
 * both know it, else by path. A file on a mount that was unmounted since (a cold volume's FUSE
 * layer, whose dead process also hides the inode) shows the rest of its path from that mount's
 * root (`/vol-….img`): that tail of the listed path is the same file. Another lab's device shows
 * its own full path, which cannot be a tail of this one's.
 */
export function sameBacking(listed: LoopDevice, now: LoopDevice | undefined): boolean {
  if (!now) return false;
  if (listed.backingId && now.backingId) return listed.backingId === now.backingId;
  return (
    listed.backingFile === now.backingFile ||
    (now.backingFile.startsWith("/") && listed.backingFile.endsWith(now.backingFile))
  );
}

/**
 * Detaches a loop device listed earlier only while the same file still backs it: its number may
 * have been freed meanwhile (auto-clear after the unmount, another reaper) and taken by another
 * lab or a test running beside this one, whose device must not be pulled from under it (see
 * sameBacking: the path of a cold volume's file changes when its FUSE mount goes first).
 */
export async function detachLoop(loop: LoopDevice, log?: Logger): Promise<"detached" | "not ours" | "failed"> {
  const now = await currentLoop(loop.device, log);
  if (!sameBacking(loop, now)) {
    log?.info("lab.loop", "not detached: the device is no longer backed by the lab's file", {
      device: loop.device,
      was: loop.backingFile,
      now: now?.backingFile ?? "(none)",
    });
    return "not ours";
  }
  const result = await run("losetup", ["-d", loop.device], { log, check: false });
  if (result.exitCode === 0) return "detached";
  log?.warning("lab.loop", "could not detach loop device", { device: loop.device, error: result.stderr });
  return "failed";
}

/** Whether `path` is `dir` itself or lies under it (plain string check on absolute paths). */
export function isUnder(path: string, dir: string): boolean {
  const prefix = dir.endsWith("/") ? dir : `${dir}/`;
  return path === dir || path.startsWith(prefix);
}
