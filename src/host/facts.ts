/**
 * Facts about the host for the metrics, `status` and the log, read with `systeminformation`:
 * the cache filesystem's size and use (df), the block device's model and serial (lsblk), memory
 * and CPU. The package is imported only here and only when a fact is asked for: it costs about
 * 50-80 ms to load, which a boot that publishes no metrics should not pay.
 *
 * It runs df and lsblk itself (through a shell, with fixed command lines and no input of ours),
 * so nothing here touches a device; these are facts to show, never to decide a write on (the
 * device's identity for that is src/host/serial.ts, read from sysfs).
 */
import { readFile, statfs } from "node:fs/promises";
import { findInstanceStoreDisks, type InstanceStoreDisk } from "./instance-store.ts";

/** The cache volume's filesystem as df sees it, with the device under it. */
export interface CacheFilesystem {
  mountPoint: string;
  /** The mounted device (`/dev/nvme1n1`, `/dev/loop3`). */
  device: string;
  fsType: string;
  sizeBytes: number;
  usedBytes: number;
  availableBytes: number;
  /** used / (used + available), as df's Use% counts it (blocks reserved for root excluded). */
  usedRatio: number;
  /** Inodes in all and free (statfs(2)); absent when statfs failed. */
  inodes?: number;
  freeInodes?: number;
  /**
   * The device's model and serial as lsblk reports them; an EBS NVMe volume's serial is its id without the dash. Absent
   * for a loop device.
   */
  model?: string;
  serial?: string;
}

/** The figures of a fill: from df at boot (CacheFilesystem) or statfs (the prune's FilesystemFill). */
export type FillFigures = Pick<
  CacheFilesystem,
  "mountPoint" | "device" | "sizeBytes" | "usedBytes" | "availableBytes" | "usedRatio" | "inodes" | "freeInodes"
>;

export interface HostContext {
  memoryBytes: number;
  cpuCores: number;
  cpuModel: string;
  /**
   * The instance's NVMe instance-store disks (instance-store.ts): seen and reported, never written. Absent: not looked
   * for.
   */
  instanceStore?: InstanceStoreDisk[];
}

type Si = typeof import("systeminformation");
let loaded: Promise<Si> | undefined;
function si(): Promise<Si> {
  // A CommonJS package: Node's import gives its exports by name, the agent's esbuild bundle only
  // as `default` (module.exports); module.exports is right in both.
  loaded ??= import("systeminformation").then((module) => (module as Si & { default?: Si }).default ?? module);
  return loaded;
}

/**
 * The filesystem mounted exactly at `mountPoint`, or undefined when nothing is mounted there.
 * (systeminformation's own filter matches any mount containing the text, so `/mnt/cache` would
 * also match `/mnt/cache2`: the exact match is made here.)
 */
export async function readCacheFilesystem(mountPoint: string): Promise<CacheFilesystem | undefined> {
  const lib = await si();
  const mounted = (await lib.fsSize()).find((fs) => fs.mount === mountPoint);
  if (!mounted) return undefined;
  const facts: CacheFilesystem = {
    mountPoint,
    device: mounted.fs,
    fsType: mounted.type,
    sizeBytes: mounted.size,
    usedBytes: mounted.used,
    availableBytes: mounted.available,
    usedRatio: mounted.used + mounted.available > 0 ? mounted.used / (mounted.used + mounted.available) : 0,
  };
  const inodes = await statfs(mountPoint).catch(() => undefined);
  if (inodes) {
    facts.inodes = inodes.files;
    facts.freeInodes = inodes.ffree;
  }
  const name = mounted.fs.replace(/^\/dev\//, "");
  const block = (await lib.blockDevices()).find((b) => b.name === name);
  if (block?.model) facts.model = block.model.trim();
  if (block?.serial) facts.serial = block.serial.trim();
  return facts;
}

/** Memory, CPU and the instance-store disks under `sysfsRoot` (config `paths.sysfsRoot`), for the metrics' context. */
export async function readHostContext(sysfsRoot: string): Promise<HostContext> {
  const lib = await si();
  const [mem, cpu, instanceStore] = await Promise.all([lib.mem(), lib.cpu(), findInstanceStoreDisks(sysfsRoot)]);
  return {
    instanceStore,
    memoryBytes: mem.total,
    cpuCores: cpu.cores,
    cpuModel:
      [cpu.manufacturer, cpu.brand]
        .filter((part) => part && part !== "unknown")
        .join(" ")
        .trim() || "unknown",
  };
}

/** The bytes of MemAvailable in /proc/meminfo text (`MemAvailable:  123456 kB`); undefined when absent. */
export function parseMemAvailable(meminfo: string): number | undefined {
  const match = /^MemAvailable:\s+(\d+)\s+kB\s*$/m.exec(meminfo);
  if (!match) return undefined;
  const kib = Number(match[1]);
  return Number.isSafeInteger(kib) ? kib * 1024 : undefined;
}

/** The host's available memory (the kernel's estimate, without swapping), in bytes; undefined when unreadable. */
export async function readMemAvailable(meminfo = "/proc/meminfo"): Promise<number | undefined> {
  return parseMemAvailable(await readFile(meminfo, "utf8").catch(() => ""));
}
