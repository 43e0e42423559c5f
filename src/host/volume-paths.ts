/**
 * Paths on a mounted cache volume, resolved without following links. What a volume holds is
 * untrusted input: a `docker/swarm` that is a symlink to /etc would have the agent, and then
 * dockerd, write into the host's /etc. So every path on a volume is taken one component at a
 * time from the volume's root with lstat: a symlink, or anything but a folder on the way, is
 * refused (VolumePathError); the last component is reported as what it is, never followed. Files
 * are opened with O_NOFOLLOW and O_NONBLOCK (a FIFO must not hang the boot) and checked to be
 * regular files on the open descriptor.
 *
 * Node has no openat2(RESOLVE_BENEATH); the walk with lstat is its equivalent here, since
 * nothing but the agent writes the volume while it is prepared (docker has not started on it).
 * Every module that reads, writes or removes on a volume goes through this one (a test holds it).
 */
import { constants, type Dirent, type Stats } from "node:fs";
import { lstat, mkdir, open, readdir, readlink, rm, type FileHandle } from "node:fs/promises";
import { isAbsolute, join, normalize, sep } from "node:path";
import { AgentError } from "../errors.ts";

/** What a path on the volume is, by lstat (a symlink is a symlink, never its target). */
export type EntryKind =
  "folder" | "file" | "symlink" | "fifo" | "socket" | "block device" | "character device" | "missing";

/** A path on the volume is not what the agent or docker expects there: the volume is refused. */
export class VolumePathError extends AgentError {
  readonly root: string;
  readonly relative: string;
  readonly found: EntryKind;

  constructor(root: string, relative: string, found: EntryKind, expected: string) {
    super(
      `${join(root, relative)} on the volume is a ${found}, where ${expected} is expected: volume content is not ` +
        `followed out of the volume`,
      "the volume's content was tampered with or damaged: it is quarantined; inspect it (mount it read-only " +
        "elsewhere) or delete it",
    );
    this.root = root;
    this.relative = relative;
    this.found = found;
  }
}

/** lstat's answer as an EntryKind; `missing` for ENOENT. */
export async function entryKind(path: string): Promise<EntryKind> {
  try {
    return kindOf(await lstat(path));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return "missing";
    throw error;
  }
}

/**
 * The id of the filesystem `path` is on (lstat's st_dev: a link's own), or undefined when it is
 * missing: a path on a filesystem mounted below the volume's root has another.
 */
