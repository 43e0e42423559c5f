/**
 * How many reads in flight a cold volume of the lab serves in parallel: fio's sequential reads of
 * 96 MiB of a fresh cold volume (every chunk fetched once) at several block sizes and depths, with
 * fio's throughput and median completion latency and the cold layer's most fetches in flight. The
 * depth past which throughput stops growing is what the pre-warm's need-ordered reads keep in
 * flight (src/host/read-phases.ts): deeper only makes a service's read wait longer.
 *
 *   sudo npx tsx bench/cold-depth.ts [--delay-ms 40] [--chunk-kib 512]
 */
import { parseArgs } from "node:util";
import { run } from "../src/exec.ts";
import { startLab } from "../src/lab/lab.ts";
import { attach, createVolume, makeDataSnapshot } from "../src/lab/volumes/volumes.ts";

const { values } = parseArgs({
  options: { "delay-ms": { type: "string", default: "40" }, "chunk-kib": { type: "string", default: "512" } },
});
const CASES: Array<[string, number[]]> = [
  ["1M", [1, 2, 4, 8, 16, 32]],
  ["512k", [8, 16]],
  ["128k", [32]],
];
const lab = await startLab({
  name: "bench-cold-depth",
  coldSnapshots: { firstReadDelayMs: Number(values["delay-ms"]), chunkBytes: Number(values["chunk-kib"]) * 1024 },
  delays: { createMs: 0, attachMs: 0, detachMs: 0, snapshotMs: 0 },
  deviceDelayMs: 0,
});
try {
  const ec2 = lab.ec2Client();
  const snapshotId = await makeDataSnapshot(lab, ec2, { sizeGiB: 2, dataMiB: 64, files: 1 });
  const host = await lab.addHost();
  for (const [bs, depths] of CASES) {
    for (const depth of depths) {
      const volumeId = await createVolume(ec2, host.instance.availabilityZone, { snapshotId });
      const device = await attach(lab, ec2, volumeId, host);
      const { stdout } = await run("fio", [
        "--name=depth",
        `--filename=${device}`,
        "--rw=read",
        `--bs=${bs}`,
        `--iodepth=${depth}`,
        "--ioengine=libaio",
        "--direct=1",
        "--readonly",
        "--size=96M",
        "--offset=256M",
        "--output-format=json",
      ]);
      const read = (
        JSON.parse(stdout) as {
          jobs: Array<{ read: { bw_bytes: number; clat_ns: { percentile: Record<string, number> } } }>;
        }
      ).jobs[0]!.read;
      const status = await lab.cold!.volumeStatus(volumeId);
      process.stdout.write(
        `bs ${bs} depth ${depth}: ${(read.bw_bytes / 2 ** 20).toFixed(1)} MiB/s, completion p50 ` +
          `${(read.clat_ns.percentile["50.000000"]! / 1e6).toFixed(1)} ms, ` +
          `most fetches in flight ${status?.mostFetchesInFlight}\n`,
      );
    }
  }
} finally {
  await lab.close();
}
