/**
 * `ebs-cache-agent prewarm` (runPrewarm) in process against the port fakes, on a volume a
 * boot made from the pool's snapshot: the sample's verdict, an initialization that tags the
 * volume initialized, one that fails and leaves it untagged, and nothing to do without a volume.
 * No root, no fio.
 */
import t from "tap";
import { runBoot } from "../../../src/agent/boot/run.ts";
import type { HostAdapters } from "../../../src/agent/adapters.ts";
import { runPrewarm } from "../../../src/agent/prewarm/run.ts";
import { MOUNT_RUN_FILE, openLabelsGate, recordMountRun } from "../../../src/agent/prewarm/mount-run.ts";
import { findMountedDevice } from "../../../src/agent/prewarm/observe.ts";
import { imagesOfNode } from "../../../src/agent/prewarm/need.ts";
import type { BegunReads, ReadTarget, WantedReadOptions } from "../../../src/agent/ports.ts";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { Label, VolumeTag } from "../../../src/tags.ts";
import { StopSignalReceived } from "../../../src/errors.ts";
import { COLD, WARM, fakeNode, fakeReader, type FakeNode, type FakeReader } from "../../fixtures/fakes/index.ts";

const POOL = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "default" };

/** A node booted (without a pre-warm of its own) on a volume made from the pool's snapshot. */
async function bootedFromSnapshot(t: Parameters<typeof fakeNode>[0]): Promise<{ node: FakeNode; volumeId: string }> {
  const node = await fakeNode(t, { config: { prewarm: { strategy: "off" } } });
  await node.fake.snapshot({ ...POOL });
  const booted = await runBoot(node.config, node.adapters(), { dryRun: false });
  if (booted.report?.outcome !== "ready" || !booted.report.volumeId) throw new Error(`boot: ${booted.report?.reason}`);
  // The boot's own pre-warm step (strategy off) decided too: the test reads the command's lines only.
  node.log.lines.splice(0);
  return { node, volumeId: booted.report.volumeId };
}

function prewarmDeps(node: FakeNode, reader: FakeReader): HostAdapters {
  return node.adapters({ reader: reader.reader });
}

/** How many times the pre-warm decided (its `prewarm.decide` lines). */
function decisions(node: FakeNode): number {
  return node.log.lines.filter((line) => line.includes("prewarm.decide:")).length;
}

/** Counts the DescribeVolumeStatus calls from here on. */
function countStatusCalls(node: FakeNode): () => number {
  const cloud = node.fake.cloud;
  const asked = cloud.initializationStatus.bind(cloud);
  let calls = 0;
  cloud.initializationStatus = async (volumeId: string) => {
    calls += 1;
    return asked(volumeId);
  };
  return () => calls;
}

t.test("check: a cold sample gives the verdict cold, published, the volume not tagged initialized", async (t) => {
  const { node, volumeId } = await bootedFromSnapshot(t);
  const reader = fakeReader(node.script, { figures: [COLD] });
  const statusAsked = countStatusCalls(node);
  const outcome = await runPrewarm(node.config, prewarmDeps(node, reader), { strategy: "check" });
  t.equal(outcome.exitCode, 0);
  t.equal(outcome.volumeId, volumeId);
  t.equal(outcome.report?.verdict, "cold");
  t.equal(decisions(node), 1, "decided once");
  t.equal(statusAsked(), 1, "from one observation: EC2's initialization status asked once");
  t.equal(node.script.of("fio.initialize").length, 0, "a check reads nothing more");
  t.equal((await node.fake.describe(volumeId)).tags[VolumeTag.initialized], undefined);
  t.match(node.labels.reports.at(-1), { details: { [Label.prewarm]: "cold" } });
  t.ok(
    node.recorder.recorded.some((r) => r.kind === "prewarmStateWritten"),
    "the state's metrics written",
  );
});

t.test("files: the data is read, the volume tagged initialized, the node labelled warm", async (t) => {
  const { node, volumeId } = await bootedFromSnapshot(t);
  const reader = fakeReader(node.script, { figures: [COLD, WARM] });
  const outcome = await runPrewarm(node.config, prewarmDeps(node, reader), { strategy: "files" });
  t.equal(outcome.exitCode, 0, node.log.lines.filter((l) => l.startsWith("<3>")).join("\n") || "exit 0");
  const reads = node.script.of("fio.initialize");
  t.equal(reads.length, 1, "one initialization");
  t.equal(reads[0]?.args[1], "files", "of the allocated data");
  t.ok((await node.fake.describe(volumeId)).tags[VolumeTag.initialized], "tagged initialized");
  t.equal(node.labels.current(), "ready");

  const before = decisions(node);
  const again = await runPrewarm(node.config, prewarmDeps(node, reader), { strategy: "files" });
  t.equal(again.exitCode, 0);
  t.equal(decisions(node) - before, 1, "an initialized volume: decided once as well");
  t.equal(node.script.of("fio.initialize").length, 1, "an initialized volume is never read again");
});

