/**
 * The EC2 emulator driven by the real @aws-sdk/client-ec2: every action, its error codes,
 * filters, pagination, the attachment state machine, the concurrent-attach race and volume
 * initialization. Faults, persistence and the admin API are in ec2-emulator.lab.test.ts.
 */
import t from "tap";
import {
  AttachVolumeCommand,
  CreateSnapshotCommand,
  CreateTagsCommand,
  CreateVolumeCommand,
  DeleteSnapshotCommand,
  DeleteTagsCommand,
  DeleteVolumeCommand,
  DescribeInstancesCommand,
  DescribeSnapshotsCommand,
  DescribeTagsCommand,
  DescribeVolumeStatusCommand,
  DescribeVolumesCommand,
  DetachVolumeCommand,
  paginateDescribeSnapshots,
  paginateDescribeTags,
  paginateDescribeVolumes,
  waitUntilVolumeAvailable,
  type DescribeSnapshotsCommandInput,
  type EC2Client,
} from "@aws-sdk/client-ec2";
import {
  attachmentState,
  availableVolume,
  describeVolume,
  gate,
  labInstance,
  poll,
  sdkError,
  snapshotCompleted,
  startLab,
  volumeState,
} from "./helpers.ts";

const volume = describeVolume;

async function attached(client: EC2Client, volumeId: string, instanceId: string, device = "/dev/sdf"): Promise<void> {
  await client.send(new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: instanceId, Device: device }));
  await attachmentState(client, volumeId, "attached");
}

t.test("CreateVolume: creating → available, full item, backend called", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  const created = await ec2.send(
    new CreateVolumeCommand({
      AvailabilityZone: "us-east-1a",
      Size: 20,
      TagSpecifications: [{ ResourceType: "volume", Tags: [{ Key: "ebs-cache:pool", Value: "builders" }] }],
    }),
  );
  t.match(created.VolumeId, /^vol-[0-9a-f]{17}$/);
  t.equal(created.State, "creating");
  t.equal(created.VolumeType, "gp3", "gp3 is the default type");
  t.equal(created.Iops, 3000);
  t.equal(created.Throughput, 125);
  t.same(created.Tags, [{ Key: "ebs-cache:pool", Value: "builders" }]);
  t.ok(created.CreateTime instanceof Date);
  const v = await volumeState(ec2, created.VolumeId as string, "available");
  t.equal(v.Size, 20);
  t.equal(v.AvailabilityZone, "us-east-1a");
  t.equal(v.Encrypted, false);
  t.equal(v.MultiAttachEnabled, false);
  t.same(v.Attachments, []);
  t.same(lab.backend.callsOf("createVolume"), [{ op: "createVolume", id: created.VolumeId, other: undefined }]);
});

t.test("CreateVolume errors", async (t) => {
  const snapshotCopy = gate();
  const lab = await startLab(t, {
    backendOptions: { hold: (c) => (c.op === "createSnapshot" ? snapshotCopy.promise : undefined) },
  });
  const ec2 = lab.client();
  t.match(await sdkError(ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1z", Size: 1 }))), {
    name: "InvalidZone.NotFound",
    status: 400,
  });
  t.match(await sdkError(ec2.send(new CreateVolumeCommand({ Size: 1 } as never))), { name: "MissingParameter" });
  t.match(await sdkError(ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a" }))), {
    name: "MissingParameter",
  });
  t.match(
    await sdkError(
      ec2.send(
        new CreateVolumeCommand({
          AvailabilityZone: "us-east-1a",
          Size: 1,
          TagSpecifications: [{ ResourceType: "snapshot", Tags: [{ Key: "a", Value: "b" }] }],
        }),
      ),
    ),
    { name: "InvalidParameterValue" },
  );
  t.match(
    await sdkError(
      ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 1, VolumeInitializationRate: 200 })),
    ),
    { name: "InvalidParameterValue", message: /snapshot/ },
    "an initialization rate needs a snapshot",
  );
  t.match(
    await sdkError(
      ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", SnapshotId: "snap-00000000000000000" })),
    ),
    { name: "InvalidSnapshot.NotFound" },
  );
  t.match(
    await sdkError(ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", SnapshotId: "snap-nope" }))),
    { name: "InvalidSnapshotID.Malformed" },
  );
  t.match(await sdkError(ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 0 }))), {
    name: "InvalidParameterValue",
  });
  t.match(
    await sdkError(ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 4, VolumeType: "io2" }))),
    { name: "MissingParameter" },
    "io2 needs Iops",
  );
  const source = await availableVolume(ec2, { size: 10 });
  const snap = await ec2.send(new CreateSnapshotCommand({ VolumeId: source }));
  // The snapshot stays pending while the backend still copies (held here).
  t.match(
    await sdkError(ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", SnapshotId: snap.SnapshotId }))),
    { name: "IncorrectState", message: /pending/ },
  );
  snapshotCopy.open();
  await snapshotCompleted(ec2, snap.SnapshotId as string);
  t.match(
    await sdkError(
      ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", SnapshotId: snap.SnapshotId, Size: 5 })),
    ),
    { name: "InvalidParameterValue", message: /smaller than snapshot/ },
  );
  for (const rate of [99, 301]) {
    t.match(
      await sdkError(
        ec2.send(
          new CreateVolumeCommand({
            AvailabilityZone: "us-east-1a",
            SnapshotId: snap.SnapshotId,
            VolumeInitializationRate: rate,
          }),
        ),
      ),
      { name: "InvalidParameterValue" },
      `rate ${rate} is out of range`,
    );
  }
  const fromSnap = await ec2.send(
    new CreateVolumeCommand({
      AvailabilityZone: "us-east-1b",
      SnapshotId: snap.SnapshotId,
      VolumeInitializationRate: 300,
    }),
  );
  t.equal(fromSnap.Size, 10, "size defaults to the snapshot's");
  t.equal(fromSnap.SnapshotId, snap.SnapshotId);
  t.equal(fromSnap.VolumeInitializationRate, 300);
  await poll(
    () => lab.backend.callsOf("createVolume"),
    (calls) => calls.some((c) => c.other === snap.SnapshotId),
  );
});

