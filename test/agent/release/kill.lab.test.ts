/**
 * The release's kill matrix on real devices: a host booted on a pool volume runs
 * `ebs-cache-agent release` as a real process, which is SIGKILLed at a point (held by the
 * emulator between an EC2 call and its follow-up, before or after the change is applied, or on
 * the first line of a log event); then release runs again, as systemd's next stop would. Every
 * point must converge: the volume available, unattached, never forced, tagged `released-at` /
 * `expires-at` with no `claimed-by`; nothing mounted; daemon.json back on docker's default
 * data-root.
 *
 * Every point a release passes (each port call and EC2 action, before and after, and each event)
 * is killed in process against the port fakes by test/agent/release/kill.test.ts. This matrix
 * keeps one point of each class of step, where what a real kernel, XFS and file system leave
 * behind matters, so it still proves a real SIGKILL of the real process on real devices:
 * - on the first `docker.daemon-json-written` line: during the data-root switch back
 *   (daemon.json rewritten, the volume still mounted);
 * - on the first `host.mount` line: during the real unmount;
 * - before EC2 applies the 1st DetachVolume: unmounted, still attached;
 * - after EC2 applied the 1st DetachVolume (its answer lost): the device leaves a host whose
 *   agent died;
 * - after EC2 applied the 1st CreateTags (its answer lost): the release's tags half written
 *   (released-at set, claimed-by not yet deleted).
 * The points come from one clean release (see test/fixtures/kill/kill-matrix.ts), so a kept point the
 * agent no longer passes fails the matrix instead of shrinking it.
 */
import t from "tap";
import { VolumeTag } from "../../../src/tags.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import { callerKey } from "../../fixtures/lab/agent-process.ts";
import {
  assertReleaseConverged,
  describePoint,
  keptPoints,
  killThenRerun,
  referencePoints,
  rerun,
  startKillMatrixLab,
  testLabClosesClean,
  type PointName,
} from "../../fixtures/kill/kill-matrix.ts";

/** The points this matrix kills at (see the header). */
const KEEP: PointName[] = [
  { event: "docker.daemon-json-written" },
  { event: "host.mount" },
  { action: "DetachVolume", apply: "before" },
  { action: "DetachVolume", apply: "after" },
  { action: "CreateTags", apply: "after" },
];

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
const { kept, missing } = keptPoints(points, KEEP);

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
  t.same(missing, [], "the clean release passes every point the matrix keeps", { points: points.map(describePoint) });
});

for (const [i, point] of kept.entries()) {
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
