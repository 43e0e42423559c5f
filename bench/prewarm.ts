/**
 * Pre-warm benchmark: initializing a cold volume by reading only its allocated data (the agent's
 * `files` strategy) against AWS's documented full-device read, side by side in one run.
 *
 * A lab with cold snapshots (src/lab/volumes/cold.ts: every chunk of a volume made from a snapshot waits
 * `--delay-ms` on its first read) gets an XFS volume of `--size-gib` holding `--fill` of it in
 * incompressible files, snapshotted. Then, each on a fresh cold volume from that snapshot:
 *   seq     a sequential read (AWS's command, limited to `--seq-mib`): the device's measured
 *           sequential throughput on cold blocks;
 *   files   the agent's files initialization (fio replaying reads of the allocated ranges);
 *   device  `fio --filename=<dev> --rw=read --bs=128k --iodepth=32 --ioengine=libaio --direct=1
 *           --name=volume-initialize`.
 * Targets: files <= 1.3 x (allocated bytes / seq throughput), and device / files >= 3.
 *
 *   npx tsx bench/prewarm.ts [--size-gib 4] [--fill 0.25] [--delay-ms 10] [--chunk-kib 512] [--seq-mib 512]
 *
 * Needs root, the lab's Debian packages and python3-pyfuse3 (scripts/setup.sh).
 */