t.test("CreateVolume: EC2's rules for encryption, KMS keys, gp3 IOPS and throughput, and tags", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  const zone = "us-east-1a";
  const create = (input: Omit<ConstructorParameters<typeof CreateVolumeCommand>[0], "AvailabilityZone">) =>
    ec2.send(new CreateVolumeCommand({ AvailabilityZone: zone, ...input }));

  t.match(
    await sdkError(create({ Size: 10, KmsKeyId: "alias/ebs-cache" })),
    { name: "InvalidParameterDependency", message: /KmsKeyId requires the parameter Encrypted/ },
    "KmsKeyId without Encrypted",
  );
  const keyId = "1234abcd-12ab-34cd-56ef-1234567890ab";
  const shapes: Array<[string, RegExp]> = [
    [keyId, new RegExp(`^arn:aws:kms:us-east-1:\\d{12}:key/${keyId}$`)],
    ["alias/ebs-cache", /^arn:aws:kms:us-east-1:\d{12}:alias\/ebs-cache$/],
    [
      `arn:aws:kms:us-east-1:111122223333:key/${keyId}`,
      new RegExp(`^arn:aws:kms:us-east-1:111122223333:key/${keyId}$`),
    ],
    ["arn:aws:kms:us-east-1:111122223333:alias/team", /^arn:aws:kms:us-east-1:111122223333:alias\/team$/],
  ];
  for (const [given, arn] of shapes) {
    const id = (await create({ Size: 10, Encrypted: true, KmsKeyId: given })).VolumeId!;
    const v = await volumeState(ec2, id, "available");
    t.equal(v.Encrypted, true, `encrypted with ${given}`);
    t.match(v.KmsKeyId, arn, "the key as its ARN");
  }
  const bad = (await create({ Size: 10, Encrypted: true, KmsKeyId: "not-a-key" })).VolumeId!;
  t.equal(
    (await volumeState(ec2, bad, "error")).State,
    "error",
    "a key of no valid shape: accepted, then the volume fails (EC2 checks the key asynchronously)",
  );
  const byDefault = await volumeState(ec2, (await create({ Size: 10, Encrypted: true })).VolumeId!, "available");
  t.match(
    byDefault.KmsKeyId,
    /^arn:aws:kms:us-east-1:\d{12}:key\//,
    "Encrypted without a key: the account's default key for EBS",
  );

  const source = (await create({ Size: 10, Encrypted: true, KmsKeyId: keyId })).VolumeId!;
  await volumeState(ec2, source, "available");
  const snap = (await ec2.send(new CreateSnapshotCommand({ VolumeId: source }))).SnapshotId!;
  await snapshotCompleted(ec2, snap);
  const done = (await ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [snap] }))).Snapshots?.[0];
  t.equal(done?.Encrypted, true, "a snapshot of an encrypted volume is encrypted");
  t.equal(
    (await ec2.send(new DescribeSnapshotsCommand({ Filters: [{ Name: "encrypted", Values: ["true"] }] }))).Snapshots
      ?.length,
    1,
    "and found by the encrypted filter",
  );
  const restored = await volumeState(
    ec2,
    (await create({ SnapshotId: snap, Encrypted: false })).VolumeId!,
    "available",
  );
  t.equal(restored.Encrypted, true, "a volume from an encrypted snapshot is encrypted, Encrypted=false ignored");
  t.match(restored.KmsKeyId, new RegExp(`key/${keyId}$`), "with the snapshot's key");
  const rekeyed = await volumeState(
    ec2,
    (await create({ SnapshotId: snap, Encrypted: true, KmsKeyId: "alias/other" })).VolumeId!,
    "available",
  );
  t.match(rekeyed.KmsKeyId, /alias\/other$/, "or with the key the request names");

  const gp3 = await volumeState(
    ec2,
    (await create({ Size: 20, Iops: 10000, Throughput: 1000 })).VolumeId!,
    "available",
  );
  t.same([gp3.Iops, gp3.Throughput], [10000, 1000], "provisioned IOPS and throughput are kept");
  const refusals: Array<[Parameters<typeof create>[0], RegExp, string]> = [
    [{ Size: 100, Iops: 2999 }, /iops of 2999 is too low; minimum is 3000/, "IOPS below gp3's 3000"],
    [{ Size: 1000, Iops: 80001 }, /iops of 80001 is too high; maximum is 80000/, "IOPS above gp3's 80000"],
    [
      { Size: 10, Iops: 5001 },
      /Iops to volume size ratio of 500\.1\d* is too high; maximum is 500/,
      "more than 500 IOPS per GiB",
    ],
    [{ Size: 100, Throughput: 124 }, /throughput of 124 is too low; minimum is 125/, "throughput below 125"],
    [
      { Size: 1000, Iops: 80000, Throughput: 2001 },
      /throughput of 2001 is too high; maximum is 2000/,
      "throughput above 2000",
    ],
    [
      { Size: 100, Iops: 3000, Throughput: 751 },
      /Throughput \(MiBps\) to iops ratio of 0\.250333 is too high; maximum is 0\.250000/,
      "more than 0.25 MiB/s per IOPS",
    ],
  ];
  for (const [input, message, why] of refusals)
    t.match(await sdkError(create(input)), { name: "InvalidParameterValue", message }, why);
  t.match(
    await sdkError(create({ Size: 10, VolumeType: "gp2", Iops: 3000 })),
    { name: "InvalidParameterCombination" },
    "Iops on gp2",
  );
  t.same(
    (await volumeState(ec2, (await create({ Size: 2, Iops: 3000 })).VolumeId!, "available")).Iops,
    3000,
    "the 3000 baseline on a 2 GiB volume (the ratio counts above it)",
  );

  const tags = (n: number) => Array.from({ length: n }, (_, i) => ({ Key: `k${i}`, Value: "v" }));
  t.match(
    await sdkError(create({ Size: 1, TagSpecifications: [{ ResourceType: "volume", Tags: tags(51) }] })),
    { name: "TagLimitExceeded" },
    "51 tags",
  );
  t.ok(
    (await create({ Size: 1, TagSpecifications: [{ ResourceType: "volume", Tags: tags(50) }] })).VolumeId,
    "50 tags",
  );
  t.match(
    await sdkError(
      create({ Size: 1, TagSpecifications: [{ ResourceType: "volume", Tags: [{ Key: "aws:owner", Value: "x" }] }] }),
    ),
    { name: "InvalidParameterValue", message: /aws:/ },
    "aws: is reserved",
  );
  t.match(
    await sdkError(
      create({
        Size: 1,
        TagSpecifications: [{ ResourceType: "volume", Tags: [{ Key: "k".repeat(129), Value: "x" }] }],
      }),
    ),
    { name: "InvalidParameterValue" },
    "a key of 129 characters",
  );
  t.match(
    await sdkError(
      create({
        Size: 1,
        TagSpecifications: [{ ResourceType: "volume", Tags: [{ Key: "k", Value: "v".repeat(257) }] }],
      }),
    ),
    { name: "InvalidParameterValue" },
    "a value of 257 characters",
  );
});

