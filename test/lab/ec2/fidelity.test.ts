/**
 * What the emulator does as EC2 does it, beyond the basics of ec2-emulator.sdk: ClientToken
 * idempotency of CreateVolume (also across the applyThen500 fault and a restart), the
 * NotFound-after-create lag of eventual consistency, the `busy` detach of a volume in use,
 * default initialization following what the storage fetched, MaxResults capped per action,
 * strict device names, and DescribeInstances' block device mapping. Through the real SDK
 * (and the aws CLI for client tokens); the loop-device side is in ec2-emulator.devices.
 */
import t from "tap";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  AttachVolumeCommand,
  CreateSnapshotCommand,
  CreateTagsCommand,
  CreateVolumeCommand,
  DeleteVolumeCommand,
  DescribeInstancesCommand,
  DescribeTagsCommand,
  DescribeVolumeStatusCommand,
  DescribeVolumesCommand,
  DetachVolumeCommand,
  EC2Client,
  type EC2Client as Client,
} from "@aws-sdk/client-ec2";
import { MemoryVolumeBackend } from "../../../src/lab/ec2/memory-backend.ts";
import { startEc2Emulator, type Model } from "../../../src/lab/ec2/index.ts";
import type { VolumeRecord } from "../../../src/lab/ec2/model.ts";
import {
  attachmentState,
  availableVolume,
  awsJson,
  describeVolume,
  FAST,
  gate,
  labInstance,
  poll,
  sdkError,
  snapshotCompleted,
  startLab,
  volumeState,
} from "./helpers.ts";

/** A 4 GiB volume (or one from the snapshot), available. */
const available4 = (client: Client, zone = "us-east-1a", snapshotId?: string) =>
  availableVolume(client, { zone, ...(snapshotId ? { snapshotId } : { size: 4 }) });

const volumeCount = (model: Model) => Object.keys(model.volumes).length;

t.test("ClientToken: a repeated CreateVolume makes nothing new; other parameters are a mismatch", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  const first = await ec2.send(
    new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 4, ClientToken: "boot-1" }),
  );
  const again = await ec2.send(
    new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 4, ClientToken: "boot-1" }),
  );
  t.equal(again.VolumeId, first.VolumeId, "the same volume");
  t.equal(volumeCount(lab.emu.snapshotState()), 1);
  t.equal(lab.backend.callsOf("createVolume").length, 1);
  t.ok(lab.emu.snapshotState().events.some((e) => e.kind === "idempotent-replay" && e.volumeId === first.VolumeId));

  t.match(
    await sdkError(
      ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 5, ClientToken: "boot-1" })),
    ),
    { name: "IdempotentParameterMismatch", status: 400 },
  );
  t.equal(volumeCount(lab.emu.snapshotState()), 1, "a mismatch makes nothing");

  // Another token (or the SDK's own fresh token per call) makes a new volume.
  const other = await ec2.send(
    new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 4, ClientToken: "boot-2" }),
  );
  const fresh = await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 4 }));
  t.not(other.VolumeId, first.VolumeId);
  t.not(fresh.VolumeId, other.VolumeId);
  t.equal(volumeCount(lab.emu.snapshotState()), 3);

  // A replay answers the volume as it is now; once it is deleted, as it was first answered.
  await volumeState(ec2, first.VolumeId as string, "available");
  const later = await ec2.send(
    new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 4, ClientToken: "boot-1" }),
  );
  t.equal(later.State, "available");
  await ec2.send(new DeleteVolumeCommand({ VolumeId: first.VolumeId }));
  await poll(
    () => lab.emu.snapshotState().volumes[first.VolumeId as string],
    (v) => v === undefined,
  );
  const gone = await ec2.send(
    new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 4, ClientToken: "boot-1" }),
  );
  t.equal(gone.VolumeId, first.VolumeId, "still the first volume, not a new one");
  t.equal(gone.State, "creating");
  t.equal(volumeCount(lab.emu.snapshotState()), 2);

  t.match(
    await sdkError(
      ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 4, ClientToken: "x".repeat(65) })),
    ),
    { name: "InvalidParameterValue" },
  );
});

