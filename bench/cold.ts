/**
 * Cold-volume benchmark: how long a service's first start reads take on a volume fresh from a
 * snapshot, per pre-warm strategy, against the same volume initialized.
 *
 * A lab with cold snapshots (src/lab/volumes/cold.ts: the first read of each chunk waits `--delay-ms`)
 * gets an XFS volume holding `--filler-mib` of other data, then 4 images of `--image-mib` each
 * (files of 4 MiB under docker/overlay2/img-<i>/diff/), and the need list
 * `.ebs-cache-agent/reads.json` naming, per image, the files it reads at start (the first
 * `fraction` of them). Then, per case, on a fresh cold volume from that snapshot:
 *   initialized  the volume read whole first (the keeper's), then the service;
 *   off          the service alone;
 *   check        what the agent decides (on a known-cold volume: no sample), then the service;
 *   files        the files initialization as the background run does it (device order, giving way
 *                to the service's reads), the service at once;
 *   need         the same with the node's images given: their files first.
 * The service reads, for each of the node's images (1 or 4, concurrently), the fraction of its
 * files (10, 50, 100 %) the list names, through the filesystem, `--head-start-ms` after the
 * volume is mounted and the pre-warm began (the gap between the node's `ready` and the first
 * `docker run` the scheduler sends it; every strategy gets it). Timed: the service's reads.
 *
 *   sudo npx tsx bench/cold.ts [--delay-ms 10] [--chunk-kib 512] [--image-mib 64] [--filler-mib 256]
 *                         [--head-start-ms 2000]
 *
 * Needs root, the lab's Debian packages and python3-pyfuse3 (scripts/setup.sh).
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { cpus, release, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { planPrewarm, DEFAULT_PREWARM, YIELD_IO_DEPTH } from "../src/agent/prewarm/plan.ts";
import type { ReadTarget } from "../src/agent/ports.ts";
import { run } from "../src/exec.ts";
import { createFioReader } from "../src/host/volume-reads.ts";
import { createMemoryLogger } from "../src/log.ts";
import { startLab } from "../src/lab/lab.ts";
import { attach, createVolume, detach, makeDataSnapshot, mountXfs } from "../src/lab/volumes/volumes.ts";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const FILE_MIB = 4;
const IMAGES = 4;

const ALL_STRATEGIES = ["initialized", "off", "check", "files", "need"] as const;

const { values } = parseArgs({
  options: {
    "delay-ms": { type: "string", default: "10" },
    "chunk-kib": { type: "string", default: "512" },
    "image-mib": { type: "string", default: "64" },
    "filler-mib": { type: "string", default: "256" },
    "head-start-ms": { type: "string", default: "2000" },
    runs: { type: "string", default: "1" },
    "node-images": { type: "string", default: "1,4" },
    fractions: { type: "string", default: "10,50,100" },
    strategies: { type: "string", default: "initialized,off,check,files,need" },
    out: { type: "string", default: join(REPO, "bench", "results") },
    help: { type: "boolean", default: false },
  },
});
if (values.help) {
  process.stdout.write(
    "sudo npx tsx bench/cold.ts [--delay-ms 10] [--chunk-kib 512] [--image-mib 64] [--filler-mib 256]\n" +
      "  [--head-start-ms 2000] [--runs 1] [--node-images 1,4] [--fractions 10,50,100]\n" +
      "  [--strategies initialized,off,check,files,need] [--out DIR]\n",
  );
  process.exit(0);
}
const delayMs = Number(values["delay-ms"]);
const chunkBytes = Number(values["chunk-kib"]) * 1024;
const imageMiB = Number(values["image-mib"]);
const fillerMiB = Number(values["filler-mib"]);
const headStartMs = Number(values["head-start-ms"]);
const runs = Math.max(1, Number(values.runs));
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
const fileOf = (i: number, f: number) => `overlay2/img-${i}/diff/usr/lib/f${f}.bin`;
/** The files image i reads at start, when it reads `fraction` of its image. */
const startReads = (i: number, fraction: number) =>
  Array.from({ length: Math.max(1, Math.round(filesPerImage * fraction)) }, (_, f) => fileOf(i, f));

