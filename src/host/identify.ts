/**
 * Positive identification of the agent's own cache filesystem, before anything writes to a
 * volume. "Ours" means: XFS, labelled FS_LABEL, with ftype=1 (overlay2 needs it and the agent
 * always formats with it), holding the data-root folder DATA_ROOT_SUBDIR at its root. A volume
 * the agent created blank and formatted itself (tag created-by=agent) may not hold the data-root
 * yet: its root must then be empty but for the agent's own folder. Anything else (another label
 * or filesystem, a partition table, LVM, LUKS, RAID, swap, garbage, a failed probe) is foreign:
 * it is refused with ForeignVolumeError and never mounted read-write, grown, or log-replayed.
 *
 * The layout is read with `xfs_db -r`, not with a mount. xfs_db opens the device read-only in
 * user space and never replays the log, whereas a kernel mount replays a dirty XFS log even
 * with `-o ro` (only `ro,norecovery` does not); it also leaves no mount behind if the agent is
 * killed, does not care about clones sharing one UUID, and keeps a damaged foreign filesystem
 * out of the kernel. Its view of a filesystem with a dirty log (or mounted now) is the
 * metadata written in place, which may lag the log: for the data-root folder that is no
 * loss, since a pool or snapshot volume holds it from its (cleanly unmounted) build, and an
 * agent-created volume is allowed to lack it. xfs_db runs only on what starts with an XFS
 * superblock carrying the agent's label (read by the agent itself), beside blkid, whose verdict
 * must agree before xfs_db's answer counts: it is not meant for arbitrary bytes.
 */
import { AgentError } from "../errors.ts";
import { run } from "../exec.ts";
import { DATA_ROOT_SUBDIR, FS_LABEL } from "../layout.ts";
import type { CacheIdentity, DeviceContents } from "../agent/ports.ts";
import type { Logger } from "../log.ts";
import { describeContents, probeDevice, ProbeError, readDeviceStart } from "./filesystem.ts";
import { deviceNumber } from "./mount.ts";
import { assertDevicePath } from "./serial.ts";

/** What the agent itself may put at the root of a volume it formatted, before docker ran on it. */
const AGENT_ROOT_ENTRIES = new Set([".ebs-cache-agent", "lost+found"]);

/** How long xfs_db may take to read a superblock and a root directory. */
const XFS_DB_TIMEOUT_MS = 60_000;

/**
 * The volume does not hold the agent's cache filesystem: nothing was written to it. The one
 * error every refusal uses, so that a boot can tell "not ours" from any other failure.
 */
export class ForeignVolumeError extends AgentError {
  /** undefined when the refusal comes from a host operation that knows only the device. */
  readonly volumeId: string | undefined;
  readonly device: string;
  /** What was found, as a phrase ("an ext4 filesystem labelled \"data\""). */
  readonly found: string;

  constructor(volumeId: string | undefined, device: string, found: string, options?: { cause?: unknown }) {
    super(
      `${volumeId ? `${volumeId} (${device})` : device} holds ${found}, not the agent's cache filesystem (XFS ` +
        `labelled ${JSON.stringify(FS_LABEL)} holding ${DATA_ROOT_SUBDIR}/); it was left untouched`,
      `inspect the volume from another machine (lsblk -f; wipefs -n; xfs_db -r -c 'ls /'): if it is not a cache ` +
        `volume, remove its ebs-cache:managed tag (then no instance claims it and gc never deletes it); if it ` +
        `should be one, replace it with a volume made from the pool's snapshot. The agent never formats, mounts ` +
        `read-write or repairs a volume it has not identified as its own`,
      undefined,
      options,
    );
    this.volumeId = volumeId;
    this.device = device;
    this.found = found;
  }
}

/** One entry of a directory as xfs_db lists it. */
export interface DirEntry {
  name: string;
  /** xfs_db's type word: directory, regular, symlink, … ("unknown" without ftype). */
  type: string;
}

/** What `xfs_db -r` shows of an XFS filesystem: its feature flags and its root directory. */
export interface XfsLayout {
  ftype: boolean;
  rootEntries: DirEntry[];
}

/** The first verdict, from the signature probe alone. */
export type SignatureVerdict = { verdict: "blank" } | { verdict: "inspect" } | { verdict: "foreign"; found: string };

/** The second verdict, from the layout of an XFS filesystem with the agent's label. */
export type LayoutVerdict = { verdict: "cache"; fresh: boolean } | { verdict: "foreign"; found: string };

