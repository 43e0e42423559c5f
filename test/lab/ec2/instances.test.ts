/**
 * The emulator's instance states through the real SDK: StopInstances / StartInstances /
 * TerminateInstances answer EC2's shapes (previous and current state, codes 0/16/32/48/64/80),
 * DescribeInstances and its `instance-state-name` / `instance-state-code` filters follow the
 * transitions, volumes stay attached over a stop (their device too) and are detached at
 * termination (deleted with DeleteOnTermination), and the shutdown hook runs while the instance
 * is `stopping` / `shutting-down`, which it does not leave before the hook is done; the aws CLI
 * drives the same actions.
 */
import t from "tap";
import {
  AttachVolumeCommand,
  CreateVolumeCommand,
  DescribeInstancesCommand,
  StartInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
  type EC2Client,
  type Filter,
} from "@aws-sdk/client-ec2";
import {
  attachmentState,
  awsEc2,
  awsJson,
  describeVolume,
  gate,
  labInstance,
  poll,
  sdkError,
  startLab,
  volumeState,
  type Lab,
} from "./helpers.ts";

const DELAYS = { startMs: 60, stopMs: 60, terminateMs: 60 };

async function instanceState(
  ec2: EC2Client,
  instanceId: string,
): Promise<{ name: string | undefined; code: number | undefined }> {
  const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }));
  const state = out.Reservations?.[0]?.Instances?.[0]?.State;
  return { name: state?.Name, code: state?.Code };
}
const reached = (ec2: EC2Client, instanceId: string, name: string) =>
  poll(
    () => instanceState(ec2, instanceId),
    (s) => s.name === name,
  );

async function idsWhere(ec2: EC2Client, filters: Filter[]): Promise<string[]> {
  const out = await ec2.send(new DescribeInstancesCommand({ Filters: filters }));
  return (out.Reservations ?? [])
    .flatMap((r) => r.Instances ?? [])
    .map((i) => i.InstanceId!)
    .sort();
}

async function attachedVolume(ec2: EC2Client, instanceId: string, device: string): Promise<string> {
  const created = await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 1 }));
  const volumeId = created.VolumeId!;
  await volumeState(ec2, volumeId, "available");
  await ec2.send(new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: instanceId, Device: device }));
  await attachmentState(ec2, volumeId, "attached");
  return volumeId;
}

/** Holds the instance in stopping / shutting-down (its shutdown hook waits) until `open()`. */
function holdShutdown(t: { teardown(fn: () => unknown): void }, lab: Lab, instanceId: string): { open(): void } {
  const hold = gate();
  lab.emu.setShutdownHook(instanceId, () => hold.promise);
  t.teardown(() => hold.open());
  return hold;
}

t.test(
  "stop → stopped with its volume still attached (and its device); start → pending → running; the answers carry " +
    "both states",
  async (t) => {
    const lab = await startLab(t, { delays: { createMs: 10, attachMs: 10, detachMs: 10, snapshotMs: 10, ...DELAYS } });
    const ec2 = lab.client();
    const id = lab.a.instanceId;
    const vol = await attachedVolume(ec2, id, "/dev/sdf");
    t.same(await instanceState(ec2, id), { name: "running", code: 16 });

    // The shutdown hook holds the instance in stopping while the test looks, however slow the machine.
    const stopping = holdShutdown(t, lab, id);
    const stop = await ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    t.same(stop.StoppingInstances, [
      { InstanceId: id, PreviousState: { Code: 16, Name: "running" }, CurrentState: { Code: 64, Name: "stopping" } },
    ]);
    t.same(await instanceState(ec2, id), { name: "stopping", code: 64 }, "DescribeInstances shows stopping at once");
    t.same(
      await idsWhere(ec2, [{ Name: "instance-state-name", Values: ["stopping"] }]),
      [id],
      "instance-state-name filter",
    );
    stopping.open();
    t.same(await reached(ec2, id, "stopped"), { name: "stopped", code: 80 });
    t.same(await idsWhere(ec2, [{ Name: "instance-state-code", Values: ["80"] }]), [id], "instance-state-code filter");

    const v = await describeVolume(ec2, vol);
    t.equal(v.State, "in-use", "the volume stays in use over the stop");
    t.match(v.Attachments, [{ InstanceId: id, State: "attached", DeleteOnTermination: false }]);
    t.equal(lab.backend.attached.get(vol), id, "its device stays");
    t.same(lab.backend.callsOf("detach"), [], "no detach");
    const mapping = (await ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }))).Reservations?.[0]
      ?.Instances?.[0]?.BlockDeviceMappings;
    t.match(
      mapping,
      [{ DeviceName: "/dev/sdf", Ebs: { VolumeId: vol, Status: "attached" } }],
      "the block device mapping keeps it",
    );

    const again = await ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    t.match(
      again.StoppingInstances,
      [{ PreviousState: { Name: "stopped" }, CurrentState: { Code: 80, Name: "stopped" } }],
      "stopping a stopped instance changes nothing",
    );

    const start = await ec2.send(new StartInstancesCommand({ InstanceIds: [id] }));
    t.same(start.StartingInstances, [
      { InstanceId: id, PreviousState: { Code: 80, Name: "stopped" }, CurrentState: { Code: 0, Name: "pending" } },
    ]);
    t.same(await reached(ec2, id, "running"), { name: "running", code: 16 });
    t.equal((await describeVolume(ec2, vol)).Attachments?.[0]?.State, "attached", "still attached after the start");
    const started = await ec2.send(new StartInstancesCommand({ InstanceIds: [id] }));
    t.match(
      started.StartingInstances,
      [{ PreviousState: { Name: "running" }, CurrentState: { Name: "running" } }],
      "starting a running instance changes nothing",
    );
    t.match(
      lab.emu.snapshotState().events.map((e) => `${e.kind} ${e.instanceId}`),
      [`instance-stopped ${id}`, `instance-started ${id}`],
    );
  },
);

