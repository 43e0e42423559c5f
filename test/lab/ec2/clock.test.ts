/**
 * The emulator on a clock of its own, and the seam it stands for: the real AWS SDK against an EC2
 * whose time is days from the host's. Every answer carries EC2's time (`Date`); a request signed
 * more than 5 minutes off it is refused `RequestExpired` (HTTP 400) as EC2 does, and the SDK then
 * corrects the time it signs with and retries, while the agent's CloudVolumes learns EC2's time
 * from the same answers. The aws CLI (which corrects nothing) works on an emulator on the host's
 * time and is refused by one days off, as by EC2. Client tokens are remembered for 24 hours of
 * EC2's clock. No root: an in-memory backend.
 */
import t from "tap";
import { CreateVolumeCommand, DescribeVolumesCommand, EC2Client } from "@aws-sdk/client-ec2";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { classifyEc2Error, CloudTimeUnknownError } from "../../../src/aws/errors.ts";
import { Ec2Admin } from "../../../src/lab/ec2/admin-client.ts";
import { TOKEN_MEMORY_MS } from "../../../src/lab/ec2/idempotency.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { awsEc2, sdkError, startLab } from "./helpers.ts";

const DAY = 86_400_000;

/** A client that has learned nothing: it signs with the host's time, as a fresh agent process does. */
function freshClient(endpoint: string, maxAttempts = 3): EC2Client {
  return new EC2Client({
    endpoint,
    region: "us-east-1",
    credentials: { accessKeyId: "AKIDFRESH", secretAccessKey: "x" },
    maxAttempts,
  });
}

for (const [name, offsetMs] of [
  ["three days ahead of the host", 3 * DAY],
  ["three days behind the host", -3 * DAY],
] as const) {
  t.test(`EC2 ${name}: refused once, the SDK corrects its signature, the agent learns EC2's time`, async (t) => {
    const lab = await startLab(t, { clockOffsetMs: offsetMs });
    const client = freshClient(lab.emu.endpoint);
    t.teardown(() => client.destroy());
    const log = createMemoryLogger("debug");
    const cloud = createCloudVolumes({ client, log });
    t.throws(() => cloud.clock.now(), CloudTimeUnknownError, "no answer yet: EC2's time is unknown");

    await cloud.findVolumes({ tags: {} });
    const records = lab.emu.requests.records().filter((r) => r.caller === "AKIDFRESH");
    t.same(
      records.map((r) => [r.action, r.status, r.code]),
      [
        ["DescribeVolumes", 400, "RequestExpired"],
        ["DescribeVolumes", 200, undefined],
      ],
      "the host's signature refused, then the SDK's corrected one answered",
    );
    const learned = cloud.clock.now().getTime() - lab.emu.now();
    t.ok(Math.abs(learned) < 2_000, `the agent's clock is EC2's (within the header's second): ${learned} ms`);
    t.ok(Math.abs(cloud.clock.offsetMs()! - offsetMs) < 2_000, "and knows how far off the host is");
    t.equal(log.lines.filter((l) => l.startsWith("<4>ec2.clock-offset")).length, 1, "one warning");

    await cloud.findVolumes({ tags: {} });
    await cloud.findVolumes({ tags: {} });
    const after = lab.emu.requests.records().filter((r) => r.caller === "AKIDFRESH");
    t.same(
      after.slice(2).map((r) => r.status),
      [200, 200],
      "from then on signed in EC2's time: no refusal",
    );
    t.equal(log.lines.filter((l) => l.startsWith("<4>ec2.clock-offset")).length, 1, "and still one warning");
  });
}

t.test("every answer is dated by EC2's clock; the clock moves per lab, over the admin API too", async (t) => {
  const lab = await startLab(t, { clockOffsetMs: -2 * DAY });
  const dated = async (path: string) => Date.parse((await fetch(`${lab.emu.endpoint}${path}`)).headers.get("date")!);
  const ec2 = await dated("/?Action=DescribeVolumes&Version=2016-11-15");
  t.ok(Math.abs(ec2 - lab.emu.now()) < 2_000, "an EC2 answer's Date is the emulator's time");
  t.ok(Math.abs(ec2 - (Date.now() - 2 * DAY)) < 2_000, "two days behind the host's");
  const admin = new Ec2Admin(lab.emu.endpoint);
  const moved = await admin.setClockOffset(DAY);
  t.equal(moved.offsetMs, DAY);
  t.ok(Math.abs(Date.parse(moved.now) - (Date.now() + DAY)) < 2_000, "moved a day ahead of the host");
  t.equal((await admin.clock()).offsetMs, DAY);
  t.ok(Math.abs((await dated("/_lab/health")) - (Date.now() + DAY)) < 2_000, "every answer follows");
  const refused = await fetch(`${lab.emu.endpoint}/_lab/clock`, { method: "PUT", body: JSON.stringify({}) });
  t.equal(refused.status, 400, "an offset that is not a number is refused");
});

