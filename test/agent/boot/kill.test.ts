/**
 * The boot's kill matrix in process: runBoot against the port fakes (test/fixtures/fakes), its
 * process killed (death.ts) at every point one clean boot passes, then booted again in a new
 * process against the same world, as systemd's next start would. A point is each call the boot
 * makes, before it is made and after it returned (its answer lost): every port's method
 * (cloud, storage, daemon.json, docker, labels, the recorder...), every EC2 action on the wire
 * (AttachVolume, CreateTags..., held before or after the emulator applies it, as the lab's
 * matrix holds them), and each step boundary (the first line of each log event). A dead process
 * runs no undo and no `finally`: every call after the point throws, whatever catches it.
 *
 * Every point must converge, with the invariants of the lab's matrix (kill-invariants.ts): the
 * instance holds exactly one volume, attached, tagged claimed-by it with no released-at /
 * expires-at kept from the volume's earlier release; it is mounted at its mount point and
 * nothing else is; daemon.json and docker are switched to it; every other volume is in the pool,
 * none force-detached. Then a release of the converged node gives the volume back.
 *
 * test/agent/boot/kill.lab.test.ts kills a real process on real devices at a few of these points.
 */
import t, { type Test } from "tap";
import { VolumeTag } from "../../../src/tags.ts";
import { describeDeath, type FakeNode } from "../../fixtures/fakes/index.ts";
import {
  alive,
  assertPointsCover,
  boot,
  killThenRerun,
  referenceRun,
  release,
  usedPoolNode,
} from "../../fixtures/kill/kill-in-process.ts";
import { assertHoldsOne, assertNothingLostIn, assertReleased } from "../../fixtures/kill/kill-invariants.ts";

// Each point is a world of its own (its emulator, host and docker) and waits mostly on the
// emulator's transitions: several at a time, each in its own process life.
t.jobs = 4;

/** What a boot left is what a boot must leave: one volume held, mounted, docker on it. */
function assertBootConverged(t: Test, node: FakeNode): string | undefined {
  const model = node.fake.emulator.snapshotState();
  const volumeId = assertHoldsOne(t, model, node.instance.instanceId);
  if (volumeId !== undefined) {
    const mountPoint = `${node.config.paths.mountRoot}/${volumeId}`;
    t.same(
      [...node.host.mounted.entries()].filter(([, points]) => points.length > 0),
      [[node.host.deviceOf(volumeId), [mountPoint]]],
      `${volumeId}: mounted at <mountRoot>/${volumeId}, nothing else mounted`,
    );
    t.equal(node.docker.state.daemonJson["data-root"], `${mountPoint}/docker`, "daemon.json points docker at it");
    t.equal(node.docker.state.runningRoot, `${mountPoint}/docker`, "docker runs there");
    t.equal(node.labels.current(), "ready", "labelled ready");
  }
  assertNothingLostIn(t, model, VolumeTag.pool);
  return volumeId;
}

// One clean boot: the calls it makes and the events it logs are the points.
const referenceNode = await usedPoolNode(t);
const reference = await referenceRun(() => boot(referenceNode));
const { points } = reference;

t.test("a clean boot (the reference the points come from) converges", async (t) => {
  t.equal(reference.outcome.exitCode, 0, "exit 0");
  t.equal(reference.outcome.report?.outcome, "ready", "ready");
  assertBootConverged(t, referenceNode);
});

t.test("the points cover the claim, the device, the mount, the switch and docker", async (t) => {
  assertPointsCover(t, points, [
    "ec2.AttachVolume",
    "ec2.CreateTags",
    "cloud.claimVolume",
    "storage.waitForDevice",
    "storage.mount",
    "daemon-json.setDataRoot",
    "docker.start",
    "labels.report",
  ]);
});

for (const point of points) {
  t.test(`boot killed ${describeDeath(point)}, then booted again: converges`, async (t) => {
    const node = await usedPoolNode(t);
    const again = await killThenRerun(t, point, () => boot(node));
    t.equal(again.exitCode, 0, "the rerun exits 0", { reason: again.report?.reason });
    t.equal(again.report?.outcome, "ready", "the rerun readied the node");
    const volumeId = assertBootConverged(t, node);
    t.equal(again.report?.volumeId, volumeId, "on the volume it holds");

    // The converged node releases as any booted node does.
    const released = await alive(() => release(node));
    t.equal(released.report?.outcome, "released", "then a release gives the volume back");
    if (volumeId) assertReleased(t, node.fake.emulator.snapshotState(), volumeId, node.instance.instanceId);
  });
}