t.test("ClientToken: applied-then-500 and the SDK's retries make exactly one volume", async (t) => {
  const lab = await startLab(t, { faults: { applyThen500: ["CreateVolume"] } });
  const retrying = lab.client(3);
  const failure = await sdkError(retrying.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 4 })));
  t.match(failure, { name: "InternalError", status: 500, attempts: 3 }, "every attempt answered 500");
  const model = lab.emu.snapshotState();
  t.equal(volumeCount(model), 1, "three attempts, one volume");
  t.equal(lab.backend.callsOf("createVolume").length, 1);
  t.equal(model.events.filter((e) => e.kind === "idempotent-replay").length, 2, "the two retries were replays");

  // Once the fault is lifted, a retry by the caller with the same token learns the volume's id.
  lab.emu.setFaults({});
  const token = Object.keys(model.clientTokens ?? {})[0] as string;
  const found = await retrying.send(
    new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 4, ClientToken: token }),
  );
  t.equal(found.VolumeId, Object.keys(model.volumes)[0]);
  t.equal(volumeCount(lab.emu.snapshotState()), 1);
});

t.test("ClientToken: tokens survive a restart of the emulator; the aws CLI's --client-token", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "ec2-token-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const stateFile = join(dir, "ec2.json");
  const backend = new MemoryVolumeBackend();
  const client = (endpoint: string) =>
    new EC2Client({ endpoint, region: "us-east-1", credentials: { accessKeyId: "dummy", secretAccessKey: "dummy" } });
  const first = await startEc2Emulator({ backend, stateFile, delays: FAST });
  const ec2 = client(first.endpoint);
  const made = await ec2.send(
    new CreateVolumeCommand({ AvailabilityZone: "us-east-1b", Size: 2, ClientToken: "persisted" }),
  );
  ec2.destroy();
  await first.close();

  const second = await startEc2Emulator({ backend, stateFile, delays: FAST });
  t.teardown(() => second.close());
  const again = client(second.endpoint);
  t.teardown(() => again.destroy());
  const replay = await again.send(
    new CreateVolumeCommand({ AvailabilityZone: "us-east-1b", Size: 2, ClientToken: "persisted" }),
  );
  t.equal(replay.VolumeId, made.VolumeId);
  t.equal(volumeCount(second.snapshotState()), 1);

  const cli = (size: string) =>
    awsJson<{ VolumeId: string }>(second.endpoint, [
      "create-volume",
      "--availability-zone",
      "us-east-1a",
      "--size",
      size,
      "--client-token",
      "cli-token",
    ]);
  const a = await cli("3");
  const b = await cli("3");
  t.equal(b.VolumeId, a.VolumeId, "the CLI's repeat gives the same volume");
  await t.rejects(cli("4"), /IdempotentParameterMismatch/);
  t.equal(volumeCount(second.snapshotState()), 2);
});

