/**
 * The EC2 emulator driven by the real Debian aws CLI (/usr/bin/aws's entry point, `--endpoint-url`): every
 * action, every error code the CLI can provoke, auto-pagination, waiters and faults. Its
 * commands run two at a time in long-lived Python processes (test/fixtures/lab/aws-cli-batch.ts),
 * which pay the CLI's start-up once.
 */
import t from "tap";
import {
  AttachVolumeCommand,
  CreateTagsCommand,
  CreateVolumeCommand,
  DescribeVolumesCommand,
  type EC2Client,
} from "@aws-sdk/client-ec2";
import { createMemoryLogger } from "../../../src/log.ts";
import { attachmentState, awsEc2, awsJson, labInstance, limited, startLab, volumeState } from "./helpers.ts";

t.jobs = 2;

interface CliVolume {
  VolumeId: string;
  State: string;
  Size: number;
  SnapshotId: string;
  Tags?: { Key: string; Value: string }[];
  Attachments: { InstanceId: string; State: string; Device: string }[];
}

async function sdkVolume(ec2: EC2Client, zone = "us-east-1a", attachTo?: string, device = "/dev/sdf"): Promise<string> {
  const v = await ec2.send(new CreateVolumeCommand({ AvailabilityZone: zone, Size: 2 }));
  const id = v.VolumeId as string;
  await volumeState(ec2, id, "available");
  if (attachTo) {
    await ec2.send(new AttachVolumeCommand({ VolumeId: id, InstanceId: attachTo, Device: device }));
    await attachmentState(ec2, id, "attached");
  }
  return id;
}

t.test("volume lifecycle: create, wait, filter, attach, detach, delete", async (t) => {
  const lab = await startLab(t);
  const e = lab.emu.endpoint;
  const created = await awsJson<CliVolume>(e, [
    "create-volume",
    "--availability-zone",
    "us-east-1a",
    "--size",
    "4",
    "--tag-specifications",
    "ResourceType=volume,Tags=[{Key=Pool,Value=builders}]",
  ]);
  t.match(created, { State: "creating", Size: 4, Tags: [{ Key: "Pool", Value: "builders" }] });
  const id = created.VolumeId;
  t.equal((await awsEc2(e, ["wait", "volume-available", "--volume-ids", id])).exitCode, 0);
  const filtered = await awsJson<{ Volumes: CliVolume[] }>(e, [
    "describe-volumes",
    "--filters",
    "Name=tag:Pool,Values=builders",
    "Name=availability-zone,Values=us-east-1a,us-east-1b",
  ]);
  t.same(
    filtered.Volumes.map((v) => v.VolumeId),
    [id],
  );

  const attach = await awsJson(e, [
    "attach-volume",
    "--volume-id",
    id,
    "--instance-id",
    lab.a.instanceId,
    "--device",
    "/dev/sdf",
  ]);
  t.match(attach, { State: "attaching", Device: "/dev/sdf", InstanceId: lab.a.instanceId });
  const ec2 = lab.client();
  await attachmentState(ec2, id, "attached");
  const instances = await awsJson<{ Reservations: { Instances: { BlockDeviceMappings: unknown[] }[] }[] }>(e, [
    "describe-instances",
    "--instance-ids",
    lab.a.instanceId,
  ]);
  t.match(instances.Reservations[0]?.Instances[0]?.BlockDeviceMappings, [
    { DeviceName: "/dev/sdf", Ebs: { VolumeId: id, Status: "attached" } },
  ]);
  const inUse = await awsEc2(e, ["delete-volume", "--volume-id", id]);
  t.equal(inUse.exitCode, 254);
  t.match(inUse.stderr, "(VolumeInUse)");

  t.match(await awsJson(e, ["detach-volume", "--volume-id", id]), { State: "detaching" });
  t.equal((await awsEc2(e, ["wait", "volume-available", "--volume-ids", id])).exitCode, 0);
  t.equal((await awsEc2(e, ["delete-volume", "--volume-id", id])).exitCode, 0);
  const deleted = await awsEc2(e, ["wait", "volume-deleted", "--volume-ids", id]);
  t.equal(deleted.exitCode, 0, "InvalidVolume.NotFound ends the waiter");
  t.same(
    lab.backend.calls.map((c) => c.op),
    ["createVolume", "attach", "detach", "deleteVolume"],
  );
});