t.test(
  "terminate → shutting-down → terminated: volumes detached (DeleteOnTermination=false) or deleted (true)",
  async (t) => {
    const lab = await startLab(t, { delays: { createMs: 10, attachMs: 10, detachMs: 10, snapshotMs: 10, ...DELAYS } });
    const ec2 = lab.client();
    const id = lab.a.instanceId;
    const kept = await attachedVolume(ec2, id, "/dev/sdf");
    const doomed = await attachedVolume(ec2, id, "/dev/sdg");
    // Only ModifyInstanceAttribute sets it on EC2 (the agent never does): set in the model here.
    const model = lab.emu.snapshotState();
    model.volumes[doomed]!.attachment!.deleteOnTermination = true;
    lab.emu.replaceState(model);
    t.match((await describeVolume(ec2, doomed)).Attachments, [{ DeleteOnTermination: true }]);

    const shuttingDown = holdShutdown(t, lab, id);
    const out = await ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
    t.same(out.TerminatingInstances, [
      {
        InstanceId: id,
        PreviousState: { Code: 16, Name: "running" },
        CurrentState: { Code: 32, Name: "shutting-down" },
      },
    ]);
    t.equal((await describeVolume(ec2, kept)).State, "in-use", "attached while shutting down");
    shuttingDown.open();
    t.same(await reached(ec2, id, "terminated"), { name: "terminated", code: 48 });
    const v = await volumeState(ec2, kept, "available");
    t.same(v.Attachments, [], "DeleteOnTermination=false: detached, available");
    await poll(
      () => lab.emu.snapshotState().volumes[doomed],
      (record) => record === undefined,
    );
    t.pass("DeleteOnTermination=true: deleted");
    await poll(
      () => lab.backend.callsOf("deleteVolume").map((c) => c.id),
      (ids) => ids.includes(doomed),
    );
    t.notOk(lab.backend.attached.has(kept), "the kept volume's device is gone");

    const twice = await ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
    t.match(
      twice.TerminatingInstances,
      [{ PreviousState: { Name: "terminated" }, CurrentState: { Code: 48, Name: "terminated" } }],
      "terminating twice is no error",
    );
    t.match(await sdkError(ec2.send(new StartInstancesCommand({ InstanceIds: [id] }))), {
      name: "IncorrectInstanceState",
    });
    t.match(await sdkError(ec2.send(new StopInstancesCommand({ InstanceIds: [id] }))), {
      name: "IncorrectInstanceState",
    });
  },
);

t.test(
  "refusals: a stopping instance cannot start, a pending one cannot stop, unknown and malformed ids, one bad id " +
    "refuses the whole call",
  async (t) => {
    // Long enough to be seen in stopping / pending; the hook holds `a` in stopping anyway.
    const lab = await startLab(t, {
      delays: {
        createMs: 10,
        attachMs: 10,
        detachMs: 10,
        snapshotMs: 10,
        startMs: 60_000,
        stopMs: 10,
        terminateMs: 10,
      },
    });
    const ec2 = lab.client();
    const hold = gate();
    lab.emu.setShutdownHook(lab.a.instanceId, () => hold.promise);
    t.teardown(() => hold.open());
    await ec2.send(new StopInstancesCommand({ InstanceIds: [lab.a.instanceId] }));
    t.match(await sdkError(ec2.send(new StartInstancesCommand({ InstanceIds: [lab.a.instanceId] }))), {
      name: "IncorrectInstanceState",
      message: /not in a state from which it can be started/,
    });
    t.match(
      await sdkError(ec2.send(new StopInstancesCommand({ InstanceIds: [lab.b.instanceId, "i-00000000000000000"] }))),
      { name: "InvalidInstanceID.NotFound", message: /i-00000000000000000/ },
    );
    t.equal(
      (await instanceState(ec2, lab.b.instanceId)).name,
      "running",
      "the known instance of a refused call is not stopped",
    );
    t.match(await sdkError(ec2.send(new StopInstancesCommand({ InstanceIds: ["vol-1234"] }))), {
      name: "InvalidInstanceID.Malformed",
    });
    t.match(await sdkError(ec2.send(new StopInstancesCommand({ InstanceIds: [] }))), { name: "MissingParameter" });

    const c = lab.emu.registerInstance(labInstance("us-east-1a"));
    await ec2.send(new StopInstancesCommand({ InstanceIds: [c.instanceId] }));
    await reached(ec2, c.instanceId, "stopped");
    await ec2.send(new StartInstancesCommand({ InstanceIds: [c.instanceId] }));
    t.equal((await instanceState(ec2, c.instanceId)).name, "pending");
    t.match(await sdkError(ec2.send(new StopInstancesCommand({ InstanceIds: [c.instanceId] }))), {
      name: "IncorrectInstanceState",
      message: /not in a state from which it can be stopped/,
    });
    t.match(
      await sdkError(
        ec2.send(
          new AttachVolumeCommand({
            VolumeId: (await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 1 }))).VolumeId!,
            InstanceId: c.instanceId,
            Device: "/dev/sdf",
          }),
        ),
      ),
      { name: /IncorrectInstanceState|IncorrectState/ },
    );
  },
);

