/**
 * What the acceptance run needs of the world (wire.ts builds the real ones from the host's
 * adapters; the lab test builds them for a lab host): EC2 in the agent's words, the boot's own
 * device lookup by NVMe serial, a read-only mount, fio's timed reads, where to write the file.
 */
import type { ByteRange } from "../../host/extents.ts";
import type { Logger } from "../../log.ts";
import type { Prices } from "../pool/cost.ts";
import type { CloudVolumes, HostStorage, Identity, VolumeCreation } from "../ports.ts";

/** One timed fio read of a device region: `blockBytes` reads, `skipBytes` apart, at a depth. */
export interface TimedRead {
  name: string;
  offset: number;
  size: number;
  blockBytes: number;
  skipBytes?: number;
  ioDepth: number;
}

/** What fio measured of one timed read. */
export interface ReadTiming {
  reads: number;
  iops: number;
  /** fio's median completion latency (ms). */
  medianMs: number;
  mibps: number;
}

export interface AcceptanceSettings {
  pool: string;
  imageSet: string | null;
  /** The device name AttachVolume starts from (config `device`). */
  device: string;
  /** The run mounts its volume under `<mountRoot>/acceptance/`. */
  mountRoot: string;
  attachTimeoutMs: number;
  deviceTimeoutMs: number;
  prices: Pick<Prices, "gibMonthUsd">;
  /** Config `volumes`, as every volume the agent creates gets it. */
  creation?: VolumeCreation;
  /** Where the calibration goes. */
  output: string;
}

export interface AcceptanceDeps {
  log: Logger;
  /** This instance (IMDS). */
  identify(): Promise<Identity>;
  cloudFor(region: string): CloudVolumes;
  storage: Pick<HostStorage, "waitForDevice" | "findDevice" | "identify" | "mountPointOf">;
  /** Mounts read-only (XFS: norecovery too): never writes to the device. */
  mountReadOnly(device: string, mountPoint: string): Promise<void>;
  unmount(mountPoint: string): Promise<void>;
  /** What is mounted strictly below `folder`, deepest first. */
  mountsBelow(folder: string): Promise<string[]>;
  /** The filesystem's allocated byte ranges on its device (XFS, mounted). */
  allocatedRanges(mountPoint: string): Promise<ByteRange[]>;
  deviceBytes(device: string): Promise<number>;
  timeReads(device: string, read: TimedRead): Promise<ReadTiming>;
  /** Writes the file atomically. */
  writeFile(path: string, text: string): Promise<void>;
  /** The lines before the run starts and after it (stdout). */
  say(line: string): void;
  /** A new run's id. */
  newRunId(): string;
  settings: AcceptanceSettings;
}