t.test("DescribeVolumes: ids, filters (OR within, AND across, wildcards)", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  const v1 = await availableVolume(ec2, { zone: "us-east-1a", size: 8, tags: { Pool: "builders", Name: "cache-1" } });
  const v2 = await availableVolume(ec2, {
    zone: "us-east-1a",
    size: 16,
    tags: { Pool: "runners", Name: "cache-2" },
    type: "gp2",
  });
  const v3 = await availableVolume(ec2, { zone: "us-east-1b", size: 8, tags: { Pool: "builders", Name: "other" } });
  await attached(ec2, v1, lab.a.instanceId);
  const ids = async (filters: { Name: string; Values: string[] }[]) =>
    ((await ec2.send(new DescribeVolumesCommand({ Filters: filters }))).Volumes ?? []).map((v) => v.VolumeId).sort();
  const sorted = (...xs: string[]) => [...xs].sort();

  t.same(await ids([{ Name: "tag:Pool", Values: ["builders"] }]), sorted(v1, v3));
  t.same(await ids([{ Name: "tag:Pool", Values: ["builders", "runners"] }]), sorted(v1, v2, v3), "values are OR-ed");
  t.same(
    await ids([
      { Name: "tag:Pool", Values: ["builders"] },
      { Name: "availability-zone", Values: ["us-east-1a"] },
    ]),
    [v1],
    "filters are AND-ed",
  );
  t.same(await ids([{ Name: "tag:Name", Values: ["cache-*"] }]), sorted(v1, v2), "* wildcard");
  t.same(await ids([{ Name: "tag:Name", Values: ["cache-?"] }]), sorted(v1, v2), "? wildcard");
  t.same(await ids([{ Name: "tag:Name", Values: ["cache"] }]), [], "no partial match without wildcard");
  t.same(await ids([{ Name: "tag:Name", Values: ["CACHE-1"] }]), [], "case-sensitive");
  t.same(await ids([{ Name: "tag-key", Values: ["Po*"] }]), sorted(v1, v2, v3));
  t.same(await ids([{ Name: "status", Values: ["in-use"] }]), [v1]);
  t.same(await ids([{ Name: "status", Values: ["available"] }]), sorted(v2, v3));
  t.same(await ids([{ Name: "volume-id", Values: [v2] }]), [v2]);
  t.same(await ids([{ Name: "attachment.instance-id", Values: [lab.a.instanceId] }]), [v1]);
  t.same(await ids([{ Name: "attachment.status", Values: ["attached"] }]), [v1]);
  t.same(await ids([{ Name: "size", Values: ["16"] }]), [v2]);
  t.same(await ids([{ Name: "volume-type", Values: ["gp2"] }]), [v2]);
  t.same(await ids([{ Name: "snapshot-id", Values: ["snap-*"] }]), []);

  const byId = await ec2.send(new DescribeVolumesCommand({ VolumeIds: [v3, v1] }));
  t.same(byId.Volumes?.map((v) => v.VolumeId).sort(), sorted(v1, v3));
  t.match(await sdkError(ec2.send(new DescribeVolumesCommand({ VolumeIds: [v1, "vol-00000000000000000"] }))), {
    name: "InvalidVolume.NotFound",
    message: /vol-00000000000000000/,
  });
  t.match(await sdkError(ec2.send(new DescribeVolumesCommand({ VolumeIds: ["volume-1"] }))), {
    name: "InvalidVolumeID.Malformed",
  });
  t.match(await sdkError(ec2.send(new DescribeVolumesCommand({ Filters: [{ Name: "colour", Values: ["red"] }] }))), {
    name: "InvalidParameterValue",
    message: /colour/,
  });
});

