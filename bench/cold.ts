/**
 * Cold-volume benchmark: boot → the first `docker run` of the node's images on a volume fresh from a
 * snapshot, per pre-warm strategy, against the same volume initialized.
 *
 * A lab with cold snapshots (src/lab/volumes/cold.ts) set by an EBS model (`--ebs-model FILE`, a
 * calibration; default src/lab/volumes/ebs-model.default.json, the lab's assumptions: the first read of
 * each 512 KiB chunk waits 40 ms, up to 8 fetches of a volume at once, 125 MiB/s; `--delay-ms` and
 * `--chunk-kib` override the model's first-read delay and block) builds, per fraction, a golden
 * snapshot the product's way (src/lab/volumes/golden.ts: `snapshot build`'s steps, the need list
 * recorded by running each image): a filler image of `--filler-mib` loaded first (other data, read
 * first in device order), then 4 images of `--image-mib` each in 4 MiB files, whose CMD reads the
 * first `fraction` of its files once
 * (`cat … > /dev/null`). Then, per case, on a fresh cold volume from that snapshot, mounted, with the
 * host's private dockerd started on the volume's data-root (the boot's `start-docker`):
 *   initialized  the volume read whole first (the keeper's), then the service;
 *   off          the service alone;
 *   check        what the agent decides by default (on a volume created from its snapshot just now: no
 *                sample, the files initialization by need in the background, as `need`);
 *   files        the files initialization as the background run does it, with no image named;
 *   need         the same with the node's images named (their files first).
 * The service: for each of the node's images (1 or 4, concurrently), `docker run --rm --network none`
 * of it, `--head-start-ms` after `ready` (the default's reads of a volume known cold begin at the mount, before
 * dockerd starts, and are handed over at `ready`, as the boot does; the others start at `ready`; osparc's first
 * `docker run` comes after the join, the autoscaler's next poll and its scheduling: see bench/README.md).
 * Timed: the `docker run`s, from the first start to the last exit. Beside each case: the cold
 * layer's fetches before and during the service, the device's bytes read, the pre-warm's own lines.
 *
 *   sudo npx tsx bench/cold.ts [--ebs-model FILE] [--delay-ms 40] [--chunk-kib 512] [--image-mib 32] [--filler-mib 128]
 *                         [--head-start-ms 2000] [--runs 3]
 *
 * Needs root, the lab's Debian packages, busybox-static, strace and python3-pyfuse3 (scripts/setup.sh).
 */
import { spawnSync } from "node:child_process";
import { mkdir, writeFile } from "node:fs/promises";
import { cpus, loadavg, release, totalmem } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { headStartAtMount, planPrewarm, DEFAULT_PREWARM, YIELD_IO_DEPTH } from "../src/agent/prewarm/plan.ts";
import type { ReadTarget } from "../src/agent/ports.ts";
import { run } from "../src/exec.ts";
import { DATA_ROOT_SUBDIR } from "../src/layout.ts";
import { createFioReader } from "../src/host/volume-reads.ts";
import { poolThreads, READ_POOL_THREADS } from "../src/host/cache-reads.ts";
import { deviceCounters } from "../src/host/read-pacer.ts";
import { createMemoryLogger } from "../src/log.ts";
import { startLab } from "../src/lab/lab.ts";
import { buildGoldenSnapshot } from "../src/lab/volumes/golden.ts";
import {
  coldSnapshotOptionsOf,
  DEFAULT_EBS_MODEL_FILE,
  describeEbsModel,
  readEbsModel,
} from "../src/lab/volumes/ebs-model.ts";
import { attach, createVolume, detach, mountXfs } from "../src/lab/volumes/volumes.ts";
import {
  classifyFetches,
  coldFusePid,
  fileDataRanges,
  machineCpuSeconds,
  processCpuSeconds,
  startWarmProbe,
  type WindowFetches,
} from "./cold-window.ts";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const MiB = 1024 * 1024;
const FILE_MIB = 4;
const IMAGES = 4;

const ALL_STRATEGIES = ["initialized", "off", "check", "files", "need"] as const;

