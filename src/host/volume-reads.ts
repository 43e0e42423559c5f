/**
 * The pre-warm's reads of a cache volume, with fio:
 * - check: random `blockBytes` reads at offsets drawn uniformly over the filesystem's allocated
 *   ranges (never its empty space), replayed from an I/O log with libaio and O_DIRECT, bounded
 *   by a number of reads and a time;
 * - files: every allocated range once, in device order, in reads of at most `maxIoBytes`,
 *   `ioDepth` at a time (one fio replaying an I/O log);
 * - device: AWS's documented full read, `fio --filename=<dev> --rw=read --bs=128k --iodepth=32
 *   --ioengine=libaio --direct=1 --name=volume-initialize` (plus --readonly and JSON output).
 * Both begin with the need list's files (read-phases.ts); its wanted files within the page cache's budget are read
 * through their files instead (cache-reads.ts), so that the service finds them in memory.
 * Both long reads report progress (fio --status-interval) and a resume point: every byte of the
 * device below it has been read.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type {
  BegunReads,
  CheckFigures,
  InitializeOptions,
  InitializeResult,
  PrewarmReader,
  ReadTarget,
  SampleBounds,
  WantedReadOptions,
} from "../agent/ports.ts";
import { run } from "../exec.ts";
import type { Logger } from "../log.ts";
import { imagesAboutToRun, needOrder } from "../read-list.ts";
import { describeError } from "../errors.ts";
import {
  coveringReads,
  mergeRanges,
  sampleReads,
  subtractRanges,
  totalBytes,
  usedRanges,
  type ByteRange,
} from "./extents.ts";
import { fileRanges, readReadList, type MappedFile } from "./need-reads.ts";
import { cacheBudget, cacheReaders, chooseCached, poolThreads, readThroughCache } from "./cache-reads.ts";
import { fileSystemOf } from "./volume-paths.ts";
import { needPhases, wantedPhase } from "./read-phases.ts";
import type { RunningCommand } from "../exec.ts";
import { feedIolog, runFio, writeIolog, type DeviceRead, type FedIolog, type FioReport } from "./fio.ts";
import { DEFAULT_PACE } from "./read-pace.ts";
import { deviceCounters, paceReads, watchQueue, type PaceTally } from "./read-pacer.ts";
import { timeWarmRead } from "./warm-read.ts";

const MiB = 1024 * 1024;
const round1 = (n: number) => Math.round(n * 10) / 10;
/** AWS's documented block size for the full read. */
export const DEVICE_READ_BLOCK = 128 * 1024;
export interface FioReaderOptions {
  log?: Logger;
  /** The fio binary (default `fio` on PATH). */
  fio?: string;
  /** Where I/O logs are written (default the OS temp folder). */
  workDir?: string;
  /**
   * How long the paced reads in flight may take to complete once fio is stopped, before the look
   * counts them as others' (default DEFAULT_PACE.drainMs). A host's constant, not configuration:
   * tests that assert "never stopped" on a loaded machine give it room.
   */
  drainMs?: number;
  /**
   * How many bytes of the wanted files may be read through the page cache (cache-reads.ts; default half the host's
   * available memory then): the files past it are read with fio. Tests give 0 to have fio read all of them.
   */
  pageCacheBudget?: () => Promise<number>;
}

/** The size of a block device in bytes. */
export async function deviceSize(device: string, log?: Logger): Promise<number> {
  const { stdout } = await run("blockdev", ["--getsize64", device], {
    log,
    remediation: "check that the device exists",
  });
  const size = Number(stdout.trim());
  if (!Number.isSafeInteger(size) || size <= 0)
    throw new Error(`blockdev printed no size for ${device}: ${JSON.stringify(stdout)}`);
  return size;
}

/** The figures of a check from fio's report. */
export function checkFigures(report: FioReport): CheckFigures {
  return {
    reads: report.read.totalIos,
    seconds: report.read.runtimeMs / 1000,
    iops: report.read.iops,
    mibps: report.read.bytesPerSecond / MiB,
    latencyMs: report.read.latencyMs,
  };
}

/**
 * The offset below which every read of `reads` has completed, given that fio counted `counted`
 * bytes with up to `inFlight` bytes of reads still running (or left out of its count).
 */
