/**
 * The one way the agent replaces a file: a reader, and the disk after a power cut, see the old
 * file or the new one, never part of one. Used for every file the agent owns on the host
 * (daemon.json and its backup, containerd's config, state files, metrics textfiles, status records).
 */
import { randomBytes } from "node:crypto";
import { mkdir, open, rename, rm, stat } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { describeDiskError, diskErrorKind, type DiskErrorKind } from "./disk-errors.ts";
import { AgentError } from "./errors.ts";

export interface AtomicWriteOptions {
  /** The new file's mode (default 0644); set after the write too, since the umask trims open()'s. */
  mode?: number;
  /** The owner to give the new file (only as root), e.g. to keep a file's owner across a rewrite. */
  owner?: { uid: number; gid: number };
}

/**
 * Writes `data` to `path` atomically and durably: a temp file in the same folder (a rename is
 * atomic only within one filesystem; the dot name keeps it out of globs such as the metrics
 * collector's `*.prom`), fsynced, renamed over `path`, then the folder fsynced so the rename
 * itself survives a crash. The folder must exist. Throws the filesystem's error, but a full or
 * read-only filesystem as a FolderNotWritableError (not the agent's bug: an operator frees room);
 * the temp file is removed on failure, and the file at `path` is then as it was.
 */
export async function writeFileAtomic(
  path: string,
  data: string | Uint8Array,
  options: AtomicWriteOptions = {},
): Promise<void> {
  const mode = options.mode ?? 0o644;
  const temp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`);
  try {
    const handle = await open(temp, "wx", mode);
    try {
      await handle.writeFile(data);
      await handle.chmod(mode);
      if (options.owner && process.getuid?.() === 0) await handle.chown(options.owner.uid, options.owner.gid);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temp, path);
  } catch (error) {
    await rm(temp, { force: true }).catch(() => undefined);
    const kind = diskErrorKind(error);
    throw kind ? new FolderNotWritableError(dirname(path), basename(path), kind, error) : error;
  }
  await syncFolder(dirname(path));
}

/** A file not written because its folder's filesystem is full (ENOSPC, EDQUOT) or read-only (EROFS). */
export class FolderNotWritableError extends AgentError {
  readonly folder: string;
  readonly kind: DiskErrorKind;

  constructor(
    folder: string,
    file: string,
    kind: DiskErrorKind,
    cause: unknown,
    /** A path on the same filesystem that exists (the folder's nearest when it could not be made). */
    existing = folder,
  ) {
    const code = (cause as { code?: unknown }).code;
    super(
      `${describeDiskError(kind)} on ${folder}${typeof code === "string" ? ` (${code})` : ""}: ${file} not written, ` +
        "the file there is as it was",
      kind === "no-space"
        ? `free space on the filesystem of ${existing} (df -h ${existing}) and run the command again`
        : `remount the filesystem of ${existing} read-write, or point the setting at a writable folder, and run again`,
      undefined,
      { cause },
    );
    this.folder = folder;
    this.kind = kind;
  }
}

/**
 * Makes `folder` (and its parents) for `file` to be written there. A full or read-only filesystem
 * (a full disk still refuses a folder when its inodes are spent) is a FolderNotWritableError naming
 * the folder, its remediation the nearest folder that exists (df cannot look at a missing one).
 * Returns the first folder it made (mkdir's answer), undefined when it was there.
 */
export async function makeFolderFor(folder: string, file: string): Promise<string | undefined> {
  try {
    return await mkdir(folder, { recursive: true });
  } catch (error) {
    const kind = diskErrorKind(error);
    if (!kind) throw error;
    throw new FolderNotWritableError(folder, file, kind, error, await nearestExisting(folder));
  }
}

async function nearestExisting(path: string): Promise<string> {
  let at = path;
  while (at !== dirname(at) && !(await stat(at).catch(() => undefined))) at = dirname(at);
  return at;
}

/** Fsyncs a folder, so a rename or an unlink in it is on disk. */
export async function syncFolder(folder: string): Promise<void> {
  const handle = await open(folder, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