/** Names for signatures that say what they are to an operator. */
const SIGNATURE_NAMES: Record<string, string> = {
  LVM2_member: "an LVM physical volume",
  crypto_LUKS: "a LUKS encrypted container",
  linux_raid_member: "an md RAID member",
  swap: "swap space",
};

/** A phrase naming what the probe found, for the refusal. */
export function foundPhrase(contents: DeviceContents): string {
  switch (contents.kind) {
    case "blank":
      return "no filesystem (blank)";
    case "filesystem": {
      const what = describeContents(contents);
      // Filesystem types are read letter by letter when they start so: "an xfs", "an ntfs".
      return `${/^(?:[aeiou]|x|n|f2)/i.test(what) ? "an" : "a"} ${what}${contents.label ? "" : " without a label"}`;
    }
    case "other": {
      const name = SIGNATURE_NAMES[contents.signature];
      if (name) return `${name} (${contents.signature})`;
      return /partition table$/.test(contents.signature)
        ? `a ${contents.signature}`
        : `data the agent does not own: ${contents.signature}`;
    }
  }
}

/**
 * Pure: what the signatures alone say. Only an XFS with the agent's label is worth a look at
 * its layout; a blank device is the agent's only when the agent created the volume.
 */
export function judgeSignature(contents: DeviceContents, createdByAgent: boolean): SignatureVerdict {
  if (contents.kind === "blank") {
    return createdByAgent
      ? { verdict: "blank" }
      : { verdict: "foreign", found: "no filesystem (blank), on a volume the agent did not create" };
  }
  if (contents.kind === "filesystem" && contents.type === "xfs" && contents.label === FS_LABEL)
    return { verdict: "inspect" };
  return { verdict: "foreign", found: foundPhrase(contents) };
}

/** Pure: whether the layout of an XFS labelled FS_LABEL is the agent's. */
export function judgeLayout(layout: XfsLayout, createdByAgent: boolean): LayoutVerdict {
  const label = `an XFS filesystem labelled ${JSON.stringify(FS_LABEL)}`;
  if (!layout.ftype) return { verdict: "foreign", found: `${label} without ftype=1` };
  const entries = layout.rootEntries.filter((entry) => entry.name !== "." && entry.name !== "..");
  const dataRoot = entries.find((entry) => entry.name === DATA_ROOT_SUBDIR);
  if (dataRoot?.type === "directory") return { verdict: "cache", fresh: false };
  if (dataRoot)
    return { verdict: "foreign", found: `${label} whose ${DATA_ROOT_SUBDIR} is a ${dataRoot.type}, not a directory` };
  const others = entries.filter((entry) => !AGENT_ROOT_ENTRIES.has(entry.name));
  if (createdByAgent && others.length === 0) return { verdict: "cache", fresh: true };
  const holding =
    others.length === 0
      ? "nothing else"
      : others
          .slice(0, 5)
          .map((entry) => entry.name)
          .join(", ") + (others.length > 5 ? ", …" : "");
  return {
    verdict: "foreign",
    found: `${label} without the ${DATA_ROOT_SUBDIR}/ data-root folder (its root holds ${holding})`,
  };
}

/**
 * Parses the output of `xfs_db -r -c version -c 'ls /'`: the feature list of the version line,
 * and one directory entry per line (`<offset> <inode> <type> <hash> <namelen> <name> (good)`;
 * the name length is given, so names with spaces parse).
 */
export function parseXfsDb(text: string): XfsLayout {
  const version = /^versionnum \[[^\]]*\] = (.*)$/m.exec(text);
  if (!version) throw new Error("xfs_db printed no versionnum line");
  const features = version[1]!.split(",").map((feature) => feature.trim());
  const rootEntries: DirEntry[] = [];
  let listing = false;
  for (const line of text.split("\n")) {
    if (line === "/:") {
      listing = true;
      continue;
    }
    if (!listing || line.trim() === "") continue;
    const match = /^\s*\d+\s+\d+\s+(\S+)\s+0x[0-9a-f]+\s+(\d+)\s(.*)$/.exec(line);
    if (!match) {
      if (line.startsWith("versionnum")) continue;
      throw new Error(`unexpected xfs_db directory line: ${JSON.stringify(line)}`);
    }
    const length = Number(match[2]);
    const rest = match[3]!;
    if (rest.length < length) throw new Error(`truncated xfs_db directory line: ${JSON.stringify(line)}`);
    rootEntries.push({ type: match[1]!, name: rest.slice(0, length) });
  }
  if (!listing) throw new Error("xfs_db printed no listing of /");
  return { ftype: features.includes("FTYPE"), rootEntries };
}

