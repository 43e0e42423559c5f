/**
 * The one way the agent replaces a file: a reader, and the disk after a power cut, see the old
 * file or the new one, never part of one. Used for every file the agent owns on the host
 * (daemon.json and its backup, containerd's config, state files, metrics textfiles, status records).
 */
import { randomBytes } from "node:crypto";
import { open, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

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
 * itself survives a crash. The folder must exist. Throws the filesystem's error; the temp file
 * is removed on failure.
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
    throw error;
  }
  await syncFolder(dirname(path));
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