t.test("error codes reach the CLI", async (t) => {
  const lab = await startLab(t, { attachmentLimit: 1 });
  const e = lab.emu.endpoint;
  const ec2 = lab.client();
  const used = await sdkVolume(ec2, "us-east-1a", lab.a.instanceId);
  const free = await sdkVolume(ec2, "us-east-1b");
  const full = lab.emu.registerInstance(labInstance("us-east-1b"));
  await sdkVolume(ec2, "us-east-1b", full.instanceId);
  const gone = lab.emu.registerInstance(labInstance("us-east-1b"));
  lab.emu.terminateInstance(gone.instanceId);
  const none = "vol-00000000000000000";
  const cases: [string, string[]][] = [
    ["InvalidZone.NotFound", ["create-volume", "--availability-zone", "us-east-1z", "--size", "1"]],
    ["InvalidVolume.NotFound", ["describe-volumes", "--volume-ids", none]],
    ["InvalidVolumeID.Malformed", ["describe-volumes", "--volume-ids", "vol-xyz"]],
    ["InvalidParameterValue", ["describe-volumes", "--filters", "Name=colour,Values=red"]],
    ["InvalidParameterValue", ["describe-volumes", "--no-paginate", "--max-results", "3"]],
    ["InvalidParameterCombination", ["describe-volumes", "--no-paginate", "--max-results", "5", "--volume-ids", used]],
    [
      "InvalidVolume.ZoneMismatch",
      ["attach-volume", "--volume-id", free, "--instance-id", lab.a.instanceId, "--device", "/dev/sdg"],
    ],
    [
      "InvalidInstanceID.NotFound",
      ["attach-volume", "--volume-id", free, "--instance-id", "i-00000000000000000", "--device", "/dev/sdg"],
    ],
    [
      "IncorrectInstanceState",
      ["attach-volume", "--volume-id", free, "--instance-id", gone.instanceId, "--device", "/dev/sdg"],
    ],
    ["VolumeInUse", ["attach-volume", "--volume-id", used, "--instance-id", lab.b.instanceId, "--device", "/dev/sdg"]],
    [
      "AttachmentLimitExceeded",
      ["attach-volume", "--volume-id", free, "--instance-id", full.instanceId, "--device", "/dev/sdg"],
    ],
    ["IncorrectState", ["detach-volume", "--volume-id", free]],
    ["InvalidAttachment.NotFound", ["detach-volume", "--volume-id", used, "--instance-id", lab.b.instanceId]],
    [
      "InvalidSnapshot.NotFound",
      ["create-volume", "--availability-zone", "us-east-1a", "--snapshot-id", "snap-00000000000000000"],
    ],
    ["InvalidSnapshotID.Malformed", ["delete-snapshot", "--snapshot-id", "snap-x"]],
    ["InvalidID", ["create-tags", "--resources", "ami-12345678", "--tags", "Key=a,Value=b"]],
    ["InvalidInstanceID.NotFound", ["describe-instances", "--instance-ids", "i-00000000000000000"]],
    ["DryRunOperation", ["create-volume", "--availability-zone", "us-east-1a", "--size", "1", "--dry-run"]],
  ];
  const results = await limited(
    2,
    cases.map(
      ([, args]) =>
        () =>
          awsEc2(e, args),
    ),
  );
  cases.forEach(([code, args], i) => {
    const r = results[i];
    t.ok(r && (r.exitCode === 254 || r.exitCode === 255), `${args[0]} → exit 254/255`);
    t.match(r?.stderr, `(${code})`, `${args.slice(0, 2).join(" ")} → ${code}`);
  });
});

t.test("CLI auto-pagination over NextToken", async (t) => {
  const log = createMemoryLogger("debug");
  const lab = await startLab(t, { log });
  const e = lab.emu.endpoint;
  const ec2 = lab.client();
  const made: string[] = [];
  for (let i = 0; i < 12; i++) {
    const v = await ec2.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1c", Size: 1 }));
    made.push(v.VolumeId as string);
  }
  const requests = () => log.lines.filter((l) => l.startsWith("<7>lab.ec2-emulator: DescribeVolumes ")).length;

  const all = await awsJson<{ Volumes: CliVolume[] }>(e, ["describe-volumes", "--page-size", "5"]);
  t.same(
    all.Volumes.map((v) => v.VolumeId),
    made,
    "all 12, in order, none twice",
  );
  t.equal(requests(), 3, "three pages of at most 5");

  const some = await awsJson<{ Volumes: CliVolume[]; NextToken?: string }>(e, [
    "describe-volumes",
    "--page-size",
    "5",
    "--max-items",
    "7",
  ]);
  t.equal(some.Volumes.length, 7);
  t.ok(some.NextToken, "the CLI hands out its own token to continue");

  await ec2.send(
    new CreateTagsCommand({
      Resources: made.slice(0, 6),
      Tags: [
        { Key: "Pool", Value: "p" },
        { Key: "Gen", Value: "1" },
      ],
    }),
  );
  const tags = await awsJson<{ Tags: unknown[] }>(e, [
    "describe-tags",
    "--page-size",
    "5",
    "--filters",
    "Name=resource-type,Values=volume",
  ]);
  t.equal(tags.Tags.length, 12);
});

