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
import { VolumeTag } from "../src/tags.ts";
import { callerKey } from "./fixtures/agent-process.ts";
import { goldenPoolTags, POOL, startBootLab } from "./fixtures/boot-lab.ts";
import {
  assertBootConverged,
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

const bl = await startBootLab({ name: "test-boot-kill", poolSize: 2 });
t.teardown(() => bl.close());
const overrides = { pool: POOL, createFromSnapshot: false };
const pristine = () => ({ ...goldenPoolTags(POOL, bl.golden), ...earlierRelease() });

// One clean boot: the EC2 calls it makes and the events it logs are the points to kill at.
await resetPool(bl, VolumeTag.pool, pristine);
const cleanHost = await bl.addHost({ tags: { Name: "kill-clean" } });
const cleanCaller = await callerKey(cleanHost);
const clean = await rerun(bl, cleanHost, "boot", overrides);
const cleanRecords = bl.lab.ec2.requests.records().filter((r) => r.caller === cleanCaller);
const points = killPoints(cleanRecords, clean.lines, () => true);

t.test("a clean boot (the reference the points come from) converges too", async (t) => {
  t.equal(clean.run.exitCode, 0, "exit 0", { stderr: clean.run.stderr });
  t.equal(clean.json?.result?.outcome, "prepared", "prepared (docker.control none)");
  t.ok(cleanRecords.some((r) => r.action === "AttachVolume"), "it claimed with AttachVolume", { calls: cleanRecords.map((r) => r.action) });
  t.ok(points.length > 0, "kill points found", { points: points.map(describePoint) });
  await assertBootConverged(t, bl, cleanHost, VolumeTag.pool);
});

for (const [i, point] of points.entries()) {
  t.test(`boot killed ${describePoint(point)}, then booted again: converges`, async (t) => {
    await resetPool(bl, VolumeTag.pool, pristine);
    const host = await bl.addHost({ tags: { Name: `kill-${i}` } });
    const killed = await runKilled(bl, host, "boot", point, overrides);
    t.ok(killed.reached, "the agent reached the point and was killed there", killed.reached ? {} : { exitCode: killed.run.exitCode, events: events(killed.lines) });
    const again = await rerun(bl, host, "boot", overrides);
    t.equal(again.run.exitCode, 0, "the rerun exits 0", again.run.exitCode === 0 ? {} : { stderr: again.run.stderr });
    t.equal(again.json?.result?.outcome, "prepared", "the rerun prepared the node", { reason: again.json?.result?.reason });
    await assertBootConverged(t, bl, host, VolumeTag.pool);
  });
}

t.test("the lab closes and leaves no loop device, mount or dockerd behind", async (t) => {
  await resetPool(bl, VolumeTag.pool, pristine);
  t.same(await bl.close(), { rootExists: false, loopDevices: [], mounts: [], dockerds: [] });
});