t.test("notFoundAfterCreateMs: a new volume is NotFound by id and missing from listings for the lag", async (t) => {
  // The emulator's clock is driven by the test, so the lag is exact whatever the machine's speed.
  let now = Date.parse("2026-01-01T00:00:00Z");
  const lab = await startLab(t, { clock: () => now, faults: { notFoundAfterCreateMs: 5_000 } });
  const ec2 = lab.client(1);
  const created = await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 4 }));
  const id = created.VolumeId as string;
  t.match(await sdkError(ec2.send(new DescribeVolumesCommand({ VolumeIds: [id] }))), {
    name: "InvalidVolume.NotFound",
    status: 400,
  });
  t.same((await ec2.send(new DescribeVolumesCommand({}))).Volumes, [], "absent from an unfiltered listing");
  const listed = await ec2.send(new DescribeVolumesCommand({ Filters: [{ Name: "volume-id", Values: [id] }] }));
  t.same(listed.Volumes, [], "absent from a filtered listing");
  t.match(await sdkError(ec2.send(new CreateTagsCommand({ Resources: [id], Tags: [{ Key: "k", Value: "v" }] }))), {
    name: "InvalidVolume.NotFound",
  });
  t.match(
    await sdkError(
      ec2.send(new AttachVolumeCommand({ VolumeId: id, InstanceId: lab.a.instanceId, Device: "/dev/sdf" })),
    ),
    { name: "InvalidVolume.NotFound" },
  );
  t.match(await sdkError(ec2.send(new DescribeVolumeStatusCommand({ VolumeIds: [id] }))), {
    name: "InvalidVolume.NotFound",
  });
  t.same(
    (await ec2.send(new DescribeTagsCommand({}))).Tags?.filter((tag) => tag.ResourceId === id),
    [],
  );

  now += 4_999;
  t.match(await sdkError(ec2.send(new DescribeVolumesCommand({ VolumeIds: [id] }))), {
    name: "InvalidVolume.NotFound",
  });
  now += 1;
  t.equal((await describeVolume(ec2, id)).VolumeId, id, "visible once the lag has passed");
  await ec2.send(new CreateTagsCommand({ Resources: [id], Tags: [{ Key: "k", Value: "v" }] }));

  // Per action: only DescribeVolumes lags, CreateTags sees the new volume at once.
  lab.emu.setFaults({ actions: { DescribeVolumes: { notFoundAfterCreateMs: 1_000 } } });
  const second = (await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 4 })))
    .VolumeId as string;
  await ec2.send(new CreateTagsCommand({ Resources: [second], Tags: [{ Key: "k", Value: "v" }] }));
  t.match(await sdkError(ec2.send(new DescribeVolumesCommand({ VolumeIds: [second] }))), {
    name: "InvalidVolume.NotFound",
  });
  now += 1_000;
  t.same((await describeVolume(ec2, second)).Tags, [{ Key: "k", Value: "v" }]);

  t.throws(() => lab.emu.setFaults({ notFoundAfterCreateMs: -1 } as never), /notFoundAfterCreateMs/);
});

t.test("busy: a detach of a volume in use waits in busy until it is free, or forced", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  const id = await available4(ec2);
  await ec2.send(new AttachVolumeCommand({ VolumeId: id, InstanceId: lab.a.instanceId, Device: "/dev/sdf" }));
  await attachmentState(ec2, id, "attached");
  lab.backend.busy.add(id); // stands for "mounted on the instance"
  const answer = await ec2.send(new DetachVolumeCommand({ VolumeId: id }));
  t.equal(answer.State, "detaching", "DetachVolume answers detaching");
  const busy = await attachmentState(ec2, id, "busy");
  t.equal(busy.State, "in-use", "the volume stays in-use while busy");
  await poll(
    () => lab.emu.snapshotState().events,
    (events) => events.some((e) => e.kind === "detach-busy" && e.volumeId === id),
  );
  // Several rechecks later it is still busy, and its device is still there.
  const rechecks = lab.emu.snapshotState().events.length;
  await new Promise((resolve) => setTimeout(resolve, FAST.detachMs * 4));
  t.equal((await describeVolume(ec2, id)).Attachments?.[0]?.State, "busy");
  t.equal(lab.emu.snapshotState().events.length, rechecks, "one detach-busy event, not one per recheck");
  t.equal(lab.backend.attached.has(id), true, "the device was not removed");
  t.same(lab.backend.callsOf("detach"), []);
  const repeated = await ec2.send(new DetachVolumeCommand({ VolumeId: id }));
  t.equal(repeated.State, "busy", "a repeated DetachVolume shows busy");

  lab.backend.busy.delete(id); // unmounted
  await volumeState(ec2, id, "available");
  t.same(
    lab.backend.callsOf("detach").map((c) => c.id),
    [id],
    "detached once",
  );
  t.equal(lab.emu.snapshotState().volumes[id]?.forceDetachCount, 0);

  // Force ends a busy detach (EC2 allows it, at the risk of the data): counted as a force.
  const other = await available4(ec2);
  await ec2.send(new AttachVolumeCommand({ VolumeId: other, InstanceId: lab.a.instanceId, Device: "/dev/sdg" }));
  await attachmentState(ec2, other, "attached");
  lab.backend.busy.add(other);
  await ec2.send(new DetachVolumeCommand({ VolumeId: other }));
  await attachmentState(ec2, other, "busy");
  await ec2.send(new DetachVolumeCommand({ VolumeId: other, Force: true }));
  await volumeState(ec2, other, "available");
  t.equal(lab.emu.snapshotState().volumes[other]?.forceDetachCount, 1);
});

