/**
 * CloudVolumes (src/aws/ec2.ts) against the lab: the real SDK over HTTP to the EC2 emulator,
 * volumes on loop devices. Faults (throttling, 500-after-apply, stuck attachments) come from the
 * emulator. Waits are correctness deadlines, never speed assertions.
 */
import t from "tap";
import {
  CreateSnapshotCommand,
  CreateTagsCommand,
  CreateVolumeCommand,
  DeleteTagsCommand,
  DescribeSnapshotsCommand,
  DescribeVolumesCommand,
  EC2ServiceException,
  RunInstancesCommand,
  TerminateInstancesCommand,
  type EC2Client,
} from "@aws-sdk/client-ec2";
import type { CloudVolumes } from "../../src/agent/ports.ts";
import { currentSnapshot } from "../../src/agent/volume-rules.ts";
import {
  CREATE_POLL,
  createCloudVolumes,
  createEc2Client,
  createPollPause,
  DEVICE_NAMES,
  escapeFilterValue,
  isLaunchDisk,
  tagFilters,
} from "../../src/aws/ec2.ts";
import { AttachmentTimeoutError, classifyEc2Error, Ec2CallError, outcomeUnknown } from "../../src/aws/errors.ts";
import { AgentError } from "../../src/errors.ts";
import { run } from "../../src/exec.ts";
import { LAB_CREDENTIALS, startLab, type Lab, type LabHost } from "../../src/lab/lab.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { SnapshotTag, VolumeTag } from "../../src/tags.ts";
import { assertLabPrerequisites, pollUntil } from "../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const log = createMemoryLogger("info");
const lab: Lab = await startLab({ name: "test-aws", log });
let labClosed = false;
t.teardown(async () => {
  if (!labClosed) await lab.close();
});
const setup = lab.ec2Client();
const zoneA = `${lab.region}a`;
const zoneB = `${lab.region}b`;

/** A client for the code under test that counts sends (per command) and HTTP attempts. */
function countingClient(maxAttempts?: number): {
  client: EC2Client;
  sends: Record<string, number>;
  attempts: Record<string, number>;
} {
  const client = createEc2Client({
    region: lab.region,
    endpoint: lab.ec2.endpoint,
    credentials: LAB_CREDENTIALS,
    ...(maxAttempts !== undefined ? { maxAttempts } : {}),
  });
  t.teardown(() => client.destroy());
  const sends: Record<string, number> = {};
  const attempts: Record<string, number> = {};
  client.middlewareStack.add(
    (next, context) => (args) => {
      sends[context.commandName ?? "?"] = (sends[context.commandName ?? "?"] ?? 0) + 1;
      return next(args);
    },
    { step: "initialize", name: "countSends" },
  );
  // Below the retry middleware (finalizeRequest, high priority): runs once per HTTP attempt.
  client.middlewareStack.add(
    (next, context) => (args) => {
      attempts[context.commandName ?? "?"] = (attempts[context.commandName ?? "?"] ?? 0) + 1;
      return next(args);
    },
    { step: "finalizeRequest", priority: "low", name: "countAttempts" },
  );
  return { client, sends, attempts };
}

function cloud(options: { maxAttempts?: number; pageSize?: number } = {}) {
  const counting = countingClient(options.maxAttempts);
  const volumes = createCloudVolumes({
    client: counting.client,
    log,
    pollMs: 25,
    ...(options.pageSize !== undefined ? { pageSize: options.pageSize } : {}),
  });
  return { ...counting, volumes };
}

/**
 * Creates `count` 1 GiB volumes with the tags (directly, not through the code under test) and waits until available.
 */
async function makeVolumes(count: number, zone: string, tags: Record<string, string>): Promise<string[]> {
  const ids = await Promise.all(
    Array.from({ length: count }, async () => {
      const out = await setup.send(
        new CreateVolumeCommand({
          AvailabilityZone: zone,
          Size: 1,
          VolumeType: "gp3",
          TagSpecifications: [
            { ResourceType: "volume", Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) },
          ],
        }),
      );
      return out.VolumeId!;
    }),
  );
  const ready = await pollUntil(async () => {
    const out = await setup.send(new DescribeVolumesCommand({ VolumeIds: ids }));
    return (out.Volumes ?? []).every((v) => v.State === "available");
  });
  if (!ready) throw new Error(`volumes not available: ${ids.join(" ")}`);
  return ids;
}

