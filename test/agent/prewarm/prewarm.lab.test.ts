/**
 * The pre-warm on the lab's cold volumes (src/lab/volumes/cold.ts): the verdict says `cold` before the
 * initialization and `warm` after it, `warm` on a blank volume; the volume is tagged
 * initialized only at the end; a missing or failing fio gives `unknown` and never blocks.
 * Thresholds come from the emulated delay (COLD_IOPS_CEILING); that a sample read a cold or a warm
 * volume is told by what the cold layer counts (fetches, delayed time), never by comparing speeds.
 */
import t from "tap";
import { join } from "node:path";
import { prewarmAtBoot, runInitialization } from "../../../src/agent/prewarm/apply.ts";
import {
  DEFAULT_PREWARM,
  verdictOf,
  type PrewarmSettings,
  type PrewarmTarget,
} from "../../../src/agent/prewarm/plan.ts";
import { readPrewarmState } from "../../../src/agent/prewarm/state.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { run } from "../../../src/exec.ts";
import { createFioReader } from "../../../src/host/volume-reads.ts";
import { startLab } from "../../../src/lab/lab.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";
import {
  attach,
  COLD,
  COLD_IOPS_CEILING,
  createVolume,
  makeDataSnapshot,
  mountXfs,
} from "../../fixtures/lab/prewarm-lab.ts";
import type { PrewarmDeps } from "../../../src/agent/prewarm/deps.ts";
import type { CheckFigures, PrewarmReader } from "../../../src/agent/ports.ts";

await assertLabPrerequisites();

const log = createMemoryLogger("debug");
const lab = await startLab({ name: "test-prewarm", coldSnapshots: COLD, log: createMemoryLogger("info") });
t.teardown(async () => {
  for (const host of lab.hosts) await run("umount", ["-R", host.paths.mountRoot], { check: false });
  await lab.close();
});
const ec2 = lab.ec2Client();
const cloud = createCloudVolumes({ client: ec2, pollMs: 100 });
const snapshotId = await makeDataSnapshot(lab, ec2, { sizeGiB: 1, dataMiB: 64, files: 8 });
const host = await lab.addHost();
const zone = host.instance.availabilityZone;

/** Thresholds from the emulated delay: a cold sample cannot reach COLD_IOPS_CEILING on any machine. */
const settings = (over: Partial<PrewarmSettings> = {}): PrewarmSettings => ({
  ...DEFAULT_PREWARM,
  check: { seconds: 3, reads: 300, ioDepth: 16, blockBytes: 4096 },
  thresholds: { minIops: COLD_IOPS_CEILING, maxMedianLatencyMs: null },
  initialize: { ...DEFAULT_PREWARM.initialize, progressSeconds: 1 },
  ...over,
});

let stateDirs = 0;
async function target(options: { snapshot: boolean }): Promise<PrewarmTarget & { stateDir: string }> {
  const volumeId = await createVolume(ec2, zone, options.snapshot ? { snapshotId } : { sizeGiB: 1 });
  const device = await attach(lab, ec2, volumeId, host);
  if (!options.snapshot) {
    await run("mkfs.xfs", ["-q", device]);
    const mp = await mountXfs(device, host, volumeId);
    await run("dd", ["if=/dev/urandom", `of=${join(mp, "data.bin")}`, "bs=1M", "count=64", "status=none"]);
    return {
      volume: { volumeId, tags: {} },
      device,
      mountPoint: mp,
      labels: {},
      stateDir: join(host.paths.hostRoot, `state-${++stateDirs}`),
    };
  }
  const volume = (await cloud.describeVolume(volumeId))!;
  return {
    volume: { volumeId, snapshotId: volume.snapshotId!, tags: volume.tags },
    device,
    mountPoint: await mountXfs(device, host, volumeId),
    labels: { "volume-id": volumeId },
    stateDir: join(host.paths.hostRoot, `state-${++stateDirs}`),
  };
}

function deps(stateDir: string, over: Partial<PrewarmDeps> = {}): PrewarmDeps {
  return {
    reader: createFioReader({ log }),
    tagVolume: (id, tags) => cloud.tagVolume(id, tags),
    clock: cloud.clock,
    stateDir,
    log,
    ...over,
  };
}

/** A check as the cold layer saw it: its figures, and the chunks it had to fetch first and the time they took. */
interface Sample {
  figures: CheckFigures;
  fetches: number;
  delayedMs: number;
}

/** fio's reader, each check counted on the volume's cold-layer counters (a warm read fetches nothing). */
function countingReader(volumeId: string, samples: Sample[]): PrewarmReader {
  const reader = createFioReader({ log });
  const status = async () => (await lab.cold!.volumeStatus(volumeId))!;
  return {
    ...reader,
    async check(target, bounds) {
      const before = await status();
      const figures = await reader.check(target, bounds);
      const after = await status();
      samples.push({ figures, fetches: after.fetches - before.fetches, delayedMs: after.delayedMs - before.delayedMs });
      return figures;
    },
  };
}

