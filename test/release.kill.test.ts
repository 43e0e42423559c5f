/**
 * The release's kill matrix: a host booted on a pool volume runs `ebs-cache-agent release` as
 * a real process, which is SIGKILLed between each EC2 call and its follow-up (held by the
 * emulator before and after the change is applied) and at each step boundary (its log events);
 * then release runs again, as systemd's next stop would. Every point must converge: the volume
 * available, unattached, never forced, tagged `released-at` / `expires-at` with no `claimed-by`;
 * nothing mounted; daemon.json back on docker's default data-root.
 *
 * The points come from one clean release (see test/fixtures/kill-matrix.ts).
 */
import t from "tap";
import { VolumeTag } from "../src/tags.ts";
import type { LabHost } from "../src/lab/lab.ts";
import { callerKey } from "./fixtures/agent-process.ts";
import { goldenPoolTags, POOL, startBootLab } from "./fixtures/boot-lab.ts";
import {
  assertReleaseConverged,
  describePoint,
  earlierRelease,
  events,
  killPoints,
  rerun,
  resetPool,
  runKilled,
} from "./fixtures/kill-matrix.ts";
import { assertLabPrerequisites } from "./fixtures/lab-prereq.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-release-kill", poolSize: 2 });
t.teardown(() => bl.close());
const overrides = { pool: POOL, createFromSnapshot: false };
const pristine = () => ({ ...goldenPoolTags(POOL, bl.golden), ...earlierRelease() });

/** A fresh host booted (as a CLI process) on a pool volume; the volume it holds. */
async function bootedHost(name: string): Promise<{ host: LabHost; volumeId: string | undefined }> {
  await resetPool(bl, VolumeTag.pool, pristine);
  const host = await bl.addHost({ tags: { Name: name } });
  const booted = await rerun(bl, host, "boot", overrides);
  return { host, volumeId: booted.run.exitCode === 0 ? booted.json?.result?.volumeId : undefined };
}

// One clean release: the EC2 calls it makes and the events it logs are the points to kill at.
const reference = await bootedHost("release-kill-clean");
const referenceCaller = await callerKey(reference.host);
bl.lab.ec2.requests.reset();
const clean = await rerun(bl, reference.host, "release", overrides);
const cleanRecords = bl.lab.ec2.requests.records().filter((r) => r.caller === referenceCaller);
const points = killPoints(cleanRecords, clean.lines, () => true);

t.test("a clean release (the reference the points come from) converges", async (t) => {
  t.ok(reference.volumeId, "the reference host booted on a pool volume");
  t.equal(clean.run.exitCode, 0, "exit 0", { stderr: clean.run.stderr });
  t.ok(cleanRecords.some((r) => r.action === "DetachVolume"), "it detached with DetachVolume", { calls: cleanRecords.map((r) => r.action) });
  t.ok(points.length > 0, "kill points found", { points: points.map(describePoint) });
  if (reference.volumeId) await assertReleaseConverged(t, bl, reference.host, reference.volumeId, VolumeTag.pool);
});

for (const [i, point] of points.entries()) {
  t.test(`release killed ${describePoint(point)}, then released again: converges`, async (t) => {
    const { host, volumeId } = await bootedHost(`release-kill-${i}`);
    if (!volumeId) {
      t.fail("the host did not boot on a pool volume: nothing to release");
      return;
    }
    const killed = await runKilled(bl, host, "release", point, overrides);
    t.ok(killed.reached, "the agent reached the point and was killed there", killed.reached ? {} : { exitCode: killed.run.exitCode, events: events(killed.lines) });
    const again = await rerun(bl, host, "release", overrides);
    t.equal(again.run.exitCode, 0, "the rerun exits 0", again.run.exitCode === 0 ? {} : { stderr: again.run.stderr });
    await assertReleaseConverged(t, bl, host, volumeId, VolumeTag.pool);
  });
}

t.test("the lab closes and leaves no loop device, mount or dockerd behind", async (t) => {
  await resetPool(bl, VolumeTag.pool, pristine);
  t.same(await bl.close(), { rootExists: false, loopDevices: [], mounts: [], dockerds: [] });
});