async function attachedHere(volumes: CloudVolumes, volumeId: string, host: LabHost): Promise<void> {
  await volumes.waitForAttachment(volumeId, host.instance.instanceId, "attached", 30_000);
}

let counter = 0;
/** Tags unique to one test, so tests sharing the lab do not see each other's volumes. */
function poolTags(extra: Record<string, string> = {}): Record<string, string> {
  return { [VolumeTag.managed]: "true", [VolumeTag.pool]: `pool-${++counter}`, ...extra };
}

const hostA = await lab.addHost({ availabilityZone: zoneA, tags: { Name: "host-a" } });
const hostB = await lab.addHost({ availabilityZone: zoneA, tags: { Name: "host-b" } });

t.test("findVolumes: one DescribeVolumes serves 30 matches among 35, filtered by tag, zone and status", async (t) => {
  const tags = poolTags();
  const matching = await makeVolumes(30, zoneA, tags);
  await makeVolumes(2, zoneA, { ...tags, [VolumeTag.pool]: "another-pool" });
  const otherZone = await makeVolumes(2, zoneB, { ...tags, "test:other-zone": "yes" });
  const [inUse] = await makeVolumes(1, zoneA, tags);
  const { volumes, sends } = cloud();
  t.equal((await volumes.claimVolume(inUse!, hostB.instance.instanceId, "/dev/sdf")).kind, "claimed");

  for (const key of Object.keys(sends)) delete sends[key];
  const found = await volumes.findVolumes({ tags, availabilityZone: zoneA, status: ["available"] });
  t.same(
    found.map((v) => v.volumeId).sort(),
    [...matching].sort(),
    "exactly the 30 available volumes of the pool in the zone",
  );
  t.same(sends, { DescribeVolumesCommand: 1 }, "one EC2 call for 30 volumes");
  const first = found[0]!;
  t.match(first, { availabilityZone: zoneA, state: "available", sizeGiB: 1, tags });
  t.equal(first.attachment, undefined);
  t.ok(first.createTime instanceof Date);
  t.match(
    first,
    { volumeType: "gp3", iops: 3000, throughputMiBps: 125 },
    "type, IOPS and throughput as EC2 gives a gp3 created without them",
  );

  const attached = await volumes.findVolumes({ tags, attachedTo: hostB.instance.instanceId });
  t.same(
    attached.map((v) => v.volumeId),
    [inUse],
  );
  t.match(attached[0]!.attachment, { instanceId: hostB.instance.instanceId, device: "/dev/sdf" });

  const byKey = await volumes.findVolumes({ tags: { "test:other-zone": "*" } });
  t.same(byKey.map((v) => v.volumeId).sort(), [...otherZone].sort(), 'a tag value "*" matches on the key alone');

  t.same(
    await volumes.findVolumes({ tags: { [VolumeTag.pool]: tags[VolumeTag.pool]!.slice(0, -1) + "?" } }),
    [],
    "wildcards in a value are literal",
  );

  const paged = cloud({ pageSize: 10 });
  const all = await paged.volumes.findVolumes({ tags, availabilityZone: zoneA, status: ["available"] });
  t.same(all.map((v) => v.volumeId).sort(), [...matching].sort(), "paging returns the same volumes");
  t.equal(paged.sends.DescribeVolumesCommand, 3, "calls grow with pages (30 / 10), not with volumes");
});