const say = (line: string) => process.stdout.write(line + "\n");
const lab = await startLab({
  name: "bench-cold",
  coldSnapshots: { firstReadDelayMs: delayMs, chunkBytes },
  delays: { createMs: 0, attachMs: 0, detachMs: 0, snapshotMs: 0 },
  deviceDelayMs: 0,
});
try {
  const ec2 = lab.ec2Client();
  say(
    `lab ${lab.root}: ${IMAGES} images of ${imageMiB} MiB after ${fillerMiB} MiB of other data; first read of a ` +
      `${chunkBytes / 1024} KiB chunk waits ${delayMs} ms`,
  );
  // One snapshot per fraction: the need list records what the images read at start.
  const snapshots = new Map<number, string>();
  for (const fraction of FRACTIONS) {
    snapshots.set(
      fraction,
      await makeDataSnapshot(lab, ec2, {
        sizeGiB: 2,
        dataMiB: fillerMiB,
        files: Math.max(1, Math.ceil(fillerMiB / 64)),
        addContent: async (mountPoint) => {
          for (let i = 0; i < IMAGES; i++) {
            await mkdir(join(mountPoint, "docker", dirname(fileOf(i, 0))), { recursive: true });
            for (let f = 0; f < filesPerImage; f++) {
              const path = join(mountPoint, "docker", fileOf(i, f));
              await run("dd", ["if=/dev/urandom", `of=${path}`, "bs=1M", `count=${FILE_MIB}`, "status=none"]);
            }
          }
          await mkdir(join(mountPoint, ".ebs-cache-agent"));
          const images = Array.from({ length: IMAGES }, (_, i) => ({
            image: image(i),
            files: startReads(i, fraction),
          }));
          await writeFile(join(mountPoint, ".ebs-cache-agent/reads.json"), JSON.stringify({ version: 1, images }));
        },
      }),
    );
  }
  const host = await lab.addHost();
  const zone = host.instance.availabilityZone;
  // The pre-warm's own log: its pacing line per phase (batches, pauses) goes with each case.
  const readerLog = createMemoryLogger("info");
  const reader = createFioReader({ log: readerLog });
  let volumes = 0;

  const service = async (target: ReadTarget, nodeImages: number, fraction: number) => {
    const started = performance.now();
    await Promise.all(
      Array.from({ length: nodeImages }, async (_, i) => {
        for (const file of startReads(i, fraction)) await readFile(join(target.mountPoint, "docker", file));
      }),
    );
    return (performance.now() - started) / 1000;
  };

  const rows: Array<{
    strategy: string;
    images: number;
    fraction: number;
    run: number;
    seconds: number;
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
          let seconds = 0;
          let note: string | undefined;
          const stop = new AbortController();
          readerLog.lines.length = 0;
          let background: Promise<unknown> | undefined;
          if (strategy === "initialized") await init();
          if (strategy === "check") {
            const started = performance.now();
            const decision = planPrewarm(DEFAULT_PREWARM, {
              volume: { volumeId, snapshotId, createTime: new Date(), tags: {} },
            });
            if (decision.action === "check") await reader.check(target, DEFAULT_PREWARM.check);
            note =
              decision.action === "check"
                ? "sampled"
                : `${decision.action} ${"verdict" in decision ? decision.verdict : ""}`;
            seconds += (performance.now() - started) / 1000;
          }
          // As the background run reads: the yielding depth once the wanted files are read.
          if (strategy === "files") background = init(undefined, stop.signal, YIELD_IO_DEPTH).catch(() => undefined);
          if (strategy === "need")
            background = init(
              Array.from({ length: nodeImages }, (_, i) => image(i)),
              stop.signal,
              YIELD_IO_DEPTH,
            ).catch(() => undefined);
          // The gap between the node's `ready` and the scheduler's first `docker run` there.
          await sleep(headStartMs);
          seconds += await service(target, nodeImages, fraction);
          stop.abort();
          await background;
          // How the pre-warm paced itself: one line per phase (batches read, pauses).
          if (strategy === "files" || strategy === "need")
            note = readerLog.lines
              .filter((line) => line.includes("prewarm.pace"))
              .map((line) => line.replace(/^.*prewarm\.pace: /, "").replace(/ volume=.*$/, ""))
              .join("; ");
          rows.push({ strategy, images: nodeImages, fraction, run: runIndex, seconds, ...(note ? { note } : {}) });
          say(
            `run ${runIndex + 1} ${strategy} images=${nodeImages} reads=${fraction * 100} %: ${seconds.toFixed(2)} s` +
              (note ? ` (${note})` : ""),
          );
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
    settings: { delayMs, chunkBytes, imageMiB, fillerMiB, filesPerImage, fileMiB: FILE_MIB, headStartMs, runs },
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
