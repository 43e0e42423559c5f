/**
 * The emulator's transition delays changed while it runs (`setDelays`, what bench/boot-latency.ts
 * uses to draw EC2's latencies per boot): a transition started afterwards takes the new delay,
 * one already under way keeps its own. The old delay is an hour, so nothing here depends on the
 * machine's speed.
 */
import t from "tap";
import { AttachVolumeCommand, CreateVolumeCommand } from "@aws-sdk/client-ec2";
import { attachmentState, describeVolume, startLab, volumeState } from "./helpers.ts";

const HOUR = 3_600_000;

t.test("setDelays applies to the transitions that start after it, not to those under way", async (t) => {
  const lab = await startLab(t, { delays: { createMs: 0, attachMs: HOUR, detachMs: 0, snapshotMs: 0 } });
  const ec2 = lab.client();
  const create = async () =>
    (await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 1 }))).VolumeId!;
  const early = await create();
  const late = await create();
  await volumeState(ec2, early, "available");
  await volumeState(ec2, late, "available");

  await ec2.send(new AttachVolumeCommand({ VolumeId: early, InstanceId: lab.a.instanceId, Device: "/dev/sdf" }));
  lab.emu.setDelays({ attachMs: 0 });
  await ec2.send(new AttachVolumeCommand({ VolumeId: late, InstanceId: lab.a.instanceId, Device: "/dev/sdg" }));

  const attached = await attachmentState(ec2, late, "attached");
  t.equal(
    attached.Attachments?.[0]?.State,
    "attached",
    "an attach started after setDelays takes the new delay (0, not an hour)",
  );
  t.equal(
    (await describeVolume(ec2, early)).Attachments?.[0]?.State,
    "attaching",
    "the attach started before keeps its hour",
  );
});