t.test("findVolumes leaves out an instance's launch disks, whatever ebs-cache tags they carry", async (t) => {
  // As osparc launches: every instance tag (here the pool's, keep, a workspace's) copied onto the root volume.
  const tags = { ...poolTags(), [VolumeTag.keep]: "true", [VolumeTag.userId]: "u-1" };
  const launched = await setup.send(
    new RunInstancesCommand({
      ImageId: "ami-0123456789abcdef0",
      MinCount: 1,
      MaxCount: 1,
      Placement: { AvailabilityZone: zoneA },
      TagSpecifications: [
        { ResourceType: "volume", Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) },
      ],
    }),
  );
  const instanceId = launched.Instances![0]!.InstanceId!;
  const described = await setup.send(
    new DescribeVolumesCommand({ Filters: [{ Name: "attachment.instance-id", Values: [instanceId] }] }),
  );
  t.equal(described.Volumes?.length, 1, "EC2 lists its root volume, tagged as the instance");
  const { volumes } = cloud();
  t.same(await volumes.findVolumes({ tags, attachedTo: instanceId }), [], "the agent's listing does not");
  t.same(
    (await volumes.findVolumes({ tags })).map((v) => v.volumeId),
    [],
    "nor any listing by its tags (a pool's, a workspace's)",
  );
  t.equal(isLaunchDisk({ Attachments: [{ Device: "/dev/sda1", State: "attached" }] }), true, "at a root device name");
  t.equal(
    isLaunchDisk({ Attachments: [{ Device: "/dev/sdf", State: "attached", DeleteOnTermination: true }] }),
    true,
    "deleted with the instance",
  );
  t.equal(
    isLaunchDisk({ Attachments: [{ Device: "/dev/sdf", State: "attached", DeleteOnTermination: false }] }),
    false,
    "an attachment as the agent makes it",
  );
  t.equal(isLaunchDisk({ Attachments: [] }), false, "an available volume");
  await setup.send(new TerminateInstancesCommand({ InstanceIds: [instanceId] }));
});

t.test("tag filters escape wildcards; '*' becomes tag-key", async (t) => {
  t.equal(escapeFilterValue("a*b?c\\d"), "a\\*b\\?c\\\\d");
  t.same(tagFilters({ k: "*", "ebs-cache:pool": "p1" }), [
    { Name: "tag-key", Values: ["k"] },
    { Name: "tag:ebs-cache:pool", Values: ["p1"] },
  ]);
});

t.test("describeVolume: undefined for a volume that does not exist", async (t) => {
  const { volumes } = cloud();
  t.equal(await volumes.describeVolume("vol-0123456789abcdef0"), undefined);
});

