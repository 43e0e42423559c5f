/**
 * The one backup protocol for a host file the agent changes but does not own outright: dockerd's
 * daemon.json and containerd's config.toml. Three rules, the same for both:
 *
 * - the owner's original is kept: before an instance first writes the file, a verbatim copy goes
 *   next to it (`<file>.ebs-cache-agent.bak`, with the file's mode and owner), or, when there was
 *   no file, a marker (`<file>.ebs-cache-agent.absent`) so that restoring means removing the file.
 *   Later changes of the same instance keep that backup, and a change that changes nothing writes
 *   nothing and takes no backup, so a re-run keeps the backup of the run that made the change;
 * - one queue: every change and restore of one file goes through one promise chain, so two
 *   read-modify-writes never interleave and lose one of them;
 * - every step is durable and leaves the old state or the new one: writes through
 *   writeFileAtomic (src/fs-atomic.ts), and a removal is followed by an fsync of the folder.
 *
 * The steps are exported one by one so a test can stop between them, as a crash would.
 */
import { lstat, mkdir, readFile, realpath, rm, stat } from "node:fs/promises";
import { dirname } from "node:path";
import { type AgentError, describeError } from "../errors.ts";
import { syncFolder, writeFileAtomic } from "../fs-atomic.ts";

/** Appended to the file's name for the verbatim backup. */
export const BACKUP_SUFFIX = ".ebs-cache-agent.bak";
/** Appended to the file's name for the marker saying there was no file before the change. */
export const ABSENT_SUFFIX = ".ebs-cache-agent.absent";
/** The mode of a file the agent creates where there was none. */
export const NEW_FILE_MODE = 0o644;

/** Builds the owning module's error (DaemonJsonError, ContainerdConfigError): they share this shape. */
export type OwnedFileErrorClass<E extends AgentError = AgentError> = new (
  path: string,
  message: string,
  remediation: string,
  options?: { cause?: unknown },
) => E;

/** The file as read: its bytes (undefined when missing), mode and owner. */
export interface OwnedFileSnapshot {
  /** The real file written (symlinks resolved). */
  readonly file: string;
  readonly bytes: Buffer | undefined;
  readonly mode: number;
  readonly owner: { uid: number; gid: number } | undefined;
}

/** Where the file and its backup live, and how a failure is told. */
export interface OwnedFilePaths {
  readonly path: string;
  readonly backupPath: string;
  readonly absentMarkerPath: string;
  readonly errorClass: OwnedFileErrorClass;
}

export interface OwnedFileOptions {
  path: string;
  errorClass: OwnedFileErrorClass;
}

/** What a change did: whether it wrote the file, and the backup it took first (only the first change's). */
export interface OwnedFileChange {
  readonly written: boolean;
  /** The backup or absent marker this change wrote before the file, when it took one. */
  readonly backup?: string;
}

export interface OwnedFile {
  readonly path: string;
  readonly backupPath: string;
  readonly absentMarkerPath: string;
  /** The file as it is now (not queued: a read changes nothing). */
  read(): Promise<OwnedFileSnapshot>;
  /**
   * Queued read-modify-write: `edit` gets the file as it is and returns its new bytes, or
   * undefined when nothing changes (then nothing is written and no backup taken). Throwing from
   * `edit` changes nothing.
   */
  change(
    edit: (current: OwnedFileSnapshot) => string | Buffer | undefined | Promise<string | Buffer | undefined>,
  ): Promise<OwnedFileChange>;
  /** Queued: puts back the file as this instance's first change found it (removes it when there was none). */
  restore(): Promise<"restored" | "removed">;
}

/** The paths of the file at `path` and its backup. */
export function ownedFilePaths(path: string, errorClass: OwnedFileErrorClass): OwnedFilePaths {
  return { path, backupPath: `${path}${BACKUP_SUFFIX}`, absentMarkerPath: `${path}${ABSENT_SUFFIX}`, errorClass };
}

/** The file at `options.path` under the protocol above. */
export function createOwnedFile(options: OwnedFileOptions): OwnedFile {
  const paths = ownedFilePaths(options.path, options.errorClass);
  const { path, backupPath, absentMarkerPath } = paths;
  let backedUp = false;
  let queue: Promise<unknown> = Promise.resolve();
  const serially = <T>(work: () => Promise<T>): Promise<T> => {
    const next = queue.then(work, work);
    queue = next.catch(() => undefined);
    return next;
  };

  return {
    path,
    backupPath,
    absentMarkerPath,
    read: () => readOwnedFile(path, paths.errorClass),
    change: (edit) =>
      serially(async () => {
        const current = await readOwnedFile(path, paths.errorClass);
        const next = await edit(current);
        if (next === undefined) return { written: false };
        let backup: string | undefined;
        if (!backedUp) {
          await keepOriginal(paths, current);
          backedUp = true;
          backup = current.bytes !== undefined ? backupPath : absentMarkerPath;
        }
        await writeOwnedFile(paths, current, next);
        return backup === undefined ? { written: true } : { written: true, backup };
      }),
    restore: () => serially(() => restoreOriginal(paths)),
  };
}