t.test(
  "the shutdown hook runs while the instance is stopping / shutting-down, and the instance waits for it",
  async (t) => {
    const lab = await startLab(t, {
      delays: { createMs: 10, attachMs: 10, detachMs: 10, snapshotMs: 10, startMs: 10, stopMs: 10, terminateMs: 10 },
    });
    const ec2 = lab.client();
    const seen: string[] = [];
    const hold = gate();
    lab.emu.setShutdownHook(lab.a.instanceId, async (kind) => {
      seen.push(`${kind} while ${(await instanceState(ec2, lab.a.instanceId)).name}`);
      await hold.promise;
    });
    await ec2.send(new StopInstancesCommand({ InstanceIds: [lab.a.instanceId] }));
    await poll(
      () => seen.length,
      (n) => n === 1,
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    t.equal(
      (await instanceState(ec2, lab.a.instanceId)).name,
      "stopping",
      "held in stopping while the hook runs (well past stopMs)",
    );
    hold.open();
    await reached(ec2, lab.a.instanceId, "stopped");

    // A stopped instance's OS is not running: terminating it runs no hook.
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [lab.a.instanceId] }));
    await reached(ec2, lab.a.instanceId, "terminated");
    lab.emu.setShutdownHook(lab.b.instanceId, async (kind) => {
      seen.push(`${kind} while ${(await instanceState(ec2, lab.b.instanceId)).name}`);
      throw new Error("the release failed");
    });
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [lab.b.instanceId] }));
    await reached(ec2, lab.b.instanceId, "terminated");
    t.same(
      seen,
      ["stop while stopping", "terminate while shutting-down"],
      "one hook per OS shutdown; a failing hook does not hold the instance",
    );
  },
);

t.test("the aws CLI: stop-instances, describe-instances by state, start-instances, terminate-instances", async (t) => {
  const lab = await startLab(t, { delays: { createMs: 10, attachMs: 10, detachMs: 10, snapshotMs: 10, ...DELAYS } });
  const e = lab.emu.endpoint;
  const ec2 = lab.client();
  const id = lab.a.instanceId;
  type Change = {
    InstanceId: string;
    CurrentState: { Code: number; Name: string };
    PreviousState: { Code: number; Name: string };
  };
  const stop = await awsJson<{ StoppingInstances: Change[] }>(e, ["stop-instances", "--instance-ids", id]);
  t.same(stop.StoppingInstances, [
    { InstanceId: id, CurrentState: { Code: 64, Name: "stopping" }, PreviousState: { Code: 16, Name: "running" } },
  ]);
  await reached(ec2, id, "stopped");
  const listed = await awsJson<{ Reservations: { Instances: { InstanceId: string; State: { Name: string } }[] }[] }>(
    e,
    ["describe-instances", "--filters", "Name=instance-state-name,Values=stopped"],
  );
  t.same(
    listed.Reservations.flatMap((r) => r.Instances.map((i) => `${i.InstanceId} ${i.State.Name}`)),
    [`${id} stopped`],
  );
  const start = await awsJson<{ StartingInstances: Change[] }>(e, ["start-instances", "--instance-ids", id]);
  t.match(start.StartingInstances, [
    { CurrentState: { Code: 0, Name: "pending" }, PreviousState: { Code: 80, Name: "stopped" } },
  ]);
  await reached(ec2, id, "running");
  const term = await awsJson<{ TerminatingInstances: Change[] }>(e, ["terminate-instances", "--instance-ids", id]);
  t.match(term.TerminatingInstances, [
    { CurrentState: { Code: 32, Name: "shutting-down" }, PreviousState: { Code: 16, Name: "running" } },
  ]);
  const refused = await awsEc2(e, ["start-instances", "--instance-ids", id]);
  t.match(refused.stderr, /IncorrectInstanceState/, "starting a terminating instance: IncorrectInstanceState");
});