t.test("DescribeVolumes pagination: 23 volumes in pages of 5", async (t) => {
  const lab = await startLab(t, { delays: { createMs: 1, attachMs: 1, detachMs: 1, snapshotMs: 1 } });
  const ec2 = lab.client();
  const made = new Set<string>();
  for (let i = 0; i < 23; i++) {
    const v = await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1c", Size: 1 }));
    made.add(v.VolumeId as string);
  }
  const pages: number[] = [];
  const seen: string[] = [];
  for await (const page of paginateDescribeVolumes({ client: ec2, pageSize: 5 }, {})) {
    pages.push(page.Volumes?.length ?? 0);
    seen.push(...(page.Volumes ?? []).map((v) => v.VolumeId as string));
  }
  t.same(pages, [5, 5, 5, 5, 3]);
  t.equal(new Set(seen).size, 23, "no volume twice");
  t.same(new Set(seen), made);

  const filtered: string[] = [];
  for await (const page of paginateDescribeVolumes(
    { client: ec2, pageSize: 5 },
    { Filters: [{ Name: "availability-zone", Values: ["us-east-1c"] }] },
  )) {
    filtered.push(...(page.Volumes ?? []).map((v) => v.VolumeId as string));
  }
  t.equal(filtered.length, 23);

  t.match(await sdkError(ec2.send(new DescribeVolumesCommand({ MaxResults: 4 }))), { name: "InvalidParameterValue" });
  const capped = await ec2.send(new DescribeVolumesCommand({ MaxResults: 1000 }));
  t.equal(capped.Volumes?.length, 23, "above the cap is accepted (the cap itself is in ec2-emulator.fidelity)");
  t.match(await sdkError(ec2.send(new DescribeVolumesCommand({ MaxResults: 5, VolumeIds: [...made].slice(0, 1) }))), {
    name: "InvalidParameterCombination",
  });
  t.match(await sdkError(ec2.send(new DescribeVolumesCommand({ MaxResults: 5, NextToken: "garbage" }))), {
    name: "InvalidPaginationToken",
  });
  const all = await ec2.send(new DescribeVolumesCommand({}));
  t.equal(all.Volumes?.length, 23, "without MaxResults everything comes at once");
  t.equal(all.NextToken, undefined);
});

t.test("attach and detach state machine, observed by polling", async (t) => {
  // The backend's attach and detach are held until the test has seen the state in between.
  const attachDone = gate();
  const detachDone = gate();
  const lab = await startLab(t, {
    backendOptions: {
      hold: (c) => (c.op === "attach" ? attachDone.promise : c.op === "detach" ? detachDone.promise : undefined),
    },
  });
  const ec2 = lab.client();
  const id = await availableVolume(ec2);
  const att = await ec2.send(
    new AttachVolumeCommand({ VolumeId: id, InstanceId: lab.a.instanceId, Device: "/dev/sdf" }),
  );
  t.match(att, {
    VolumeId: id,
    InstanceId: lab.a.instanceId,
    Device: "/dev/sdf",
    State: "attaching",
    DeleteOnTermination: false,
  });
  t.ok(att.AttachTime instanceof Date);
  await poll(
    () => lab.backend.callsOf("attach"),
    (calls) => calls.length === 1,
  );
  t.match(await volume(ec2, id), {
    State: "in-use",
    Attachments: [{ State: "attaching", InstanceId: lab.a.instanceId }],
  });
  attachDone.open();
  await attachmentState(ec2, id, "attached");
  t.same(lab.backend.callsOf("attach"), [{ op: "attach", id, other: lab.a.instanceId }]);
  t.equal(lab.backend.attached.get(id), lab.a.instanceId);

  const inst = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [lab.a.instanceId] }));
  t.match(inst.Reservations?.[0]?.Instances?.[0]?.BlockDeviceMappings, [
    { DeviceName: "/dev/sdf", Ebs: { VolumeId: id, Status: "attached", DeleteOnTermination: false } },
  ]);

  const det = await ec2.send(new DetachVolumeCommand({ VolumeId: id, InstanceId: lab.a.instanceId }));
  t.equal(det.State, "detaching");
  t.match(await volume(ec2, id), { State: "in-use", Attachments: [{ State: "detaching" }] });
  await poll(
    () => lab.backend.callsOf("detach"),
    (calls) => calls.length === 1,
  );
  t.match(
    await volume(ec2, id),
    { State: "in-use", Attachments: [{ State: "detaching" }] },
    "still detaching until the device is gone",
  );
  detachDone.open();
  const final = await volumeState(ec2, id, "available");
  t.same(final.Attachments, []);
  t.same(lab.backend.callsOf("detach"), [{ op: "detach", id, other: lab.a.instanceId }]);
  t.equal(lab.backend.attached.has(id), false);
  t.equal(lab.emu.snapshotState().volumes[id]?.forceDetachCount, 0);
});