/** Step 1: reads the file with its mode and owner; a missing file has no bytes. Symlinks are followed. */
export async function readOwnedFile(path: string, errorClass: OwnedFileErrorClass): Promise<OwnedFileSnapshot> {
  let file = path;
  try {
    file = await realpath(path);
  } catch (error) {
    if (errno(error) !== "ENOENT") throw ioError(errorClass, path, "resolve", error);
  }
  let info;
  try {
    info = await stat(file);
  } catch (error) {
    if (errno(error) === "ENOENT") return { file, bytes: undefined, mode: NEW_FILE_MODE, owner: undefined };
    throw ioError(errorClass, path, "read", error);
  }
  if (!info.isFile()) throw new errorClass(path, `${path} is not a regular file`, `replace ${path} with a file`);
  try {
    return { file, bytes: await readFile(file), mode: info.mode & 0o7777, owner: { uid: info.uid, gid: info.gid } };
  } catch (error) {
    if (errno(error) === "ENOENT") return { file, bytes: undefined, mode: NEW_FILE_MODE, owner: undefined };
    throw ioError(errorClass, path, "read", error);
  }
}

/**
 * Step 2: keeps the original beside the file: a verbatim copy, or the absent marker. The order
 * matters when killed half-way: a .bak left beside a stale .absent is the newer one (restore
 * prefers it), and a stale .bak is removed before the marker is written.
 */
export async function keepOriginal(paths: OwnedFilePaths, original: OwnedFileSnapshot): Promise<void> {
  const { path, backupPath, absentMarkerPath, errorClass } = paths;
  await ensureFolder(errorClass, dirname(original.file));
  if (original.bytes !== undefined) {
    await writeDurably(errorClass, backupPath, original.bytes, original.mode, original.owner);
    await removeDurably(errorClass, absentMarkerPath);
  } else {
    await removeDurably(errorClass, backupPath);
    await writeDurably(
      errorClass,
      absentMarkerPath,
      `${path} did not exist before ebs-cache-agent changed it\n`,
      NEW_FILE_MODE,
      undefined,
    );
  }
}

/** Step 3: replaces the file (the real one behind a symlink) with `bytes`, keeping its mode and owner. */
export async function writeOwnedFile(
  paths: OwnedFilePaths,
  current: OwnedFileSnapshot,
  bytes: string | Buffer,
): Promise<void> {
  await ensureFolder(paths.errorClass, dirname(current.file));
  await writeDurably(paths.errorClass, current.file, bytes, current.mode, current.owner);
}

/**
 * Puts the original back: the backup's bytes, mode and owner, or no file when the marker says
 * there was none. Safe to repeat. Refuses when there is neither backup nor marker.
 */
export async function restoreOriginal(paths: OwnedFilePaths): Promise<"restored" | "removed"> {
  const { path, backupPath, absentMarkerPath, errorClass } = paths;
  const file = (await readOwnedFile(path, errorClass)).file;
  const backup = await readOwnedFile(backupPath, errorClass);
  if (backup.bytes !== undefined) {
    await writeDurably(errorClass, file, backup.bytes, backup.mode, backup.owner);
    return "restored";
  }
  if (await exists(errorClass, absentMarkerPath)) {
    await removeDurably(errorClass, file);
    return "removed";
  }
  throw new errorClass(
    path,
    `no backup of ${path} to restore (neither ${backupPath} nor ${absentMarkerPath} exists)`,
    `check ${path} by hand`,
  );
}

async function ensureFolder(errorClass: OwnedFileErrorClass, folder: string): Promise<void> {
  await mkdir(folder, { recursive: true, mode: 0o755 }).catch((error: unknown) => {
    throw ioError(errorClass, folder, "create", error);
  });
}

/** writeFileAtomic, a failure told as the owner's error. */
async function writeDurably(
  errorClass: OwnedFileErrorClass,
  path: string,
  data: string | Buffer,
  mode: number,
  owner: { uid: number; gid: number } | undefined,
): Promise<void> {
  try {
    await writeFileAtomic(path, data, { mode, ...(owner ? { owner } : {}) });
  } catch (error) {
    throw ioError(errorClass, path, "write", error);
  }
}

/** Removes a file and fsyncs its folder, so the removal survives a crash too. */
async function removeDurably(errorClass: OwnedFileErrorClass, path: string): Promise<void> {
  try {
    await rm(path, { force: true });
  } catch (error) {
    throw ioError(errorClass, path, "remove", error);
  }
  try {
    await syncFolder(dirname(path));
  } catch (error) {
    throw ioError(errorClass, dirname(path), "fsync", error);
  }
}

async function exists(errorClass: OwnedFileErrorClass, path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch (error) {
    if (errno(error) === "ENOENT") return false;
    throw ioError(errorClass, path, "stat", error);
  }
}

function errno(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | undefined)?.code;
}

/** An I/O failure as the owner's error, with the remediation both files share. */
export function ioError<E extends AgentError>(
  errorClass: OwnedFileErrorClass<E>,
  path: string,
  action: string,
  cause: unknown,
): E {
  return new errorClass(
    path,
    `could not ${action} ${path}: ${describeError(cause)}`,
    "check that the agent runs as root and that the filesystem holding it is writable and not full",
    { cause },
  );
}
