/**
 * The emulator's request ledger and holds (src/lab/ec2/requests.ts), through the real SDK and
 * the `/_lab/` admin API: requests counted per action, caller (access key) and instance, and
 * reset; a hold parks the n-th matching request before or after its change, until released or
 * dropped.
 */
import t from "tap";
import {
  AttachVolumeCommand,
  CreateTagsCommand,
  CreateVolumeCommand,
  DescribeVolumesCommand,
  EC2Client,
} from "@aws-sdk/client-ec2";
import { Ec2Admin } from "../../../src/lab/ec2/admin-client.ts";
import { callerOf } from "../../../src/lab/ec2/requests.ts";
import { describeVolume, poll, startLab } from "./helpers.ts";

function clientAs(endpoint: string, accessKeyId: string, t: { teardown(fn: () => unknown): void }): EC2Client {
  const client = new EC2Client({
    endpoint,
    region: "us-east-1",
    credentials: { accessKeyId, secretAccessKey: "x" },
    maxAttempts: 1,
  });
  t.teardown(() => client.destroy());
  return client;
}

async function newVolume(client: EC2Client, lab: Awaited<ReturnType<typeof startLab>>): Promise<string> {
  const { VolumeId } = await client.send(
    new CreateVolumeCommand({ AvailabilityZone: lab.a.availabilityZone, Size: 1 }),
  );
  await poll(
    () => describeVolume(client, VolumeId!),
    (v) => v.State === "available",
  );
  return VolumeId!;
}

t.test("callerOf reads the access key id of a SigV4 Authorization header", async (t) => {
  t.equal(
    callerOf(
      "AWS4-HMAC-SHA256 Credential=ASIAXYZ/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=ab",
    ),
    "ASIAXYZ",
  );
  t.equal(callerOf(undefined), undefined);
  t.equal(callerOf("Basic abc"), undefined);
});

t.test("requests are counted per action, caller and instance; reset starts afresh", async (t) => {
  const lab = await startLab(t);
  const one = clientAs(lab.emu.endpoint, "AKIAONE", t);
  const two = clientAs(lab.emu.endpoint, "AKIATWO", t);
  const volumeId = await newVolume(one, lab);
  lab.emu.requests.reset();
  await one.send(new DescribeVolumesCommand({ VolumeIds: [volumeId] }));
  await two.send(new DescribeVolumesCommand({}));
  await two.send(new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: lab.a.instanceId, Device: "/dev/sdf" }));
  await t.rejects(
    one.send(new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: lab.a.instanceId, Device: "/dev/sdg" })),
  );

  const counts = lab.emu.requests.snapshotCounts();
  t.equal(counts.total, 4);
  t.same(counts.byAction, { DescribeVolumes: 2, AttachVolume: 2 });
  t.same(counts.byCaller, {
    AKIAONE: { DescribeVolumes: 1, AttachVolume: 1 },
    AKIATWO: { DescribeVolumes: 1, AttachVolume: 1 },
  });
  t.same(counts.byInstance, { [lab.a.instanceId]: { AttachVolume: 2 } });
  t.same(Object.keys(counts.byError), ["AttachVolume VolumeInUse"], "the refused attach is counted by its code");
  const records = lab.emu.requests.records();
  t.same(
    records.map((r) => [r.action, r.caller, r.volumeId, r.status]),
    [
      ["DescribeVolumes", "AKIAONE", volumeId, 200],
      ["DescribeVolumes", "AKIATWO", undefined, 200],
      ["AttachVolume", "AKIATWO", volumeId, 200],
      ["AttachVolume", "AKIAONE", volumeId, 400],
    ],
  );

  const admin = new Ec2Admin(lab.emu.endpoint);
  t.same((await admin.requests()).counts.total, 4, "the admin API shows the same counters");
  await admin.resetRequests();
  t.same(
    lab.emu.requests.snapshotCounts(),
    { total: 0, byAction: {}, byError: {}, byCaller: {}, byInstance: {} },
    "reset",
  );
});

t.test("an `after` hold applies the request and keeps its answer until released", async (t) => {
  const lab = await startLab(t);
  const client = clientAs(lab.emu.endpoint, "AKIAHOLD", t);
  const volumeId = await newVolume(client, lab);
  const hold = lab.emu.requests.addHold({
    action: "AttachVolume",
    caller: "AKIAHOLD",
    match: { VolumeId: volumeId },
    apply: "after",
  });
  let answered = false;
  const attach = client
    .send(new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: lab.a.instanceId, Device: "/dev/sdf" }))
    .then((out) => {
      answered = true;
      return out;
    });
  t.ok(await lab.emu.requests.waitForHold(hold.id, 20_000), "the hold caught the request");
  t.equal(lab.emu.snapshotState().volumes[volumeId]?.attachment?.instanceId, lab.a.instanceId, "the change is applied");
  t.notOk(answered, "the answer is held");
  t.ok(lab.emu.requests.releaseHold(hold.id), "released");
  t.equal((await attach).VolumeId, volumeId, "the client gets its answer");
  t.same(lab.emu.requests.listHolds(), [], "a released hold is forgotten");
});

t.test(
  "a `before` hold on the 2nd matching request, dropped: never applied, the client sees the connection close",
  async (t) => {
    const lab = await startLab(t);
    const client = clientAs(lab.emu.endpoint, "AKIAHOLD", t);
    const volumeId = await newVolume(client, lab);
    const admin = new Ec2Admin(lab.emu.endpoint);
    const hold = await admin.addHold({ action: "CreateTags", nth: 2, apply: "before" });
    await client.send(new CreateTagsCommand({ Resources: [volumeId], Tags: [{ Key: "first", Value: "1" }] }));
    const second = client.send(new CreateTagsCommand({ Resources: [volumeId], Tags: [{ Key: "second", Value: "2" }] }));
    t.ok(await admin.waitForHold(hold.id, 20_000), "the 2nd CreateTags is held");
    t.same((await admin.hold(hold.id))?.seen, 2, "two matching requests seen");
    t.notOk(lab.emu.snapshotState().volumes[volumeId]?.tags.second, "not applied while held");
    await admin.releaseHold(hold.id, { drop: true });
    await t.rejects(second, "the client's call fails: no answer");
    t.same(lab.emu.snapshotState().volumes[volumeId]?.tags, { first: "1" }, "the dropped request was never applied");
    t.equal(lab.emu.requests.records().at(-1)?.dropped, true, "recorded as dropped");
  },
);

t.test("bad holds are refused with a clear error", async (t) => {
  const lab = await startLab(t);
  const admin = new Ec2Admin(lab.emu.endpoint);
  await t.rejects(
    admin.addHold({ action: "", apply: "later" as "after", nth: 0 }),
    /action must be a non-empty string; apply must be "before" or "after"; nth must be an integer ≥ 1/,
  );
  t.equal(await admin.hold("hold-404"), undefined, "an unknown hold is 404");
  t.same(lab.emu.requests.listHolds(), [], "nothing was added");
});