t.test("files: cold before, warm after, tagged only at the end; the allocated data only", async (t) => {
  const tg = await target({ snapshot: true });
  const allocated = await createFioReader().allocatedBytes(tg);
  const tagsSeen: string[] = [];
  const samples: Sample[] = [];
  const outcome = await prewarmAtBoot(
    tg,
    settings({ strategy: "files", background: false }),
    deps(tg.stateDir, {
      reader: countingReader(tg.volume.volumeId, samples),
      tagVolume: async (id, tags) => {
        const state = await readPrewarmState(tg.stateDir);
        tagsSeen.push(`${Object.keys(tags).join(",")} at ${state?.progress?.percent ?? "?"} %`);
        await cloud.tagVolume(id, tags);
      },
    }),
  );
  t.equal(
    outcome.before && verdictOf(outcome.before, settings().thresholds).verdict,
    "cold",
    `before: ${Math.round(outcome.before?.iops ?? 0)} IOPS`,
  );
  t.equal(outcome.verdict, "warm", `after: ${Math.round(outcome.after?.iops ?? 0)} IOPS`);
  // Warm is what the layer counts, not how much faster fio went (a speed ratio fails on a loaded machine).
  t.equal(samples.length, 2, "two samples: before and after the initialization");
  t.ok(samples[0]!.fetches > 0, `the sample before waited for chunks (${samples[0]!.fetches} fetches)`);
  t.match(samples[1], { fetches: 0, delayedMs: 0 }, "the sample after it read a warmed volume: no fetch, no delay");
  t.equal(outcome.phase, "done");
  t.same(outcome.labels, { prewarm: "warm" });
  t.same(tagsSeen, [`${VolumeTag.initialized} at 100 %`], "tagged once, after 100 %");
  const tags = (await cloud.describeVolume(tg.volume.volumeId))!.tags;
  t.ok(tags[VolumeTag.initialized], "tag set");
  const state = await readPrewarmState(tg.stateDir);
  t.match(state, { phase: "done", verdict: "warm", progress: { percent: 100 } });
  const cold = (await lab.cold!.volumeStatus(tg.volume.volumeId))!;
  const volumeBytes = cold.chunks * COLD.chunkBytes;
  t.ok(
    cold.warmChunks * COLD.chunkBytes < volumeBytes / 2,
    `only the allocated data was read (${cold.warmChunks} of ${cold.chunks} chunks warm)`,
  );
  t.ok(cold.warmChunks * COLD.chunkBytes >= allocated * 0.9, "all of it");
  // Tagged: the next boot skips it, warm, without reading.
  const again = await prewarmAtBoot(
    { ...tg, volume: { ...tg.volume, tags } },
    settings({ strategy: "files" }),
    deps(tg.stateDir),
  );
  t.match(again, { decision: { action: "skip" }, verdict: "warm" });
});

t.test("check: cold on the cold volume (nothing initialized, nothing tagged); device: warm after", async (t) => {
  const tg = await target({ snapshot: true });
  const samples: Sample[] = [];
  const reader = countingReader(tg.volume.volumeId, samples);
  const checked = await prewarmAtBoot(tg, settings(), deps(tg.stateDir, { reader }));
  t.match(checked, {
    decision: { action: "check" },
    verdict: "cold",
    labelState: "ready",
    labels: { prewarm: "cold" },
  });
  t.notOk((await cloud.describeVolume(tg.volume.volumeId))!.tags[VolumeTag.initialized]);
  // The cold sample is taken: the full read's point is that it touches every chunk, not how long
  // 4096 first reads take one at a time at the lab's delay (over a minute).
  await lab.cold!.setFirstReadDelay(tg.volume.volumeId, 0);
  const outcome = await runInitialization(tg, settings({ strategy: "device" }), deps(tg.stateDir, { reader }), {
    publish: false,
  });
  t.equal(outcome.verdict, "warm", `after: ${Math.round(outcome.after?.iops ?? 0)} IOPS`);
  t.ok(samples[0]!.fetches > 0, `the check waited for chunks (${samples[0]!.fetches} fetches)`);
  t.match(samples.at(-1), { fetches: 0, delayedMs: 0 }, "device read: the sample after it fetched nothing");
  const cold = (await lab.cold!.volumeStatus(tg.volume.volumeId))!;
  t.equal(cold.warmChunks, cold.chunks, "the full read warmed every chunk");
});

