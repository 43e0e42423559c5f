/**
 * What a device carries, making a filesystem on a blank one, and growing a mounted one.
 *
 * The probe errs on the side of "not blank": blkid's low-level probe, cross-checked with
 * `wipefs -n`, and a look at the first MiB (a blank EBS volume reads zeros). Any failure to probe
 * throws, because a device that could not be read must never be taken for blank: `blkid -p`
 * itself answers "nothing found" (exit 2) for a device it cannot even open.
 */
import { GROW_MARGIN_BYTES } from "../layout.ts";
import { open, stat } from "node:fs/promises";
import { AgentError } from "../errors.ts";
import { run } from "../exec.ts";
import type { DeviceContents } from "../agent/ports.ts";
import type { Logger } from "../log.ts";
import { assertDevicePath } from "./serial.ts";
import { mountAt } from "./mount.ts";

/** The device could not be probed: nothing may be formatted or mounted from it. */
export class ProbeError extends AgentError {
  readonly device: string;

  constructor(device: string, detail: string, options?: { cause?: unknown }) {
    super(
      `cannot tell what ${device} holds: ${detail}`,
      `check the device (lsblk -f ${device}; dmesg for I/O errors) and run the agent again; the agent never ` +
        `formats a device it could not probe`,
      undefined,
      options,
    );
    this.device = device;
  }
}

/** format() found something on the device: it refuses, whatever the caller believed. */
export class FormatRefusedError extends AgentError {
  readonly device: string;
  readonly found: DeviceContents;

  constructor(device: string, found: DeviceContents) {
    super(
      `refusing to format ${device}: it is not blank (${describeContents(found)})`,
      `inspect the device (lsblk -f ${device}; wipefs -n ${device}); the agent never formats a device that ` +
        `carries any signature`,
    );
    this.device = device;
    this.found = found;
  }
}

/** Options of the filesystem operations. */
export interface FilesystemOptions {
  log?: Logger;
}

/** blkid TYPE values that are filesystems even when USAGE is missing (older blkid). */
const FILESYSTEM_TYPES = new Set([
  "xfs",
  "ext2",
  "ext3",
  "ext4",
  "btrfs",
  "vfat",
  "exfat",
  "ntfs",
  "f2fs",
  "squashfs",
  "iso9660",
]);

/** How much of the start of a device must read back as zeros for it to count as blank. */
const ZERO_CHECK_BYTES = 1024 * 1024;

/** XFS labels: at most 12 bytes; kept to characters that need no quoting anywhere. */
const LABEL = /^[A-Za-z0-9_.-]{1,12}$/;

/** Parses `blkid -o export` output (`KEY=value` lines, with backslash escapes in values). */
export function parseBlkidExport(text: string): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const line of text.split("\n")) {
    const eq = line.indexOf("=");
    if (eq <= 0) continue;
    fields[line.slice(0, eq)] = line.slice(eq + 1).replace(/\\(.)/g, "$1");
  }
  return fields;
}

/** The signature types `wipefs -n -J` lists (empty output or an empty list: none). */
export function parseWipefsJson(text: string): string[] {
  if (text.trim() === "") return [];
  const parsed = JSON.parse(text) as { signatures?: unknown };
  if (!Array.isArray(parsed.signatures)) throw new Error("wipefs -J printed no signatures array");
  return parsed.signatures.map((entry: unknown) => {
    const type = (entry as { type?: unknown } | null)?.type;
    return typeof type === "string" ? type : "unknown";
  });
}

/** What blkid's fields say the device carries (fields of an exit-0 probe). */
export function contentsFromBlkid(fields: Record<string, string>): DeviceContents {
  const { TYPE: type, USAGE: usage, PTTYPE: ptType } = fields;
  // A partitioned disk is never mounted whole, even if a stray filesystem signature shows too.
  if (ptType) return { kind: "other", signature: `${ptType} partition table` };
  if (!type) return { kind: "other", signature: `unnamed signature (${Object.keys(fields).join(", ")})` };
  if (usage === "filesystem" || (usage === undefined && FILESYSTEM_TYPES.has(type))) {
    return {
      kind: "filesystem",
      type,
      ...(fields.LABEL ? { label: fields.LABEL } : {}),
      ...(fields.UUID ? { uuid: fields.UUID } : {}),
    };
  }
  return { kind: "other", signature: type };
}