t.test("default initialization follows what the storage fetched", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  const source = await available4(ec2);
  const snapshot = (await ec2.send(new CreateSnapshotCommand({ VolumeId: source }))).SnapshotId as string;
  await snapshotCompleted(ec2, snapshot);
  const id = await available4(ec2, "us-east-1a", snapshot);
  const status = async () => {
    const out = await ec2.send(new DescribeVolumeStatusCommand({ VolumeIds: [id] }));
    const item = out.VolumeStatuses?.[0];
    return {
      details: item?.InitializationStatusDetails,
      state: item?.VolumeStatus?.Details?.find((d) => d.Name === "initialization-state")?.Status,
    };
  };
  t.match(
    await status(),
    { details: { InitializationType: "default", Progress: 100 }, state: "completed" },
    "not tracked: initialized",
  );
  lab.backend.initialization.set(id, { done: 3, total: 12 });
  const quarter = await status();
  t.match(quarter, { details: { InitializationType: "default", Progress: 25 }, state: "initializing" });
  t.equal(quarter.details?.EstimatedTimeToCompleteInSeconds, undefined, "no estimate for default initialization");
  lab.backend.initialization.set(id, { done: 11, total: 12 });
  t.match(
    await status(),
    { details: { Progress: 91 }, state: "initializing" },
    "rounded down: 100 only when all is fetched",
  );
  lab.backend.initialization.set(id, { done: 12, total: 12 });
  t.match(await status(), { details: { Progress: 100 }, state: "completed" });
});

/** `count` available volumes put straight into the model (a big pool without 1000 CreateVolume calls). */
function withPool(model: Model, count: number): Model {
  const base = model.nextSeq;
  for (let i = 0; i < count; i++) {
    const volumeId = `vol-${(0x10000000000000000n + BigInt(i)).toString(16).slice(1)}`;
    const record: VolumeRecord = {
      volumeId,
      seq: base + i,
      sizeGiB: 4,
      snapshotId: null,
      sourceSizeGiB: null,
      availabilityZone: "us-east-1a",
      state: "available",
      createTime: "2026-01-01T00:00:00.000Z",
      volumeType: "gp3",
      iops: 3000,
      throughput: 125,
      encrypted: false,
      initializationRate: null,
      tags: { pool: "p" },
      attachment: null,
      forceDetachCount: 0,
      error: null,
      imageReady: true,
    };
    model.volumes[volumeId] = record;
  }
  model.nextSeq = base + count;
  return model;
}

