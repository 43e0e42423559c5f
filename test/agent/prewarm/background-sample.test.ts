/**
 * A `files` initialization handed to the background run (beginPrewarmAtBoot in runBoot, against the port fakes):
 * the sample taken before the reads never holds the boot. The boot publishes `warming` with `prewarm=checking`
 * and ends while the sample still runs; the background run's first `warming` carries the verdict, then the reads,
 * the tag and `ready`. The sample here ends only when the test releases it. No root, no fio.
 */
import t from "tap";
import { runBoot } from "../../../src/agent/boot/run.ts";
import { Label, VolumeTag } from "../../../src/tags.ts";
import { POOL, gatedReader, withBackgroundPrewarm } from "../../fixtures/lab/background-prewarm.ts";
import { fakeNode } from "../../fixtures/fakes/index.ts";

t.test("files in the background: the boot reports warming with prewarm=checking before the sample ends", async (t) => {
  const node = await fakeNode(t, { config: { prewarm: { strategy: "files" } } });
  const snapshot = await node.fake.snapshot({ ...POOL });
  const fio = gatedReader(node);
  const wired = withBackgroundPrewarm(node, fio.reader);

  // The sample has not ended (it cannot before release()): the boot ends all the same.
  const booted = await runBoot(node.config, wired.adapters, { dryRun: false });
  const volumeId = booted.report?.volumeId ?? "";
  t.equal(booted.report?.outcome, "warming", booted.report?.reason ?? "usable, warming in the background");
  t.equal((await node.fake.describe(volumeId)).snapshotId, snapshot, "the volume is made from the pool's snapshot");
  t.same(
    node.labels.reports.map((r) => [r.state, r.details[Label.prewarm], r.details[Label.prewarmProgress]]),
    [["warming", "checking", "0"]],
    "warming at once, the verdict not known yet",
  );
  const background = wired.background();
  if (!background) throw new Error("the initialization was not handed to the background run");
  t.ok(fio.sampling() <= 1, "at most the background run's own sample has begun");
  t.equal(node.script.of("fio.initialize").length, 0, "no read before the sample's verdict");

  fio.release();
  const outcome = await background;
  t.equal(outcome.phase, "done", outcome.error ?? "the background run ends done");
  t.equal(fio.sampling(), 2, "one sample before the reads, one after");
  t.equal(node.script.of("fio.initialize").length, 1, "the data read once");
  t.same(
    node.labels.reports.map((r) => [r.state, r.details[Label.prewarm]]).slice(0, 2),
    [
      ["warming", "checking"],
      ["warming", "cold"],
    ],
    "the background run publishes the sample's verdict first",
  );
  t.same(node.labels.reports.at(-1)?.details[Label.prewarm], "warm", "ready and warm at the end");
  t.equal(node.labels.current(), "ready");
  t.ok((await node.fake.describe(volumeId)).tags[VolumeTag.initialized], "tagged initialized");
});
