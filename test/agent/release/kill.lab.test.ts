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
import { VolumeTag } from "../../../src/tags.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import { callerKey } from "../../fixtures/agent-process.ts";
import {
  assertReleaseConverged,
  describePoint,
  killThenRerun,
  referencePoints,
  rerun,
  startKillMatrixLab,
  testLabClosesClean,
} from "../../fixtures/kill-matrix.ts";

const km = await startKillMatrixLab(t, "test-release-kill");
const { bl, overrides } = km;

/** A fresh host booted (as a CLI process) on a pool volume; the volume it holds. */
async function bootedHost(name: string): Promise<{ host: LabHost; volumeId: string | undefined }> {
  await km.resetPool();
  const host = await bl.addHost({ tags: { Name: name } });
  const booted = await rerun(bl, host, "boot", overrides);
  return { host, volumeId: booted.run.exitCode === 0 ? booted.json?.result?.volumeId : undefined };
}

// One clean release: the EC2 calls it makes and the events it logs are the points to kill at.
const reference = await bootedHost("release-kill-clean");
const referenceCaller = await callerKey(reference.host);
bl.lab.ec2.requests.reset();
const clean = await rerun(bl, reference.host, "release", overrides);
const { records: cleanRecords, points } = referencePoints(bl, referenceCaller, clean.lines);

t.test("a clean release (the reference the points come from) converges", async (t) => {
  t.ok(reference.volumeId, "the reference host booted on a pool volume");
  t.equal(clean.run.exitCode, 0, "exit 0", { stderr: clean.run.stderr });
  t.ok(
    cleanRecords.some((r) => r.action === "DetachVolume"),
    "it detached with DetachVolume",
    { calls: cleanRecords.map((r) => r.action) },
  );
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
    await killThenRerun(t, km, host, "release", point);
    await assertReleaseConverged(t, bl, host, volumeId, VolumeTag.pool);
  });
}

testLabClosesClean(t, km);
