/**
 * Cold means warmed by need, from the mount on (beginPrewarmAtBoot in runBoot, the background run in process,
 * against the port fakes; no root, no fio):
 * - a volume EBS says is cold is read from the mount on, before docker starts (the head start), and handed to the
 *   background run at the `prewarm` step: the head start's reads end before the background run's begin;
 * - a failed boot stops the head start before it gives the volume back; in two phases, the run the first begins at
 *   the mount is taken over by the second (no reads of its own), which stops it when it fails, before the unmount;
 * - a volume that only the default sample (`check`) finds cold is handed to the background run too, which takes
 *   the boot's verdict rather than sampling again; the node is published `warming`, then `ready` at the end.
 */
import t from "tap";
import type { HostAdapters } from "../../../src/agent/adapters.ts";
import { runBoot } from "../../../src/agent/boot/run.ts";
import type { PrewarmReport } from "../../../src/agent/prewarm/plan.ts";
import { runPrewarm } from "../../../src/agent/prewarm/run.ts";
import type { InitializeOptions, PrewarmReader } from "../../../src/agent/ports.ts";
import { Label, VolumeTag } from "../../../src/tags.ts";
import { POOL, gatedReader, withBackgroundPrewarm } from "../../fixtures/lab/background-prewarm.ts";
import { COLD, WARM, fakeNode, fakeReader, type FakeNode } from "../../fixtures/fakes/index.ts";

/** The background run in process, on EC2's own clock (a volume made from a snapshot minutes ago is known cold). */
function withBackground(node: FakeNode, reader: PrewarmReader) {
  let background: Promise<PrewarmReport> | undefined;
  const adapters: HostAdapters = node.adapters({
    reader,
    startPrewarm: async () => {
      background = runPrewarm(node.config, adapters).then((outcome) => {
        if (!outcome.report) throw new Error("the background run found no volume to pre-warm");
        return outcome.report;
      });
    },
  });
  return { adapters, background: () => background };
}

/** EBS reports the volume's lazy initialization under 100 %: known cold. */
function lazilyLoaded(node: FakeNode): void {
  node.fake.cloud.initializationStatus = async () => ({ type: "default", progress: 3 });
}

/** fio whose first long read (the head start) runs until it is stopped; `events` orders it against the rest. */
function headStartReader(node: FakeNode) {
  const fake = fakeReader(node.script, { figures: [WARM] });
  const events: string[] = [];
  let initializes = 0;
  const fio = { reading: () => {} };
  const reader: PrewarmReader = {
    allocatedBytes: (...args) => fake.reader.allocatedBytes(...args),
    check: (...args) => fake.reader.check(...args),
    initialize: async (target, mode, options: InitializeOptions) => {
      if (++initializes > 1) {
        events.push(`read:${options.images?.join(",") ?? ""}`);
        return fake.reader.initialize(target, mode, options);
      }
      events.push("head-start");
      fio.reading();
      options.onProgress({ doneBytes: 1024 * 1024, totalBytes: 4 * 1024 * 1024, cursor: 0, runBytes: 1024 * 1024 });
      await new Promise<void>((_resolve, reject) => {
        const stop = () => {
          events.push("head-start stopped");
          reject(options.signal?.reason);
        };
        if (options.signal?.aborted) stop();
        else options.signal?.addEventListener("abort", stop, { once: true });
      });
      throw new Error("unreachable");
    },
  };
  // docker starts only once the head start reads: begun only at the `prewarm` step (docker verified), it never would.
  let begun!: () => void;
  const reading = new Promise<void>((resolve) => (begun = resolve));
  const started = async () => {
    await reading;
    events.push("docker.start");
  };
  node.script.before("docker.start", started, { times: 10 });
  node.script.before("docker.restart", started, { times: 10 });
  fio.reading = begun;
  return { reader, events };
}

t.test("a volume EBS says is cold is read from the mount on, then handed to the background run", async (t) => {
  const node = await fakeNode(t);
  await node.fake.snapshot({ ...POOL });
  lazilyLoaded(node);
  const fio = headStartReader(node);
  const wired = withBackground(node, fio.reader);

  const booted = await runBoot(node.config, wired.adapters, { dryRun: false });
  t.equal(booted.report?.outcome, "warming", booted.report?.reason ?? "usable, warming in the background");
  const outcome = await wired.background();
  t.equal(outcome?.phase, "done", outcome?.error ?? "the background run ends done");
  const start = fio.events.indexOf("docker.start");
  t.ok(start > 0, `docker started: ${fio.events.join(" | ")}`);
  t.equal(fio.events[0], "head-start", "the reads began before docker's start");
  const stopped = fio.events.indexOf("head-start stopped");
  const read = fio.events.findIndex((e) => e.startsWith("read:"));
  t.ok(stopped > start && read > stopped, `stopped at the hand-over, before the background run read: ${fio.events}`);
  t.ok((await node.fake.describe(booted.report?.volumeId ?? "")).tags[VolumeTag.initialized], "tagged initialized");
  t.equal(node.labels.current(), "ready");
});

