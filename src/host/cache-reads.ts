/**
 * The wanted files read through the page cache: opened on the mounted volume and read to their end, a few at once,
 * so that the service starting from them finds their blocks in memory (overlayfs reads a layer's file through the
 * underlying file's pages). A block fio reads with O_DIRECT is fetched from the snapshot but not kept: the service
 * then reads it again from the device, which costs the volume's throughput twice where that binds.
 *
 * Only what memory holds is read so (cacheBudget: half the host's available memory when the reads begin): the pages
 * would otherwise push out the ones read before them, and the service would read them from the device again. The
 * files past it are read as before, with fio (volume-reads.ts).
 *
 * Read-only, and only files of the volume: each is opened without following a link (O_NOFOLLOW), without waiting
 * on a FIFO put in its place (O_NONBLOCK), without updating its access time (O_NOATIME: a read of the agent's that
 * wrote the volume would count as others' writes in the pacer's looks), and read only when it is a regular file of
 * the volume's filesystem (one swapped since the walk is left out, as the walk leaves it out).
 */
import { constants, type Stats } from "node:fs";
import { open, readFile, type FileHandle } from "node:fs/promises";
import type { MappedFile } from "./need-reads.ts";

/** The share of the host's available memory the wanted files may take in the page cache. */
export const CACHE_SHARE = 0.5;

/** The bytes of MemAvailable in /proc/meminfo text (`MemAvailable:  123456 kB`); undefined when absent. */
export function parseMemAvailable(meminfo: string): number | undefined {
  const match = /^MemAvailable:\s+(\d+)\s+kB\s*$/m.exec(meminfo);
  if (!match) return undefined;
  const kib = Number(match[1]);
  return Number.isSafeInteger(kib) ? kib * 1024 : undefined;
}

/** How many bytes of the wanted files may be read through the page cache now: 0 when memory cannot be told. */
export async function cacheBudget(meminfo = "/proc/meminfo"): Promise<number> {
  const available = parseMemAvailable(await readFile(meminfo, "utf8").catch(() => ""));
  return available === undefined ? 0 : Math.floor(available * CACHE_SHARE);
}

/**
 * The threads of libuv's pool the agent's units give a process that reads (systemd: Environment=UV_THREADPOOL_SIZE):
 * every read through the page cache holds one of them until its blocks are fetched (tens of milliseconds each on a
 * cold volume), and Node runs every other file operation of the process (the state file, the listed files' walk; the
 * bench's own docker start) on the same pool, 4 threads by default.
 */
export const READ_POOL_THREADS = 16;

/** The threads in this process's pool (libuv reads UV_THREADPOOL_SIZE once, at its first use; default 4). */
export function poolThreads(env: NodeJS.ProcessEnv = process.env): number {
  const size = Number(env.UV_THREADPOOL_SIZE);
  return Number.isInteger(size) && size >= 1 ? Math.min(size, 1024) : 4;
}

/**
 * Files read at once: the phase's depth (what fio would keep in flight), but never more than leave two of the pool's
 * threads to the process's other file operations.
 */
export function cacheReaders(depth: number, pool: number): number {
  return Math.max(1, Math.min(depth, pool - 2));
}

/** How many of `files`, from the first, hold together no more than `budget` bytes (their ranges'). */
export function filesWithin(files: readonly Pick<MappedFile, "ranges">[], budget: number): number {
  let total = 0;
  for (let i = 0; i < files.length; i++) {
    total += files[i]!.ranges.reduce((sum, r) => sum + (r.end - r.start), 0);
    if (total > budget) return i;
  }
  return files.length;
}

export interface CacheReadOptions {
  /** Files read at once. */
  readers: number;
  /** Bytes of one read (each file is read to its end in reads of this size). */
  chunkBytes: number;
  /** The volume's filesystem (st_dev): a file of another is left out. */
  fileSystem: number;
  signal?: AbortSignal;
}

/** What the reads through the page cache did. */
export interface CacheReadTally {
  files: number;
  /** Left out: gone, a link, not a regular file, or not on the volume. */
  skipped: number;
  bytes: number;
}

/** What open may answer for a file swapped or removed since the walk: left out, as the walk leaves such files out. */
const GONE = new Set(["ENOENT", "ELOOP", "ENOTDIR", "ENXIO"]);

/**
 * Reads `paths` (absolute, in the list's order) to their end, `readers` at once: the first files first. Stops at
 * `signal` (rejecting with its reason); a read that fails otherwise rejects (the volume's own I/O error).
 */
export async function readThroughCache(paths: readonly string[], options: CacheReadOptions): Promise<CacheReadTally> {
  const tally: CacheReadTally = { files: 0, skipped: 0, bytes: 0 };
  let next = 0;
  let failed = false;
  const reader = async () => {
    const buffer = Buffer.allocUnsafe(options.chunkBytes);
    while (next < paths.length && !failed) {
      options.signal?.throwIfAborted();
      const path = paths[next++]!;
      try {
        const read = await readOne(path, buffer, options);
        if (read === undefined) tally.skipped++;
        else {
          tally.files++;
          tally.bytes += read;
        }
      } catch (error) {
        failed = true;
        throw error;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(options.readers, paths.length)) }, reader));
  return tally;
}

/** One file read to its end; undefined when it is left out. */
async function readOne(path: string, buffer: Buffer, options: CacheReadOptions): Promise<number | undefined> {
  const handle = await openQuietly(path);
  if (!handle) return undefined;
  try {
    const stats: Stats = await handle.stat();
    if (!stats.isFile() || stats.dev !== options.fileSystem) return undefined;
    let bytes = 0;
    for (;;) {
      options.signal?.throwIfAborted();
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, null);
      if (bytesRead === 0) return bytes;
      bytes += bytesRead;
    }
  } finally {
    await handle.close();
  }
}

const FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** The file opened read-only, without following a link or updating its access time; undefined when it is gone. */
async function openQuietly(path: string): Promise<FileHandle | undefined> {
  try {
    try {
      return await open(path, FLAGS | constants.O_NOATIME);
    } catch (error) {
      // O_NOATIME is for the file's owner (or CAP_FOWNER): without it the read may touch the access time (relatime).
      if ((error as NodeJS.ErrnoException).code !== "EPERM") throw error;
      return await open(path, FLAGS);
    }
  } catch (error) {
    if (GONE.has((error as NodeJS.ErrnoException).code ?? "")) return undefined;
    throw error;
  }
}