t.test("findSnapshots lists every snapshot carrying the tags; the current one is chosen from them", async (t) => {
  const tags = poolTags();
  const [source] = await makeVolumes(1, zoneA, {});
  const snapshotIds: string[] = [];
  for (const snapTags of [tags, tags, tags, { ...tags, [VolumeTag.pool]: "other" }]) {
    const out = await setup.send(
      new CreateSnapshotCommand({
        VolumeId: source,
        TagSpecifications: [
          { ResourceType: "snapshot", Tags: Object.entries(snapTags).map(([Key, Value]) => ({ Key, Value })) },
        ],
      }),
    );
    snapshotIds.push(out.SnapshotId!);
    t.ok(
      await pollUntil(async () => {
        const found = await setup.send(new DescribeSnapshotsCommand({ SnapshotIds: [out.SnapshotId!] }));
        return found.Snapshots?.[0]?.State === "completed";
      }),
    );
  }
  const { volumes, sends } = cloud();
  const listed = await volumes.findSnapshots(tags);
  t.equal(sends.DescribeSnapshotsCommand, 1, "one DescribeSnapshots");
  t.equal(currentSnapshot(listed)?.snapshotId, snapshotIds[2], "the latest of the three (no built-at: start time)");
  t.match(
    listed.find((s) => s.snapshotId === snapshotIds[2]),
    { state: "completed", volumeSizeGiB: 1, tags },
  );

  // Order by StartTime, not by listing order: make the first one the newest, then broken.
  const model = lab.ec2.snapshotState();
  model.snapshots[snapshotIds[0]!]!.startTime = new Date(Date.now() + 3600_000).toISOString();
  lab.ec2.replaceState(model);
  t.equal(
    currentSnapshot(await volumes.findSnapshots(tags))?.snapshotId,
    snapshotIds[0],
    "the greatest StartTime wins",
  );
  const broken = lab.ec2.snapshotState();
  broken.snapshots[snapshotIds[0]!]!.state = "error";
  lab.ec2.replaceState(broken);
  t.equal(
    currentSnapshot(await volumes.findSnapshots(tags))?.snapshotId,
    snapshotIds[2],
    "only completed snapshots count",
  );
  // An upload's snapshot not yet read back carries ebs-cache:unverified: listed, never current.
  await setup.send(
    new CreateTagsCommand({ Resources: [snapshotIds[2]!], Tags: [{ Key: SnapshotTag.unverified, Value: "true" }] }),
  );
  const marked = await volumes.findSnapshots(tags);
  t.match(marked.find((s) => s.snapshotId === snapshotIds[2])?.tags, { [SnapshotTag.unverified]: "true" });
  t.equal(currentSnapshot(marked)?.snapshotId, snapshotIds[1], "a snapshot marked unverified is passed over");
  await setup.send(new DeleteTagsCommand({ Resources: [snapshotIds[2]!], Tags: [{ Key: SnapshotTag.unverified }] }));
  const all = await volumes.findSnapshots(tags);
  t.equal(currentSnapshot(all)?.snapshotId, snapshotIds[2], "… and current again once the marker is removed");
  t.same(
    all.map((s) => s.snapshotId).sort(),
    snapshotIds.slice(0, 3).sort(),
    "findSnapshots: every snapshot with the tags, in any state",
  );
  t.ok(
    all.every((s) => s.startTime instanceof Date),
    "with their start times",
  );
  t.same(await volumes.findSnapshots({ [VolumeTag.pool]: "no-such-pool" }), []);

  t.test("createVolume from it: tags at creation, initialization rate, waits until available", async (t) => {
    const spec = {
      availabilityZone: zoneA,
      snapshotId: snapshotIds[2]!,
      volumeType: "gp3",
      tags: { ...tags, [VolumeTag.kind]: "pool" },
      initializationRateMiBps: 200,
    };
    const created = await volumes.createVolume(spec);
    t.match(created, {
      availabilityZone: zoneA,
      state: "available",
      snapshotId: snapshotIds[2],
      sizeGiB: 1,
      tags: spec.tags,
    });
    t.equal(sends.CreateVolumeCommand, 1, "one CreateVolume: tags come with it, not with a CreateTags after");
    t.notOk(sends.CreateTagsCommand);
    t.equal(lab.ec2.snapshotState().volumes[created.volumeId]?.initializationRate, 200);

    const error = await volumes
      .createVolume({ ...spec, snapshotId: "snap-0000000000000000f" })
      .catch((e: unknown) => e);
    t.type(error, Ec2CallError);
    t.match(error, { kind: "not-found", code: "InvalidSnapshot.NotFound", action: "CreateVolume" });
    t.match((error as AgentError).remediation, /no longer exists/);
  });
});

t.test("claimVolume: AttachVolume is the lock", async (t) => {
  const tags = poolTags();
  const [free, elsewhere, nextDevice] = await makeVolumes(3, zoneA, tags);
  const [farAway] = await makeVolumes(1, zoneB, tags);
  const { volumes } = cloud();
  const a = hostA.instance.instanceId;
  const b = hostB.instance.instanceId;

  t.same(await volumes.claimVolume(free!, a, "/dev/sdf"), { kind: "claimed" });
  await attachedHere(volumes, free!, hostA);
  t.match(await volumes.describeVolume(free!), {
    state: "in-use",
    attachment: { instanceId: a, device: "/dev/sdf", state: "attached" },
  });
  t.same(
    await volumes.claimVolume(free!, a, "/dev/sdf"),
    { kind: "claimed" },
    "claiming again what this instance holds is claimed",
  );

  t.same(await volumes.claimVolume(elsewhere!, b, "/dev/sdg"), { kind: "claimed" });
  const taken = await volumes.claimVolume(elsewhere!, a, "/dev/sdg");
  t.equal(taken.kind, "taken", "a volume attached to another instance is taken");
  t.match(taken, { reason: new RegExp(`VolumeInUse: .*${b}`) });
  const quick = cloud();
  t.match(await quick.volumes.claimVolume(elsewhere!, a, "/dev/sdg", { notHeldHere: true }), {
    kind: "taken",
    reason: /VolumeInUse/,
  });
  t.same(
    quick.sends,
    { AttachVolumeCommand: 1 },
    "a candidate refused at the first attempt costs no DescribeVolumes (notHeldHere)",
  );

  const mismatch = await volumes.claimVolume(farAway!, a, "/dev/sdh");
  t.match(mismatch, { kind: "taken", reason: /InvalidVolume.ZoneMismatch/ });
  t.match(await volumes.claimVolume("vol-0123456789abcdef0", a, "/dev/sdh"), {
    kind: "taken",
    reason: /InvalidVolume.NotFound/,
  });

  // /dev/sdf is used on host A by `free`: the next free name is taken instead.
  t.same(await volumes.claimVolume(nextDevice!, a, "/dev/sdf"), { kind: "claimed" });
  await attachedHere(volumes, nextDevice!, hostA);
  t.equal((await volumes.describeVolume(nextDevice!))?.attachment?.device, DEVICE_NAMES[1]);

  await volumes.detachVolume(free!, a);
  await volumes.detachVolume(nextDevice!, a);
  await volumes.detachVolume(elsewhere!, b);
});

