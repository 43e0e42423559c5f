/**
 * The mount table (/proc/self/mountinfo), and mounting / unmounting a volume's filesystem. Both
 * are idempotent: mounting what is already mounted there, or unmounting what is not mounted,
 * succeeds without doing anything. Neither ever forces: no lazy or forced unmount.
 */
import { mkdir, readFile, realpath, stat } from "node:fs/promises";
import { isAbsolute, normalize } from "node:path";
import { AgentError, CommandError, describeError } from "../errors.ts";
import { run } from "../exec.ts";
import type { Logger } from "../log.ts";
import { assertDevicePath } from "./serial.ts";

/** One line of /proc/self/mountinfo. */
export interface MountEntry {
  mountId: number;
  parentId: number;
  /** `major:minor` of the mounted filesystem's device. */
  majorMinor: string;
  /** The folder of the filesystem shown at the target (`/` unless a bind mount of a subfolder). */
  root: string;
  target: string;
  options: string;
  fsType: string;
  source: string;
}

/** Something other than the expected device is mounted at the mount point. */
export class MountConflictError extends AgentError {
  readonly mountPoint: string;
  readonly device: string;
  readonly mounted: MountEntry;

  constructor(mountPoint: string, device: string, mounted: MountEntry) {
    super(
      `cannot mount ${device} at ${mountPoint}: ${mounted.source} ` +
        `(${mounted.fsType}${mounted.root === "/" ? "" : `, ${mounted.root}`}) is mounted there`,
      `find out what mounted ${mounted.source} at ${mountPoint} (findmnt ${mountPoint}) and unmount it, or ` +
        `configure another mount point`,
    );
    this.mountPoint = mountPoint;
    this.device = device;
    this.mounted = mounted;
  }
}

/** Options of the mount operations. */
export interface MountOptions {
  log?: Logger;
}