t.test("AttachVolume errors", async (t) => {
  const creation = gate();
  let holdCreates = false;
  const lab = await startLab(t, {
    attachmentLimit: 2,
    backendOptions: { hold: (c) => (c.op === "createVolume" && holdCreates ? creation.promise : undefined) },
  });
  const ec2 = lab.client();
  const id = await availableVolume(ec2);
  const attach = (VolumeId: string, InstanceId: string, Device = "/dev/sdf") =>
    ec2.send(new AttachVolumeCommand({ VolumeId, InstanceId, Device }));
  t.match(await sdkError(attach("vol-00000000000000000", lab.a.instanceId)), { name: "InvalidVolume.NotFound" });
  t.match(await sdkError(attach(id, "i-00000000000000000")), { name: "InvalidInstanceID.NotFound" });
  t.match(await sdkError(attach(id, lab.b.instanceId)), { name: "InvalidVolume.ZoneMismatch" }, "b is in another zone");
  t.match(await sdkError(attach(id, lab.a.instanceId, "sdf")), { name: "InvalidParameterValue" }, "not a device name");
  t.match(
    await sdkError(attach(id, lab.a.instanceId, "/dev/xvda")),
    { name: "InvalidParameterValue", message: /in use/ },
    "root device",
  );
  t.match(await sdkError(ec2.send(new AttachVolumeCommand({ VolumeId: id, InstanceId: lab.a.instanceId } as never))), {
    name: "MissingParameter",
  });
  await attached(ec2, id, lab.a.instanceId, "/dev/sdf");
  const other = lab.emu.registerInstance(labInstance("us-east-1a"));
  t.match(await sdkError(attach(id, other.instanceId, "/dev/sdg")), { name: "VolumeInUse" });
  const second = await availableVolume(ec2);
  t.match(await sdkError(attach(second, lab.a.instanceId, "/dev/sdf")), {
    name: "InvalidParameterValue",
    message: /already in use/,
  });
  await attach(second, lab.a.instanceId, "/dev/sdg");
  const third = await availableVolume(ec2);
  t.match(await sdkError(attach(third, lab.a.instanceId, "/dev/sdh")), { name: "AttachmentLimitExceeded" });
  holdCreates = true;
  const creating = await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 1 }));
  t.match(await sdkError(attach(creating.VolumeId as string, other.instanceId, "/dev/sdh")), {
    name: "IncorrectState",
  });
  creation.open();
  lab.emu.terminateInstance(other.instanceId);
  t.match(await sdkError(attach(third, other.instanceId, "/dev/sdh")), { name: "IncorrectInstanceState" });
});

t.test("20 concurrent AttachVolume calls for one volume: exactly one wins", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  const id = await availableVolume(ec2);
  const contenders = Array.from({ length: 20 }, () => lab.emu.registerInstance(labInstance("us-east-1a")));
  const results = await Promise.allSettled(
    contenders.map((i) =>
      ec2.send(new AttachVolumeCommand({ VolumeId: id, InstanceId: i.instanceId, Device: "/dev/sdf" })),
    ),
  );
  const winners = results.filter((r) => r.status === "fulfilled");
  const losers = results.flatMap((r) => (r.status === "rejected" ? [(r.reason as Error).name] : []));
  t.equal(winners.length, 1);
  t.same(losers, Array(19).fill("VolumeInUse"));
  const v = await attachmentState(ec2, id, "attached");
  const winner = (winners[0] as PromiseFulfilledResult<{ InstanceId?: string }>).value.InstanceId;
  t.equal(v.Attachments?.[0]?.InstanceId, winner);
  t.equal(lab.backend.callsOf("attach").length, 1, "the backend attached once");
});

t.test("DetachVolume errors and Force bookkeeping", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  const id = await availableVolume(ec2);
  t.match(await sdkError(ec2.send(new DetachVolumeCommand({ VolumeId: id }))), {
    name: "IncorrectState",
    message: /available/,
  });
  t.match(await sdkError(ec2.send(new DetachVolumeCommand({ VolumeId: "vol-00000000000000000" }))), {
    name: "InvalidVolume.NotFound",
  });
  await attached(ec2, id, lab.a.instanceId);
  const other = lab.emu.registerInstance(labInstance("us-east-1a"));
  t.match(await sdkError(ec2.send(new DetachVolumeCommand({ VolumeId: id, InstanceId: other.instanceId }))), {
    name: "InvalidAttachment.NotFound",
  });
  t.match(await sdkError(ec2.send(new DetachVolumeCommand({ VolumeId: id, Device: "/dev/sdz" }))), {
    name: "InvalidAttachment.NotFound",
  });
  await ec2.send(new DetachVolumeCommand({ VolumeId: id, Force: true }));
  await volumeState(ec2, id, "available");
  const state = lab.emu.snapshotState();
  t.equal(state.volumes[id]?.forceDetachCount, 1);
  t.match(state.events, [{ kind: "force-detach", volumeId: id, instanceId: lab.a.instanceId }]);
});

t.test("DeleteVolume", async (t) => {
  const creation = gate();
  let holdCreates = false;
  const lab = await startLab(t, {
    backendOptions: { hold: (c) => (c.op === "createVolume" && holdCreates ? creation.promise : undefined) },
  });
  const ec2 = lab.client();
  const id = await availableVolume(ec2);
  await attached(ec2, id, lab.a.instanceId);
  t.match(await sdkError(ec2.send(new DeleteVolumeCommand({ VolumeId: id }))), { name: "VolumeInUse" });
  await ec2.send(new DetachVolumeCommand({ VolumeId: id }));
  await volumeState(ec2, id, "available");
  await ec2.send(new DeleteVolumeCommand({ VolumeId: id }));
  await poll(
    () => sdkError(ec2.send(new DescribeVolumesCommand({ VolumeIds: [id] }))).catch(() => ({ name: "still there" })),
    (e) => e.name === "InvalidVolume.NotFound",
  );
  t.same(lab.backend.callsOf("deleteVolume"), [{ op: "deleteVolume", id }]);
  t.match(await sdkError(ec2.send(new DeleteVolumeCommand({ VolumeId: id }))), { name: "InvalidVolume.NotFound" });
  holdCreates = true;
  const creating = await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 1 }));
  t.match(await sdkError(ec2.send(new DeleteVolumeCommand({ VolumeId: creating.VolumeId }))), {
    name: "IncorrectState",
  });
  creation.open();
});

