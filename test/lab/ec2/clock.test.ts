/**
 * The emulator on a clock of its own, and the seam it stands for: the real AWS SDK against an EC2
 * whose time is days from the host's. Every answer carries EC2's time (`Date`); a request signed
 * more than 5 minutes off it is refused `RequestExpired` (HTTP 400) as EC2 does, and the SDK then
 * corrects the time it signs with and retries. The aws CLI (which corrects nothing) works on an
 * emulator on the host's time and is refused by one days off, as by EC2. Client tokens are
 * remembered for 24 hours of EC2's clock. No root: an in-memory backend.
 */
import t from "tap";
import { CreateVolumeCommand, DescribeVolumesCommand, EC2Client } from "@aws-sdk/client-ec2";
import { Ec2Admin } from "../../../src/lab/ec2/admin-client.ts";
import { TOKEN_MEMORY_MS } from "../../../src/lab/ec2/idempotency.ts";
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
  t.test(`EC2 ${name}: the host's signature refused once, the SDK corrects it from EC2's Date`, async (t) => {
    const lab = await startLab(t, { clockOffsetMs: offsetMs });
    const client = freshClient(lab.emu.endpoint);
    t.teardown(() => client.destroy());
    await client.send(new DescribeVolumesCommand({}));
    await client.send(new DescribeVolumesCommand({}));
    t.same(
      lab.emu.requests.records().map((r) => [r.action, r.status, r.code]),
      [
        ["DescribeVolumes", 400, "RequestExpired"],
        ["DescribeVolumes", 200, undefined],
        ["DescribeVolumes", 200, undefined],
      ],
      "refused, then answered: from then on signed in EC2's time",
    );
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

t.test("within 5 minutes no refusal; a client that may not retry gets EC2's refusal", async (t) => {
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
