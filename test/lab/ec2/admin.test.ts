/**
 * The EC2 emulator's lab side, through the SDK and raw HTTP: fault injection, backend
 * failures, persistence across a restart, the `/_lab/` admin API and protocol-level errors.
 */
import t from "tap";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  AttachVolumeCommand,
  CreateTagsCommand,
  CreateVolumeCommand,
  DescribeInstancesCommand,
  DescribeVolumeStatusCommand,
  DescribeVolumesCommand,
  DetachVolumeCommand,
  CreateSnapshotCommand,
  DescribeSnapshotsCommand,
  EC2Client,
} from "@aws-sdk/client-ec2";
import { Ec2Admin } from "../../../src/lab/ec2/admin-client.ts";
import { validateFaults } from "../../../src/lab/ec2/faults.ts";
import { startEc2Emulator, type Model } from "../../../src/lab/ec2/index.ts";
import { MemoryVolumeBackend } from "../../../src/lab/ec2/memory-backend.ts";
import {
  attachmentState,
  availableVolume,
  describeVolume,
  FAST,
  labInstance,
  poll,
  sdkError,
  snapshotCompleted,
  startLab,
  volumeState,
} from "./helpers.ts";

const volume = describeVolume;

/** A 4 GiB volume, available. */
const available4 = (client: EC2Client, zone = "us-east-1a") => availableVolume(client, { zone, size: 4 });

t.test("throttling: deterministic rate, SDK retries through it, surfaces it without retries", async (t) => {
  const lab = await startLab(t);
  const once = lab.client(1);
  lab.emu.setFaults({ throttleRate: 1 });
  t.match(await sdkError(once.send(new DescribeVolumesCommand({}))), {
    name: "RequestLimitExceeded",
    status: 503,
    attempts: 1,
  });

  // Rate 1/4: exactly the 4th and 8th of 8 requests are throttled.
  lab.emu.setFaults({ throttleRate: 0.25 });
  const outcomes: string[] = [];
  for (let i = 0; i < 8; i++) {
    outcomes.push(
      await once.send(new DescribeVolumesCommand({})).then(
        () => "ok",
        (e: Error) => e.name,
      ),
    );
  }
  t.same(outcomes, ["ok", "ok", "ok", "RequestLimitExceeded", "ok", "ok", "ok", "RequestLimitExceeded"]);

  // Rate 1/2 with the SDK's default retries: every call succeeds, some on their second attempt.
  lab.emu.setFaults({ throttleRate: 0.5 });
  const retrying = lab.client();
  const attempts: number[] = [];
  for (let i = 0; i < 3; i++) {
    const out = await retrying.send(new DescribeVolumesCommand({}));
    attempts.push(out.$metadata.attempts ?? 0);
  }
  t.same(attempts, [1, 2, 2]);

  // Per action: only DescribeVolumes is throttled.
  lab.emu.setFaults({ actions: { DescribeVolumes: { throttleRate: 1 } } });
  t.match(await sdkError(once.send(new DescribeVolumesCommand({}))), { name: "RequestLimitExceeded" });
  const inst = await once.send(new DescribeInstancesCommand({}));
  t.equal(inst.Reservations?.length, 2);
});

t.test("latency is added before every answer", async (t) => {
  const lab = await startLab(t, { faults: { latencyMs: 120 } });
  const ec2 = lab.client();
  const start = performance.now();
  await ec2.send(new DescribeVolumesCommand({}));
  // A lower bound only: the emulator waits at least this long whatever the machine's speed.
  t.ok(performance.now() - start >= 110, "waited for the latency");
  t.same(lab.emu.faults(), { latencyMs: 120 });
});

t.test("stuckAttach keeps an attachment in attaching until lifted", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  const stuck = await available4(ec2);
  const fine = await available4(ec2);
  lab.emu.setFaults({ stuckAttach: [stuck] });
  await ec2.send(new AttachVolumeCommand({ VolumeId: stuck, InstanceId: lab.a.instanceId, Device: "/dev/sdf" }));
  await ec2.send(new AttachVolumeCommand({ VolumeId: fine, InstanceId: lab.a.instanceId, Device: "/dev/sdg" }));
  // The fine one attaching proves attachMs has passed for the stuck one too.
  await attachmentState(ec2, fine, "attached");
  await poll(
    () => lab.emu.snapshotState().events,
    (events) => events.some((e) => e.kind === "stuck-attach"),
  );
  t.equal((await volume(ec2, stuck)).Attachments?.[0]?.State, "attaching");
  t.same(
    lab.backend.callsOf("attach").map((c) => c.id),
    [fine],
    "no device for the stuck volume",
  );

  lab.emu.setFaults({});
  await attachmentState(ec2, stuck, "attached");

  // `true` holds every volume; a plain detach of a stuck attachment ends it without a device to remove.
  lab.emu.setFaults({ stuckAttach: true });
  const third = await available4(ec2);
  await ec2.send(new AttachVolumeCommand({ VolumeId: third, InstanceId: lab.a.instanceId, Device: "/dev/sdh" }));
  await poll(
    () => lab.emu.snapshotState().events.filter((e) => e.kind === "stuck-attach"),
    (e) => e.length === 2,
  );
  await ec2.send(new DetachVolumeCommand({ VolumeId: third }));
  await volumeState(ec2, third, "available");
  t.notOk(lab.backend.calls.some((c) => c.id === third && (c.op === "attach" || c.op === "detach")));
});