t.test("a blank volume: warm without reading, and warm when sampled", async (t) => {
  const tg = await target({ snapshot: false });
  t.match(await prewarmAtBoot(tg, settings({ strategy: "files" }), deps(tg.stateDir)), {
    decision: { action: "skip" },
    verdict: "warm",
  });
  // Nothing of it is cold, so the sample can be long at no cost: 10 x the reads and the time keep the
  // threshold's IOPS while a machine that stalls for seconds (its disk, its load) still averages above it.
  const { check } = settings();
  const figures = await createFioReader().check(tg, { ...check, reads: 10 * check.reads, seconds: 10 * check.seconds });
  t.equal(verdictOf(figures, settings().thresholds).verdict, "warm", `${Math.round(figures.iops)} IOPS`);
});

t.test("fio missing or failing: verdict unknown, a clear error, the node still reported", async (t) => {
  const tg = await target({ snapshot: true });
  const missing = await prewarmAtBoot(
    tg,
    settings(),
    deps(tg.stateDir, { reader: createFioReader({ fio: "/nonexistent/fio" }) }),
  );
  t.match(missing, {
    verdict: "unknown",
    labelState: "ready",
    labels: { prewarm: "unknown" },
    error: /fio could not be started/,
  });
  t.ok(
    log.lines.some((l) => /^<3>prewarm\.verdict: .*fio could not be started.* remediation="install fio/.test(l)),
    "one error line with the remedy",
  );
  const init = await prewarmAtBoot(
    tg,
    settings({ strategy: "files", background: false }),
    deps(tg.stateDir, { reader: createFioReader({ fio: "/nonexistent/fio" }) }),
  );
  t.match(init, { verdict: "unknown", phase: "failed", labelState: "ready" });
  t.notOk((await cloud.describeVolume(tg.volume.volumeId))!.tags[VolumeTag.initialized], "not tagged");
  const failing = await prewarmAtBoot(
    { ...tg, device: "/dev/ebs-cache-no-such-device" },
    settings(),
    deps(tg.stateDir),
  );
  t.match(failing, { verdict: "unknown", labelState: "ready", error: /fio prewarm-check failed/ });
});

t.test(
  "VolumeInitializationRate: followed through DescribeVolumeStatus, not read; tagged when EBS says 100 %",
  async (t) => {
    // Held from before its creation, the volume is still initializing when the boot looks, however
    // slow the machine: 1 GiB at 300 MiB/s would otherwise race attach and mount (and a volume
    // done by then is `record-initialized`, not followed).
    lab.ec2.holdInitialization();
    t.teardown(() => lab.ec2.releaseInitialization());
    const volumeId = await createVolume(ec2, zone, { snapshotId, rate: 300 });
    const device = await attach(lab, ec2, volumeId, host);
    const volume = (await cloud.describeVolume(volumeId))!;
    const tg: PrewarmTarget = {
      volume: { volumeId, snapshotId: volume.snapshotId!, tags: volume.tags },
      sizeBytes: 1024 ** 3,
      device,
      mountPoint: await mountXfs(device, host, volumeId),
      labels: { "volume-id": volumeId },
    };
    const status = await cloud.initializationStatus(volumeId);
    t.match(status, { type: "provisioned-rate" }, "DescribeVolumeStatus through the adapter");
    const dir = join(host.paths.hostRoot, "state-rate");
    const fetchesBefore = (await lab.cold!.volumeStatus(volumeId))!.fetches;
    // Once the boot has seen it initializing, the hold ends when the layer has warmed every chunk
    // (it warms at the rate regardless), so EC2's 100 % means warm reads on any machine.
    const firstSeen: (number | undefined)[] = [];
    let released: Promise<boolean> | undefined;
    const releaseWhenWarm = async () => {
      const warm = await pollUntil(async () => {
        const s = await lab.cold!.volumeStatus(volumeId);
        return s !== undefined && s.warmChunks === s.chunks;
      }, 120_000);
      lab.ec2.releaseInitialization();
      return warm;
    };
    const outcome = await prewarmAtBoot(
      tg,
      settings({ strategy: "files", background: false }),
      deps(dir, {
        initializationStatus: async (id) => {
          const answer = await cloud.initializationStatus(id);
          if (firstSeen.length === 0) {
            firstSeen.push(answer?.progress);
            released = releaseWhenWarm();
          }
          return answer;
        },
        followPollMs: 200,
      }),
    );
    t.same(firstSeen, [0], "the boot saw it at 0 %, held");
    t.ok(await released, "the layer warmed every chunk before the hold ended");
    t.match(outcome, { decision: { action: "follow" }, phase: "done", verdict: "warm" });
    t.ok((await cloud.describeVolume(volumeId))!.tags[VolumeTag.initialized], "tagged");
    const state = await readPrewarmState(dir);
    t.match(state, { action: "follow", phase: "done", progress: { percent: 100 } });
    const cold = (await lab.cold!.volumeStatus(volumeId))!;
    t.ok(
      cold.fetches - fetchesBefore < cold.chunks / 10,
      `the agent read next to nothing itself (${cold.fetches - fetchesBefore} fetches of ${cold.chunks} chunks)`,
    );
  },
);