t.test("MaxResults above an action's cap gives a capped page; below the minimum is refused", async (t) => {
  const lab = await startLab(t);
  lab.emu.replaceState(withPool(lab.emu.snapshotState(), 1001));
  const ec2 = lab.client();
  const first = await ec2.send(new DescribeVolumesCommand({ MaxResults: 1000 }));
  t.equal(first.Volumes?.length, 500, "DescribeVolumes: at most 500 per page");
  t.ok(first.NextToken);
  const second = await ec2.send(new DescribeVolumesCommand({ MaxResults: 100_000, NextToken: first.NextToken }));
  t.equal(second.Volumes?.length, 500);
  const third = await ec2.send(new DescribeVolumesCommand({ MaxResults: 600, NextToken: second.NextToken }));
  t.equal(third.Volumes?.length, 1);
  t.equal(third.NextToken, undefined);
  const ids = new Set(
    [...(first.Volumes ?? []), ...(second.Volumes ?? []), ...(third.Volumes ?? [])].map((v) => v.VolumeId),
  );
  t.equal(ids.size, 1001, "every volume once");

  const status = await ec2.send(new DescribeVolumeStatusCommand({ MaxResults: 5000 }));
  t.equal(status.VolumeStatuses?.length, 1000, "DescribeVolumeStatus: at most 1000 per page");
  const tags = await ec2.send(new DescribeTagsCommand({ MaxResults: 5000 }));
  t.equal(tags.Tags?.length, 1000, "DescribeTags: at most 1000 per page");
  const exact = await ec2.send(new DescribeVolumesCommand({ MaxResults: 5 }));
  t.equal(exact.Volumes?.length, 5);
  t.match(await sdkError(ec2.send(new DescribeVolumesCommand({ MaxResults: 4 }))), {
    name: "InvalidParameterValue",
    message: /maxResults/,
  });
  t.match(await sdkError(ec2.send(new DescribeInstancesCommand({ MaxResults: 0 }))), { name: "InvalidParameterValue" });
});

t.test("AttachVolume accepts only the device names EC2 accepts for EBS on Linux", async (t) => {
  const lab = await startLab(t, { attachmentLimit: 27 });
  const ec2 = lab.client();
  const attach = (VolumeId: string, Device: string) =>
    ec2.send(new AttachVolumeCommand({ VolumeId, InstanceId: lab.a.instanceId, Device }));
  const invalid = [
    "/dev/sdf1",
    "/dev/xvdb",
    "/dev/xvddz",
    "/dev/xvdza",
    "/dev/nvme1n1",
    "/dev/sd",
    "sdf",
    "/dev/sdF",
    "/dev/../sdf",
    "/dev/sdf ",
  ];
  const id = await available4(ec2);
  for (const device of invalid) {
    t.match(
      await sdkError(attach(id, device)),
      { name: "InvalidParameterValue", message: /not a valid EBS device name/ },
      device,
    );
  }
  t.match(
    await sdkError(attach(id, "/dev/sda1")),
    { name: "InvalidParameterValue", message: /already in use/ },
    "root",
  );
  t.match(
    await sdkError(attach(id, "/dev/xvda")),
    { name: "InvalidParameterValue", message: /already in use/ },
    "root",
  );
  const valid = ["/dev/sdf", "/dev/sdp", "/dev/sdz", "/dev/xvdf", "/dev/xvdz", "/dev/xvdba", "/dev/xvddx"];
  const volumes: string[] = [];
  for (const device of valid) {
    const volumeId = await available4(ec2);
    volumes.push(volumeId);
    const answer = await attach(volumeId, device);
    t.equal(answer.Device, device, `${device} accepted`);
  }
  // A bad name is refused before the volume's state is looked at.
  t.match(await sdkError(attach(volumes[0] as string, "/dev/sdf1")), {
    name: "InvalidParameterValue",
    message: /not a valid/,
  });
  t.match(await sdkError(attach(id, "/dev/sdf")), { name: "InvalidParameterValue", message: /already in use/ });
});