t.test("stuckCreate keeps new volumes creating past their delay until lifted", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  lab.emu.setFaults({ stuckCreate: true });
  const held = (await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 4 }))).VolumeId!;
  // The event is recorded once the delay has passed and the image is made: only the fault holds it.
  await poll(
    () => lab.emu.snapshotState().events,
    (events) => events.some((e) => e.kind === "stuck-create" && e.volumeId === held),
  );
  t.equal((await volume(ec2, held)).State, "creating", "held in creating past its delay");
  lab.emu.setFaults({});
  t.equal((await volume(ec2, held)).State, "available", "available as soon as the fault is lifted");
  t.match(validateFaults({ stuckCreate: false }), ["stuckCreate must be true"], "only `true` holds");
});

t.test("applyThen500: the change happens although the call failed", async (t) => {
  const lab = await startLab(t, { faults: { applyThen500: ["AttachVolume"] } });
  const once = lab.client(1);
  const first = await available4(once);
  t.match(
    await sdkError(
      once.send(new AttachVolumeCommand({ VolumeId: first, InstanceId: lab.a.instanceId, Device: "/dev/sdf" })),
    ),
    { name: "InternalError", status: 500 },
  );
  const v = await attachmentState(once, first, "attached");
  t.equal(v.Attachments?.[0]?.InstanceId, lab.a.instanceId);

  // With retries, the SDK repeats the call and the retry finds the volume taken: the caller
  // must check who holds it rather than trust the error.
  const retrying = lab.client();
  const second = await available4(retrying);
  t.match(
    await sdkError(
      retrying.send(new AttachVolumeCommand({ VolumeId: second, InstanceId: lab.a.instanceId, Device: "/dev/sdg" })),
    ),
    { name: "VolumeInUse", attempts: 2 },
  );
  t.equal((await volume(retrying, second)).Attachments?.[0]?.InstanceId, lab.a.instanceId);
  t.ok(lab.emu.snapshotState().events.some((e) => e.kind === "apply-then-500" && e.detail === "AttachVolume"));
});

t.test("backend failures stay visible, and DetachVolume recovers", async (t) => {
  const failing = { attach: true, detach: false, createVolume: false };
  const lab = await startLab(t, {
    backendOptions: {
      fail: (call) => (failing[call.op as keyof typeof failing] ? new Error(`no ${call.op} today`) : undefined),
    },
  });
  const ec2 = lab.client();
  const id = await available4(ec2);
  await ec2.send(new AttachVolumeCommand({ VolumeId: id, InstanceId: lab.a.instanceId, Device: "/dev/sdf" }));
  await poll(
    () => lab.emu.snapshotState().volumes[id]?.attachment?.error,
    (e) => e !== undefined,
  );
  t.equal((await volume(ec2, id)).Attachments?.[0]?.State, "attaching", "a failed attach stays attaching");
  const status = await ec2.send(new DescribeVolumeStatusCommand({ VolumeIds: [id] }));
  t.match(status.VolumeStatuses?.[0]?.VolumeStatus, {
    Status: "impaired",
    Details: [{ Name: "io-enabled", Status: "failed" }],
  });
  t.match(lab.emu.snapshotState().events, [{ kind: "backend-error", volumeId: id, detail: /no attach today/ }]);
  // Giving up on it: no device was made, so none is removed.
  await ec2.send(new DetachVolumeCommand({ VolumeId: id }));
  await volumeState(ec2, id, "available");
  t.same(lab.backend.callsOf("detach"), []);

  // A failed detach stays detaching; the next DetachVolume tries again.
  failing.attach = false;
  failing.detach = true;
  await ec2.send(new AttachVolumeCommand({ VolumeId: id, InstanceId: lab.a.instanceId, Device: "/dev/sdf" }));
  await attachmentState(ec2, id, "attached");
  await ec2.send(new DetachVolumeCommand({ VolumeId: id }));
  await poll(
    () => lab.emu.snapshotState().volumes[id]?.attachment?.error,
    (e) => e !== undefined,
  );
  t.equal((await volume(ec2, id)).Attachments?.[0]?.State, "detaching");
  failing.detach = false;
  await ec2.send(new DetachVolumeCommand({ VolumeId: id }));
  await volumeState(ec2, id, "available");
  t.equal(lab.backend.callsOf("detach").length, 2);

  failing.createVolume = true;
  const created = await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 1 }));
  const broken = await poll(
    () => volume(ec2, created.VolumeId as string),
    (v) => v.State !== "creating",
  );
  t.equal(broken.State, "error", "a failed creation leaves the volume in error");
});