/** One phrase for logs and errors. */
export function describeContents(contents: DeviceContents): string {
  switch (contents.kind) {
    case "blank":
      return "blank";
    case "filesystem":
      return `${contents.type} filesystem${contents.label ? ` labelled ${JSON.stringify(contents.label)}` : ""}`;
    case "other":
      return contents.signature;
  }
}

/**
 * Probes the device's signatures. Blank only when blkid finds nothing, wipefs finds nothing and
 * the first MiB reads as zeros; throws ProbeError when any of that cannot be established.
 */
export async function probeDevice(
  device: string,
  options: FilesystemOptions & { start?: Promise<Buffer> } = {},
): Promise<DeviceContents> {
  assertDevicePath(device);
  return probeSignatures(device, options.start ?? readDeviceStart(device), options);
}

/**
 * probeDevice's probe of a disk image file (`snapshot upload`'s image: a regular file, never a
 * device), with its first MiB as the caller read it.
 */
export async function probeImageFile(
  image: string,
  start: Promise<Buffer>,
  options: FilesystemOptions = {},
): Promise<DeviceContents> {
  return probeSignatures(image, start, options);
}

async function probeSignatures(
  device: string,
  startRead: Promise<Buffer>,
  options: FilesystemOptions,
): Promise<DeviceContents> {
  const { log } = options;
  // Three reads of the device, none of them writing: at once. Each is waited for, and judged in
  // this order, so that a failure reads as it did one after the other (and no probe outlives
  // the answer).
  const [start, blkidRun, wipefsRun] = await Promise.allSettled([
    startRead,
    run("blkid", ["-p", "-o", "export", device], { log, check: false }),
    run("wipefs", ["-n", "-J", device], { log, check: false }),
  ]);
  const allZero = isAllZero(settled(start));
  const blkid = settled(blkidRun);
  const wipefs = settled(wipefsRun);
  if (wipefs.exitCode !== 0)
    throw new ProbeError(device, `wipefs -n exited with ${wipefs.exitCode}: ${wipefs.stderr.trim()}`);
  let signatures: string[];
  try {
    signatures = parseWipefsJson(wipefs.stdout);
  } catch (error) {
    throw new ProbeError(device, `unreadable wipefs output: ${(error as Error).message}`, { cause: error });
  }
  let contents: DeviceContents;
  if (blkid.exitCode === 0) {
    contents = contentsFromBlkid(parseBlkidExport(blkid.stdout));
  } else if (blkid.exitCode === 2 && blkid.stderr.trim() === "") {
    if (signatures.length > 0)
      contents = { kind: "other", signature: `signatures only wipefs sees: ${signatures.join(", ")}` };
    else if (!allZero) contents = { kind: "other", signature: "unrecognized data (no signature, but not zeros)" };
    else contents = { kind: "blank" };
  } else if (blkid.exitCode === 8) {
    // Ambivalent: several signatures that contradict each other. Certainly not blank.
    contents = { kind: "other", signature: `several signatures: ${signatures.join(", ") || "see wipefs -n"}` };
  } else {
    throw new ProbeError(
      device,
      `blkid -p exited with ${blkid.exitCode}: ${blkid.stderr.trim() || blkid.stdout.trim()}`,
    );
  }
  log?.info("host.fs", "probed", { device, contents: describeContents(contents), signatures: signatures.join(",") });
  return contents;
}

/**
 * Makes an XFS filesystem (ftype=1 for overlay2, CRC metadata, the label) on a device a fresh
 * probe finds blank; refuses (FormatRefusedError) otherwise. Never forces (`-f`), so mkfs.xfs's
 * own signature check stands behind this one.
 */
export async function formatDevice(device: string, label: string, options: FilesystemOptions = {}): Promise<void> {
  const { log } = options;
  assertDevicePath(device);
  if (!LABEL.test(label))
    throw new AgentError(
      `invalid filesystem label ${JSON.stringify(label)}`,
      "use 1-12 letters, digits, '_', '.' or '-'",
    );
  const found = await probeDevice(device, options);
  if (found.kind !== "blank") throw new FormatRefusedError(device, found);
  log?.notice("host.fs", "formatting", { device, label });
  // -K: a blank volume has nothing to discard, and discarding a large EBS volume slows the boot.
  await run("mkfs.xfs", ["-K", "-L", label, "-m", "crc=1", "-n", "ftype=1", device], {
    log,
    remediation: `check the device (lsblk -f ${device}) and that xfsprogs is installed`,
  });
  const made = await probeDevice(device, options);
  if (made.kind !== "filesystem" || made.type !== "xfs" || made.label !== label) {
    throw new ProbeError(device, `after mkfs.xfs the device shows ${describeContents(made)}`);
  }
}

