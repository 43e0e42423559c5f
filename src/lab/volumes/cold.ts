/**
 * Cold snapshots in the lab: volumes created from a snapshot read slowly on the first touch of
 * each block and fast afterwards, as an EBS volume restored from a snapshot does (its blocks are
 * fetched lazily from S3).
 *
 * How: a small FUSE filesystem (cold-fuse.py, Debian's python3-pyfuse3) mounted at
 * `<root>/cold/mnt` serves each cold volume's image, byte for byte, from a hard link in
 * `<root>/cold/src`, keeping one cold/warm bit per chunk. The loop device of such a volume is
 * set up on `<root>/cold/mnt/<vol>.img` instead of the image itself (loopdev.ts asks this layer
 * through `VolumeImageLayer.backingFile`), with direct I/O, so that its reads reach the layer
 * concurrently. The first read of a cold chunk waits `firstReadDelayMs`; then the chunk is warm.
 * Per volume, at most `fetchConcurrency` fetches run at once and all reads share
 * `throughputMiBps`, as EBS serves a volume. Writes go through unchanged (a whole-chunk write
 * warms the chunk, a partial one fetches it first). See docs/lab.md, "Cold snapshots".
 *
 * Cleanup: the FUSE mount and its process live under the lab root (the process is registered in
 * `<root>/pids` and names the root on its command line), so the reaper (cleanup.ts) finds both
 * after a crash. close() tears down in the right order: filesystems on cold loop devices,
 * the loop devices, then the FUSE mount.
 */
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { link, mkdir, open, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";
import { run } from "../../exec.ts";
import type { Logger } from "../../log.ts";
import { registerLabProcess, unregisterLabProcess } from "../reaper/cleanup.ts";
import { detachLoop, isUnder, listLoopDevices, listMounts } from "../reaper/devices.ts";
import { assertLabId } from "../reaper/labdir.ts";
import type { VolumeImageLayer } from "./loopdev.ts";
import { isProcessAlive, processIdentity, type ProcessIdentity } from "../reaper/procinfo.ts";

/** How volumes created from a snapshot behave in a lab started with `coldSnapshots`. */
export interface ColdSnapshotOptions {
  /** Wait on the first touch of each chunk (ms). 0 keeps the layer but makes nothing slow. */
  firstReadDelayMs: number;
  /** Size of the unit fetched at once (default 512 KiB, the block size of EBS snapshots). */
  chunkBytes?: number;
  /**
   * `cold` (default): every chunk of the volume is cold, holes of the image included, as AWS
   * documents initialization (every block is read once). `warm`: chunks holding no data in the
   * snapshot start warm.
   */
  holes?: "cold" | "warm";
  /**
   * Cold chunks of one volume fetched at once (default 8); more wait their turn, first come
   * first served. EBS serves a volume's first reads in parallel (AWS's documented initialization
   * reads at depth 32); the kernel's FUSE connection passes at most 12 requests on at once, for
   * all cold volumes together.
   */
  fetchConcurrency?: number;
  /**
   * The volume's throughput (MiB/s) that every read, warm or cold, spends (default 125, gp3's
   * baseline); 0: no cap.
   */
  throughputMiBps?: number;
}

/** One cold volume as the FUSE process counts it. */
export interface ColdVolumeStatus {
  chunks: number;
  warmChunks: number;
  /** Chunks fetched (each cost one first-read delay, concurrent fetches overlapping). */
  fetches: number;
  delayedMs: number;
  /** The first-read delay this volume's fetches wait now (the layer's, unless setFirstReadDelay changed it). */
  firstReadDelayMs: number;
  bytesRead: number;
  bytesWritten: number;
  /** The most fetches of this volume that were in flight at once. */
  mostFetchesInFlight: number;
  /** A provisioned-rate initialization is running in the background. */
  initializing: boolean;
}

/** One chunk fetch of a cold volume (the layer's fetch log). */
export interface ColdFetch {
  chunk: number;
  /** How long it waited for one of the volume's fetch slots (behind fetches asked for before it). */
  queuedMs: number;
  /** A read asked for it, or a write to part of the chunk (the rest had to be fetched first). */
  by: "read" | "write";
  /** When the fetch ended (ms since the epoch, this machine's clock). */
  atMs: number;
}

/** The cold layer of a lab. */
export interface ColdLayer extends VolumeImageLayer {
  readonly mountPoint: string;
  readonly options: Required<ColdSnapshotOptions>;
  /** Whether the volume is served cold (made from a snapshot while the layer ran). */
  isCold(volumeId: string): boolean;
  /** The FUSE process's counters for a cold volume (undefined: not a cold volume). */
  volumeStatus(volumeId: string): Promise<ColdVolumeStatus | undefined>;
  /** The chunks of a cold volume fetched so far, in the order they were first read. */
  fetchOrder(volumeId: string): Promise<number[]>;
  /** The same with how each fetch was asked for: how long it queued for a fetch slot, by a read or a write. */
  fetches(volumeId: string): Promise<ColdFetch[]>;
  /** Warms the volume in the background at `rateMiBps` (EBS's provisioned-rate initialization). */
  initialize(volumeId: string, rateMiBps: number): Promise<void>;
  /** Makes every chunk of the volume cold again (tests). */
  cool(volumeId: string): Promise<void>;
  /**
   * The volume's first-read delay from now on (tests): a test that reads a whole volume once its
   * cold reads are measured need not wait the lab's delay thousands of times.
   */
  setFirstReadDelay(volumeId: string, delayMs: number): Promise<void>;
  /** Unmounts what sits on cold loop devices, detaches them, unmounts the FUSE filesystem. */
  close(): Promise<void>;
}

/**
 * The layer's defaults: the lab's assumed EBS model (ebs-model.default.json, whose `source` says
 * what each rests on; test/lab/volumes/ebs-model.test.ts holds the two equal). A calibration
 * replaces them through `coldSnapshotOptionsOf(model)` (ebs-model.ts), as `--ebs-model FILE` does.
 */
export const COLD_LAYER_DEFAULTS = {
  /** The block size of EBS snapshots. */
  chunkBytes: 512 * 1024,
  fetchConcurrency: 8,
  /** gp3's baseline throughput (EC2 CreateVolume: Throughput, 125-2000 MiB/s for gp3). */
  throughputMiBps: 125,
} as const;
const DEFAULT_CHUNK = COLD_LAYER_DEFAULTS.chunkBytes;
const DEFAULT_FETCH_CONCURRENCY = COLD_LAYER_DEFAULTS.fetchConcurrency;
const DEFAULT_THROUGHPUT_MIBPS = COLD_LAYER_DEFAULTS.throughputMiBps;
const PYTHON = "/usr/bin/python3";
const FS_NAME = "ebs-cache-cold";
const PROCESS_NAME = "cold-fuse";

/** The FUSE script: next to this module in the source tree (also found from a bundle in dist/). */
export function coldFuseScript(): string {
  const candidates = [
    new URL("./cold-fuse.py", import.meta.url),
    new URL("../src/lab/volumes/cold-fuse.py", import.meta.url),
  ];
  for (const candidate of candidates) {
    const path = fileURLToPath(candidate);
    if (existsSync(path)) return path;
  }
  throw new Error("src/lab/volumes/cold-fuse.py not found: run the lab from the source tree");
}

/** Throws with what to install unless /dev/fuse, python3 and pyfuse3 are there. */
export async function assertColdPrerequisites(): Promise<void> {
  const problems: string[] = [];
  if (!existsSync("/dev/fuse")) problems.push("/dev/fuse is missing (modprobe fuse)");
  if (!existsSync("/usr/bin/fusermount") && !existsSync("/usr/bin/fusermount3"))
    problems.push("fusermount not found (apt-get install fuse3)");
  const pyfuse3 = await run(PYTHON, ["-c", "import pyfuse3, trio"], { check: false }).catch(() => undefined);
  if (!pyfuse3 || pyfuse3.exitCode !== 0)
    problems.push(`${PYTHON} cannot import pyfuse3 (apt-get install python3-pyfuse3)`);
  if (problems.length > 0) throw new Error(`cold snapshots need: ${problems.join("; ")}`);
}

/** Paths of the cold layer inside a lab root. */
export function coldPaths(root: string) {
  const dir = join(root, "cold");
  return {
    dir,
    source: join(dir, "src"),
    mountPoint: join(dir, "mnt"),
    log: join(dir, "fuse.log"),
    fetches: join(dir, "fetches.log"),
  };
}

/** What the lab tells the layer beyond the options. */
export interface ColdLayerContext {
  /**
   * The VolumeInitializationRate (MiB/s) a volume was created with, if any: such a volume is
   * warmed in the background at that rate (times `speedup`), as EBS does.
   */
  initializationRate?: (volumeId: string) => number | null | undefined;
  /** The EC2 emulator's initializationSpeedup, so both agree on when a volume is initialized. */
  speedup?: number;
  log?: Logger;
}

/** Starts the FUSE process under `<root>/cold` and waits until it is mounted. */
export async function startColdLayer(
  root: string,
  options: ColdSnapshotOptions,
  context: ColdLayerContext = {},
): Promise<ColdLayer> {
  const { log } = context;
  const settings: Required<ColdSnapshotOptions> = {
    firstReadDelayMs: options.firstReadDelayMs,
    chunkBytes: options.chunkBytes ?? DEFAULT_CHUNK,
    holes: options.holes ?? "cold",
    fetchConcurrency: options.fetchConcurrency ?? DEFAULT_FETCH_CONCURRENCY,
    throughputMiBps: options.throughputMiBps ?? DEFAULT_THROUGHPUT_MIBPS,
  };
  if (!(settings.firstReadDelayMs >= 0))
    throw new Error(`coldSnapshots.firstReadDelayMs must be >= 0, got ${settings.firstReadDelayMs}`);
  if (!Number.isInteger(settings.chunkBytes) || settings.chunkBytes < 4096 || settings.chunkBytes % 4096 !== 0) {
    throw new Error(`coldSnapshots.chunkBytes must be a multiple of 4096, got ${settings.chunkBytes}`);
  }
  if (!Number.isInteger(settings.fetchConcurrency) || settings.fetchConcurrency < 1)
    throw new Error(`coldSnapshots.fetchConcurrency must be an integer >= 1, got ${settings.fetchConcurrency}`);
  if (!(settings.throughputMiBps >= 0))
    throw new Error(`coldSnapshots.throughputMiBps must be >= 0, got ${settings.throughputMiBps}`);
  await assertColdPrerequisites();
  const paths = coldPaths(root);
  await mkdir(paths.source, { recursive: true });
  await mkdir(paths.mountPoint, { recursive: true });
  const logFile = await open(paths.log, "a");
  let identity: ProcessIdentity | undefined;
  try {
    const child = spawn(
      PYTHON,
      [
        coldFuseScript(),
        paths.source,
        paths.mountPoint,
        "--chunk-bytes",
        String(settings.chunkBytes),
        "--delay-ms",
        String(settings.firstReadDelayMs),
        "--fetch-concurrency",
        String(settings.fetchConcurrency),
        "--throughput-mibps",
        String(settings.throughputMiBps),
        "--holes",
        settings.holes,
        "--name",
        FS_NAME,
        "--fetch-log",
        paths.fetches,
      ],
      // Its own process group: a Ctrl-C meant for the lab must not kill it before the lab has
      // unmounted what sits on it.
      { stdio: ["ignore", logFile.fd, logFile.fd], detached: true },
    );
    child.unref();
    if (child.pid === undefined) throw new Error(`could not start ${PYTHON}`);
    identity = await processIdentity(child.pid);
    if (identity) await registerLabProcess(root, PROCESS_NAME, child.pid);
    const deadline = Date.now() + 15_000;
    for (;;) {
      if ((await listMounts()).some((m) => m.target === paths.mountPoint && m.fsType === `fuse.${FS_NAME}`)) break;
      if (child.exitCode !== null || child.signalCode !== null || Date.now() > deadline) {
        const output = await readFile(paths.log, "utf8").catch(() => "");
        throw new Error(
          `the cold-snapshot FUSE process did not mount ${paths.mountPoint}: ` +
            `${output.trim().split("\n").slice(-3).join(" | ")}`,
        );
      }
      await sleep(25);
    }
  } catch (error) {
    if (identity) process.kill(identity.pid, "SIGKILL");
    throw error;
  } finally {
    await logFile.close();
  }
  log?.info("lab.cold", "cold snapshots on", { mountPoint: paths.mountPoint, ...settings });

  const linkOf = (volumeId: string) => {
    assertLabId(volumeId, "vol");
    return join(paths.source, `${volumeId}.img`);
  };
  const control = async (command: Record<string, unknown>) => {
    // One write per command: the FUSE process parses each write as one JSON object.
    await writeFile(join(paths.mountPoint, ".cold-control"), JSON.stringify(command));
  };
  let closed = false;

  const layer: ColdLayer = {
    mountPoint: paths.mountPoint,
    options: settings,

    async volumeCreated(volumeId, image, fromSnapshotId) {
      if (fromSnapshotId === undefined) return;
      await link(image, linkOf(volumeId));
      const rate = context.initializationRate?.(volumeId);
      log?.info("lab.cold", "volume from a snapshot: served cold", {
        volumeId,
        snapshot: fromSnapshotId,
        initializationRate: rate,
      });
      if (rate) await layer.initialize(volumeId, rate * (context.speedup ?? 1));
    },

    async volumeDeleted(volumeId) {
      await rm(linkOf(volumeId), { force: true });
    },

    backingFile(volumeId, image) {
      return existsSync(linkOf(volumeId)) ? join(paths.mountPoint, `${volumeId}.img`) : image;
    },

    isCold: (volumeId) => existsSync(linkOf(volumeId)),

    initializationProgress(volumeId) {
      if (closed || !existsSync(linkOf(volumeId))) return undefined;
      // Read synchronously (the EC2 emulator answers within one turn); the FUSE process
      // serving the file is another process, so this cannot wait on ourselves.
      const parsed = JSON.parse(readFileSync(join(paths.mountPoint, ".cold-status.json"), "utf8")) as {
        files?: Record<string, ColdVolumeStatus>;
      };
      const status = parsed.files?.[`${volumeId}.img`];
      return status ? { done: status.warmChunks, total: status.chunks } : undefined;
    },

    async volumeStatus(volumeId) {
      if (!existsSync(linkOf(volumeId))) return undefined;
      const text = await readFile(join(paths.mountPoint, ".cold-status.json"), "utf8");
      const parsed = JSON.parse(text) as { files?: Record<string, ColdVolumeStatus> };
      return parsed.files?.[`${volumeId}.img`];
    },

    async fetchOrder(volumeId) {
      return (await layer.fetches(volumeId)).map((fetch) => fetch.chunk);
    },

    async fetches(volumeId) {
      const file = `${volumeId}.img`;
      const text = await readFile(paths.fetches, "utf8").catch(() => "");
      return text
        .split("\n")
        .map((line) => line.split(" "))
        .filter(([name, index]) => name === file && index !== undefined)
        .map(([, index, queued, kind, at]) => ({
          chunk: Number(index),
          queuedMs: Number(queued ?? 0),
          by: kind === "w" ? ("write" as const) : ("read" as const),
          atMs: Math.round(Number(at ?? Number.NaN) * 1000),
        }));
    },

    async initialize(volumeId, rateMiBps) {
      if (!existsSync(linkOf(volumeId))) return;
      await control({ op: "initialize", file: `${volumeId}.img`, rateMiBps });
    },

    async cool(volumeId) {
      await control({ op: "cool", file: `${volumeId}.img` });
    },

    async setFirstReadDelay(volumeId, delayMs) {
      if (!(delayMs >= 0)) throw new Error(`a first-read delay must be >= 0 ms, got ${delayMs}`);
      await control({ op: "delay", file: `${volumeId}.img`, delayMs });
    },

    async close() {
      if (closed) return;
      closed = true;
      // What sits on a cold loop device must go before the FUSE process: with it gone, the
      // kernel would fail their writes (an XFS unmount would shut the filesystem down).
      const loops = (await listLoopDevices(log)).filter((loop) => isUnder(loop.backingFile, paths.mountPoint));
      const devices = new Set(loops.map((loop) => loop.device));
      const mounts = (await listMounts())
        .filter((m) => devices.has(m.source))
        .sort((a, b) => b.target.length - a.target.length);
      for (const mount of mounts) await run("umount", [mount.target], { log, check: false });
      for (const loop of loops) await detachLoop(loop, log);
      await run("fusermount", ["-u", paths.mountPoint], { log, check: false });
      if (identity) {
        const deadline = Date.now() + 5_000;
        while ((await isProcessAlive(identity)) && Date.now() < deadline) await sleep(25);
        if (await isProcessAlive(identity)) process.kill(identity.pid, "SIGKILL");
      }
      await unregisterLabProcess(root, PROCESS_NAME);
      log?.info("lab.cold", "cold snapshots off", { mountPoint: paths.mountPoint });
    },
  };
  return layer;
}