t.test("a boot that fails once the head start reads stops it before giving the volume back", async (t) => {
  const node = await fakeNode(t);
  await node.fake.snapshot({ ...POOL });
  lazilyLoaded(node);
  const fio = headStartReader(node);
  const wired = withBackground(node, fio.reader);
  node.script.failNext("docker.start", new Error("dockerd failed"), { times: 10 });
  node.script.failNext("docker.restart", new Error("dockerd failed"), { times: 10 });

  const booted = await runBoot(node.config, wired.adapters, { dryRun: false });
  t.not(booted.report?.outcome, "ready", booted.report?.reason ?? "not ready");
  t.ok(fio.events.includes("head-start stopped"), `the head start was stopped: ${fio.events.join(" | ")}`);
  t.equal(wired.background(), undefined, "nothing was handed to a background run");
});

t.test("a volume the default sample finds cold is warmed by need in the background, not sampled twice", async (t) => {
  const node = await fakeNode(t);
  const snapshot = await node.fake.snapshot({ ...POOL });
  const fio = fakeReader(node.script, { figures: [COLD, WARM] });
  const wired = withBackgroundPrewarm(node, fio.reader);

  const booted = await runBoot(node.config, wired.adapters, { dryRun: false });
  const volumeId = booted.report?.volumeId ?? "";
  t.equal((await node.fake.describe(volumeId)).snapshotId, snapshot, "the volume is made from the pool's snapshot");
  const background = wired.background();
  if (!background) throw new Error("the cold volume was not handed to the background run");
  const outcome = await background;
  t.equal(outcome.phase, "done", outcome.error ?? "the background run ends done");
  t.equal(node.script.of("fio.check").length, 2, "the boot's sample and the one after the reads, none between");
  t.equal(node.script.of("fio.initialize").length, 1, "the data read once");
  // `ready` with prewarm=checking may come first, when the sample still ran at the `prewarm` step.
  t.ok(
    node.labels.reports.some((r) => r.state === "warming" && r.details[Label.prewarm] === "cold"),
    "published warming with the sample's verdict",
  );
  t.equal(node.labels.current(), "ready");
  t.same(node.labels.reports.at(-1)?.details[Label.prewarm], "warm", "ready and warm at the end");
  t.ok((await node.fake.describe(volumeId)).tags[VolumeTag.initialized], "tagged initialized");
});

t.test("a sample still running at ready: ready first, then warming once it finds the volume cold", async (t) => {
  const node = await fakeNode(t);
  await node.fake.snapshot({ ...POOL });
  const fio = gatedReader(node);
  const wired = withBackgroundPrewarm(node, fio.reader);

  const booting = runBoot(node.config, wired.adapters, { dryRun: false });
  // `ready` with prewarm=checking goes out while the sample runs; then the sample ends (cold).
  while (node.labels.reports.length === 0) await new Promise((resolve) => setImmediate(resolve));
  fio.release();
  await booting;
  const outcome = await wired.background();
  t.equal(outcome?.phase, "done", outcome?.error ?? "the background run ends done");
  t.same(
    node.labels.reports.map((r) => [r.state, r.details[Label.prewarm]]).slice(0, 2),
    [
      ["ready", "checking"],
      ["warming", "cold"],
    ],
    "ready while the sample ran, then warming with its verdict",
  );
  t.equal(node.labels.current(), "ready");
});

t.test(
  "two phases: the first begins the run at the mount; a second that fails stops it before giving the volume back",
  async (t) => {
    const node = await fakeNode(t);
    await node.fake.snapshot({ ...POOL });
    lazilyLoaded(node);
    const events: string[] = [];
    // What ebs-cache-agent-prewarm.service stands for: started by phase 1, stopped by whoever unmounts.
    const prewarmFromMount = {
      start: async () => void events.push("run started"),
      stop: async () => void events.push("run stopped"),
    };
    node.script.before("storage.unmount", async () => void events.push("unmount"), { times: 10 });
    const fio = fakeReader(node.script, { figures: [COLD, WARM] });
    const adapters = node.adapters({ reader: fio.reader, prewarmFromMount });

    const first = await runBoot(node.config, adapters, { dryRun: false, withDocker: false });
    t.equal(first.report?.outcome, "prepared", first.report?.reason ?? "phase 1 prepared");
    t.same(events, ["run started"], "phase 1 began the run at the mount, and left it running");

    node.script.failNext("docker.start", new Error("dockerd failed"), { times: 10 });
    node.script.failNext("docker.restart", new Error("dockerd failed"), { times: 10 });
    const second = await runBoot(node.config, adapters, { dryRun: false, mayClaim: false });
    t.not(second.report?.outcome, "ready", second.report?.reason ?? "not ready");
    t.equal(node.script.of("fio.initialize").length, 0, "phase 2 read nothing itself: the run was taken over");
    const stopped = events.indexOf("run stopped");
    const unmounted = events.indexOf("unmount");
    t.ok(stopped > 0 && (unmounted < 0 || stopped < unmounted), `stopped before any unmount: ${events.join(" | ")}`);
    t.same(
      node.labels.reports.map((r) => r.state),
      ["degraded"],
      "the failed boot's `degraded` alone: no `warming` or `ready` from the run",
    );
  },
);