t.test("an invalid device name is a typed error", async (t) => {
  const [volume] = await makeVolumes(1, zoneA, poolTags());
  const { volumes } = cloud();
  const error = await volumes.claimVolume(volume!, hostA.instance.instanceId, "/dev/bogus").catch((e: unknown) => e);
  t.match(error, { name: "DeviceNameError", tried: ["/dev/bogus"] });
  t.match((error as AgentError).remediation, /\/dev\/sdf/);
});

t.test("claimVolume: AttachVolume applied but answered 500 is claimed", async (t) => {
  const [retried, unretried] = await makeVolumes(2, zoneA, poolTags());
  t.teardown(() => lab.ec2.setFaults({}));
  lab.ec2.setFaults({ applyThen500: ["AttachVolume"] });
  const a = hostA.instance.instanceId;

  // The SDK retries the 500; the retry meets VolumeInUse; the volume is attaching here.
  const withRetries = cloud();
  t.same(await withRetries.volumes.claimVolume(retried!, a, "/dev/sdj"), { kind: "claimed" });
  t.ok((withRetries.attempts.AttachVolumeCommand ?? 0) >= 2, "the SDK retried the 500");
  // Without SDK retries, the 500 itself reaches claimVolume, which describes the volume.
  const single = cloud({ maxAttempts: 1 });
  t.same(await single.volumes.claimVolume(unretried!, a, "/dev/sdk"), { kind: "claimed" });
  t.equal(single.attempts.AttachVolumeCommand, 1);

  lab.ec2.setFaults({});
  for (const id of [retried!, unretried!]) {
    await attachedHere(withRetries.volumes, id, hostA);
    await withRetries.volumes.detachVolume(id, a);
  }
});

t.test("a stuck attachment makes waitForAttachment time out with a typed error", async (t) => {
  const [volume] = await makeVolumes(1, zoneA, poolTags());
  t.teardown(() => lab.ec2.setFaults({}));
  lab.ec2.setFaults({ stuckAttach: [volume!] });
  const { volumes } = cloud();
  const a = hostA.instance.instanceId;
  t.same(await volumes.claimVolume(volume!, a, "/dev/sdl"), { kind: "claimed" });
  const error = await volumes.waitForAttachment(volume!, a, "attached", 300).catch((e: unknown) => e);
  t.type(error, AttachmentTimeoutError);
  t.match(error, { volumeId: volume, instanceId: a, wanted: "attached", lastSeen: `attaching to ${a}` });
  t.match((error as AgentError).remediation, /detach-volume/);

  const other = await volumes
    .waitForAttachment(volume!, hostB.instance.instanceId, "attached", 5_000)
    .catch((e: unknown) => e);
  t.match(other, { name: "AttachmentLostError" }, "attached to another instance: no point waiting");

  lab.ec2.setFaults({});
  await attachedHere(volumes, volume!, hostA);
  await volumes.detachVolume(volume!, a);
});

