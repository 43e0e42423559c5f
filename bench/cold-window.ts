/**
 * What a service's window on a cold lab volume was spent on (bench/cold.ts): which chunks were
 * fetched during it (file data or the filesystem's own metadata: inodes, directories, the log,
 * btrees), whether a read or a write asked for each, how long each queued for a fetch slot behind
 * others' fetches, and the CPU the cold layer's FUSE process and the whole machine spent meanwhile.
 */
import { spawn } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { run } from "../src/exec.ts";
import { DATA_ROOT_SUBDIR } from "../src/layout.ts";
import { fileRanges } from "../src/host/need-reads.ts";
import type { ByteRange } from "../src/host/extents.ts";
import type { ColdFetch } from "../src/lab/volumes/cold.ts";

const TICKS_PER_SECOND = 100;

/** CPU seconds (user + system) of a process, from /proc/<pid>/stat; undefined once it is gone. */
export async function processCpuSeconds(pid: number): Promise<number | undefined> {
  const text = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined);
  if (!text) return undefined;
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
}

/** Busy and total CPU seconds of the machine so far (all cores), from /proc/stat. */
export async function machineCpuSeconds(): Promise<{ busy: number; total: number; iowait: number }> {
  const line = (await readFile("/proc/stat", "utf8")).split("\n")[0]!;
  const ticks = line.trim().split(/\s+/).slice(1).map(Number);
  const total = ticks.reduce((a, b) => a + b, 0);
  const idle = (ticks[3] ?? 0) + (ticks[4] ?? 0);
  return { busy: (total - idle) / TICKS_PER_SECOND, total: total / TICKS_PER_SECOND, iowait: (ticks[4] ?? 0) / 100 };
}

/** The cold layer's FUSE process: the python3 running cold-fuse.py on the lab root's mount. */
export async function coldFusePid(labRoot: string): Promise<number | undefined> {
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "");
    const args = cmdline.split("\0");
    if (args.some((a) => a.endsWith("cold-fuse.py")) && args.some((a) => a.startsWith(labRoot))) return Number(entry);
  }
  return undefined;
}

/**
 * The data ranges of every regular file of the data-root on the mounted volume. fileRanges resolves
 * names from the volume's root (as the need list names them), so the paths given are relative to
 * the mount point, the data-root's folder included.
 */
export async function fileDataRanges(mountPoint: string): Promise<ByteRange[]> {
  const root = join(mountPoint, DATA_ROOT_SUBDIR);
  const { stdout } = await run("find", [root, "-xdev", "-type", "f", "-size", "+0"], { check: false });
  const files = stdout
    .split("\n")
    .filter(Boolean)
    .map((path) => relative(mountPoint, path));
  return (await fileRanges(mountPoint, files)).ranges;
}

/** Fetches of one kind during the window. */
export interface FetchGroup {
  fetches: number;
  byWrite: number;
  /** Summed and median time the fetches queued for a slot behind others' (ms). */
  queuedMs: number;
  queuedP50Ms: number;
}

export interface WindowFetches {
  /** Chunks holding file data (the images' files, dockerd's own files). */
  fileData: FetchGroup;
  /** Chunks holding none: the filesystem's metadata (inodes, directories, log, btrees) or free space. */
  metadata: FetchGroup;
}

function group(fetches: readonly ColdFetch[]): FetchGroup {
  const queued = fetches.map((f) => f.queuedMs).sort((a, b) => a - b);
  return {
    fetches: fetches.length,
    byWrite: fetches.filter((f) => f.by === "write").length,
    queuedMs: Math.round(queued.reduce((a, b) => a + b, 0)),
    queuedP50Ms: Math.round(queued[queued.length >> 1] ?? 0),
  };
}

/** The window's fetches split by what their chunk holds. */
export function classifyFetches(
  fetches: readonly ColdFetch[],
  fileData: readonly ByteRange[],
  chunkBytes: number,
): WindowFetches {
  const dataChunks = new Set<number>();
  for (const range of fileData)
    for (let c = Math.floor(range.start / chunkBytes); c * chunkBytes < range.end; c++) dataChunks.add(c);
  return {
    fileData: group(fetches.filter((f) => dataChunks.has(f.chunk))),
    metadata: group(fetches.filter((f) => !dataChunks.has(f.chunk))),
  };
}

/**
 * A warm probe: one 4 KiB direct read of the device's first block (read at mount: warm) every
 * `everyMs`, each one's latency in ms. What a service's read of a warm block waits behind the
 * reads queued before it (the loop device, the kernel's FUSE queue, the cold layer). Its reads
 * are others' reads to the pre-warm's pacing: an evidence run only, not a timed one.
 */
const PROBE = `
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 4096)
every = float(sys.argv[2]) / 1000
while True:
    t = time.monotonic()
    os.preadv(fd, [buf], 0)
    print(round((time.monotonic() - t) * 1000, 2), flush=True)
    time.sleep(every)
`;

export function startWarmProbe(device: string, everyMs: number): { stop(): Promise<number[]> } {
  const child = spawn("python3", ["-c", PROBE, device, String(everyMs)], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
  return {
    async stop() {
      child.kill("SIGTERM");
      await new Promise((resolve) => child.once("close", resolve));
      return out.split("\n").filter(Boolean).map(Number);
    },
  };
}
