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
import { runBoot } from "../../../src/agent/boot/run.ts";
import { runRelease } from "../../../src/agent/release/run.ts";
import { VolumeTag } from "../../../src/tags.ts";
import {
  asProcess,
  DEFAULT_ROOT,
  describeDeath,
  fakeNode,
  ProcessKilled,
  ProcessLife,
  type DeathPoint,
  type FakeNode,
} from "../../fixtures/fakes/index.ts";
import { assertHoldsOne, assertNothingLostIn, assertReleased, earlierRelease } from "../../fixtures/kill-invariants.ts";

// Each point is a world of its own: several at a time, each in its own process life.
t.jobs = 4;

const POOL_TAGS = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "default" };

/** A node booted (in a process of its own) on one of two pool volumes released once before; the volume it holds. */
async function bootedNode(t: Test): Promise<{ node: FakeNode; volumeId: string }> {
  const node = await fakeNode(t);
  await Promise.all([1, 2].map(() => node.fake.volume({ tags: { ...POOL_TAGS, ...earlierRelease() } })));
  const booted = await asProcess(new ProcessLife(), () => runBoot(node.bootCommand(), { dryRun: false }));
  if (booted instanceof ProcessKilled || booted.result?.outcome !== "ready" || !booted.result.volumeId)
    throw new Error(`the node did not boot on a pool volume: ${JSON.stringify(booted)}`);
  return { node, volumeId: booted.result.volumeId };
}

const release = (node: FakeNode) => runRelease(node.releaseCommand(), { dryRun: false });

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

// One clean release, as a process that is not killed: the calls it makes and the events it logs are the points.
const reference = new ProcessLife();
const points: DeathPoint[] = await (async () => {
  const { node, volumeId } = await bootedNode(t);
  const outcome = await asProcess(reference, () => release(node));
  t.test("a clean release (the reference the points come from) converges", async (t) => {
    t.notOk(outcome instanceof ProcessKilled, "not killed");
    if (outcome instanceof ProcessKilled) return;
    t.equal(outcome.exitCode, 0, "exit 0");
    t.equal(outcome.result?.outcome, "released", "released");
    assertReleaseConverged(t, node, volumeId);
  });
  return reference.deathPoints();
})();

t.test("the points cover docker's stop, the unmount, the switch back, the detach and the tags", async (t) => {
  const names = points.flatMap((p) => (p.kind === "call" ? [p.name] : []));
  for (const name of [
    "docker.stop",
    "storage.unmount",
    "daemon-json.setDataRoot",
    "cloud.detachVolume",
    "ec2.DetachVolume",
    "ec2.CreateTags",
    "ec2.DeleteTags",
  ])
    t.ok(names.includes(name), `a point at ${name}`, { names: [...new Set(names)] });
  t.ok(
    points.some((p) => p.kind === "event"),
    "and at log events",
  );
});

for (const point of points) {
  t.test(`release killed ${describeDeath(point)}, then released again: converges`, async (t) => {
    const { node, volumeId } = await bootedNode(t);
    const killed = await asProcess(new ProcessLife(point), () => release(node));
    t.ok(killed instanceof ProcessKilled, "the release reached the point and died there", {
      outcome: killed instanceof ProcessKilled ? undefined : killed.result,
    });
    const again = await asProcess(new ProcessLife(), () => release(node));
    if (again instanceof ProcessKilled) throw again;
    t.equal(again.exitCode, 0, "the rerun exits 0", { reason: again.result?.reason });
    assertReleaseConverged(t, node, volumeId);

    // The pool is whole again: the next boot claims from it as from any pool.
    const booted = await asProcess(new ProcessLife(), () => runBoot(node.bootCommand(), { dryRun: false }));
    if (booted instanceof ProcessKilled) throw booted;
    t.equal(booted.result?.outcome, "ready", "then the next boot readies the node", { reason: booted.result?.reason });
    assertHoldsOne(t, node.fake.emulator.snapshotState(), node.instance.instanceId);
  });
}