t.test("throttling (every second request) is ridden out by the SDK's retries", async (t) => {
  const tags = poolTags();
  const [volume] = await makeVolumes(1, zoneA, tags);
  t.teardown(() => lab.ec2.setFaults({}));
  const { volumes, sends, attempts } = cloud();
  lab.ec2.setFaults({ throttleRate: 0.5 });
  const a = hostA.instance.instanceId;
  t.equal((await volumes.findVolumes({ tags, status: ["available"] })).length, 1);
  await volumes.tagVolume(volume!, { [VolumeTag.claimedBy]: a });
  t.same(await volumes.claimVolume(volume!, a, "/dev/sdm"), { kind: "claimed" });
  await attachedHere(volumes, volume!, hostA);
  t.equal((await volumes.describeVolume(volume!))?.tags[VolumeTag.claimedBy], a);
  t.match((await volumes.describeInstance(a)).tags, { Name: "host-a" });
  await volumes.detachVolume(volume!, a);
  await volumes.waitForAttachment(volume!, a, "detached", 30_000);
  const sent = Object.values(sends).reduce((x, y) => x + y, 0);
  const tried = Object.values(attempts).reduce((x, y) => x + y, 0);
  t.ok(tried > sent, `requests were throttled and retried (${tried} attempts for ${sent} calls)`);
  t.equal(sends.AttachVolumeCommand, 1);
});

t.test("detachVolume is idempotent and never forced", async (t) => {
  const [mine, theirs] = await makeVolumes(2, zoneA, poolTags());
  const { volumes } = cloud();
  const a = hostA.instance.instanceId;
  const b = hostB.instance.instanceId;
  t.same(await volumes.claimVolume(mine!, a, "/dev/sdn"), { kind: "claimed" });
  t.same(await volumes.claimVolume(theirs!, b, "/dev/sdn"), { kind: "claimed" });
  await attachedHere(volumes, mine!, hostA);
  await attachedHere(volumes, theirs!, hostB);

  await volumes.detachVolume(mine!, a);
  await volumes.detachVolume(mine!, a);
  await volumes.waitForAttachment(mine!, a, "detached", 30_000);
  t.ok(await pollUntil(async () => (await volumes.describeVolume(mine!))?.state === "available"));
  await volumes.detachVolume(mine!, a);
  t.pass("detaching a detached volume is success (IncorrectState)");
  await volumes.detachVolume("vol-0123456789abcdef0", a);
  t.pass("detaching a volume that does not exist is success (InvalidVolume.NotFound)");
  await volumes.detachVolume(theirs!, a);
  t.pass("detaching from this instance a volume attached elsewhere is success (InvalidAttachment.NotFound)");
  t.match(
    await volumes.describeVolume(theirs!),
    { attachment: { instanceId: b, state: "attached" } },
    "and leaves it alone",
  );

  await volumes.detachVolume(theirs!, b);
  await volumes.waitForAttachment(theirs!, b, "detached", 30_000);
  const state = lab.ec2.snapshotState();
  t.same(
    Object.values(state.volumes)
      .filter((v) => v.forceDetachCount > 0)
      .map((v) => v.volumeId),
    [],
    "no volume was ever force-detached",
  );
  t.notOk(state.events.some((e) => e.kind === "force-detach"));
});

t.test(
  "tags: add, remove, an empty removal removes nothing; the instance's tags and volumes in one DescribeInstances",
  async (t) => {
    const [volume] = await makeVolumes(1, zoneA, { keep: "me", drop: "me" });
    const { volumes, sends } = cloud({ pageSize: 5 });
    await volumes.tagVolume(volume!, { added: "1" });
    await volumes.untagVolume(volume!, ["drop"]);
    await volumes.untagVolume(volume!, []);
    await volumes.tagVolume(volume!, {});
    t.same((await volumes.describeVolume(volume!))?.tags, { keep: "me", added: "1" });
    t.equal(sends.DeleteTagsCommand, 1, "nothing is sent for an empty removal (it would delete every tag)");

    const tags = Object.fromEntries(Array.from({ length: 12 }, (_, i) => [`key-${i}`, `value ${i}`]));
    const host = await lab.addHost({ tags });
    const instance = await volumes.describeInstance(host.instance.instanceId);
    t.same(instance.tags, tags);
    t.equal(instance.state, "running");
    t.same(instance.volumes, [], "no volume attached yet");
    t.same(await volumes.claimVolume(volume!, host.instance.instanceId, "/dev/sdo"), { kind: "claimed" });
    const later = await volumes.describeInstance(host.instance.instanceId);
    t.same(
      later.volumes.map((v) => v.volumeId),
      [volume],
      "the attached volume is among its block devices",
    );
    t.equal(sends.DescribeInstancesCommand, 2, "one call each");
    await volumes.detachVolume(volume!, host.instance.instanceId);
    await volumes.waitForAttachment(volume!, host.instance.instanceId, "detached", 30_000);
  },
);