/** What the primary XFS superblock says (the first sector of the device), when there is one. */
export interface XfsSuperblock {
  label: string;
  /** The data section's size in bytes (block size × data blocks), as xfs_info reports it. */
  dataBytes: number;
}

/**
 * Pure: the primary XFS superblock at the start of a device (magic `XFSB`; big-endian
 * sb_blocksize at 4, sb_dblocks at 8, sb_fname at 108), or undefined when there is none.
 */
export function parseXfsSuperblock(start: Buffer): XfsSuperblock | undefined {
  if (start.length < 120 || start.toString("latin1", 0, 4) !== "XFSB") return undefined;
  const blockSize = start.readUInt32BE(4);
  const dataBlocks = start.readBigUInt64BE(8);
  const name = start.subarray(108, 120);
  const end = name.indexOf(0);
  const dataBytes = Number(BigInt(blockSize) * dataBlocks);
  if (!Number.isSafeInteger(dataBytes)) return undefined;
  return { label: name.subarray(0, end < 0 ? name.length : end).toString("latin1"), dataBytes };
}

/** Reads an XFS filesystem's features and root directory without writing (`xfs_db -r`). */
export async function readXfsLayout(device: string, options: { log?: Logger } = {}): Promise<XfsLayout> {
  assertDevicePath(device);
  return xfsDbLayout(device, [], options);
}

/** readXfsLayout of the file system in a disk image file (`xfs_db -f`: `snapshot upload`'s image). */
export async function readXfsImageLayout(image: string, options: { log?: Logger } = {}): Promise<XfsLayout> {
  return xfsDbLayout(image, ["-f"], options);
}

async function xfsDbLayout(device: string, flags: string[], options: { log?: Logger }): Promise<XfsLayout> {
  const result = await run("xfs_db", ["-r", ...flags, "-c", "version", "-c", "ls /", device], {
    log: options.log,
    check: false,
    timeoutMs: XFS_DB_TIMEOUT_MS,
  });
  if (result.exitCode !== 0) {
    throw new ProbeError(
      device,
      `xfs_db -r exited with ${result.exitCode}: ` +
        `${(result.stderr.trim() || result.stdout.trim()).split("\n")[0] ?? ""}`,
    );
  }
  try {
    return parseXfsDb(result.stdout);
  } catch (error) {
    throw new ProbeError(device, `unreadable xfs_db output: ${(error as Error).message}`, { cause: error });
  }
}

/**
 * What a positive identification saw of the device: which kernel device it was (`major:minor`,
 * the same before and after the reads) and its first MiB. The label check before the mount
 * takes it as its answer while both are unchanged (see assertCacheLabel).
 */
export interface IdentifiedDevice {
  device: string;
  number: string;
  start: Buffer;
  /** When the identification ended (ms since the epoch). */
  at: number;
}

/**
 * Identifies what the volume's device holds, writing nothing: the agent's cache filesystem
 * (`fresh` when the agent formatted it and docker has not run on it yet), or a blank volume the
 * agent created (to be formatted). Everything else throws ForeignVolumeError, a failed probe
 * included: what cannot be read cannot be positively identified.
 */
export async function identifyCacheVolume(
  volume: { volumeId: string; createdByAgent: boolean },
  device: string,
  options: { log?: Logger } = {},
): Promise<CacheIdentity> {
  return (await identifyWithEvidence(volume, device, options)).identity;
}