t.test("SDK waiter waitUntilVolumeAvailable waits through creating", async (t) => {
  const lab = await startLab(t, { delays: { createMs: 1500, attachMs: 10, detachMs: 10, snapshotMs: 10 } });
  const ec2 = lab.client();
  const v = await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 1 }));
  const result = await waitUntilVolumeAvailable(
    { client: ec2, maxWaitTime: 60, minDelay: 1, maxDelay: 1 },
    { VolumeIds: [v.VolumeId as string] },
  );
  t.equal(result.state, "SUCCESS");
});

t.test("tags: CreateTags / DeleteTags / DescribeTags on volumes, snapshots, instances", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  const vol = await availableVolume(ec2, { tags: { Keep: "1" } });
  const snap = await ec2.send(new CreateSnapshotCommand({ VolumeId: vol }));
  const snapId = snap.SnapshotId as string;
  const inst = lab.a.instanceId;
  await ec2.send(
    new CreateTagsCommand({
      Resources: [vol, snapId, inst],
      Tags: [
        { Key: "ebs-cache:state", Value: "attached" },
        { Key: "Empty", Value: "" },
      ],
    }),
  );
  t.same(
    lab.a.tags,
    { Name: "swarm-node", "ebs-cache:state": "attached", Empty: "" },
    "the live LabInstance sees instance tags",
  );
  const described = await ec2.send(
    new DescribeTagsCommand({ Filters: [{ Name: "key", Values: ["ebs-cache:state"] }] }),
  );
  t.same(described.Tags?.map((x) => [x.ResourceType, x.ResourceId, x.Value]).sort(), [
    ["instance", inst, "attached"],
    ["snapshot", snapId, "attached"],
    ["volume", vol, "attached"],
  ]);
  const forVolume = await ec2.send(
    new DescribeTagsCommand({
      Filters: [
        { Name: "resource-type", Values: ["volume"] },
        { Name: "resource-id", Values: [vol] },
      ],
    }),
  );
  t.same(
    forVolume.Tags?.map((x) => x.Key),
    ["Empty", "Keep", "ebs-cache:state"],
  );
  const byValue = await ec2.send(
    new DescribeTagsCommand({
      Filters: [
        { Name: "value", Values: ["attach*"] },
        { Name: "resource-type", Values: ["instance"] },
      ],
    }),
  );
  t.same(
    byValue.Tags?.map((x) => x.ResourceId),
    [inst],
  );

  // With a value, only a matching value is deleted; without, whatever the value.
  await ec2.send(new DeleteTagsCommand({ Resources: [vol, inst], Tags: [{ Key: "ebs-cache:state", Value: "other" }] }));
  t.equal(
    (await volume(ec2, vol)).Tags?.some((x) => x.Key === "ebs-cache:state"),
    true,
    "value did not match",
  );
  await ec2.send(new DeleteTagsCommand({ Resources: [vol, inst], Tags: [{ Key: "ebs-cache:state" }] }));
  t.equal(
    (await volume(ec2, vol)).Tags?.some((x) => x.Key === "ebs-cache:state"),
    false,
  );
  t.same(lab.a.tags, { Name: "swarm-node", Empty: "" });
  await ec2.send(new DeleteTagsCommand({ Resources: [snapId] }));
  const snapTags = await ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [snapId] }));
  t.same(snapTags.Snapshots?.[0]?.Tags, [], "no Tag.N deletes all tags");

  const ab = [{ Key: "a", Value: "b" }];
  const tagErrors: [string, () => Promise<unknown>][] = [
    [
      "InvalidVolume.NotFound",
      () => ec2.send(new CreateTagsCommand({ Resources: ["vol-00000000000000000"], Tags: ab })),
    ],
    [
      "InvalidSnapshot.NotFound",
      () => ec2.send(new CreateTagsCommand({ Resources: ["snap-00000000000000000"], Tags: ab })),
    ],
    [
      "InvalidInstanceID.NotFound",
      () => ec2.send(new CreateTagsCommand({ Resources: ["i-00000000000000000"], Tags: ab })),
    ],
    ["InvalidVolume.NotFound", () => ec2.send(new DeleteTagsCommand({ Resources: ["vol-00000000000000000"] }))],
    ["InvalidID", () => ec2.send(new CreateTagsCommand({ Resources: ["ami-123"], Tags: ab }))],
    [
      "InvalidParameterValue",
      () => ec2.send(new CreateTagsCommand({ Resources: [vol], Tags: [{ Key: "aws:x", Value: "b" }] })),
    ],
    ["MissingParameter", () => ec2.send(new CreateTagsCommand({ Resources: [vol], Tags: [] }))],
  ];
  for (const [code, call] of tagErrors) t.match(await sdkError(call()), { name: code }, code);
  // One bad resource leaves the others untouched.
  const atomic = [{ Key: "Atomic", Value: "1" }];
  await sdkError(ec2.send(new CreateTagsCommand({ Resources: [vol, "vol-00000000000000000"], Tags: atomic })));
  t.equal(
    (await volume(ec2, vol)).Tags?.some((x) => x.Key === "Atomic"),
    false,
  );
  const tooMany = Array.from({ length: 51 }, (_, i) => ({ Key: `k${i}`, Value: "v" }));
  t.match(await sdkError(ec2.send(new CreateTagsCommand({ Resources: [vol], Tags: tooMany }))), {
    name: "TagLimitExceeded",
  });

  // DescribeTags pagination.
  const twelve = Array.from({ length: 12 }, (_, i) => `p${String(i).padStart(2, "0")}`);
  await ec2.send(new CreateTagsCommand({ Resources: [vol], Tags: twelve.map((Key) => ({ Key, Value: "x" })) }));
  const keys: string[] = [];
  let pages = 0;
  const pFilter = { Filters: [{ Name: "key", Values: ["p*"] }] };
  for await (const page of paginateDescribeTags({ client: ec2, pageSize: 5 }, pFilter)) {
    pages++;
    keys.push(...(page.Tags ?? []).map((x) => x.Key as string));
  }
  t.equal(pages, 3);
  t.same(keys, twelve);
});