t.test("files: an initialization that fails leaves the volume untagged and exits 1", async (t) => {
  const { node, volumeId } = await bootedFromSnapshot(t);
  const reader = fakeReader(node.script, { figures: [COLD] });
  node.script.failNext("fio.initialize", new Error("fio exited with 1 (scripted)"));
  const outcome = await runPrewarm(node.config, prewarmDeps(node, reader), { strategy: "files" });
  t.equal(outcome.exitCode, 1);
  t.equal((await node.fake.describe(volumeId)).tags[VolumeTag.initialized], undefined, "not tagged initialized");
});

for (const [reason, code, why] of [
  [new StopSignalReceived("SIGTERM"), 143, "SIGTERM: 128 + 15, the code the prewarm unit counts as a clean stop"],
  [new StopSignalReceived("SIGINT"), 130, "SIGINT (Ctrl-C): 128 + 2"],
  [new Error("stopped by its caller"), 1, "an abort naming no signal"],
] as const)
  t.test(`files: an initialization stopped (${reason.message}) stays resumable, untagged, exits ${code}`, async (t) => {
    const { node, volumeId } = await bootedFromSnapshot(t);
    const reader = fakeReader(node.script, { figures: [COLD] });
    const stop = new AbortController();
    node.script.before("fio.initialize", () => stop.abort(reason));
    const outcome = await runPrewarm(node.config, prewarmDeps(node, reader), {
      strategy: "files",
      signal: stop.signal,
    });
    t.equal(outcome.report?.phase, "pending", "interrupted: the next run resumes");
    t.equal(outcome.exitCode, code, `${why}; never 0: a script or an operator's shell must not read it as done`);
    t.equal((await node.fake.describe(volumeId)).tags[VolumeTag.initialized], undefined, "not tagged initialized");
  });

t.test("following EBS's initialization: a stop ends the pause between polls, not after it", async (t) => {
  const { node, volumeId } = await bootedFromSnapshot(t);
  const reader = fakeReader(node.script, { figures: [COLD] });
  const stop = new AbortController();
  let polls = 0;
  // EBS initializes the volume (a provisioned rate) and stays at 50 %; the stop comes with the
  // second answer (the first is the decision's), and the next poll would be 10 s later.
  node.fake.cloud.initializationStatus = async () => {
    if (++polls === 2) stop.abort(new Error("SIGTERM received"));
    return { type: "provisioned-rate", progress: 50 };
  };
  const started = Date.now();
  const outcome = await runPrewarm(node.config, prewarmDeps(node, reader), { strategy: "files", signal: stop.signal });
  const seconds = (Date.now() - started) / 1000;
  t.equal(outcome.report?.phase, "pending", "interrupted: the next run follows again");
  t.equal(outcome.exitCode, 1);
  t.equal(polls, 2, "no poll after the stop");
  t.ok(seconds < 5, `ended ${seconds.toFixed(1)} s after it began, not after the 10 s pause`);
  t.equal((await node.fake.describe(volumeId)).tags[VolumeTag.initialized], undefined, "not tagged initialized");
});

t.test("no cache volume attached: nothing to pre-warm", async (t) => {
  const node = await fakeNode(t);
  const reader = fakeReader(node.script);
  const outcome = await runPrewarm(node.config, prewarmDeps(node, reader));
  t.equal(outcome.exitCode, 0);
  t.equal(outcome.volumeId, undefined);
  t.same(node.script.names("fio."), [], "nothing read");
});

/** Resolves once a line of the node's log matches, or `done()` (checked between turns of the event loop, no timer). */
async function untilLogged(node: FakeNode, pattern: RegExp, done: () => boolean): Promise<void> {
  while (!done() && !node.log.lines.some((line) => pattern.test(line)))
    await new Promise((resolve) => setImmediate(resolve));
}