/** mountinfo escapes space, tab, newline and backslash as octal (`\040`). */
function unescapeField(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

/** Parses /proc/self/mountinfo text; malformed lines are skipped. */
export function parseMountInfo(text: string): MountEntry[] {
  const entries: MountEntry[] = [];
  for (const line of text.split("\n")) {
    const fields = line.split(" ");
    const separator = fields.indexOf("-", 6);
    if (separator < 0) continue;
    const [mountId, parentId, majorMinor, root, target, options] = fields;
    const fsType = fields[separator + 1];
    const source = fields[separator + 2];
    if (!mountId || !parentId || !majorMinor || !root || !target || !options || !fsType || source === undefined)
      continue;
    entries.push({
      mountId: Number(mountId),
      parentId: Number(parentId),
      majorMinor,
      root: unescapeField(root),
      target: unescapeField(target),
      options,
      fsType,
      source: unescapeField(source),
    });
  }
  return entries;
}

/** The mounts of this process's mount namespace, in mount order. */
export async function readMountTable(): Promise<MountEntry[]> {
  return parseMountInfo(await readFile("/proc/self/mountinfo", "utf8"));
}

/** `major:minor` of a block device node, as mountinfo writes it. */
export async function deviceNumber(device: string): Promise<string> {
  let info;
  try {
    info = await stat(device, { bigint: true });
  } catch (error) {
    throw new AgentError(
      `cannot stat ${device}: ${(error as Error).message}`,
      "check that the volume is attached (lsblk)",
      undefined,
      {
        cause: error,
      },
    );
  }
  if (!info.isBlockDevice())
    throw new AgentError(`${device} is not a block device`, "pass the volume's device (e.g. /dev/nvme1n1)");
  const rdev = info.rdev;
  // Linux's dev_t encoding (glibc gnu_dev_major / gnu_dev_minor).
  const major = ((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & ~0xfffn);
  const minor = (rdev & 0xffn) | ((rdev >> 12n) & ~0xffn);
  return `${major}:${minor}`;
}

/**
 * The canonical form of a mount point or a folder below one (what mountinfo shows); the path itself when it does not
 * exist.
 */
export async function canonicalPath(mountPoint: string): Promise<string> {
  assertMountPoint(mountPoint);
  try {
    return await realpath(mountPoint);
  } catch {
    return normalize(mountPoint);
  }
}

/** Mount points are absolute, normalized (no `..`), and never `/` itself. */
function assertMountPoint(mountPoint: string): void {
  const stripped = mountPoint.replace(/(.)\/+$/, "$1");
  if (!isAbsolute(stripped) || stripped.includes("\0") || normalize(stripped) !== stripped || stripped === "/") {
    throw new AgentError(
      `invalid mount point ${JSON.stringify(mountPoint)}`,
      "use an absolute, normalized folder path other than /",
    );
  }
}

/** What is visible at `mountPoint` now (the last of stacked mounts), if anything. */
export async function mountAt(mountPoint: string): Promise<MountEntry | undefined> {
  const target = await canonicalPath(mountPoint);
  return (await readMountTable()).filter((entry) => entry.target === target).at(-1);
}

/** Whether a mount entry is the whole filesystem of `device` (not a bind mount of a subfolder). */
function isWholeMountOf(entry: MountEntry, device: string, number: string): boolean {
  return entry.root === "/" && ((number !== "" && entry.majorMinor === number) || entry.source === device);
}

/**
 * Where the device's filesystem is mounted (the first such mount), if anywhere. Matched by device
 * number, or by source path when the node is gone (a filesystem can outlive its device node).
 */
export async function findMountPoint(device: string): Promise<string | undefined> {
  assertDevicePath(device);
  const number = await deviceNumber(device).catch(() => "");
  return (await readMountTable()).find((entry) => isWholeMountOf(entry, device, number))?.target;
}

/**
 * Mounts the device at `mountPoint` (created if missing) with noatime (and nouuid for XFS: the
 * type given, or probed); `readOnly`: `ro`, and for XFS `norecovery` too, since XFS replays a dirty
 * log even on a read-only mount, which writes to the device.
 * Nothing to do when the device is already mounted there; MountConflictError when something
 * else is.
 */
export async function mountDevice(
  device: string,
  mountPoint: string,
  options: MountOptions & { fsType?: string; readOnly?: boolean } = {},
): Promise<void> {
  const { log } = options;
  assertDevicePath(device);
  assertMountPoint(mountPoint);
  const number = await deviceNumber(device);
  await mkdir(mountPoint, { recursive: true });
  const target = await realpath(mountPoint);
  const present = await mountAt(target);
  if (present) {
    if (isWholeMountOf(present, device, number)) {
      log?.info("host.mount", "already mounted", { device, mountPoint: target });
      return;
    }
    throw new MountConflictError(target, device, present);
  }
  const elsewhere = await findMountPoint(device);
  if (elsewhere) log?.warning("host.mount", "the device is also mounted elsewhere", { device, elsewhere });
  // Volumes restored from one snapshot share their XFS UUID, and XFS refuses to mount a second
  // filesystem whose UUID is already mounted ("duplicate UUID"): with another clone of the pool's
  // snapshot mounted on the host (a pool volume being inspected, a workspace volume made from the
  // same snapshot; in the lab, every host on the one kernel) the cache volume could not be mounted.
  // The caller may know the type already (it just probed the device): no second probe.
  const fsType =
    options.fsType ??
    (await run("blkid", ["-p", "-o", "value", "-s", "TYPE", device], { check: false, log })).stdout.trim();
  const flags = options.readOnly ? ["ro", ...(fsType === "xfs" ? ["norecovery"] : [])] : ["noatime"];
  if (fsType === "xfs") flags.push("nouuid");
  await run("mount", ["-o", flags.join(","), device, target], {
    log,
    remediation: `check the filesystem on ${device} (dmesg; xfs_repair -n ${device} while unmounted)`,
  });
  const mounted = await mountAt(target);
  if (!mounted || !isWholeMountOf(mounted, device, number)) {
    throw new AgentError(`mount reported success but ${device} is not mounted at ${target}`, `check findmnt ${target}`);
  }
  if (options.readOnly && !mounted.options.split(",").includes("ro"))
    throw new AgentError(`${device} was to be mounted read-only at ${target} but is not`, `unmount ${target} now`);
  log?.info("host.mount", "mounted", { device, mountPoint: target, fsType: mounted.fsType });
}

/** Unmounts whatever is mounted at `mountPoint` (never lazily, never forced); nothing to do when nothing is. */
export async function unmountPath(mountPoint: string, options: MountOptions = {}): Promise<void> {
  const { log } = options;
  const target = await canonicalPath(mountPoint);
  // Stacked mounts come off one by one; the table bounds the loop.
  const stacked = (await readMountTable()).filter((entry) => entry.target === target).length;
  if (stacked === 0) {
    log?.debug("host.mount", "not mounted", { mountPoint: target });
    return;
  }
  for (let i = 0; i < stacked; i++) {
    await run("umount", [target], {
      log,
      remediation: `stop what still uses ${target} (fuser -vm ${target}; docker must be stopped first) and run again`,
    });
  }
  const left = await mountAt(target);
  if (left) throw new AgentError(`${target} is still mounted (${left.source}) after umount`, `check findmnt ${target}`);
  log?.info("host.mount", "unmounted", { mountPoint: target });
}

/**
 * Every place the filesystem of `device` is mounted (bind mounts of its subfolders included),
 * plus `mountPoint` when something is mounted there: what must come off before a detach.
 */
export async function mountPointsOf(device: string | undefined, mountPoint: string): Promise<string[]> {
  const target = await canonicalPath(mountPoint);
  if (device !== undefined) assertDevicePath(device);
  const number = device !== undefined ? await deviceNumber(device).catch(() => "") : "";
  const found = (await readMountTable())
    .filter(
      (entry) =>
        entry.target === target ||
        (device !== undefined && ((number !== "" && entry.majorMinor === number) || entry.source === device)),
    )
    .map((entry) => entry.target);
  // Deepest first: a mount below another comes off before it.
  return [...new Set(found)].sort((a, b) => b.length - a.length);
}

/** Runs a command (`run`; a fake in the unit test of the freeze-and-thaw sequence). */
export type CommandRunner = typeof run;

/**
 * Writes everything the filesystem holds to its device, in place: `fsfreeze --freeze` (which for
 * XFS also writes back the metadata that syncfs(2) leaves in the log only) then `--unfreeze`.
 * For a filesystem that is read raw after its unmount (`xfs_db -r`, a copy of the image): an
 * unmount removes the mount from this mount namespace only, and while any process on the host
 * holds a copy of the namespace made meanwhile (`unshare --mount`, a container), the
 * filesystem stays live and its unmount writes back nothing. Its device then shows the layout
 * as of the last writeback: an XFS root without the folders made since mkfs.
 *
 * A frozen filesystem holds every writer on it until thawed, so the thaw is attempted whenever
 * the freeze may have taken effect, and a thaw that fails is an error that says how to thaw by
 * hand.
 */
export async function settleFilesystem(
  mountPoint: string,
  options: MountOptions & { runCommand?: CommandRunner } = {},
): Promise<void> {
  assertMountPoint(mountPoint);
  const { log, runCommand = run } = options;
  try {
    await runCommand("fsfreeze", ["--freeze", mountPoint], {
      log,
      timeoutMs: 300_000,
      remediation: `check the device under ${mountPoint} (dmesg)`,
    });
  } catch (error) {
    // fsfreeze exits non-zero only when its FIFREEZE failed: not frozen by us (or already frozen by
    // someone else, EBUSY, whose freeze a thaw here would undo). Killed at its timeout instead, it
    // may have frozen the filesystem all the same (the ioctl runs to its end before the kill lands).
    if (!(error instanceof CommandError) || error.exitCode_ === undefined)
      await thawFilesystem(mountPoint, log, runCommand, { mayBeThawed: true });
    throw error;
  }
  await thawFilesystem(mountPoint, log, runCommand, { mayBeThawed: false });
}

/**
 * `fsfreeze --unfreeze`; a failure is an error saying the filesystem may be left frozen. With
 * `mayBeThawed` (a freeze that may not have happened), "Invalid argument" (not frozen) is no failure.
 */
async function thawFilesystem(
  mountPoint: string,
  log: Logger | undefined,
  runCommand: CommandRunner,
  { mayBeThawed }: { mayBeThawed: boolean },
): Promise<void> {
  let detail;
  try {
    const thawed = await runCommand("fsfreeze", ["--unfreeze", mountPoint], { log, timeoutMs: 300_000, check: false });
    if (thawed.exitCode === 0) return;
    const stderr = thawed.stderr.trim();
    if (mayBeThawed && /Invalid argument/.test(stderr)) return;
    detail = `exited with ${thawed.exitCode}${stderr ? `: ${stderr}` : ""}`;
  } catch (error) {
    detail = describeError(error);
  }
  throw new AgentError(
    `fsfreeze --unfreeze ${mountPoint} failed (${detail}): the filesystem may be left frozen, and every write to ` +
      `it waits until it is thawed`,
    `thaw it by hand: fsfreeze --unfreeze ${mountPoint} ("Invalid argument" there means it is not frozen); then ` +
      `check the device under ${mountPoint} (dmesg)`,
  );
}

/** Flushes one filesystem's dirty data and metadata to its device (`sync -f`, syncfs(2)). */
export async function syncFilesystem(mountPoint: string, options: MountOptions = {}): Promise<void> {
  assertMountPoint(mountPoint);
  await run("sync", ["-f", mountPoint], {
    log: options.log,
    timeoutMs: 300_000,
    remediation: `check the device under ${mountPoint} (dmesg)`,
  });
}