export function safeCursor(
  reads: readonly DeviceRead[],
  prefix: readonly number[],
  counted: number,
  inFlight: number,
  from: number,
): number {
  const safe = counted - inFlight;
  if (safe <= 0 || reads.length === 0) return from;
  let lo = 0;
  let hi = prefix.length - 1;
  let best = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (prefix[mid]! <= safe) {
      best = mid;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  return best < 0 ? from : reads[best]!.offset + reads[best]!.length;
}

/** What the reads share: the reader's options, and fio's as every run of it takes them. */
interface FioContext {
  options: FioReaderOptions;
  log: Logger | undefined;
  fioOptions: { log?: Logger; fio?: string };
}

/** The PrewarmReader over fio and xfs_spaceman. */
export function createFioReader(options: FioReaderOptions = {}): PrewarmReader {
  const { log } = options;
  const ctx: FioContext = {
    options,
    log,
    fioOptions: { log, fio: options.fio },
  };

  return {
    async allocatedBytes(target: ReadTarget): Promise<number> {
      return totalBytes(await usedRanges(target.mountPoint, { log }));
    },

    async check(target: ReadTarget, check: SampleBounds): Promise<CheckFigures> {
      const ranges = await usedRanges(target.mountPoint, { log });
      const reads = sampleReads(ranges, check.reads, check.blockBytes);
      if (reads.length === 0) throw new Error(`no allocated data on ${target.device} to sample`);
      const report = await withIolog(ctx, async (iolog) => {
        await writeIolog(iolog, target.device, reads);
        return runFio(
          { name: "prewarm-check", iolog, ioDepth: check.ioDepth, runtimeSeconds: check.seconds },
          { ...ctx.fioOptions, timeoutMs: (check.seconds + 60) * 1000 },
        );
      });
      return checkFigures(report);
    },

    async initialize(target: ReadTarget, mode: "files" | "device", init: InitializeOptions): Promise<InitializeResult> {
      // The allocated ranges are looked up while the need list's first reads run, not before them.
      const allocated = mode === "files" ? usedRanges(target.mountPoint, { log, gap: init.maxIoBytes }) : undefined;
      allocated?.catch(() => undefined);
      let needed: ByteRange[];
      try {
        needed = await readNeeded(ctx, target, init);
      } finally {
        await allocated?.catch(() => undefined);
      }
      if (mode === "device") return readDevice(ctx, target, init);
      const read = mergeRanges(needed);
      return readRanges(ctx, target, subtractRanges(await allocated!, read), init, totalBytes(read));
    },

    beginWanted(target: ReadTarget, init: WantedReadOptions): BegunReads {
      const begun = startWanted(ctx, target, init);
      const handle: BegunReads = { stop: () => begun.stop() };
      begunReads.set(handle, begun);
      return handle;
    },
  };
}

/** What a replay takes of an initialization's options. */
type ReplayOptions = Pick<InitializeOptions, "signal" | "yieldDepth" | "giveWay">;

/** Runs `work` with the path of an I/O log in a folder of its own, removed afterwards. */
async function withIolog<T>(ctx: FioContext, work: (path: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(ctx.options.workDir ?? tmpdir(), "ebs-cache-prewarm-"));
  try {
    return await work(join(dir, "reads.iolog"));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The wanted files' reads under way (startWanted): the fed fio, and the need list's order once it is read. */
interface WantedStart {
  /** What it reads: adopted by an initialization only when it would read the same (sameWanted). */
  key: { device: string; mountPoint: string; depth: number; maxIoBytes: number; images: readonly string[] };
  /** The fed fio's replay (its failure is the run's, reported once the mapping is done). */
  reading: Promise<void>;
  /** The list's order and the wanted files' ranges, given to fio; undefined: no list, or not usable (warned). */
  mapped: Promise<
    | { order: { files: string[]; wanted: number }; wanted: ByteRange[]; mappedFiles: number; skipped: number }
    | undefined
  >;
  /** When the reads began (the log's mappedMs counts from here). */
  started: number;
  stopped: AbortSignal;
  stop(reason?: unknown): Promise<void>;
}

/** Reads begun by beginWanted, by the handle the caller holds. */
const begunReads = new WeakMap<BegunReads, WantedStart>();

/**
 * The wanted files' reads, begun: once they are mapped, those within the page cache's budget are read through their
 * files (readCached), the others by a fio started before the list is read and given their reads then (feedIolog: its
 * start-up passes meanwhile). Any problem with the list is a warning: no reads then.
 */
function startWanted(ctx: FioContext, target: ReadTarget, init: WantedReadOptions): WantedStart {
  const started = Date.now();
  const controller = new AbortController();
  const onAbort = () => controller.abort(init.signal?.reason);
  if (init.signal?.aborted) onAbort();
  else init.signal?.addEventListener("abort", onAbort, { once: true });
  const phase = wantedPhase(init);
  const feed = feedIolog(target.device, init.maxIoBytes);
  const replayed = replayFed(ctx, target, feed, phase, { ...init, signal: controller.signal });
  void replayed.catch(() => undefined);
  let cached: Promise<void> = Promise.resolve();
  const mapping = ctx.log ? { log: ctx.log } : {};
  const mapped = (async () => {
    try {
      const list = await readReadList(target.mountPoint);
      if (!list) return undefined;
      const order = needOrder(list, imagesAboutToRun(init.images ?? []));
      const wanted = await fileRanges(target.mountPoint, order.files.slice(0, order.wanted), mapping);
      const budget = await (ctx.options.pageCacheBudget ?? cacheBudget)();
      // A sparse file, or one that cannot be looked at now, is read by fio: its allocated ranges only.
      const { cached: throughCache, byFio } = await chooseCached(wanted.files, budget);
      cached = readCached(ctx, target, throughCache, { ...phase, chunkBytes: init.maxIoBytes }, controller.signal);
      void cached.catch(() => undefined);
      feed.add(
        coveringReads(
          byFio.flatMap((file) => file.ranges),
          init.maxIoBytes,
        ),
      );
      ctx.log?.debug(
        "prewarm.need",
        `${throughCache.length} of ${wanted.files.length} wanted files read through the page cache, ` +
          `${feed.added.length} reads of the rest given to fio`,
      );
      return { order, wanted: wanted.ranges, mappedFiles: wanted.mapped, skipped: wanted.skipped };
    } catch (error) {
      // Stopped meanwhile (the volume unmounted under it, say): nothing is read on, nothing to warn of.
      if (!controller.signal.aborted)
        ctx.log?.warning("prewarm.need", `the need list is not used, reading in device order: ${describeError(error)}`);
      return undefined;
    } finally {
      feed.end();
    }
  })();
  // Both ways of reading end before the phase does; fio's failure is reported first, as before.
  const reading = Promise.all([replayed, mapped.then(() => cached)]).then(() => undefined);
  void reading.catch(() => undefined);
  return {
    key: {
      device: target.device,
      mountPoint: target.mountPoint,
      depth: phase.depth,
      maxIoBytes: init.maxIoBytes,
      images: [...(init.images ?? [])],
    },
    reading,
    mapped,
    started,
    stopped: controller.signal,
    async stop(reason) {
      controller.abort(reason ?? new Error("stopped"));
      feed.end();
      await Promise.all([reading.catch(() => undefined), mapped]);
    },
  };
}

/**
 * The wanted files within the page cache's budget, read through it (cache-reads.ts) at the phase's depth: as many
 * files at once as fio would keep reads in flight (cacheReaders: fewer in a process with a small thread pool), each in
 * reads of `maxIoBytes`.
 */
async function readCached(
  ctx: FioContext,
  target: ReadTarget,
  files: readonly MappedFile[],
  phase: { name: string; depth: number; chunkBytes: number },
  signal: AbortSignal,
): Promise<void> {
  if (files.length === 0) return;
  const fileSystem = await fileSystemOf(target.mountPoint);
  if (fileSystem === undefined) throw new Error(`${target.mountPoint} is gone`);
  const started = Date.now();
  const readers = cacheReaders(phase.depth, poolThreads());
  const tally = await readThroughCache(
    files.map((file) => file.path),
    { readers, chunkBytes: phase.chunkBytes, fileSystem, signal },
  );
  ctx.log?.info(
    "prewarm.read",
    `${phase.name}: ${tally.files} files, ${round1(tally.bytes / MiB)} MiB through the page cache, ${readers} at once`,
    { seconds: round1((Date.now() - started) / 1000), ...(tally.skipped > 0 ? { skipped: tally.skipped } : {}) },
  );
}

/** Whether begun reads read what an initialization of `target` with `init` reads first. */
function sameWanted(begun: WantedStart, target: ReadTarget, init: WantedReadOptions): boolean {
  const images = init.images ?? [];
  return (
    !begun.stopped.aborted &&
    begun.key.device === target.device &&
    begun.key.mountPoint === target.mountPoint &&
    begun.key.depth === wantedPhase(init).depth &&
    begun.key.maxIoBytes === init.maxIoBytes &&
    begun.key.images.length === images.length &&
    begun.key.images.every((image, i) => image === images[i])
  );
}

/**
 * The wanted reads an initialization starts with: those begun for it (beginWanted) when they read the same, its
 * signal then stopping them; else its own (begun ones that differ are stopped first: nothing reads twice at once).
 */
async function wantedReads(ctx: FioContext, target: ReadTarget, init: InitializeOptions): Promise<WantedStart> {
  const begun = init.begun ? begunReads.get(init.begun) : undefined;
  if (begun && sameWanted(begun, target, init)) {
    const stop = () => void begun.stop(init.signal?.reason);
    if (init.signal?.aborted) stop();
    else init.signal?.addEventListener("abort", stop, { once: true });
    ctx.log?.info("prewarm.need", "the wanted files' reads begun before the decision are taken over");
    return begun;
  }
  if (begun) {
    ctx.log?.info("prewarm.need", "the reads begun before the decision read other files or ways: read afresh");
    await begun.stop();
  }
  return startWanted(ctx, target, init);
}

/**
 * The need list's files (read-phases.ts: those of the images about to run first, then the
 * list's others), read before everything else, in the idle I/O class; returns the ranges read.
 * The wanted files' reads (startWanted, or begun before this run by beginWanted) run while the other files are
 * mapped. Any problem with the list is a warning: everything is then read in device order.
 */
async function readNeeded(ctx: FioContext, target: ReadTarget, init: InitializeOptions): Promise<ByteRange[]> {
  const start = await wantedReads(ctx, target, init);
  const found = await start.mapped;
  if (!found) {
    await start.reading.catch(() => undefined);
    return [];
  }
  const { order, wanted } = found;
  const mappedMs = Date.now() - start.started;
  const mapping = ctx.log ? { log: ctx.log } : {};
  // The other files are mapped while the wanted files are read (their metadata reads then queue behind a few of
  // those, not before all of them).
  let listed: Awaited<ReturnType<typeof fileRanges>>;
  try {
    listed = await fileRanges(target.mountPoint, order.files.slice(order.wanted), mapping);
  } catch (error) {
    await start.reading;
    ctx.log?.warning("prewarm.need", `the list's other files are not read first: ${describeError(error)}`);
    return wanted;
  }
  const need = [...wanted, ...listed.ranges];
  ctx.log?.info("prewarm.need", `reading first the ${order.files.length} files the images read at start`, {
    wanted: order.wanted,
    mapped: found.mappedFiles + listed.mapped,
    skipped: found.skipped + listed.skipped,
    bytes: totalBytes(need),
    mappedMs,
  });
  await start.reading;
  for (const phase of needPhases([], listed.ranges, init))
    await replay(ctx, target, phase.reads, phase.name, phase.depth, init, phase);
  return need;
}

/**
 * The wanted files' reads, replayed by a fio started before they are known (feedIolog). A fio that cannot take its
 * log from stdin (before 3.22) or fails otherwise: the same reads from a file, once they are all known, as before
 * fio read logs from stdin.
 */
async function replayFed(
  ctx: FioContext,
  target: ReadTarget,
  feed: FedIolog,
  phase: { name: string; depth: number; paced: boolean },
  init: ReplayOptions,
): Promise<void> {
  // In the background run its queue is looked at once it has built up: paced from then on where it holds others up.
  const background = init.yieldDepth !== undefined;
  let spawned: RunningCommand | undefined;
  let latest: FioReport | undefined;
  const done = new AbortController();
  const watched = background
    ? paceWhenHoldingUp(ctx, target, init, {
        name: phase.name,
        reads: () => spawned,
        progress: () => queueProgress(latest, feed.added, phase.depth),
        done: done.signal,
      })
    : undefined;
  try {
    let report: FioReport;
    try {
      report = await runFio(
        { name: phase.name, iolog: feed, ioDepth: phase.depth, idle: true, thread: background },
        {
          ...ctx.fioOptions,
          signal: init.signal,
          ...(background
            ? {
                statusIntervalMs: QUEUE_LOOK_MS,
                onStatus: (report: FioReport) => (latest = report),
                onSpawn: (fio: RunningCommand) => (spawned = fio),
              }
            : {}),
        },
      );
    } finally {
      // The look and its pacing end with this fio, before any replay from a file.
      done.abort();
      await watched;
    }
    if (feed.added.length > 0) logReplay(ctx, phase.name, feed.added, phase.depth, report);
  } catch (error) {
    if (init.signal?.aborted) throw error;
    await feed.ended;
    if (feed.added.length === 0) return;
    ctx.log?.info(
      "prewarm.read",
      `${phase.name}: fio did not take its reads on stdin (${describeError(error)}): replaying them from a file`,
    );
    await replay(ctx, target, feed.added, phase.name, phase.depth, init, phase);
  }
}

/** How often fio reports on the wanted reads in the background, for the look at their queue. */
const QUEUE_LOOK_MS = 100;
/** Warm reads timed at the look (its median decides). */
const WARM_READS = 5;

/**
 * What the look at the queue needs from fio's latest report: its reads' median completion, and the first reads of
 * the log, surely done once fio has issued twice the depth (each read issued past the depth waited for one to
 * complete, and reads complete about in the order they were issued; the median warm read counts, so one found cold
 * does not mislead). Undefined until then.
 */
export function queueProgress(
  report: FioReport | undefined,
  reads: readonly DeviceRead[],
  depth: number,
): { readP50Ms: number; doneOffsets: number[] } | undefined {
  const p50 = report?.read.latencyMs.p50;
  if (!report || p50 === undefined || report.read.totalIos < 2 * depth || reads.length < 2 * depth) return undefined;
  return { readP50Ms: p50, doneOffsets: reads.slice(0, WARM_READS).map((read) => read.offset) };
}

/**
 * Looks at the reads' queue once (watchQueue, with dd's warm reads) and, where they hold others up, paces them until
 * `done`, as the background's other reads are.
 */
async function paceWhenHoldingUp(
  ctx: FioContext,
  target: ReadTarget,
  init: ReplayOptions,
  phase: {
    name: string;
    reads: () => RunningCommand | undefined;
    progress: () => ReturnType<typeof queueProgress>;
    done: AbortSignal;
  },
): Promise<void> {
  const verdict = await watchQueue({
    progress: phase.progress,
    timeRead: (offset) =>
      timeWarmRead(target.device, offset, { ...(ctx.log ? { log: ctx.log } : {}), signal: phase.done }),
    done: phase.done,
  });
  if (!verdict || phase.done.aborted) return;
  const figures = { warmReadMs: verdict.warmReadMs.map(round1).join(" "), readP50Ms: round1(verdict.readP50Ms) };
  if (!verdict.holdsUp) {
    ctx.log?.info(
      "prewarm.pace",
      `${phase.name}: others' reads pass these (a warm read is not held up): not paced`,
      figures,
    );
    return;
  }
  ctx.log?.info(
    "prewarm.pace",
    `${phase.name}: a warm read waits behind these (the volume's throughput binds): they give way to others now`,
    figures,
  );
  const tally = await paceReads({
    reads: phase.reads,
    counters: deviceCounters(target.device),
    settings: paceSettings(ctx, init),
    done: phase.done,
    stopped: init.signal,
    // They have been in the way since they began: stopped now, not after one more run.
    lookFirst: true,
  });
  logPaceTally(ctx, phase.name, tally);
}

/** The pacing of a replay: the defaults, the agent's give-way settings over them, the reader's drain. */
function paceSettings(ctx: FioContext, init: ReplayOptions) {
  return {
    ...DEFAULT_PACE,
    ...init.giveWay,
    ...(ctx.options.drainMs !== undefined ? { drainMs: ctx.options.drainMs } : {}),
  };
}

function logPaceTally(ctx: FioContext, name: string, tally: PaceTally | undefined) {
  if (tally)
    ctx.log?.info("prewarm.pace", `${name}: stopped ${tally.pauses} times while others read or wrote the device`, {
      looks: tally.looks,
      pausedMs: tally.pausedMs,
    });
}

async function readRanges(
  ctx: FioContext,
  target: ReadTarget,
  ranges: ByteRange[],
  init: InitializeOptions,
  readAlready = 0,
): Promise<InitializeResult> {
  const total = totalBytes(ranges) + readAlready;
  const reads = coveringReads(ranges, init.maxIoBytes, init.fromOffset);
  const before = total - reads.reduce((sum, r) => sum + r.length, 0);
  const prefix: number[] = [];
  let sum = 0;
  for (const r of reads) prefix.push((sum += r.length));
  const inFlight = init.ioDepth * init.maxIoBytes;
  init.onProgress({ doneBytes: before, totalBytes: total, cursor: init.fromOffset, runBytes: 0 });
  if (reads.length === 0) return { totalBytes: total, readBytes: readAlready };
  await replay(ctx, target, reads, "prewarm-files", init.yieldDepth ?? init.ioDepth, init, undefined, (report) => {
    const counted = Math.min(report.read.ioBytes, sum);
    init.onProgress({
      doneBytes: before + counted,
      totalBytes: total,
      cursor: safeCursor(reads, prefix, counted, inFlight, init.fromOffset),
      runBytes: counted,
    });
  });
  // fio leaves up to iodepth-1 replayed reads out of its byte count: the log is done, all of it.
  init.onProgress({
    doneBytes: total,
    totalBytes: total,
    cursor: reads.at(-1)!.offset + reads.at(-1)!.length,
    runBytes: sum,
  });
  return { totalBytes: total, readBytes: sum + readAlready };
}

/**
 * One fio replaying `reads` at `depth`, in the idle I/O class. In the background run
 * (`init.yieldDepth` set) it is paced, stopped while others read the device (read-pace.ts),
 * unless `phase` says otherwise (read-phases.ts); `phase.onSpawn` is told once fio runs.
 */
async function replay(
  ctx: FioContext,
  target: ReadTarget,
  reads: readonly DeviceRead[],
  name: string,
  depth: number,
  init: ReplayOptions,
  phase?: { paced: boolean; onSpawn?: () => void },
  onStatus?: (report: FioReport) => void,
): Promise<void> {
  const paced = phase?.paced ?? init.yieldDepth !== undefined;
  await withIolog(ctx, async (iolog) => {
    await writeIolog(iolog, target.device, reads);
    let spawned: RunningCommand | undefined;
    const done = new AbortController();
    const fio = runFio(
      { name, iolog, ioDepth: depth, idle: true, thread: paced },
      {
        ...ctx.fioOptions,
        signal: init.signal,
        ...(onStatus ? { statusIntervalMs: 1000, onStatus } : {}),
        onSpawn: (fio) => {
          spawned = fio;
          phase?.onSpawn?.();
        },
      },
    );
    const pacer = paced
      ? paceReads({
          reads: () => spawned,
          counters: deviceCounters(target.device),
          settings: paceSettings(ctx, init),
          done: done.signal,
          stopped: init.signal,
        })
      : undefined;
    try {
      logReplay(ctx, name, reads, depth, await fio);
    } finally {
      done.abort();
      logPaceTally(ctx, name, await pacer);
    }
  });
}

/** fio's figures of one replay. */
function logReplay(ctx: FioContext, name: string, reads: readonly DeviceRead[], depth: number, report: FioReport) {
  const bytes = reads.reduce((sum, r) => sum + r.length, 0);
  const latency = report.read.latencyMs;
  ctx.log?.info("prewarm.read", `${name}: ${reads.length} reads, ${round1(bytes / MiB)} MiB at depth ${depth}`, {
    seconds: round1(report.read.runtimeMs / 1000),
    ...(latency.p50 !== undefined ? { p50ms: round1(latency.p50) } : {}),
    ...(latency.p99 !== undefined ? { p99ms: round1(latency.p99) } : {}),
  });
}

async function readDevice(ctx: FioContext, target: ReadTarget, init: InitializeOptions): Promise<InitializeResult> {
  const size = await deviceSize(target.device, ctx.log);
  const from = Math.min(size, Math.floor(init.fromOffset / MiB) * MiB);
  init.onProgress({ doneBytes: from, totalBytes: size, cursor: from, runBytes: 0 });
  if (from >= size) return { totalBytes: size, readBytes: 0 };
  const inFlight = 32 * DEVICE_READ_BLOCK;
  await runFio(
    {
      name: "volume-initialize",
      device: target.device,
      rw: "read",
      blockSize: "128k",
      ioDepth: 32,
      offset: from,
    },
    {
      ...ctx.fioOptions,
      signal: init.signal,
      statusIntervalMs: 1000,
      onStatus: (report) => {
        const counted = report.read.ioBytes;
        init.onProgress({
          doneBytes: Math.min(size, from + counted),
          totalBytes: size,
          cursor: Math.max(from, Math.floor((from + counted - inFlight) / MiB) * MiB),
          runBytes: counted,
        });
      },
    },
  );
  init.onProgress({ doneBytes: size, totalBytes: size, cursor: size, runBytes: size - from });
  return { totalBytes: size, readBytes: size - from };
}
