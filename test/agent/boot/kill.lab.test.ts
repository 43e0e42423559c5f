/**
 * The boot's kill matrix: a real `ebs-cache-agent boot` process on a lab host is SIGKILLed
 * between each EC2 call it makes and that call's follow-up (held by the emulator before and
 * after the change is applied) and at each step boundary (its log events), then booted again as
 * systemd would at the next start. Every point must converge: the instance holds exactly one
 * volume, attached, mounted, daemon.json switched to it, tagged `claimed-by` this instance with
 * no `released-at` / `expires-at` left from the volume's earlier release; every other volume is
 * still available in the pool, none force-detached.
 *
 * The points come from one clean boot of the same kind (see test/fixtures/kill-matrix.ts), so
 * the matrix follows the agent's code. Pool volumes start as a used pool looks: released once
 * before (released-at, expires-at), which is what a rerun must not keep.
 */
import t from "tap";
import { VolumeTag } from "../../../src/tags.ts";
import { callerKey } from "../../fixtures/agent-process.ts";
import {
  assertBootConverged,
  describePoint,
  killThenRerun,
  referencePoints,
  rerun,
  startKillMatrixLab,
  testLabClosesClean,
} from "../../fixtures/kill-matrix.ts";

const km = await startKillMatrixLab(t, "test-boot-kill");
const { bl } = km;

// One clean boot: the EC2 calls it makes and the events it logs are the points to kill at.
await km.resetPool();
const cleanHost = await bl.addHost({ tags: { Name: "kill-clean" } });
const cleanCaller = await callerKey(cleanHost);
const clean = await rerun(bl, cleanHost, "boot", km.overrides);
const { records: cleanRecords, points } = referencePoints(bl, cleanCaller, clean.lines);

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
});

for (const [i, point] of points.entries()) {
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