t.test(
  "--from-mount: a volume known cold is read, and no label goes out until the boot has published the node",
  async (t) => {
    const { node, volumeId } = await bootedFromSnapshot(t);
    const reader = fakeReader(node.script, { figures: [WARM] });
    const published = node.labels.reports.length;
    const adapters = prewarmDeps(node, reader);
    const key = { volumeId, ...(adapters.bootId ? { bootId: adapters.bootId } : {}) };
    await recordMountRun(node.config.paths.stateDir, key);
    // EBS says the volume is cold (its lazy initialization under 100 %): the run reads it.
    node.fake.cloud.initializationStatus = async () => ({ type: "default", progress: 3 });
    let settled = false;
    const running = runPrewarm(node.config, adapters, { strategy: "check", fromMount: true }).finally(() => {
      settled = true;
    });
    // The reads end before the boot has published: the run waits for it, its labels held.
    const ended = await Promise.race([
      untilLogged(node, /prewarm\.labels: read to the end before the boot published the node/, () => settled).then(
        () => false,
      ),
      running.then(() => true),
    ]);
    t.notOk(ended, "the run waits for the boot", { log: node.log.lines.join("\n") });
    if (ended) return;
    t.equal(node.script.of("fio.initialize").length, 1, "the volume was read");
    t.ok((await node.fake.describe(volumeId)).tags[VolumeTag.initialized], "and tagged initialized");
    t.equal(node.labels.reports.length, published, "no label published meanwhile (warming, progress, ready held)");
    // The boot publishes the node, then opens the gate: the run's `ready` follows.
    await openLabelsGate(node.config.paths.stateDir, key);
    const outcome = await running;
    t.equal(outcome.exitCode, 0);
    t.equal(node.labels.reports.length, published + 1, "one publication: ready");
    t.equal(node.labels.current(), "ready");
    t.match(node.labels.reports.at(-1), { details: { [Label.prewarm]: "warm" } });
  },
);

t.test("--from-mount: a decision that needs no reads before docker is left to the boot's step", async (t) => {
  const { node } = await bootedFromSnapshot(t);
  const reader = fakeReader(node.script, { figures: [COLD] });
  const published = node.labels.reports.length;
  const outcome = await runPrewarm(node.config, prewarmDeps(node, reader), { strategy: "off", fromMount: true });
  t.equal(outcome.exitCode, 0);
  t.equal(outcome.report, undefined, "nothing done");
  t.equal(node.script.of("fio.initialize").length + node.script.of("fio.check").length, 0, "nothing read");
  t.equal(node.labels.reports.length, published, "nothing published");
});

/**
 * A reader that can begin the wanted reads ahead (PrewarmReader.beginWanted), recorded in the node's script as
 * `fio.beginWanted` and `fio.begun-stop`; `given` holds what initialize() was handed as `begun`.
 */
function readerBeginningAhead(node: FakeNode): { reader: FakeReader; handle: BegunReads; given: unknown[] } {
  const reader = fakeReader(node.script, { figures: [WARM] });
  const handle: BegunReads = {
    stop: async () => {
      await node.script.call("fio.begun-stop", [], async () => undefined);
    },
  };
  const given: unknown[] = [];
  const initialize = reader.reader.initialize.bind(reader.reader);
  reader.reader = {
    ...reader.reader,
    initialize: async (target, mode, options) => {
      given.push(options.begun);
      return initialize(target, mode, options);
    },
    beginWanted: (target, options) => {
      node.script.calls.push({ name: "fio.beginWanted", args: [target, options] });
      return handle;
    },
  };
  return { reader, handle, given };
}

t.test(
  "--from-mount: the node's images' files are begun before EC2 is asked, and the initialization takes them over",
  async (t) => {
    const { node, volumeId } = await bootedFromSnapshot(t);
    const { reader, handle, given } = readerBeginningAhead(node);
    const adapters = prewarmDeps(node, reader);
    const volume = await node.fake.describe(volumeId);
    const key = { volumeId, bootId: adapters.bootId! };
    await recordMountRun(node.config.paths.stateDir, key, volume.tags);
    await openLabelsGate(node.config.paths.stateDir, key);
    node.fake.cloud.initializationStatus = async () => ({ type: "default", progress: 3 });
    const from = node.script.calls.length;
    const outcome = await runPrewarm(node.config, adapters, { strategy: "check", fromMount: true });
    t.equal(outcome.exitCode, 0);
    const names = node.script.calls.slice(from).map((call) => call.name);
    const begun = names.indexOf("fio.beginWanted");
    const firstEc2 = names.findIndex((name) => name.startsWith("cloud."));
    t.ok(begun >= 0 && begun < firstEc2, "begun before the first EC2 call", { names });
    const [target, options] = node.script.of("fio.beginWanted")[0]!.args as [ReadTarget, WantedReadOptions];
    const mounted = await findMountedDevice(node.adapters().storage, volumeId);
    t.same(target, mounted, "on the device the volume is mounted from");
    t.same(options.images, imagesOfNode(volume.tags, node.config.docker.expectedImages), "the images its tags name");
    t.same(given, [handle], "the initialization was handed the reads begun");
    t.equal(names.filter((name) => name === "fio.initialize").length, 1);
  },
);

