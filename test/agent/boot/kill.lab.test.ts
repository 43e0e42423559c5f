/**
 * The boot's kill matrix on real devices: a real `ebs-cache-agent boot` process on a lab host is
 * SIGKILLed at a point (held by the emulator between an EC2 call and its follow-up, before or
 * after the change is applied, or on the first line of a log event), then booted again as
 * systemd would at the next start. Every point must converge: the instance holds exactly one
 * volume, attached, mounted, daemon.json switched to it, tagged `claimed-by` this instance with
 * no `released-at` / `expires-at` left from the volume's earlier release; every other volume is
 * still available in the pool, none force-detached.
 *
 * Every point a boot passes (each port call and EC2 action, before and after, and each event)
 * is killed in process against the port fakes by test/agent/boot/kill.test.ts. This matrix keeps
 * one point of each class of step, where what a real kernel, udev, XFS and file system leave
 * behind matters, so it still proves a real SIGKILL of the real process on real devices:
 * - before EC2 applies the 1st AttachVolume: before the claim (nothing held yet);
 * - after EC2 applied the 1st AttachVolume (its answer lost): the device appears on a host
 *   whose agent died, between attach and mount;
 * - after EC2 applied the 1st CreateTags (its answer lost): the claim's tags half written
 *   (claimed-by set, the earlier release's tags not yet deleted);
 * - on the first `host.identify` line: while the real device's signature is read;
 * - on the first `host.mount` line: during the real mount of the volume's XFS;
 * - on the first `docker.daemon-json-backup` line: during the data-root switch (the volume's
 *   data-root prepared, daemon.json being rewritten).
 * The points come from one clean boot of the same kind (see test/fixtures/kill/kill-matrix.ts), so a
 * kept point the agent no longer passes fails the matrix instead of shrinking it. Pool volumes
 * start as a used pool looks: released once before (released-at, expires-at), which is what a
 * rerun must not keep.
 */
import t from "tap";
import { VolumeTag } from "../../../src/tags.ts";
import { callerKey } from "../../fixtures/lab/agent-process.ts";
import {
  assertBootConverged,
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
  { action: "AttachVolume", apply: "before" },
  { action: "AttachVolume", apply: "after" },
  { action: "CreateTags", apply: "after" },
  { event: "host.identify" },
  { event: "host.mount" },
  { event: "docker.daemon-json-backup" },
];

const km = await startKillMatrixLab(t, "test-boot-kill");
const { bl } = km;

// One clean boot: the EC2 calls it makes and the events it logs are the points to kill at.
await km.resetPool();
const cleanHost = await bl.addHost({ tags: { Name: "kill-clean" } });
const cleanCaller = await callerKey(cleanHost);
const clean = await rerun(bl, cleanHost, "boot", km.overrides);
const { records: cleanRecords, points } = referencePoints(bl, cleanCaller, clean.lines);
const { kept, missing } = keptPoints(points, KEEP);

t.test("a clean boot (the reference the points come from) converges too", async (t) => {
  t.equal(clean.run.exitCode, 0, "exit 0", { stderr: clean.run.stderr });
  t.equal(clean.json?.result?.outcome, "prepared", "prepared (docker.control none)");
  t.ok(
    cleanRecords.some((r) => r.action === "AttachVolume"),
    "it claimed with AttachVolume",
    { calls: cleanRecords.map((r) => r.action) },
  );
  t.ok(points.length > 0, "kill points found", { points: points.map(describePoint) });
  await assertBootConverged(t, bl, cleanHost, VolumeTag.pool);
  t.same(missing, [], "the clean boot passes every point the matrix keeps", { points: points.map(describePoint) });
});

for (const [i, point] of kept.entries()) {
  t.test(`boot killed ${describePoint(point)}, then booted again: converges`, async (t) => {
    await km.resetPool();
    const host = await bl.addHost({ tags: { Name: `kill-${i}` } });
    const again = await killThenRerun(t, km, host, "boot", point);
    t.equal(again.json?.result?.outcome, "prepared", "the rerun prepared the node", {
      reason: again.json?.result?.reason,
    });
    await assertBootConverged(t, bl, host, VolumeTag.pool);
  });
}

testLabClosesClean(t, km);