t.test("within 5 minutes no refusal; a client that may not retry fails with a clock fault", async (t) => {
  const lab = await startLab(t, { clockOffsetMs: 4 * 60_000 });
  const near = freshClient(lab.emu.endpoint);
  t.teardown(() => near.destroy());
  await near.send(new DescribeVolumesCommand({}));
  t.same(
    lab.emu.requests.records().map((r) => r.status),
    [200],
    "4 minutes off: answered",
  );
  lab.emu.setClockOffset(6 * 60_000);
  const once = freshClient(lab.emu.endpoint, 1);
  t.teardown(() => once.destroy());
  const failure = await sdkError(once.send(new DescribeVolumesCommand({})));
  t.match(failure, { name: "RequestExpired", status: 400 }, "6 minutes off, one attempt: EC2's refusal");
  t.equal(classifyEc2Error({ name: failure.name, $metadata: { httpStatusCode: 400 } }).kind, "clock");
});

t.test("the aws CLI: answered on the host's time, refused as by EC2 once days off", async (t) => {
  const lab = await startLab(t);
  const ok = await awsEc2(lab.emu.endpoint, ["describe-volumes"]);
  t.equal(ok.exitCode, 0, ok.stderr);
  lab.emu.setClockOffset(3 * DAY);
  const refused = await awsEc2(lab.emu.endpoint, ["describe-volumes"]);
  t.not(refused.exitCode, 0, "refused");
  t.match(refused.stderr, /RequestExpired/, "with EC2's code");
});

t.test("a client token is remembered for 24 hours of EC2's clock, then forgotten", async (t) => {
  const lab = await startLab(t);
  const client = freshClient(lab.emu.endpoint);
  t.teardown(() => client.destroy());
  const create = async () =>
    (await client.send(new CreateVolumeCommand({ AvailabilityZone: "us-east-1a", Size: 1, ClientToken: "slot-1" })))
      .VolumeId;
  const first = await create();
  lab.emu.setClockOffset(TOKEN_MEMORY_MS - 60_000);
  t.equal(await create(), first, "a minute before 24 h: the same volume");
  lab.emu.setClockOffset(TOKEN_MEMORY_MS + 60_000);
  const later = await create();
  t.not(later, first, "a minute after: forgotten, a new volume");
});

t.test(
  "days off, the SDK retries every error as a clock correction; the agent's client only the clock's own",
  async (t) => {
    const lab = await startLab(t, { clockOffsetMs: 3 * DAY });
    const missing = "vol-0123456789abcdef0";
    const notFounds = (caller: string) =>
      lab.emu.requests.records().filter((r) => r.caller === caller && r.code === "InvalidVolume.NotFound").length;

    // The SDK alone (@aws-sdk/core's signer marks each error clockSkewCorrected once 4 min off): a
    // NotFound is sent again until the attempts run out. Should the SDK stop doing so, this fails
    // by name, and keepSkewRetriesToClockErrors can go.
    const bare = freshClient(lab.emu.endpoint, 4);
    t.teardown(() => bare.destroy());
    const failure = await sdkError(bare.send(new DescribeVolumesCommand({ VolumeIds: [missing] })));
    t.match(failure, { name: "InvalidVolume.NotFound", attempts: 4 }, "the SDK's own client: every attempt spent");
    t.equal(notFounds("AKIDFRESH"), 3, "the refusal of its first signature, then three NotFound");

    const agents = new EC2Client({
      endpoint: lab.emu.endpoint,
      region: "us-east-1",
      credentials: { accessKeyId: "AKIDAGENT", secretAccessKey: "x" },
      maxAttempts: 4,
    });
    t.teardown(() => agents.destroy());
    const cloud = createCloudVolumes({ client: agents });
    t.equal(await cloud.describeVolume(missing), undefined, "the agent's: not found");
    t.same(
      lab.emu.requests
        .records()
        .filter((r) => r.caller === "AKIDAGENT")
        .map((r) => r.code),
      ["RequestExpired", "InvalidVolume.NotFound"],
      "its signature's time corrected once, the NotFound answered once",
    );
  },
);