t.test("--from-mount: reads begun on a volume EBS says is initialized are stopped, nothing more read", async (t) => {
  const { node, volumeId } = await bootedFromSnapshot(t);
  const { reader } = readerBeginningAhead(node);
  const adapters = prewarmDeps(node, reader);
  const key = { volumeId, bootId: adapters.bootId! };
  await recordMountRun(node.config.paths.stateDir, key, (await node.fake.describe(volumeId)).tags);
  node.fake.cloud.initializationStatus = async () => ({ type: "default", progress: 100 });
  const outcome = await runPrewarm(node.config, adapters, { strategy: "check", fromMount: true });
  t.equal(outcome.exitCode, 0);
  t.equal(node.script.of("fio.beginWanted").length, 1, "begun");
  t.equal(node.script.of("fio.begun-stop").length, 1, "and stopped");
  t.equal(node.script.of("fio.initialize").length, 0, "no initialization");
});

t.test("--from-mount: no reads before EC2 answers without this boot's record of the volume's tags", async (t) => {
  const { node, volumeId } = await bootedFromSnapshot(t);
  const { reader } = readerBeginningAhead(node);
  const adapters = prewarmDeps(node, reader);
  const tags = (await node.fake.describe(volumeId)).tags;
  node.fake.cloud.initializationStatus = async () => ({ type: "default", progress: 3 });
  const recordOfBoot = (bootId: string | undefined, volumeTags?: Record<string, string>) => () =>
    recordMountRun(node.config.paths.stateDir, { volumeId, bootId }, volumeTags);
  const cases: Array<[string, () => Promise<void>, ("check" | "off")?]> = [
    ["the pre-warm turned off on the command", recordOfBoot(adapters.bootId!, tags), "off"],
    [
      "a volume tagged initialized",
      recordOfBoot(adapters.bootId!, { ...tags, [VolumeTag.initialized]: "2026-12-07T00:00:00Z" }),
    ],
    ["another boot's record", recordOfBoot("other", tags)],
    ["a record without tags (an older agent's)", recordOfBoot(undefined)],
    [
      "a record whose tags are not strings",
      () =>
        writeFile(
          join(node.config.paths.stateDir, MOUNT_RUN_FILE),
          JSON.stringify({ volumeId, bootId: adapters.bootId, published: true, at: "", volumeTags: { a: 1 } }),
        ),
    ],
  ];
  for (const [name, write, strategy = "check"] of cases) {
    await write();
    const decided = decisions(node);
    // Stopped from the start: the run decides and ends (its labels' gate is never opened here).
    await runPrewarm(node.config, adapters, { strategy, fromMount: true, signal: AbortSignal.abort() });
    t.equal(decisions(node), decided + 1, `${name}: the run went past its decision`);
    t.equal(node.script.of("fio.beginWanted").length, 0, `${name}: nothing begun`);
  }
});

t.test(
  "--from-mount: reads that cannot begin before the decision are a warning: the run reads once decided",
  async (t) => {
    const { node, volumeId } = await bootedFromSnapshot(t);
    const { reader, given } = readerBeginningAhead(node);
    reader.reader = {
      ...reader.reader,
      beginWanted: () => {
        throw new Error("fio would not start");
      },
    };
    const adapters = prewarmDeps(node, reader);
    const key = { volumeId, bootId: adapters.bootId! };
    await recordMountRun(node.config.paths.stateDir, key, (await node.fake.describe(volumeId)).tags);
    await openLabelsGate(node.config.paths.stateDir, key);
    node.fake.cloud.initializationStatus = async () => ({ type: "default", progress: 3 });
    const outcome = await runPrewarm(node.config, adapters, { strategy: "check", fromMount: true });
    t.equal(outcome.exitCode, 0, "the run went on");
    t.ok(
      node.log.lines.some((l) =>
        /prewarm\.mount: could not begin the reads before the decision: fio would not start/.test(l),
      ),
      "said so",
    );
    t.same(given, [undefined], "one initialization, with no reads begun");
  },
);