t.test("persistence: a restarted emulator resumes from its state file", async (t) => {
  const dir = t.testdir();
  const stateFile = join(dir, "ec2-state.json");
  const backend = new MemoryVolumeBackend();
  const first = await startEc2Emulator({ backend, stateFile, delays: FAST });
  const client = (endpoint: string) =>
    new EC2Client({ endpoint, region: "us-east-1", credentials: { accessKeyId: "x", secretAccessKey: "y" } });
  const inst = first.registerInstance(labInstance("us-east-1a", { Role: "worker" }));
  const ec2 = client(first.endpoint);
  t.teardown(() => ec2.destroy());
  const attachedId = await available4(ec2);
  await ec2.send(new AttachVolumeCommand({ VolumeId: attachedId, InstanceId: inst.instanceId, Device: "/dev/sdf" }));
  await attachmentState(ec2, attachedId, "attached");
  await ec2.send(
    new CreateTagsCommand({
      Resources: [attachedId, inst.instanceId],
      Tags: [{ Key: "ebs-cache:owner", Value: inst.instanceId }],
    }),
  );
  const snap = await ec2.send(new CreateSnapshotCommand({ VolumeId: attachedId }));
  await snapshotCompleted(ec2, snap.SnapshotId as string);
  const before = (await ec2.send(new DescribeVolumesCommand({}))).Volumes;
  await first.close();
  t.same(readdirSync(dir), ["ec2-state.json"], "no temporary file left behind");

  // A volume still creating when the emulator stops becomes available after the restart.
  const slowFirst = await startEc2Emulator({ backend, stateFile, delays: { ...FAST, createMs: 600_000 } });
  const slowClient = client(slowFirst.endpoint);
  t.teardown(() => slowClient.destroy());
  const creating = await slowClient.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1b", Size: 2 }));
  // And an attachment held in `attaching` by a fault completes once the restarted emulator runs without it.
  const held = await slowClient.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 1 }));
  await slowFirst.close();
  const heldId = held.VolumeId as string;
  const state = JSON.parse(readFileSync(stateFile, "utf8")) as Model;
  const heldRecord = state.volumes[heldId];
  if (heldRecord) {
    // Made by hand: a volume attaching with no device yet, as a stuck attach leaves it.
    heldRecord.state = "in-use";
    heldRecord.attachment = {
      instanceId: inst.instanceId,
      device: "/dev/sdk",
      state: "attaching",
      attachTime: new Date().toISOString(),
      token: 999_999,
      stuck: true,
    };
  }
  writeFileSync(stateFile, JSON.stringify(state));

  const second = await startEc2Emulator({ backend, stateFile, delays: FAST });
  t.teardown(() => second.close());
  const ec2b = client(second.endpoint);
  t.teardown(() => ec2b.destroy());
  const after = (await ec2b.send(new DescribeVolumesCommand({ VolumeIds: before?.map((v) => v.VolumeId as string) })))
    .Volumes;
  t.same(after, before, "same volumes, tags and attachments");
  await volumeState(ec2b, creating.VolumeId as string, "available");
  t.equal(
    backend.calls.filter((c) => c.op === "createVolume" && c.id === creating.VolumeId).length,
    1,
    "the image is not made twice",
  );
  const heldNow = await attachmentState(ec2b, heldId, "attached");
  t.equal(heldNow.Attachments?.[0]?.Device, "/dev/sdk");
  const instances = await ec2b.send(new DescribeInstancesCommand({ InstanceIds: [inst.instanceId] }));
  t.match(instances.Reservations?.[0]?.Instances?.[0]?.Tags, [
    { Key: "Name", Value: "swarm-node" },
    { Key: "Role", Value: "worker" },
    { Key: "ebs-cache:owner", Value: inst.instanceId },
  ]);
  t.match(second.instances(), [{ instanceId: inst.instanceId, tags: { "ebs-cache:owner": inst.instanceId } }]);
  const snaps = await ec2b.send(new DescribeSnapshotsCommand({ OwnerIds: ["self"] }));
  t.same(
    snaps.Snapshots?.map((s) => s.SnapshotId),
    [snap.SnapshotId],
  );

  writeFileSync(join(dir, "bad.json"), JSON.stringify({ hello: "world" }));
  await t.rejects(startEc2Emulator({ backend, stateFile: join(dir, "bad.json") }), /not an EC2 emulator state file/);
});