t.test("tags, snapshots, volume status and instances", async (t) => {
  const lab = await startLab(t);
  const e = lab.emu.endpoint;
  const ec2 = lab.client();
  const vol = await sdkVolume(ec2);
  const tagged = await awsEc2(e, [
    "create-tags",
    "--resources",
    vol,
    lab.a.instanceId,
    "--tags",
    "Key=ebs-cache:pool,Value=builders",
    "Key=Tmp,Value=x",
  ]);
  t.equal(tagged.exitCode, 0);
  t.match(lab.a.tags, { "ebs-cache:pool": "builders", Tmp: "x" }, "live instance tags");
  const described = await awsJson<{ Tags: { ResourceId: string; ResourceType: string }[] }>(e, [
    "describe-tags",
    "--filters",
    "Name=key,Values=ebs-cache:*",
    "Name=resource-type,Values=instance",
  ]);
  t.same(
    described.Tags.map((x) => x.ResourceId),
    [lab.a.instanceId],
  );
  t.equal((await awsEc2(e, ["delete-tags", "--resources", lab.a.instanceId, "--tags", "Key=Tmp"])).exitCode, 0);
  t.notOk("Tmp" in lab.a.tags);

  const snap = await awsJson<{ SnapshotId: string; State: string }>(e, [
    "create-snapshot",
    "--volume-id",
    vol,
    "--description",
    "golden",
    "--tag-specifications",
    "ResourceType=snapshot,Tags=[{Key=Pool,Value=builders}]",
  ]);
  t.equal(snap.State, "pending");
  t.equal((await awsEc2(e, ["wait", "snapshot-completed", "--snapshot-ids", snap.SnapshotId])).exitCode, 0);
  const snaps = await awsJson<{ Snapshots: { SnapshotId: string; Progress: string; Description: string }[] }>(e, [
    "describe-snapshots",
    "--owner-ids",
    "self",
    "--filters",
    "Name=tag:Pool,Values=builders",
    "Name=status,Values=completed",
  ]);
  t.match(snaps.Snapshots, [{ SnapshotId: snap.SnapshotId, Progress: "100%", Description: "golden" }]);

  const restored = await awsJson<CliVolume>(e, [
    "create-volume",
    "--availability-zone",
    "us-east-1b",
    "--snapshot-id",
    snap.SnapshotId,
  ]);
  t.match(restored, { SnapshotId: snap.SnapshotId, Size: 2, State: "creating" });
  t.equal((await awsEc2(e, ["delete-snapshot", "--snapshot-id", snap.SnapshotId])).exitCode, 0);
  const missing = await awsEc2(e, ["describe-snapshots", "--snapshot-ids", snap.SnapshotId]);
  t.match(missing.stderr, "(InvalidSnapshot.NotFound)");

  const status = await awsJson<{ VolumeStatuses: { VolumeId: string; VolumeStatus: { Status: string } }[] }>(e, [
    "describe-volume-status",
    "--volume-ids",
    vol,
  ]);
  t.match(status.VolumeStatuses, [{ VolumeId: vol, VolumeStatus: { Status: "ok" } }]);
  const instances = await awsJson<{ Reservations: { Instances: { InstanceId: string }[] }[] }>(e, [
    "describe-instances",
    "--filters",
    "Name=tag:ebs-cache:pool,Values=builders",
    "Name=instance-state-name,Values=running",
  ]);
  t.same(
    instances.Reservations.flatMap((r) => r.Instances.map((i) => i.InstanceId)),
    [lab.a.instanceId],
  );
});

t.test("faults seen by the CLI", async (t) => {
  const log = createMemoryLogger("debug");
  const lab = await startLab(t, { log });
  const e = lab.emu.endpoint;
  const ec2 = lab.client();

  lab.emu.setFaults({ throttleRate: 1 });
  const throttled = await awsEc2(e, ["describe-volumes"]);
  t.equal(throttled.exitCode, 254);
  t.match(throttled.stderr, "(RequestLimitExceeded)");

  // Every second request throttled: the SDK call takes the 1st (passes), the CLI's first
  // attempt is the 2nd (throttled) and its retry the 3rd (passes).
  lab.emu.setFaults({ throttleRate: 0.5 });
  await ec2.send(new DescribeVolumesCommand({}));
  const retried = await awsEc2(e, ["describe-instances"], { AWS_MAX_ATTEMPTS: "3", AWS_RETRY_MODE: "standard" });
  t.equal(retried.exitCode, 0, retried.stderr);
  const throttledLines = log.lines.filter((l) => l.includes("throttled action=DescribeInstances"));
  t.equal(throttledLines.length, 1, "throttled once, then retried");

  lab.emu.setFaults({ applyThen500: ["AttachVolume"] });
  const vol = await sdkVolume(ec2);
  const failed = await awsEc2(e, [
    "attach-volume",
    "--volume-id",
    vol,
    "--instance-id",
    lab.a.instanceId,
    "--device",
    "/dev/sdf",
  ]);
  t.equal(failed.exitCode, 254);
  t.match(failed.stderr, "(InternalError)");
  const v = await attachmentState(ec2, vol, "attached");
  t.equal(v.Attachments?.[0]?.InstanceId, lab.a.instanceId, "attached although the call failed");
});
