/**
 * What the kernel says is mounted and which loop devices exist. Cleanup works from these
 * observations, never from the lab's own records alone: after a crash the records may be
 * missing or behind, while the kernel's view is always current.
 */
import { readFile } from "node:fs/promises";
import { run } from "../exec.ts";
import type { Logger } from "../log.ts";

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
}

/** Parses `losetup -J -l -O NAME,BACK-FILE` output (empty output means no loop devices). */
export function parseLosetupJson(text: string): LoopDevice[] {
  if (!text.trim()) return [];
  const parsed = JSON.parse(text) as { loopdevices?: { name?: string; "back-file"?: string | null }[] };
  const devices: LoopDevice[] = [];
  for (const entry of parsed.loopdevices ?? []) {
    if (!entry.name || !entry["back-file"]) continue;
    devices.push({ device: entry.name, backingFile: entry["back-file"].replace(/ \(deleted\)$/, "") });
  }
  return devices;
}

/** Every configured loop device with its backing file. */
export async function listLoopDevices(log?: Logger): Promise<LoopDevice[]> {
  const result = await run("losetup", ["-J", "-l", "-O", "NAME,BACK-FILE"], {
    log,
    remediation: "install util-linux (losetup)",
  });
  return parseLosetupJson(result.stdout);
}

/** Whether `path` is `dir` itself or lies under it (plain string check on absolute paths). */
export function isUnder(path: string, dir: string): boolean {
  const prefix = dir.endsWith("/") ? dir : `${dir}/`;
  return path === dir || path.startsWith(prefix);
}
