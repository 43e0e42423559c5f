/**
 * A timed fio read of a device region (read-only, direct): how many reads, how many a second, their
 * median completion latency and the throughput. The acceptance run times first reads and warm
 * reads with it.
 */
import type { Logger } from "../log.ts";
import { runFio } from "./fio.ts";
import { assertDevicePath } from "./serial.ts";

const MiB = 1024 * 1024;

export interface TimedReadJob {
  name: string;
  offset: number;
  size: number;
  blockBytes: number;
  /** Bytes skipped after each read: one read every blockBytes + skipBytes. */
  skipBytes?: number;
  ioDepth: number;
}

export interface ReadTimingFigures {
  reads: number;
  iops: number;
  medianMs: number;
  mibps: number;
}

/** Reads the region with fio; throws FioError when fio fails or reports no latency. */
export async function timeDeviceReads(
  device: string,
  job: TimedReadJob,
  options: { log?: Logger; timeoutMs?: number } = {},
): Promise<ReadTimingFigures> {
  assertDevicePath(device);
  const report = await runFio(
    {
      name: job.name,
      device,
      rw: "read",
      blockSize: String(job.blockBytes),
      ioDepth: job.ioDepth,
      offset: job.offset,
      size: job.size,
      ...(job.skipBytes ? { skipBytes: job.skipBytes } : {}),
    },
    { ...(options.log ? { log: options.log } : {}), timeoutMs: options.timeoutMs ?? 600_000 },
  );
  const { latencyMs } = report.read;
  return {
    reads: report.read.totalIos,
    iops: report.read.iops,
    medianMs: latencyMs.p50 ?? latencyMs.mean ?? 0,
    mibps: report.read.bytesPerSecond / MiB,
  };
}
