/**
 * The clean-up of what killed acceptance runs left, against the EC2 emulator with loop-device
 * volumes: one left attached to this instance is detached and deleted, one left available deleted,
 * one attached to another instance and one not managed by the agent left alone; a second run finds
 * nothing more to do. A volume still mounted here is never detached.
 */
import t from "tap";
import { AttachVolumeCommand } from "@aws-sdk/client-ec2";
import { cleanUpEarlierRuns } from "../../../src/agent/acceptance/apply.ts";
import { ACCEPTANCE_TAG, acceptanceTags } from "../../../src/agent/acceptance/plan.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-acceptance-cleanup", golden: false });
t.teardown(() => bl.close());

const tags = acceptanceTags("killed-run", new Date());
const me = await bl.addHost();
const other = await bl.addHost();

async function attached(volumeId: string, instanceId: string, device = "/dev/sdf"): Promise<void> {
  await bl.ec2.send(new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: instanceId, Device: device }));
  t.ok(await pollUntil(async () => (await bl.describe(volumeId)).Attachments?.[0]?.State === "attached"));
}

const exists = async (volumeId: string) =>
  bl.describe(volumeId).then(
    () => true,
    () => false,
  );

t.test("a killed run's volumes: detached here and deleted, the others left", async (t) => {
  const here = await bl.createBlankVolume(tags);
  const free = await bl.createBlankVolume(tags);
  const elsewhere = await bl.createBlankVolume(tags);
  const foreign = await bl.createBlankVolume({ [ACCEPTANCE_TAG]: "killed-run" });
  const mountedHere = await bl.createBlankVolume(tags);
  await attached(here, me.instance.instanceId);
  await attached(elsewhere, other.instance.instanceId);
  await attached(mountedHere, me.instance.instanceId, "/dev/sdg");
  const deps = {
    // The run's host's instance profile: the agent's role, as acceptance runs on a node.
    cloud: createCloudVolumes({ client: bl.lab.ec2Client(me.credentials), pollMs: 100 }),
    instanceId: me.instance.instanceId,
    mounted: async (volumeId: string) => volumeId === mountedHere,
    detachTimeoutMs: 30_000,
  };
  const outcomes = await cleanUpEarlierRuns(deps);
  const byVolume = (id: string) => outcomes.filter((o) => o.step.volumeId === id).map((o) => o.done);
  t.same(byVolume(here), ["detached", "deleted"]);
  t.same(byVolume(free), ["deleted"]);
  t.same(byVolume(elsewhere), ["left"]);
  t.same(byVolume(foreign), ["left"]);
  t.same(byVolume(mountedHere), ["left"], "mounted here: never detached");
  t.notOk(await exists(here), `${here} gone`);
  t.notOk(await exists(free), `${free} gone`);
  t.ok(await exists(elsewhere), `${elsewhere} still there`);
  t.ok(await exists(foreign), `${foreign} still there`);
  t.equal((await bl.describe(mountedHere)).Attachments?.[0]?.State, "attached", "the mounted one still attached");

  const again = await cleanUpEarlierRuns({ ...deps, mounted: async () => false });
  t.same(
    again.filter((o) => o.done !== "left").map((o) => [o.step.volumeId, o.done]),
    [
      [mountedHere, "detached"],
      [mountedHere, "deleted"],
    ],
    "the rerun finishes what is left and nothing else",
  );
});