t.test("EC2 errors are classified into the agent's sentinels", async (t) => {
  const sdkError = (name: string, status: number, message = name) =>
    new EC2ServiceException({
      name,
      $fault: status >= 500 ? "server" : "client",
      $metadata: { httpStatusCode: status },
      message,
    });
  const cases: [unknown, string][] = [
    [sdkError("InvalidVolume.NotFound", 400), "not-found"],
    [sdkError("InvalidAttachment.NotFound", 400), "attachment-not-found"],
    [sdkError("VolumeInUse", 400), "volume-in-use"],
    [sdkError("IncorrectState", 400), "incorrect-state"],
    [sdkError("InvalidVolume.ZoneMismatch", 400), "zone-mismatch"],
    [sdkError("AttachmentLimitExceeded", 400), "attachment-limit"],
    [
      sdkError(
        "InvalidParameterValue",
        400,
        "Invalid value '/dev/sdf' for unixDevice. Attachment point /dev/sdf is already in use",
      ),
      "device-in-use",
    ],
    [
      sdkError(
        "InvalidParameterValue",
        400,
        "Value (/dev/x) for parameter device is invalid. /dev/x is not a valid EBS device name.",
      ),
      "invalid-device",
    ],
    [sdkError("InvalidParameterValue", 400, "Value (0) for parameter size is invalid."), "invalid-request"],
    [sdkError("RequestLimitExceeded", 503), "throttled"],
    [sdkError("UnauthorizedOperation", 403), "unauthorized"],
    [sdkError("InternalError", 500), "server"],
    [Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" }), "network"],
  ];
  for (const [error, kind] of cases) t.equal(classifyEc2Error(error).kind, kind, (error as Error).message);
  t.equal(classifyEc2Error(cases[12]![0]).code, "ECONNREFUSED");
  t.ok(outcomeUnknown(classifyEc2Error(sdkError("InternalError", 500))));
  t.notOk(outcomeUnknown(classifyEc2Error(sdkError("VolumeInUse", 400))));
  const wrapped = new Ec2CallError("AttachVolume", classifyEc2Error(sdkError("UnauthorizedOperation", 403)), undefined);
  t.match(wrapped.remediation, /ec2:AttachVolume/);
  t.type(wrapped, AgentError);
});

t.test("createEc2Client retries enough for a boot storm", async (t) => {
  const client = createEc2Client({ region: "us-east-1", credentials: LAB_CREDENTIALS });
  t.teardown(() => client.destroy());
  t.equal(await client.config.maxAttempts(), 10);
  const strategy = (await client.config.retryStrategy()) as { mode?: string };
  t.equal(strategy.mode, "standard");
});

t.test("the lab closes and leaves no loop device", async (t) => {
  const root = lab.root;
  await lab.close();
  labClosed = true;
  const loops = (await run("losetup", ["-a"])).stdout;
  t.notOk(loops.includes(root), "no loop device of this lab is left");
});

t.test("a new volume is polled from 100 ms up to 250 ms for its first 30 s, then at pollMs", async (t) => {
  const pauses: number[] = [];
  let previous: number | undefined;
  for (let elapsed = 0, i = 0; i < 6; i++) {
    previous = createPollPause(previous, elapsed, 1000);
    pauses.push(previous);
    elapsed += previous;
  }
  t.same(pauses, [100, 150, 225, 250, 250, 250]);
  t.equal(createPollPause(250, CREATE_POLL.fastForMs, 1000), 1000, "past 30 s: the usual interval");
  t.equal(createPollPause(undefined, 0, 50), 50, "a shorter pollMs (the lab's) is never exceeded");
  // The cost the doc comment states: DescribeVolumes calls while a creation takes 15 s.
  let calls = 1;
  previous = undefined;
  for (let elapsed = 0; elapsed < 15_000; calls++) {
    previous = createPollPause(previous, elapsed, 1000);
    elapsed += previous;
  }
  t.ok(calls >= 60 && calls <= 63, `a 15 s creation: ${calls} DescribeVolumes`);
});