const { values } = parseArgs({
  options: {
    "ebs-model": { type: "string" },
    "delay-ms": { type: "string" },
    "chunk-kib": { type: "string" },
    "image-mib": { type: "string", default: "32" },
    "filler-mib": { type: "string", default: "128" },
    "head-start-ms": { type: "string", default: "2000" },
    runs: { type: "string", default: "3" },
    "node-images": { type: "string", default: "1,4" },
    fractions: { type: "string", default: "10,50,100" },
    strategies: { type: "string", default: "initialized,off,check,files,need" },
    out: { type: "string", default: join(REPO, "bench", "results") },
    "probe-ms": { type: "string", default: "0" },
    "hand-over": { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (values.help) {
  process.stdout.write(
    "sudo npx tsx bench/cold.ts [--ebs-model FILE] [--delay-ms 40] [--chunk-kib 512] [--image-mib 32]\n" +
      "  [--filler-mib 128]\n" +
      "  --ebs-model FILE: the lab's EBS (schema/ebs-model.schema.json, an acceptance run's calibration);\n" +
      "    default src/lab/volumes/ebs-model.default.json (assumed); --delay-ms, --chunk-kib override it\n" +
      "  [--head-start-ms 2000] [--runs 3] [--node-images 1,4] [--fractions 10,50,100]\n" +
      "  [--strategies initialized,off,check,files,need] [--out DIR] [--probe-ms N]\n" +
      "  --hand-over: check as a single-phase boot before round 3 (its head start cut at `ready` and read again\n" +
      "    by the background run); default: the run begun at the mount, read through (a two-phase host's)\n" +
      "  --probe-ms N: during the service, a warm 4 KiB read of the device every N ms, its latency\n" +
      "    reported (the wait behind reads queued before it); its reads are others' to the pacing:\n" +
      "    for evidence runs, not timed ones\n",
  );
  process.exit(0);
}
// The reader runs in this process, beside docker's start: it gets the pool of Node's threads the agent's units give
// theirs (READ_POOL_THREADS), or its reads through the page cache hold up this process's own file operations (docker's
// start among them), which on a host run in processes of their own. libuv sizes its pool once, at its first use (this
// script's loading): so a child with the size set.
if (poolThreads() !== READ_POOL_THREADS) {
  const child = spawnSync(process.execPath, [...process.execArgv, ...process.argv.slice(1)], {
    stdio: "inherit",
    env: { ...process.env, UV_THREADPOOL_SIZE: String(READ_POOL_THREADS) },
  });
  process.exit(child.status ?? 1);
}
const ebsModelFile = values["ebs-model"] ?? DEFAULT_EBS_MODEL_FILE;
const ebsModel = await readEbsModel(ebsModelFile).catch((error: unknown) => {
  process.stderr.write(`bench/cold.ts: ${(error as Error).message}\n`);
  process.exit(2);
});
const coldOptions = {
  ...coldSnapshotOptionsOf(ebsModel),
  ...(values["delay-ms"] !== undefined ? { firstReadDelayMs: Number(values["delay-ms"]) } : {}),
  ...(values["chunk-kib"] !== undefined ? { chunkBytes: Number(values["chunk-kib"]) * 1024 } : {}),
};
const delayMs = coldOptions.firstReadDelayMs;
const chunkBytes = coldOptions.chunkBytes;
const imageMiB = Number(values["image-mib"]);
const fillerMiB = Number(values["filler-mib"]);
const headStartMs = Number(values["head-start-ms"]);
const runs = Math.max(1, Number(values.runs));
const probeMs = Number(values["probe-ms"]);
const handOver = values["hand-over"];
const FRACTIONS = values.fractions.split(",").map((p) => Number(p) / 100);
const NODE_IMAGES = values["node-images"].split(",").map(Number);
const STRATEGIES = values.strategies.split(",") as Array<(typeof ALL_STRATEGIES)[number]>;
for (const s of STRATEGIES) if (!ALL_STRATEGIES.includes(s)) throw new Error(`--strategies: no strategy ${s}`);
for (const s of ["initialized", "off"] as const)
  if (!STRATEGIES.includes(s)) throw new Error(`--strategies: ${s} is the baseline of every ratio`);
const median = (xs: number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};
const filesPerImage = Math.max(1, Math.round(imageMiB / FILE_MIB));
const image = (i: number) => `bench/img-${i}:1`;
/** The files image i reads at start (its CMD), when it reads `fraction` of its image. */
const startReads = (fraction: number) =>
  Array.from(
    { length: Math.max(1, Math.round(filesPerImage * fraction)) },
    (_, f) => `/payload/blob-${String(f).padStart(3, "0")}.bin`,
  );

const say = (line: string) => process.stdout.write(line + "\n");

/** The volume's fetches per 100 ms from `fromMs` on (the mount of a case's volume). */
function fetchTimeline(fetches: readonly { atMs: number }[], fromMs: number): number[] {
  const timeline: number[] = [];
  for (const { atMs } of fetches) {
    const slot = Math.floor((atMs - fromMs) / 100);
    if (!(slot >= 0)) continue;
    while (timeline.length <= slot) timeline.push(0);
    timeline[slot]!++;
  }
  return timeline;
}

/**
 * Seconds from the mount to the first 100 ms in which the volume fetched at half the model's rate or more (its
 * fetches at once per first-read delay, or its throughput cap if lower): the head start's reads under way, as a
 * starting dockerd's one-by-one reads never are where EBS serves several fetches at once.
 */
function firstBusy(timeline: readonly number[]): number | undefined {
  const perSlot = Math.min(
    (coldOptions.fetchConcurrency * 100) / delayMs,
    (coldOptions.throughputMiBps * 1024 * 1024) / 10 / chunkBytes,
  );
  const slot = timeline.findIndex((n) => n >= perSlot / 2);
  return slot < 0 ? undefined : slot / 10;
}
const lab = await startLab({
  name: "bench-cold",
  coldSnapshots: coldOptions,
  delays: { createMs: 0, attachMs: 0, detachMs: 0, snapshotMs: 0 },
  deviceDelayMs: 0,
});
try {
  const ec2 = lab.ec2Client();
  say(describeEbsModel(ebsModel, ebsModelFile));
  say(
    `lab ${lab.root}: a filler image of ${fillerMiB} MiB, then ${IMAGES} images of ${imageMiB} MiB ` +
      `(${FILE_MIB} MiB files); first read of a ${chunkBytes / 1024} KiB chunk waits ${delayMs} ms, ` +
      `${coldOptions.fetchConcurrency} at once, ${coldOptions.throughputMiBps} MiB/s`,
  );
  // One golden snapshot per fraction: each image's CMD reads that fraction of its files, and the
  // build records it into the need list, as a pool volume's builder does.
  const snapshots = new Map<number, string>();
  for (const fraction of FRACTIONS) {
    const build = () =>
      buildGoldenSnapshot(lab, {
        pool: "bench",
        imageSet: `cold-${fraction * 100}`,
        sizeGiB: 2,
        images: [
          { tag: "bench/filler:1", payloadBytes: fillerMiB * MiB, payloadFileBytes: 64 * MiB, cmd: ["/bin/true"] },
          ...Array.from({ length: IMAGES }, (_, i) => ({
            tag: image(i),
            payloadBytes: imageMiB * MiB,
            payloadFileBytes: FILE_MIB * MiB,
            cmd: ["/bin/sh", "-c", `cat ${startReads(fraction).join(" ")} > /dev/null`],
          })),
        ],
      });
    // The build's identification of the unmounted volume has been seen to find its root empty on this
    // busy machine (once in a few builds): a second build, as an operator would run it again.
    const golden = await build().catch((error: unknown) => {
      say(`golden build failed, building again: ${String(error).split("\n")[0]}`);
      return build();
    });
    snapshots.set(fraction, golden.snapshotId);
    say(`golden snapshot ${golden.snapshotId}: images read ${fraction * 100} % of their files at start`);
  }
  const host = await lab.addHost();
  const fusePid = await coldFusePid(lab.root);
  const zone = host.instance.availabilityZone;
  // The pre-warm's own log: its pacing and fio lines per phase go with each case.
  const readerLog = createMemoryLogger("info");
  const reader = createFioReader({ log: readerLog });
  let volumes = 0;

  /** The node's first services: one `docker run` per image, all at once; seconds until the last exits. */
  const service = async (nodeImages: number) => {
    const dockerd = host.dockerd!;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: nodeImages }, (_, i) =>
        dockerd.docker(["run", "--rm", "--network", "none", image(i)], { timeoutMs: 600_000 }),
      ),
    );
    return (performance.now() - started) / 1000;
  };

  const rows: Array<{
    strategy: string;
    images: number;
    fraction: number;
    run: number;
    seconds: number;
    /** dockerd's start on the volume (the boot's start-docker): the head start must not delay it. */
    dockerStartS: number;
    load: number;
    /** Cold-layer fetches (chunks) before the service, during it; device MiB read during it. */
    fetchesBefore: number;
    fetchesDuring: number;
    /** From the mount (the head start's begin): the service's start; the volume's fetches per 100 ms (firstBusy). */
    serviceFromS: number;
    fullFromS?: number;
    fetchesPer100Ms: number[];
    deviceMiBDuring: number;
    /** The window's fetches: file data or metadata, asked by reads or writes, their wait for a slot. */
    during?: WindowFetches;
    /** CPU seconds in the window: the cold layer's FUSE process, the machine (2 cores: 2 per second). */
    fuseCpuS?: number;
    machineBusyS?: number;
    windowS?: number;
    /** --probe-ms: latency of a warm 4 KiB read during the service. */
    probe?: { reads: number; p50Ms: number; p90Ms: number; maxMs: number };
    note?: string;
  }> = [];
  // Runs outermost: each run passes once over every case, so a burst of load on the machine
  // hits one run of many cases, not every run of one.
  for (let runIndex = 0; runIndex < runs; runIndex++)
    for (const fraction of FRACTIONS) {
      for (const nodeImages of NODE_IMAGES) {
        for (const strategy of STRATEGIES) {
          const snapshotId = snapshots.get(fraction)!;
          const volumeId = await createVolume(ec2, zone, { snapshotId });
          const device = await attach(lab, ec2, volumeId, host);
          const target: ReadTarget = { device, mountPoint: await mountXfs(device, host, `v${++volumes}`) };
          const counters = deviceCounters(device);
          const fetches = async () => (await lab.cold!.volumeStatus(volumeId))?.fetches ?? 0;
          const init = (images?: string[], signal?: AbortSignal, yieldDepth?: number) =>
            reader.initialize(target, "files", {
              fromOffset: 0,
              ioDepth: DEFAULT_PREWARM.initialize.ioDepth,
              maxIoBytes: DEFAULT_PREWARM.initialize.maxIoBytes,
              onProgress: () => undefined,
              ...(images ? { images } : {}),
              ...(signal ? { signal } : {}),
              ...(yieldDepth ? { yieldDepth } : {}),
            });
          let note: string | undefined;
          const stop = new AbortController();
          if (strategy === "initialized") await init();
          const nodeImageNames = Array.from({ length: nodeImages }, (_, i) => image(i));
          const decision = planPrewarm(DEFAULT_PREWARM, {
            volume: { volumeId, snapshotId, createTime: new Date(), tags: {} },
          });
          // A volume known cold (headStartAtMount) is read by need from the mount on, while docker starts. On a
          // two-phase host (the default here) that is the run phase 1 begins at the mount (prewarm --from-mount),
          // which reads through docker's start and `ready` to the end: phase 2 takes it over. With --hand-over, the
          // single-phase boot of round 2: the head start is stopped at `ready` and the background run reads from its
          // plan's start (the head start's blocks a second time, warm).
          const mountRun = strategy === "check" && headStartAtMount(decision);
          const headStop = new AbortController();
          const mountedAtMs = Date.now();
          // The reader's lines from the mount on: the head start's look at its queue comes while docker starts.
          readerLog.lines.length = 0;
          const headStart = mountRun
            ? init(nodeImageNames, handOver ? headStop.signal : stop.signal, YIELD_IO_DEPTH).catch(() => undefined)
            : undefined;
          // The boot's start-docker: dockerd on the volume's data-root (it reads its metadata there).
          await writeFile(
            host.paths.daemonJson,
            JSON.stringify({ "data-root": join(target.mountPoint, DATA_ROOT_SUBDIR) }) + "\n",
          );
          const dockerStarted = performance.now();
          await host.startDocker();
          const dockerStartS = Math.round((performance.now() - dockerStarted) / 10) / 100;
          if (handOver) {
            headStop.abort();
            await headStart;
          }
          let background: Promise<unknown> | undefined = handOver ? undefined : headStart;
          if (strategy === "check") {
            // A sample never holds `ready`: it runs beside the head start, as the boot runs it.
            if (decision.action === "check") background = reader.check(target, DEFAULT_PREWARM.check);
            // Known cold, handed over: the files initialization by need, as the background run reads it.
            if (decision.action === "initialize" && handOver)
              background = init(nodeImageNames, stop.signal, decision.background ? YIELD_IO_DEPTH : undefined).catch(
                () => undefined,
              );
            const verdict = "verdict" in decision ? decision.verdict : "known" in decision ? decision.known : "";
            note = decision.action === "check" ? "sampled" : `${decision.action} ${verdict ?? ""}`;
          }
          // As the background run reads (yielding to others' reads).
          if (strategy === "files") background = init(undefined, stop.signal, YIELD_IO_DEPTH).catch(() => undefined);
          if (strategy === "need")
            background = init(
              Array.from({ length: nodeImages }, (_, i) => image(i)),
              stop.signal,
              YIELD_IO_DEPTH,
            ).catch(() => undefined);
          // The gap between the node's `ready` and the scheduler's first `docker run` there.
          await sleep(headStartMs);
          const fetchesBefore = await fetches();
          const logBefore = (await lab.cold!.fetches(volumeId)).length;
          const bytesBefore = (await counters.readBytes()) ?? 0;
          const fuseBefore = fusePid ? await processCpuSeconds(fusePid) : undefined;
          const cpuBefore = await machineCpuSeconds();
          const load = loadavg()[0]!;
          const probe = probeMs > 0 ? startWarmProbe(device, probeMs) : undefined;
          const serviceFromS = Math.round((Date.now() - mountedAtMs) / 10) / 100;
          const seconds = await service(nodeImages);
          const probeLatencies = (await probe?.stop())?.sort((a, b) => a - b);
          const probeSummary = probeLatencies?.length
            ? {
                reads: probeLatencies.length,
                p50Ms: probeLatencies[probeLatencies.length >> 1]!,
                p90Ms: probeLatencies[Math.floor(probeLatencies.length * 0.9)]!,
                maxMs: probeLatencies.at(-1)!,
              }
            : undefined;
          const cpuAfter = await machineCpuSeconds();
          const fuseAfter = fusePid ? await processCpuSeconds(fusePid) : undefined;
          const fetchesDuring = (await fetches()) - fetchesBefore;
          const windowFetches = (await lab.cold!.fetches(volumeId)).slice(logBefore, logBefore + fetchesDuring);
          const deviceMiBDuring = (((await counters.readBytes()) ?? 0) - bytesBefore) / MiB;
          stop.abort();
          await background;
          const during = classifyFetches(windowFetches, await fileDataRanges(target.mountPoint), chunkBytes);
          const timeline = fetchTimeline(await lab.cold!.fetches(volumeId), mountedAtMs);
          const fullFromS = firstBusy(timeline);
          const fuseCpuS =
            fuseBefore !== undefined && fuseAfter !== undefined
              ? Math.round((fuseAfter - fuseBefore) * 100) / 100
              : undefined;
          const machineBusyS = Math.round((cpuAfter.busy - cpuBefore.busy) * 100) / 100;
          // How the pre-warm read and paced itself: one line per phase.
          if (strategy === "files" || strategy === "need" || (strategy === "check" && note?.startsWith("initialize")))
            note = readerLog.lines
              .filter((line) => /prewarm\.(pace|need|read)/.test(line))
              .map((line) => line.replace(/^.*prewarm\.(pace|need|read): /, "").replace(/ volume=.*$/, ""))
              .join("; ");
          rows.push({
            strategy,
            images: nodeImages,
            fraction,
            run: runIndex,
            seconds,
            dockerStartS,
            load,
            fetchesBefore,
            fetchesDuring,
            serviceFromS,
            ...(fullFromS !== undefined ? { fullFromS } : {}),
            fetchesPer100Ms: timeline,
            deviceMiBDuring: Math.round(deviceMiBDuring * 10) / 10,
            during,
            ...(fuseCpuS !== undefined ? { fuseCpuS } : {}),
            machineBusyS,
            windowS: Math.round(((cpuAfter.total - cpuBefore.total) / cpus().length) * 100) / 100,
            ...(probeSummary ? { probe: probeSummary } : {}),
            ...(note ? { note } : {}),
          });
          say(
            `run ${runIndex + 1} ${strategy} images=${nodeImages} reads=${fraction * 100} %: ` +
              `${seconds.toFixed(2)} s (dockerd started in ${dockerStartS} s), ` +
              `fetches ${fetchesBefore} before + ${fetchesDuring} during, ` +
              `from the mount: service at ${serviceFromS} s, fetching at half the model's rate or more from ` +
              `${fullFromS ?? "never"} s, device ${deviceMiBDuring.toFixed(1)} MiB ` +
              `during, load ${load.toFixed(1)}; during: metadata ${during.metadata.fetches} ` +
              `(${during.metadata.byWrite} by writes, queued ${during.metadata.queuedMs} ms, ` +
              `p50 ${during.metadata.queuedP50Ms}), file data ${during.fileData.fetches} ` +
              `(queued ${during.fileData.queuedMs} ms); cpu fuse ${fuseCpuS ?? "?"} s, ` +
              `machine ${machineBusyS} s` +
              (probeSummary
                ? `; warm probe p50 ${probeSummary.p50Ms} p90 ${probeSummary.p90Ms} max ${probeSummary.maxMs} ms`
                : "") +
              (note ? ` (${note})` : ""),
          );
          await host.dockerd!.stop();
          await run("umount", [target.mountPoint]);
          await detach(ec2, volumeId, host);
        }
      }
    }

  say("");
  say(`median of ${runs} run(s), seconds (× initialized, × off)`);
  say(`| images | service reads | ${STRATEGIES.join(" | ")} |`);
  say(`| ---: | ---: | ${STRATEGIES.map(() => "---:").join(" | ")} |`);
  for (const fraction of FRACTIONS) {
    for (const nodeImages of NODE_IMAGES) {
      const of = (s: string) =>
        median(
          rows
            .filter((r) => r.strategy === s && r.images === nodeImages && r.fraction === fraction)
            .map((r) => r.seconds),
        );
      const base = of("initialized");
      const off = of("off");
      const cells = STRATEGIES.map((s) =>
        s === "initialized"
          ? base.toFixed(2)
          : `${of(s).toFixed(2)} (${(of(s) / base).toFixed(1)}×, ${(of(s) / off).toFixed(2)}×)`,
      );
      say(`| ${nodeImages} | ${fraction * 100} % | ${cells.join(" | ")} |`);
    }
  }
  const result = {
    date: new Date().toISOString(),
    machine: { cpus: cpus().length, memGiB: Math.round(totalmem() / 2 ** 30), kernel: release() },
    settings: {
      delayMs,
      chunkBytes,
      imageMiB,
      fillerMiB,
      filesPerImage,
      fileMiB: FILE_MIB,
      headStartMs,
      handOver,
      runs,
      service: "docker run --rm --network none",
    },
    // The model's file as the project names it, not the machine's path (results are committed).
    ebsModel: { file: relative(REPO, resolve(ebsModelFile)), ...ebsModel },
    cold: lab.cold?.options,
    rows,
  };
  await mkdir(values.out, { recursive: true });
  const file = join(values.out, `cold-${result.date.replace(/[:.]/g, "-").slice(0, 19)}.json`);
  await writeFile(file, JSON.stringify(result, null, 2) + "\n");
  say(`written to ${file}`);
} finally {
  await lab.close();
}