/** Size of the XFS filesystem mounted at `mountPoint`, from xfs_info's data section. */
export async function xfsDataBytes(mountPoint: string, options: FilesystemOptions = {}): Promise<number> {
  const { stdout } = await run("xfs_info", [mountPoint], { log: options.log });
  const match = /^data\s+=\s+bsize=(\d+)\s+blocks=(\d+)/m.exec(stdout);
  if (!match)
    throw new AgentError(`cannot read the data size from xfs_info ${mountPoint}`, "check the xfsprogs version");
  return Number(match[1]) * Number(match[2]);
}

/**
 * Grows the filesystem mounted at `mountPoint` to its device's size when the device is larger by
 * more than GROW_MARGIN_BYTES (EBS grows in GiB). XFS only; other types are left alone. Returns
 * whether the filesystem grew.
 */
export async function growFilesystem(mountPoint: string, options: FilesystemOptions = {}): Promise<boolean> {
  const { log } = options;
  const mount = await mountAt(mountPoint);
  if (!mount)
    throw new AgentError(`nothing is mounted at ${mountPoint}`, "mount the volume before growing its filesystem");
  if (mount.fsType !== "xfs") {
    log?.warning("host.fs", "growing is only done for xfs", { mountPoint, fsType: mount.fsType });
    return false;
  }
  assertDevicePath(mount.source);
  const device = Number((await run("blockdev", ["--getsize64", mount.source], { log })).stdout.trim());
  const before = await xfsDataBytes(mount.target, options);
  if (!Number.isSafeInteger(device) || device <= 0)
    throw new ProbeError(mount.source, "blockdev --getsize64 gave no size");
  if (device - before <= GROW_MARGIN_BYTES) {
    log?.debug("host.fs", "filesystem fills its device", { mountPoint, device, filesystem: before });
    return false;
  }
  log?.notice("host.fs", "growing the filesystem", { mountPoint, device, filesystem: before });
  await run("xfs_growfs", ["-d", mount.target], { log, remediation: `check dmesg and xfs_info ${mount.target}` });
  const after = await xfsDataBytes(mount.target, options);
  log?.info("host.fs", "filesystem grown", { mountPoint, before, after });
  return after > before;
}

function settled<T>(result: PromiseSettledResult<T>): T {
  if (result.status === "rejected") throw result.reason;
  return result.value;
}

function isAllZero(start: Buffer): boolean {
  return start.equals(Buffer.alloc(start.length));
}

/**
 * Drops the device's cached blocks (`blockdev --flushbufs`, BLKFLSBUF), so that the next buffered
 * reads (blkid, xfs_db, readDeviceStart) see the device. The kernel drops them itself when the
 * last opener closes the device; while a filesystem on it stays live (a copy of its mount in
 * another mount namespace), blocks read before its last writes stay cached, since a filesystem
 * writes around that cache.
 */
export async function dropDeviceCache(device: string, options: { log?: Logger } = {}): Promise<void> {
  assertDevicePath(device);
  await run("blockdev", ["--flushbufs", device], { log: options.log, remediation: "util-linux's blockdev, as root" });
}

/**
 * Opens and reads the first MiB of the device (what it holds there: zeros for a blank volume,
 * a superblock). Proves the device readable; throws ProbeError otherwise.
 */
export async function readDeviceStart(device: string): Promise<Buffer> {
  assertDevicePath(device);
  let handle;
  try {
    if (!(await stat(device)).isBlockDevice()) throw new Error("not a block device");
    handle = await open(device, "r");
    const buffer = Buffer.alloc(ZERO_CHECK_BYTES);
    let filled = 0;
    while (filled < buffer.length) {
      const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    if (filled === 0) throw new Error("the device reads as empty (size 0?)");
    return buffer.subarray(0, filled);
  } catch (error) {
    throw new ProbeError(device, (error as Error).message, { cause: error });
  } finally {
    await handle?.close();
  }
}
