/**
 * The release's kill matrix in process: a node booted on a pool volume (port fakes,
 * test/fixtures/fakes) runs runRelease, its process killed (death.ts) at every point one clean
 * release passes, then release runs again in a new process against the same world, as systemd's
 * next stop would. A point is each call the release makes, before it is made and after it
 * returned (its answer lost): every port's method (docker, storage, mounts, cloud, daemon.json,
 * labels, the recorder...), every EC2 action on the wire (DetachVolume, CreateTags..., held
 * before or after the emulator applies it, as the lab's matrix holds them), and the first line of
 * each log event. A dead process runs no undo and no `finally`.
 *
 * Every point must converge, with the invariants of the lab's matrix (kill-invariants.ts): the
 * volume available, unattached, never forced, tagged released-at / expires-at with no claimed-by;
 * nothing mounted; daemon.json back on docker's default data-root and docker not on the volume;
 * the other pool volume untouched. Then the next boot claims from the pool again.
 *
 * test/agent/release/kill.lab.test.ts kills a real process on real devices at a few of these points.
 */
import t, { type Test } from "tap";
import { VolumeTag } from "../../../src/tags.ts";
import { DEFAULT_ROOT, describeDeath, type FakeNode } from "../../fixtures/fakes/index.ts";
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

// Each point is a world of its own: several at a time, each in its own process life.
t.jobs = 4;

/** A node booted (in a process of its own) on one of two pool volumes released once before; the volume it holds. */
async function bootedNode(t: Test): Promise<{ node: FakeNode; volumeId: string }> {
  const node = await usedPoolNode(t);
  const booted = await alive(() => boot(node));
  if (booted.report?.outcome !== "ready" || !booted.report.volumeId)
    throw new Error(`the node did not boot on a pool volume: ${booted.report?.reason}`);
  return { node, volumeId: booted.report.volumeId };
}

/** What a release left is what a release must leave: the volume back in the pool, the host off it. */
function assertReleaseConverged(t: Test, node: FakeNode, volumeId: string): void {
  const model = node.fake.emulator.snapshotState();
  assertReleased(t, model, volumeId, node.instance.instanceId);
  t.same([...node.host.mounted.values()].flat(), [], "nothing mounted");
  t.equal(node.docker.state.daemonJson["data-root"], undefined, "daemon.json back on docker's default data-root");
  t.ok(
    !node.docker.state.active || node.docker.state.runningRoot === DEFAULT_ROOT,
    "docker is not running on the volume",
    { active: node.docker.state.active, runningRoot: node.docker.state.runningRoot },
  );
  assertNothingLostIn(t, model, VolumeTag.pool);
}

// One clean release: the calls it makes and the events it logs are the points.
const referenceNode = await bootedNode(t);
const reference = await referenceRun(() => release(referenceNode.node));
const { points } = reference;

t.test("a clean release (the reference the points come from) converges", async (t) => {
  t.equal(reference.outcome.exitCode, 0, "exit 0");
  t.equal(reference.outcome.report?.outcome, "released", "released");
  assertReleaseConverged(t, referenceNode.node, referenceNode.volumeId);
});

t.test("the points cover docker's stop, the unmount, the switch back, the detach and the tags", async (t) => {
  assertPointsCover(t, points, [
    "docker.stop",
    "storage.unmount",
    "daemon-json.setDataRoot",
    "cloud.detachVolume",
    "ec2.DetachVolume",
    "ec2.CreateTags",
    "ec2.DeleteTags",
  ]);
});

for (const point of points) {
  t.test(`release killed ${describeDeath(point)}, then released again: converges`, async (t) => {
    const { node, volumeId } = await bootedNode(t);
    const again = await killThenRerun(t, point, () => release(node));
    t.equal(again.exitCode, 0, "the rerun exits 0", { reason: again.report?.reason });
    assertReleaseConverged(t, node, volumeId);

    // The pool is whole again: the next boot claims from it as from any pool.
    const booted = await alive(() => boot(node));
    t.equal(booted.report?.outcome, "ready", "then the next boot readies the node", { reason: booted.report?.reason });
    assertHoldsOne(t, node.fake.emulator.snapshotState(), node.instance.instanceId);
  });
}
