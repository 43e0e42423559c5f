/**
 * The prune as `ebs-cache-agent prune` composes it from the host's adapters (pruneDeps), against the port fakes:
 * it works on the volume the last boot recorded, and on none when no boot came up.
 */
import t from "tap";
import { runBoot } from "../../../src/agent/boot/run.ts";
import { pruneDeps, runPrune } from "../../../src/agent/prune/run.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { fakeNode } from "../../fixtures/fakes/index.ts";

const options = { settings: { thresholdPercent: 80, targetPercent: 70 }, imageSet: null, dryRun: true };

t.test("after a boot that came up: the prune's volume is the one the boot recorded", async (t) => {
  const node = await fakeNode(t);
  const snapshotId = await node.fake.snapshot({ Name: "the pool's origin" });
  const volume = await node.fake.volume({
    tags: { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "default" },
    snapshotId,
  });
  const adapters = node.adapters();
  const boot = await runBoot(node.config, adapters, { dryRun: false });
  t.equal(boot.report?.outcome, "ready");
  t.equal(boot.report?.volumeId, volume.volumeId, "the boot took the pool volume");
  const report = await runPrune(pruneDeps(node.config, adapters), options);
  t.equal(report.plan.volumeId, volume.volumeId);
  t.equal(report.plan.mountPoint, boot.report?.mountPoint);
});

t.test("no boot recorded: no volume, and EC2 is not asked", async (t) => {
  const node = await fakeNode(t);
  const report = await runPrune(pruneDeps(node.config, node.adapters()), options);
  t.equal(report.plan.volumeId, undefined);
  t.same(node.script.of("cloud."), [], "no EC2 call");
  t.equal(report.removals.length, 0);
});