export async function fileSystemOf(path: string): Promise<number | undefined> {
  try {
    return (await lstat(path)).dev;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

/**
 * What an lstat answer or a readdir entry is (an entry's type is its d_type, or lstat's when the
 * filesystem gives none).
 */
export function kindOf(entry: Stats | Dirent): EntryKind {
  if (entry.isSymbolicLink()) return "symlink";
  if (entry.isDirectory()) return "folder";
  if (entry.isFile()) return "file";
  if (entry.isFIFO()) return "fifo";
  if (entry.isSocket()) return "socket";
  return entry.isBlockDevice() ? "block device" : "character device";
}

/**
 * The components of `relative` (none for "": the root itself), refused when it would leave the root (`..`, absolute).
 */
function componentsOf(root: string, relative: string): string[] {
  if (!isAbsolute(root))
    throw new AgentError(`the volume's root must be an absolute path, not ${JSON.stringify(root)}`, "report this bug");
  if (relative === "") return [];
  const parts = normalize(relative).split(sep);
  if (isAbsolute(relative) || parts.some((part) => part === ".." || part === "" || part === ".")) {
    throw new AgentError(
      `refusing the path ${JSON.stringify(relative)} on the volume ${root}: not a plain relative path`,
      "report this bug",
    );
  }
  return parts;
}

/**
 * The absolute path of `relative` below `root` and what its last component is, every folder on
 * the way checked to be a real folder (a missing one makes the whole path missing). Throws
 * VolumePathError when one is a symlink or anything else.
 */
export async function resolveBeneath(root: string, relative: string): Promise<{ path: string; kind: EntryKind }> {
  const parts = componentsOf(root, relative);
  let path = root;
  for (const [index, part] of parts.entries()) {
    path = join(path, part);
    const kind = await entryKind(path);
    if (index === parts.length - 1 || kind === "missing") return { path: join(root, relative), kind };
    if (kind !== "folder") throw new VolumePathError(root, parts.slice(0, index + 1).join("/"), kind, "a folder");
  }
  return { path: root, kind: await entryKind(root) };
}

/**
 * Like resolveBeneath, the last component also checked: `want` (a folder or a regular file), or
 * missing when `optional`. Returns the absolute path.
 */
export async function expectBeneath(
  root: string,
  relative: string,
  want: "folder" | "file",
  options: { optional?: boolean } = {},
): Promise<{ path: string; kind: EntryKind }> {
  const found = await resolveBeneath(root, relative);
  if (found.kind === want || (found.kind === "missing" && options.optional)) return found;
  throw new VolumePathError(root, relative, found.kind, want === "folder" ? "a folder" : "a regular file");
}

/** The entries of the folder `relative` (checked to be one); none when it is missing. */
export async function listBeneath(root: string, relative: string): Promise<Dirent[]> {
  const { path, kind } = await expectBeneath(root, relative, "folder", { optional: true });
  if (kind === "missing") return [];
  return (await readdir(path, { withFileTypes: true })).sort((a, b) =>
    a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
  );
}

/** The target a symlink on the volume names (read, never followed). */
export async function readLinkBeneath(root: string, relative: string): Promise<string> {
  const { path } = await resolveBeneath(root, relative);
  return readlink(path);
}

/**
 * The trimmed text (up to `maxBytes`) of the regular file `relative`, or undefined when it is
 * missing. Opened with O_NOFOLLOW | O_NONBLOCK and checked on the descriptor, so a symlink, a
 * FIFO or a device there throws VolumePathError instead of being read.
 */
export async function readFileBeneath(root: string, relative: string, maxBytes = 4096): Promise<string | undefined> {
  const { path, kind } = await expectBeneath(root, relative, "file", { optional: true });
  if (kind === "missing") return undefined;
  const handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK).catch(
    (error: NodeJS.ErrnoException) => {
      // ELOOP: it became a symlink since the lstat.
      if (error.code === "ELOOP") throw new VolumePathError(root, relative, "symlink", "a regular file");
      throw error;
    },
  );
  try {
    if (!(await handle.stat()).isFile())
      throw new VolumePathError(root, relative, await entryKind(path), "a regular file");
    const buffer = Buffer.alloc(maxBytes);
    const { bytesRead } = await handle.read(buffer, 0, maxBytes, 0);
    return buffer.subarray(0, bytesRead).toString("utf8").trim();
  } finally {
    await handle.close();
  }
}

/**
 * A file already walked to (its path resolved beneath the volume, as need-reads does), opened to read its data:
 * O_NOFOLLOW and O_NONBLOCK (a link or a FIFO put there since is not followed, not waited on) and O_NOATIME (the
 * read writes nothing to the volume, not even the access time: the pre-warm's own reads must not count as others'
 * writes). Undefined when it is gone or was swapped for a link since; the caller checks the descriptor (a regular
 * file, on the volume's filesystem).
 */
export async function openWalkedFile(path: string): Promise<FileHandle | undefined> {
  const flags = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
  try {
    try {
      return await open(path, flags | constants.O_NOATIME);
    } catch (error) {
      // O_NOATIME is for the file's owner (or CAP_FOWNER): without it the read may touch the access time (relatime).
      if ((error as NodeJS.ErrnoException).code !== "EPERM") throw error;
      return await open(path, flags);
    }
  } catch (error) {
    if (SWAPPED_SINCE.has((error as NodeJS.ErrnoException).code ?? "")) return undefined;
    throw error;
  }
}

/** What open answers for a walked path removed or swapped since (ENXIO: a socket there). */
const SWAPPED_SINCE = new Set(["ENOENT", "ELOOP", "ENOTDIR", "ENXIO"]);

/** lstat of a walked path (a link not followed); undefined when it is gone. */
export async function statWalked(path: string): Promise<Stats | undefined> {
  try {
    return await lstat(path);
  } catch (error) {
    if (SWAPPED_SINCE.has((error as NodeJS.ErrnoException).code ?? "")) return undefined;
    throw error;
  }
}

/** Creates the folder `relative` and those above it, one component at a time, none through a link. Returns its path. */
export async function mkdirBeneath(root: string, relative: string, mode = 0o755): Promise<string> {
  const parts = componentsOf(root, relative);
  let path = root;
  for (const [index, part] of parts.entries()) {
    path = join(path, part);
    await mkdir(path, { mode }).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== "EEXIST") throw error;
    });
    const kind = await entryKind(path);
    if (kind !== "folder") throw new VolumePathError(root, parts.slice(0, index + 1).join("/"), kind, "a folder");
  }
  return path;
}

/**
 * Removes `relative` (a folder with what it holds; a symlink as a link, its target untouched):
 * the folders above it checked first. Returns false when there was nothing to remove.
 */
export async function removeBeneath(root: string, relative: string): Promise<boolean> {
  if (relative === "") throw new AgentError(`refusing to remove the volume's root ${root}`, "report this bug");
  const { path, kind } = await resolveBeneath(root, relative);
  if (kind === "missing") return false;
  // rm does not follow symlinks inside the folder either: it lstat()s and unlinks them.
  await rm(path, { recursive: true, force: true });
  return true;
}