/** identifyCacheVolume, and for the agent's filesystem what it saw of the device (IdentifiedDevice). */
export async function identifyWithEvidence(
  volume: { volumeId: string; createdByAgent: boolean },
  device: string,
  options: { log?: Logger } = {},
): Promise<{ identity: CacheIdentity; seen?: IdentifiedDevice }> {
  const { log } = options;
  assertDevicePath(device);
  const numberBefore = deviceNumber(device).catch(() => undefined);
  const refuse = (found: string, cause?: unknown): never => {
    log?.warning("host.identify", "not the agent's cache filesystem", { volume: volume.volumeId, device, found });
    throw new ForeignVolumeError(volume.volumeId, device, found, cause === undefined ? undefined : { cause });
  };
  // The reads run at once (none writes): the signature probe, and, when the superblock at the
  // start of the device is an XFS one with the agent's label, xfs_db's look at the layout. Its
  // answer counts only if the signature probe agrees (judgeSignature); otherwise it is waited
  // for and dropped, so that no read outlives the refusal. The first MiB is read before any
  // process starts (the blocks blkid and wipefs read first too), so that xfs_db, the slowest,
  // is spawned first: spawning blocks this process's thread for a while on a busy host.
  const start = readDeviceStart(device);
  const superblock = start.then(parseXfsSuperblock, () => undefined);
  const sb = await superblock;
  const layoutRead = Promise.resolve(sb?.label === FS_LABEL ? readXfsLayout(device, options) : undefined);
  const layoutSettled = layoutRead.then(
    () => undefined,
    () => undefined,
  );
  let contents: DeviceContents;
  try {
    contents = await probeDevice(device, { ...options, start });
  } catch (error) {
    await layoutSettled;
    return refuse(`something the agent could not probe (${(error as Error).message})`, error);
  }
  const first = judgeSignature(contents, volume.createdByAgent);
  if (first.verdict !== "inspect") await layoutSettled;
  if (first.verdict === "foreign") return refuse(first.found);
  if (first.verdict === "blank") return { identity: { kind: "blank" } };
  let layout: XfsLayout;
  try {
    layout = (await layoutRead) ?? (await readXfsLayout(device, options));
  } catch (error) {
    return refuse(
      `an XFS filesystem labelled ${JSON.stringify(FS_LABEL)} whose layout could not be read ` +
        `(${(error as Error).message})`,
      error,
    );
  }
  const second = judgeLayout(layout, volume.createdByAgent);
  if (second.verdict === "foreign") return refuse(second.found);
  const dataBytes = (await superblock)?.dataBytes;
  log?.info("host.identify", "the agent's cache filesystem", {
    volume: volume.volumeId,
    device,
    fresh: second.fresh,
    dataBytes,
  });
  const identity: CacheIdentity = {
    kind: "cache",
    fresh: second.fresh,
    ...(dataBytes !== undefined ? { dataBytes } : {}),
  };
  const [before, after, bytes] = await Promise.all([
    numberBefore,
    deviceNumber(device).catch(() => undefined),
    start.catch(() => undefined),
  ]);
  const seen =
    before !== undefined && before === after && bytes
      ? { device, number: before, start: bytes, at: Date.now() }
      : undefined;
  return { identity, ...(seen ? { seen } : {}) };
}

/**
 * How long an identification stands in for the label check before a mount (a boot mounts within milliseconds of it).
 */
const IDENTIFIED_FOR_MS = 30_000;

/**
 * Whether the device is, byte for byte where it was read, what `seen` identified moments ago: the
 * same kernel device before and after the read, and the same first MiB. Then blkid's and wipefs's
 * verdict of the identification still holds for it: everything they can find in the first MiB
 * (the XFS superblock with the agent's label, no partition table, no other signature) is
 * unchanged, and a signature elsewhere (at the device's end) would take a writer on this host to
 * a device only the agent has opened since EC2 attached it to this instance alone. False (check
 * again in full) on any difference or failure.
 */
async function stillAsIdentified(device: string, seen: IdentifiedDevice): Promise<boolean> {
  if (seen.device !== device || Date.now() - seen.at > IDENTIFIED_FOR_MS) return false;
  try {
    const before = await deviceNumber(device);
    const start = await readDeviceStart(device);
    const after = await deviceNumber(device);
    return (
      before === seen.number &&
      after === seen.number &&
      start.equals(seen.start) &&
      parseXfsSuperblock(start)?.label === FS_LABEL
    );
  } catch {
    return false;
  }
}

/**
 * The last guard before a read-write mount or a grow: the device must carry an XFS superblock
 * with the agent's label (blkid's low-level probe). Cheap, and it keeps a caller that skipped
 * identification from mounting a foreign filesystem (which would replay its log). Given this
 * process's identification of the device (`identified`), and the device unchanged since
 * (stillAsIdentified: one read of its first MiB, no process), that identification's probe is
 * the answer; anything else probes again.
 */
export async function assertCacheLabel(
  device: string,
  options: { log?: Logger; identified?: IdentifiedDevice } = {},
): Promise<{ kind: "filesystem"; type: "xfs"; label: string }> {
  assertDevicePath(device);
  if (options.identified && (await stillAsIdentified(device, options.identified))) {
    options.log?.debug("host.identify", "unchanged since its identification: the label check stands", { device });
    return { kind: "filesystem", type: "xfs", label: FS_LABEL };
  }
  const contents = await probeDevice(device, options).catch((error: unknown) => {
    throw new ForeignVolumeError(
      undefined,
      device,
      `something the agent could not probe (${(error as Error).message})`,
      { cause: error },
    );
  });
  if (contents.kind !== "filesystem" || contents.type !== "xfs" || contents.label !== FS_LABEL) {
    throw new ForeignVolumeError(undefined, device, foundPhrase(contents));
  }
  return { kind: "filesystem", type: "xfs", label: contents.label };
}
