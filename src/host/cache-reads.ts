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
 * A sparse file (denseEnough) is fio's too: only its allocated ranges are read.
 *
 * Read-only, and only files of the volume: each is opened without following a link (O_NOFOLLOW), without waiting
 * on a FIFO put in its place (O_NONBLOCK), without updating its access time (O_NOATIME: an access time written to
 * the volume would count as others' writes in the pacer's looks), and read only when it is a regular file of the
 * volume's filesystem (one swapped since the walk is left out, as the walk leaves it out).
 */
import { mapConcurrently } from "../map-concurrently.ts";
import { totalBytes } from "./extents.ts";
import { readMemAvailable } from "./facts.ts";
import type { MappedFile } from "./need-reads.ts";
import { openWalkedFile, statWalked } from "./volume-paths.ts";

/** The share of the host's available memory the wanted files may take in the page cache. */
export const CACHE_SHARE = 0.5;

/** How many bytes of the wanted files may be read through the page cache now: 0 when memory cannot be told. */
export async function cacheBudget(meminfo?: string): Promise<number> {
  const available = await readMemAvailable(meminfo);
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

/**
 * How far a file's size may pass its allocated blocks and still be read through the page cache. A sparse file (a
 * `lastlog` of a user with a high id, a database's preallocated file: gigabytes of holes) read to its end would fill
 * the page cache with zeros and the readers with copying them; such a file's few allocated ranges are fio's. The
 * slack covers a file whose last block is partly written.
 */
export const SPARSE_SLACK_BYTES = 1024 * 1024;

/** Whether a file of `size` bytes with `blocks` 512-byte blocks allocated (stat's st_blocks) is read to its end. */
export function denseEnough(stats: { size: number; blocks: number }): boolean {
  return stats.size <= stats.blocks * 512 + SPARSE_SLACK_BYTES;
}

/** Whether each of `paths` (walked) is a regular file dense enough to be read to its end; false when it is gone. */
export async function denseFiles(paths: readonly string[]): Promise<boolean[]> {
  return Promise.all(
    paths.map(async (path) => {
      const stats = await statWalked(path).catch(() => undefined);
      return stats !== undefined && stats.isFile() && denseEnough(stats);
    }),
  );
}

/** How many of `files`, from the first, hold together no more than `budget` bytes (their ranges'). */
export function filesWithin(files: readonly Pick<MappedFile, "ranges">[], budget: number): number {
  let total = 0;
  for (let i = 0; i < files.length; i++) {
    total += totalBytes(files[i]!.ranges);
    if (total > budget) return i;
  }
  return files.length;
}

/**
 * The wanted files split (pure): those read through the page cache (the first `within`, in the list's order, that are
 * dense enough: `dense[i]` for the i-th file), and those fio reads (the others of the first `within`, then all after
 * them), each group in the list's order.
 */
export function splitForCache<F>(
  files: readonly F[],
  within: number,
  dense: readonly boolean[],
): { cached: F[]; byFio: F[] } {
  const cached: F[] = [];
  const byFio: F[] = [];
  files.forEach((file, i) => (i < within && dense[i] === true ? cached : byFio).push(file));
  return { cached, byFio };
}

/**
 * The wanted files split for their reads: within `budget` (filesWithin) and dense enough (denseFiles: only those are
 * looked at) through the page cache, the others by fio (splitForCache).
 */
export async function chooseCached<F extends MappedFile>(
  files: readonly F[],
  budget: number,
): Promise<{ cached: F[]; byFio: F[] }> {
  const within = filesWithin(files, budget);
  return splitForCache(files, within, await denseFiles(files.slice(0, within).map((file) => file.path)));
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

/**
 * Reads `paths` (absolute, in the list's order) to their end, `readers` at once: the first files first. Stops at
 * `signal` (rejecting with its reason); a read that fails otherwise rejects (the volume's own I/O error).
 */
export async function readThroughCache(paths: readonly string[], options: CacheReadOptions): Promise<CacheReadTally> {
  const readers = Math.max(1, options.readers);
  // One buffer a reader, used for each of its files in turn.
  const buffers = Array.from({ length: Math.min(readers, paths.length) }, () => Buffer.allocUnsafe(options.chunkBytes));
  const read = await mapConcurrently(paths, readers, (path, reader) => {
    options.signal?.throwIfAborted();
    return readOne(path, buffers[reader]!, options);
  });
  const done = read.filter((bytes): bytes is number => bytes !== undefined);
  return { files: done.length, skipped: read.length - done.length, bytes: done.reduce((sum, bytes) => sum + bytes, 0) };
}

/** One file read to its end; undefined when it is left out. */
async function readOne(path: string, buffer: Buffer, options: CacheReadOptions): Promise<number | undefined> {
  const handle = await openWalkedFile(path);
  if (!handle) return undefined;
  try {
    const stats = await handle.stat();
    if (!stats.isFile() || stats.dev !== options.fileSystem) return undefined;
    // Made sparse since it was chosen (denseEnough): no further than its allocated bytes go.
    const limit = stats.blocks * 512 + SPARSE_SLACK_BYTES;
    let bytes = 0;
    while (bytes < limit) {
      options.signal?.throwIfAborted();
      const { bytesRead } = await handle.read(buffer, 0, Math.min(buffer.length, limit - bytes), null);
      if (bytesRead === 0) break;
      bytes += bytesRead;
    }
    return bytes;
  } finally {
    await handle.close();
  }
}