t.test("admin API under /_lab/", async (t) => {
  const lab = await startLab(t);
  const admin = new Ec2Admin(lab.emu.endpoint);
  const ec2 = lab.client();
  t.match(await admin.health(), { ok: true, region: "us-east-1", zones: ["us-east-1a", "us-east-1b", "us-east-1c"] });

  const fresh = labInstance("us-east-1c", { Pool: "builders" });
  t.match(await admin.registerInstance(fresh), { instanceId: fresh.instanceId, state: "running", volumes: [] });
  await ec2.send(
    new CreateTagsCommand({ Resources: [fresh.instanceId], Tags: [{ Key: "ebs-cache:volume", Value: "vol-1" }] }),
  );
  t.match(
    await admin.instance(fresh.instanceId),
    { tags: { Pool: "builders", "ebs-cache:volume": "vol-1" } },
    "live tags",
  );
  t.equal(await admin.instance("i-00000000000000000"), undefined);
  t.equal((await admin.instances()).length, 3);
  await t.rejects(admin.registerInstance({ ...fresh, availabilityZone: "eu-west-1a" }), /400/);
  await t.rejects(admin.registerInstance({ instanceId: "i-1" } as never), /400/);

  const vol = await available4(ec2, "us-east-1c");
  await ec2.send(new AttachVolumeCommand({ VolumeId: vol, InstanceId: fresh.instanceId, Device: "/dev/sdf" }));
  t.match(await admin.instance(fresh.instanceId), { volumes: [{ volumeId: vol, device: "/dev/sdf" }] });
  t.match(await admin.terminateInstance(fresh.instanceId), { state: "terminated", volumes: [] });
  t.equal((await volume(ec2, vol)).State, "available");

  t.same(await admin.setFaults({ throttleRate: 0, stuckAttach: [vol] }), { throttleRate: 0, stuckAttach: [vol] });
  t.same(lab.emu.faults(), { throttleRate: 0, stuckAttach: [vol] });
  await t.rejects(admin.setFaults({ throttleRate: 2 }), /400/);
  await t.rejects(admin.setFaults({ bogus: true } as never), /400/);

  const state = await admin.state();
  t.ok(state.volumes[vol]);
  t.match(await admin.events(), [{ kind: "instance-terminated", instanceId: fresh.instanceId }]);
  const volumeRecord = state.volumes[vol];
  if (volumeRecord) volumeRecord.tags = { Replaced: "yes" };
  await admin.replaceState(state);
  t.same((await volume(ec2, vol)).Tags, [{ Key: "Replaced", Value: "yes" }]);
  await t.rejects(admin.replaceState({ version: 2 } as never), /400/);

  const raw = await fetch(`${lab.emu.endpoint}/_lab/nowhere`);
  t.equal(raw.status, 404);
});

t.test("protocol: InvalidAction, MissingAction, DryRun, GET with a query string", async (t) => {
  const lab = await startLab(t);
  const post = (body: string) =>
    fetch(lab.emu.endpoint + "/", {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body,
    });
  const unknown = await post("Action=RebootInstances&Version=2016-11-15");
  t.equal(unknown.status, 400);
  const text = await unknown.text();
  t.match(
    text,
    new RegExp(
      String.raw`<Response><Errors><Error><Code>InvalidAction<\/Code><Message>[^<]+<\/Message><\/` +
        String.raw`Error><\/Errors><RequestID>[0-9a-f-]{36}<\/RequestID><\/Response>`,
    ),
  );
  t.match(await (await post("Version=2016-11-15")).text(), /<Code>MissingAction<\/Code>/);
  t.match(
    await (await post("Action=AttachVolume&Version=2016-11-15&VolumeId=vol-00000000000000000")).text(),
    /<Code>MissingParameter<\/Code>/,
  );

  const ok = await fetch(`${lab.emu.endpoint}/?Action=DescribeInstances&Version=2016-11-15`);
  t.equal(ok.status, 200);
  const xml = await ok.text();
  t.match(
    xml,
    new RegExp(
      String.raw`^<\?xml version="1.0" encoding="UTF-8"\?>\n<DescribeInstancesResponse ` +
        String.raw`xmlns="http:\/\/ec2.amazonaws.com\/doc\/2016-11-15\/"><requestId>`,
    ),
  );
  t.ok(xml.includes(lab.a.instanceId));

  const ec2 = lab.client();
  t.match(
    await sdkError(ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 1, DryRun: true }))),
    {
      name: "DryRunOperation",
      status: 412,
    },
  );
  t.same(lab.emu.snapshotState().volumes, {}, "a dry run changes nothing");
});