t.test("DescribeInstances: tags and block device mapping with each volume's attachment state", async (t) => {
  const detachHold = gate();
  const lab = await startLab(t, {
    backendOptions: { hold: (c) => (c.op === "detach" ? detachHold.promise : undefined) },
  });
  const ec2 = lab.client();
  const host = lab.emu.registerInstance(labInstance("us-east-1a", { "ebs-cache:pool": "p1", role: "worker" }));
  const attached = await available4(ec2);
  const attaching = await available4(ec2);
  const detaching = await available4(ec2);
  await ec2.send(new AttachVolumeCommand({ VolumeId: attached, InstanceId: host.instanceId, Device: "/dev/sdf" }));
  await ec2.send(new AttachVolumeCommand({ VolumeId: detaching, InstanceId: host.instanceId, Device: "/dev/sdh" }));
  await attachmentState(ec2, attached, "attached");
  await attachmentState(ec2, detaching, "attached");
  lab.emu.setFaults({ stuckAttach: [attaching] });
  await ec2.send(new AttachVolumeCommand({ VolumeId: attaching, InstanceId: host.instanceId, Device: "/dev/sdg" }));
  await ec2.send(new DetachVolumeCommand({ VolumeId: detaching }));
  await poll(
    () => lab.backend.callsOf("detach"),
    (calls) => calls.length === 1,
  ); // held in detaching

  const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [host.instanceId] }));
  const instance = out.Reservations?.[0]?.Instances?.[0];
  t.same(Object.fromEntries((instance?.Tags ?? []).map((tag) => [tag.Key, tag.Value])), {
    Name: "swarm-node",
    "ebs-cache:pool": "p1",
    role: "worker",
  });
  const mapping = instance?.BlockDeviceMappings ?? [];
  const byVolume = Object.fromEntries(mapping.map((m) => [m.Ebs?.VolumeId, m]));
  t.equal(mapping.length, 3);
  t.match(byVolume[attached], {
    DeviceName: "/dev/sdf",
    Ebs: { VolumeId: attached, Status: "attached", DeleteOnTermination: false },
  });
  t.match(byVolume[attaching], { DeviceName: "/dev/sdg", Ebs: { Status: "attaching", DeleteOnTermination: false } });
  t.match(byVolume[detaching], { DeviceName: "/dev/sdh", Ebs: { Status: "detaching", DeleteOnTermination: false } });
  t.ok(byVolume[attached]?.Ebs?.AttachTime instanceof Date, "attach time parsed by the SDK");
  detachHold.open();
  await volumeState(ec2, detaching, "available");
  const after = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [host.instanceId] }));
  t.equal(
    after.Reservations?.[0]?.Instances?.[0]?.BlockDeviceMappings?.length,
    2,
    "a detached volume leaves the mapping",
  );
});

t.test("CreateTags on an instance with tags in instance metadata: only keys IMDS can serve", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  const tag = (id: string, Key: string) =>
    ec2.send(new CreateTagsCommand({ Resources: [id], Tags: [{ Key, Value: "v" }] }));
  for (const key of ["a/b", "a b", ".", "..", "_index", "key!"]) {
    t.match(
      await sdkError(tag(lab.a.instanceId, key)),
      { name: "InvalidParameterValue", message: /instance metadata/ },
      key,
    );
  }
  t.notOk(Object.hasOwn(lab.a.tags, "a/b"), "nothing was set");
  await tag(lab.a.instanceId, "io.simcore.autoscaling.ec2_instance.docker_node_labels");
  await tag(lab.a.instanceId, "a+b-c=d,e_f:g@h");
  t.equal(lab.a.tags["a+b-c=d,e_f:g@h"], "v");
  const plain = lab.emu.registerInstance({ ...labInstance("us-east-1a"), metadataTags: false });
  await tag(plain.instanceId, "a/b");
  t.equal(plain.tags["a/b"], "v", "without metadata tags any key is fine");
  const volumeId = await available4(ec2);
  await tag(volumeId, "a b/c");
  t.same((await describeVolume(ec2, volumeId)).Tags, [{ Key: "a b/c", Value: "v" }], "volumes are not concerned");
});