t.test("snapshots: create pending → completed, describe, filters, delete", async (t) => {
  const lab = await startLab(t, { delays: { createMs: 10, attachMs: 10, detachMs: 10, snapshotMs: 200 } });
  const ec2 = lab.client();
  const vol = await availableVolume(ec2, { size: 12 });
  const snap = await ec2.send(
    new CreateSnapshotCommand({
      VolumeId: vol,
      Description: "golden docker cache",
      TagSpecifications: [{ ResourceType: "snapshot", Tags: [{ Key: "Pool", Value: "builders" }] }],
    }),
  );
  const id = snap.SnapshotId as string;
  t.match(id, /^snap-[0-9a-f]{17}$/);
  t.match(snap, {
    State: "pending",
    VolumeId: vol,
    VolumeSize: 12,
    OwnerId: "123456789012",
    Description: "golden docker cache",
  });
  t.match(snap.Progress, /^\d+%$/);
  t.ok(snap.StartTime instanceof Date);
  t.same(lab.backend.callsOf("createSnapshot"), [{ op: "createSnapshot", id, other: vol }], "copied at creation time");
  const done = await poll(
    () => ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [id] })),
    (o) => o.Snapshots?.[0]?.State === "completed",
  );
  t.equal(done.Snapshots?.[0]?.Progress, "100%");
  t.same(done.Snapshots?.[0]?.Tags, [{ Key: "Pool", Value: "builders" }]);

  const other = await ec2.send(new CreateSnapshotCommand({ VolumeId: vol }));
  const list = async (input: DescribeSnapshotsCommandInput) =>
    ((await ec2.send(new DescribeSnapshotsCommand(input))).Snapshots ?? []).map((s) => s.SnapshotId);
  t.same(await list({ OwnerIds: ["self"] }), [id, other.SnapshotId]);
  t.same(await list({ OwnerIds: ["123456789012"] }), [id, other.SnapshotId]);
  t.same(await list({ OwnerIds: ["amazon"] }), []);
  t.same(await list({ Filters: [{ Name: "tag:Pool", Values: ["builders"] }] }), [id]);
  t.same(await list({ Filters: [{ Name: "tag-key", Values: ["Pool"] }] }), [id]);
  t.same(await list({ Filters: [{ Name: "status", Values: ["completed"] }] }).then((l) => l.includes(id)), true);
  t.same(await list({ Filters: [{ Name: "volume-id", Values: [vol] }] }), [id, other.SnapshotId]);
  t.same(await list({ Filters: [{ Name: "snapshot-id", Values: [id] }] }), [id]);
  t.match(await sdkError(ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: ["snap-00000000000000000"] }))), {
    name: "InvalidSnapshot.NotFound",
  });
  t.match(await sdkError(ec2.send(new CreateSnapshotCommand({ VolumeId: "vol-00000000000000000" }))), {
    name: "InvalidVolume.NotFound",
  });

  for (let i = 0; i < 4; i++) await ec2.send(new CreateSnapshotCommand({ VolumeId: vol }));
  const pages: number[] = [];
  for await (const page of paginateDescribeSnapshots({ client: ec2, pageSize: 5 }, { OwnerIds: ["self"] })) {
    pages.push(page.Snapshots?.length ?? 0);
  }
  t.same(pages, [5, 1]);

  await ec2.send(new DeleteSnapshotCommand({ SnapshotId: id }));
  t.match(await sdkError(ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [id] }))), {
    name: "InvalidSnapshot.NotFound",
  });
  t.match(await sdkError(ec2.send(new DeleteSnapshotCommand({ SnapshotId: id }))), {
    name: "InvalidSnapshot.NotFound",
  });
  await poll(
    () => lab.backend.callsOf("deleteSnapshot"),
    (calls) => calls.some((c) => c.id === id),
  );
});