import { mkdir, writeFile } from "node:fs/promises";
import { cpus, release, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import type { ReadTarget } from "../src/agent/ports.ts";
import { run } from "../src/exec.ts";
import { runFio } from "../src/host/fio.ts";
import { createFioReader, deviceSize } from "../src/host/volume-reads.ts";
import { startLab } from "../src/lab/lab.ts";
import { attach, createVolume, makeDataSnapshot, mountXfs } from "../src/lab/volumes/volumes.ts";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const MiB = 1024 * 1024;

const { values } = parseArgs({
  options: {
    "size-gib": { type: "string", default: "4" },
    fill: { type: "string", default: "0.25" },
    "delay-ms": { type: "string", default: "10" },
    "chunk-kib": { type: "string", default: "512" },
    "seq-mib": { type: "string", default: "512" },
    out: { type: "string", default: join(REPO, "bench", "results") },
    help: { type: "boolean", default: false },
  },
});
if (values.help) {
  process.stdout.write(
    "npx tsx bench/prewarm.ts [--size-gib 4] [--fill 0.25] [--delay-ms 10] [--chunk-kib 512] [--seq-mib 512] " +
      "[--out DIR]\n",
  );
  process.exit(0);
}
const sizeGiB = Number(values["size-gib"]);
const fill = Number(values.fill);
const delayMs = Number(values["delay-ms"]);
const chunkBytes = Number(values["chunk-kib"]) * 1024;
const seqBytes = Number(values["seq-mib"]) * MiB;

const say = (line: string) => process.stdout.write(line + "\n");
const lab = await startLab({
  name: "bench-prewarm",
  coldSnapshots: { firstReadDelayMs: delayMs, chunkBytes },
  delays: { createMs: 0, attachMs: 0, detachMs: 0, snapshotMs: 0 },
  deviceDelayMs: 0,
});
try {
  const ec2 = lab.ec2Client();
  const dataMiB = Math.round(sizeGiB * 1024 * fill);
  say(
    `lab ${lab.root}: ${sizeGiB} GiB volume, ${dataMiB} MiB of data (${fill * 100} %), first read of a ` +
      `${chunkBytes / 1024} KiB chunk waits ${delayMs} ms`,
  );
  const snapshotId = await makeDataSnapshot(lab, ec2, {
    sizeGiB,
    dataMiB,
    files: Math.max(1, Math.ceil(dataMiB / 64)),
  });
  const host = await lab.addHost();
  const zone = host.instance.availabilityZone;
  const fresh = async (mount: boolean): Promise<ReadTarget> => {
    const volumeId = await createVolume(ec2, zone, { snapshotId });
    const device = await attach(lab, ec2, volumeId, host);
    return { device, mountPoint: mount ? await mountXfs(device, host, volumeId) : "" };
  };
  const reader = createFioReader();
  const dropCaches = () => writeFile("/proc/sys/vm/drop_caches", "3\n");

  // seq: the device's sequential throughput on cold blocks.
  const seqTarget = await fresh(false);
  await dropCaches();
  const seqReport = await runFio({
    name: "volume-initialize",
    device: seqTarget.device,
    rw: "read",
    blockSize: "128k",
    ioDepth: 32,
    size: seqBytes,
  });
  const seqSeconds = seqReport.read.runtimeMs / 1000;
  const seqMiBps = seqReport.read.ioBytes / MiB / seqSeconds;
  say(
    `seq:    ${(seqReport.read.ioBytes / MiB).toFixed(0)} MiB in ${seqSeconds.toFixed(2)} s = ` +
      `${seqMiBps.toFixed(1)} MiB/s`,
  );

  // files: the agent's initialization of the allocated data.
  const filesTarget = await fresh(true);
  const allocated = await reader.allocatedBytes(filesTarget);
  await dropCaches();
  let started = performance.now();
  const files = await reader.initialize(filesTarget, "files", {
    fromOffset: 0,
    ioDepth: 32,
    maxIoBytes: MiB,
    onProgress: () => undefined,
  });
  const filesSeconds = (performance.now() - started) / 1000;
  say(
    `files:  ${(files.readBytes / MiB).toFixed(0)} MiB (allocated ${(allocated / MiB).toFixed(0)} MiB) in ` +
      `${filesSeconds.toFixed(2)} s = ${(files.readBytes / MiB / filesSeconds).toFixed(1)} MiB/s`,
  );

  // device: AWS's documented full read.
  const deviceTarget = await fresh(false);
  const size = await deviceSize(deviceTarget.device);
  await dropCaches();
  started = performance.now();
  const deviceReport = await runFio({
    name: "volume-initialize",
    device: deviceTarget.device,
    rw: "read",
    blockSize: "128k",
    ioDepth: 32,
  });
  const deviceSeconds = (performance.now() - started) / 1000;
  say(
    `device: ${(deviceReport.read.ioBytes / MiB).toFixed(0)} MiB in ${deviceSeconds.toFixed(2)} s = ` +
      `${(deviceReport.read.ioBytes / MiB / deviceSeconds).toFixed(1)} MiB/s`,
  );

  const ideal = allocated / MiB / seqMiBps;
  const ratio = deviceSeconds / filesSeconds;
  const result = {
    date: new Date().toISOString(),
    machine: { cpus: cpus().length, memGiB: Math.round(totalmem() / 2 ** 30), kernel: release() },
    settings: { sizeGiB, fill, delayMs, chunkBytes, seqBytes },
    volumeBytes: size,
    allocatedBytes: allocated,
    seq: { bytes: seqReport.read.ioBytes, seconds: seqSeconds, mibps: seqMiBps },
    files: { bytes: files.readBytes, seconds: filesSeconds, mibps: files.readBytes / MiB / filesSeconds },
    device: {
      bytes: deviceReport.read.ioBytes,
      seconds: deviceSeconds,
      mibps: deviceReport.read.ioBytes / MiB / deviceSeconds,
    },
    idealFilesSeconds: ideal,
    filesVsIdeal: filesSeconds / ideal,
    /** The same with the full read's own throughput as the device's sequential throughput. */
    filesVsIdealFromDeviceRead: filesSeconds / (allocated / deviceReport.read.ioBytes) / deviceSeconds,
    deviceVsFiles: ratio,
    targets: { filesWithin1_3xIdeal: filesSeconds <= 1.3 * ideal, deviceAtLeast3xFiles: ratio >= 3 },
  };
  say("");
  say("| method | bytes read | seconds | MiB/s |");
  say("| --- | ---: | ---: | ---: |");
  say(
    `| files (allocated data) | ${(files.readBytes / MiB).toFixed(0)} MiB | ${filesSeconds.toFixed(2)} | ` +
      `${result.files.mibps.toFixed(1)} |`,
  );
  say(
    `| device (AWS full read) | ${(deviceReport.read.ioBytes / MiB).toFixed(0)} MiB | ` +
      `${deviceSeconds.toFixed(2)} | ${result.device.mibps.toFixed(1)} |`,
  );
  say("");
  say(
    `allocated ${(allocated / MiB).toFixed(0)} MiB / seq ${seqMiBps.toFixed(1)} MiB/s = ${ideal.toFixed(2)} s; ` +
      `files took ${result.filesVsIdeal.toFixed(2)} x that (target <= 1.3): ` +
      `${result.targets.filesWithin1_3xIdeal ? "met" : "MISSED"}`,
  );
  say(
    `(with the full read's own ${result.device.mibps.toFixed(1)} MiB/s as the device's throughput: ` +
      `${result.filesVsIdealFromDeviceRead.toFixed(2)} x)`,
  );
  say(
    `device / files = ${ratio.toFixed(2)} x (target >= 3): ${result.targets.deviceAtLeast3xFiles ? "met" : "MISSED"}`,
  );
  await mkdir(values.out, { recursive: true });
  const file = join(values.out, `prewarm-${result.date.replace(/[:.]/g, "-").slice(0, 19)}.json`);
  await writeFile(file, JSON.stringify(result, null, 2) + "\n");
  say(`written to ${file}`);
  for (const target of [filesTarget]) await run("umount", [target.mountPoint], { check: false });
} finally {
  await lab.close();
}