t.test("DescribeInstances and instance termination", async (t) => {
  const lab = await startLab(t);
  const ec2 = lab.client();
  const vol = await availableVolume(ec2);
  await attached(ec2, vol, lab.a.instanceId);
  const all = await ec2.send(new DescribeInstancesCommand({}));
  t.equal(all.Reservations?.length, 2);
  const one = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [lab.b.instanceId] }));
  t.match(one.Reservations?.[0], {
    ReservationId: /^r-[0-9a-f]{17}$/,
    OwnerId: "123456789012",
    Instances: [
      {
        InstanceId: lab.b.instanceId,
        Placement: { AvailabilityZone: "us-east-1b" },
        State: { Name: "running", Code: 16 },
      },
    ],
  });
  const ids = async (filters: { Name: string; Values: string[] }[]) =>
    ((await ec2.send(new DescribeInstancesCommand({ Filters: filters }))).Reservations ?? []).flatMap((r) =>
      (r.Instances ?? []).map((i) => i.InstanceId),
    );
  t.same(await ids([{ Name: "availability-zone", Values: ["us-east-1a"] }]), [lab.a.instanceId]);
  t.same(await ids([{ Name: "instance-id", Values: [lab.b.instanceId] }]), [lab.b.instanceId]);
  t.same(await ids([{ Name: "tag:Name", Values: ["swarm-*"] }]).then((l) => l.length), 2);
  t.same(await ids([{ Name: "block-device-mapping.volume-id", Values: [vol] }]), [lab.a.instanceId]);
  t.match(await sdkError(ec2.send(new DescribeInstancesCommand({ InstanceIds: ["i-00000000000000000"] }))), {
    name: "InvalidInstanceID.NotFound",
  });
  t.match(await sdkError(ec2.send(new DescribeInstancesCommand({ InstanceIds: [lab.a.instanceId], MaxResults: 5 }))), {
    name: "InvalidParameterCombination",
  });

  lab.emu.terminateInstance(lab.a.instanceId);
  const v = await volume(ec2, vol);
  t.equal(v.State, "available", "termination detaches at once");
  t.same(v.Attachments, []);
  t.same(await ids([{ Name: "instance-state-name", Values: ["terminated"] }]), [lab.a.instanceId]);
  await poll(
    () => lab.backend.callsOf("detach"),
    (calls) => calls.length === 1,
  );
  t.equal(lab.backend.attached.has(vol), false);
});

t.test("DescribeVolumeStatus: initialization progress at the provisioned rate", async (t) => {
  // The emulator's clock is driven by the test: progress is followed step by step, exactly.
  // 1 GiB at 100 MiB/s takes 10.24 s; with initializationSpeedup 2 it takes 5.12 s.
  let now = Date.parse("2025-06-01T00:00:00Z");
  const lab = await startLab(t, { clock: () => now, initializationSpeedup: 2 });
  const ec2 = lab.client();
  const source = await availableVolume(ec2, { size: 1 });
  const snap = await ec2.send(new CreateSnapshotCommand({ VolumeId: source }));
  await snapshotCompleted(ec2, snap.SnapshotId as string);
  const rated = await ec2.send(
    new CreateVolumeCommand({
      AvailabilityZone: "us-east-1a",
      SnapshotId: snap.SnapshotId,
      VolumeInitializationRate: 100,
    }),
  );
  t.equal(rated.CreateTime?.getTime(), now, "timestamps come from the clock");
  const plain = await availableVolume(ec2, { snapshotId: snap.SnapshotId as string });
  const status = async (id: string) =>
    (await ec2.send(new DescribeVolumeStatusCommand({ VolumeIds: [id] }))).VolumeStatuses?.[0];

  const seen: [number | undefined, number | undefined, string | undefined][] = [];
  for (let step = 0; step <= 6; step++) {
    const s = await status(rated.VolumeId as string);
    const d = s?.InitializationStatusDetails;
    const state = s?.VolumeStatus?.Details?.find((x) => x.Name === "initialization-state")?.Status;
    seen.push([d?.Progress, d?.EstimatedTimeToCompleteInSeconds, state]);
    t.equal(d?.InitializationType, "provisioned-rate");
    now += 1024; // 1.024 s × 2 × 100 MiB/s = 204.8 MiB = 20 % of 1 GiB
  }
  t.same(seen, [
    [0, 6, "initializing"],
    [20, 5, "initializing"],
    [40, 4, "initializing"],
    [60, 3, "initializing"],
    [80, 2, "initializing"],
    [100, 0, "completed"],
    [100, 0, "completed"],
  ]);

  const p = await status(plain);
  t.match(p?.InitializationStatusDetails, { InitializationType: "default", Progress: 100 });
  t.equal(
    p?.InitializationStatusDetails?.EstimatedTimeToCompleteInSeconds,
    undefined,
    "only provisioned-rate has an estimate",
  );
  t.match(p?.VolumeStatus, { Status: "ok" });
  const blank = await status(source);
  t.equal(blank?.InitializationStatusDetails, undefined, "no initialization for a blank volume");
  const all = await ec2.send(new DescribeVolumeStatusCommand({}));
  t.equal(all.VolumeStatuses?.length, 3);
  t.match(await sdkError(ec2.send(new DescribeVolumeStatusCommand({ VolumeIds: ["vol-00000000000000000"] }))), {
    name: "InvalidVolume.NotFound",
  });

  // A hold stops provisioned-rate progress where it is (a volume created during it stays at 0 %)
  // until it is released; then progress goes on at the rate, the held time not counted.
  const progress = async (id: string) => (await status(id))?.InitializationStatusDetails?.Progress;
  now += 1024;
  lab.emu.holdInitialization();
  const held = await ec2.send(
    new CreateVolumeCommand({
      AvailabilityZone: "us-east-1a",
      SnapshotId: snap.SnapshotId,
      VolumeInitializationRate: 100,
    }),
  );
  now += 10_000;
  t.equal(await progress(held.VolumeId as string), 0, "created during the hold: 0 % however long it lasts");
  const state = (await status(held.VolumeId as string))?.VolumeStatus?.Details?.find(
    (x) => x.Name === "initialization-state",
  )?.Status;
  t.equal(state, "initializing");
  lab.emu.releaseInitialization();
  now += 1024;
  t.equal(await progress(held.VolumeId as string), 20, "released: on at the rate from 0 %");
  lab.emu.holdInitialization();
  now += 10_000;
  t.equal(await progress(held.VolumeId as string), 20, "held again: stands at 20 %");
  lab.emu.releaseInitialization();
  now += 1024;
  t.equal(await progress(held.VolumeId as string), 40, "and goes on from there");
  t.equal(await progress(rated.VolumeId as string), 100, "a completed volume stays completed");
});
