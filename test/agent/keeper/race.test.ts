/**
 * Keepers racing for one slot, through the real SDK against the EC2 emulator (in memory, no root):
 * three keepers that planned on either side of an hour boundary, with CreateVolume throttled and
 * applied-then-500, fill the slot once; once the slot's volume is deleted (as gc or a trim would),
 * the slot gets a new one, also with three keepers at it, though EC2 still remembers the slot's
 * token (and answers it with the deleted volume). The keepers' clocks are injected (EC2's time as
 * each learned it): no test waits for an hour.
 */
import t from "tap";
import { EC2Client } from "@aws-sdk/client-ec2";
import { runKeeper, type KeeperReport } from "../../../src/agent/keeper/run.ts";
import type { KeeperSettings } from "../../../src/agent/keeper/plan.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { poolTags } from "../../../src/lab/volumes/golden.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { withCloudTime } from "../../fixtures/fakes/cloud-time.ts";
import { REGION, startFakeCloud, waitFor, ZONE } from "../../fixtures/fakes/cloud.ts";

const fake = await startFakeCloud(t);
const { emulator } = fake;
const POOL = "race";
await fake.snapshot(poolTags(POOL, "set-1", ["alpine:3.20"]), 1);

const settings: KeeperSettings = {
  pool: POOL,
  imageSet: null,
  volumeType: "gp3",
  zones: [ZONE],
  minAvailable: 1,
  maxAvailable: 1,
  maxVolumes: 5,
  maxGiB: 100,
  initializationRateMiBps: null,
  quarantineHours: 6,
};

/** The next hour boundary: keeper 1 asks half a second before it, the others just after. */
const HOUR = 3_600_000;
const boundary = Math.ceil(Date.now() / HOUR) * HOUR + HOUR;
const CLOCKS = [boundary - 500, boundary + 300, boundary + 400];

const clients: EC2Client[] = [];
t.teardown(() => clients.forEach((c) => c.destroy()));

/** Keeper `i` on a host of its own: its own SDK client (its own access key, so a hold can pick its requests). */
function keeper(i: number): Promise<KeeperReport> {
  const client = new EC2Client({
    endpoint: emulator.endpoint,
    region: REGION,
    credentials: { accessKeyId: `AKIDKEEPER${i}`, secretAccessKey: "x" },
    maxAttempts: 10,
  });
  clients.push(client);
  const cloud = createCloudVolumes({ client, pollMs: 10, createTimeoutMs: 5_000 });
  return runKeeper({ cloud: withCloudTime(cloud, CLOCKS[i]!), log: createMemoryLogger() }, settings, {
    dryRun: false,
  });
}

/** The pool's volumes in the zone, but those being deleted. */
async function slotVolumes(): Promise<string[]> {
  const all = await fake.direct.findVolumes({ tags: { [VolumeTag.pool]: POOL } });
  return all.filter((v) => v.state !== "deleting" && v.state !== "deleted").map((v) => v.volumeId);
}

const createsOf = (report: KeeperReport) => report.results.filter((r) => r.step === "create");

t.test("three keepers across an hour boundary, CreateVolume throttled and applied-then-500: one volume", async (t) => {
  // Each keeper's first CreateVolume waits until all three have planned from the empty zone.
  const holds = [0, 1, 2].map((i) =>
    emulator.requests.addHold({ action: "CreateVolume", caller: `AKIDKEEPER${i}`, apply: "before" }),
  );
  const before = emulator.requests.records().length;
  const running = [0, 1, 2].map((i) => keeper(i));
  for (const hold of holds) t.ok(await emulator.requests.waitForHold(hold.id, 60_000), `${hold.id}: planned, sent`);

  emulator.setFaults({ throttleRate: 0.25, applyThen500: ["CreateVolume"] });
  for (const hold of holds) emulator.requests.releaseHold(hold.id);
  // Every first CreateVolume answered (throttled, or applied and answered 500): the retries may succeed.
  await waitFor(
    async () =>
      emulator.requests
        .records()
        .slice(before)
        .filter((r) => r.action === "CreateVolume" && r.status === 500).length >= 1 &&
      holds.every((h) => emulator.requests.hold(h.id) === undefined),
    "a CreateVolume applied and answered 500",
  );
  emulator.setFaults({ throttleRate: 0.25 });
  const reports = await Promise.all(running);
  emulator.setFaults({});

  const volumes = await slotVolumes();
  t.equal(volumes.length, 1, "the slot filled once", { volumes });
  const made = reports.flatMap((r) => createsOf(r).map((c) => c.volumeId));
  t.same(new Set(made), new Set(volumes), "every keeper's create answered that one volume", { reports });
  t.same(
    reports.map((r) => r.failed),
    [0, 0, 0],
    "no keeper failed",
  );
  const records = emulator.requests.records().slice(before);
  t.ok(
    records.some((r) => r.action === "CreateVolume" && r.code === "RequestLimitExceeded") ||
      records.some((r) => r.code === "RequestLimitExceeded"),
    "throttling was met",
  );
  t.ok(
    emulator.snapshotState().events.some((e) => e.kind === "apply-then-500"),
    "and a CreateVolume applied, answered 500",
  );
});

t.test("the slot's volume deleted: the slot gets one new volume, though EC2 remembers its token", async (t) => {
  const olds = await slotVolumes();
  // An hour on in EC2's time (gc deletes a volume hours after it was made; within the day EC2 keeps the token).
  emulator.setClockOffset(HOUR);
  t.teardown(() => emulator.setClockOffset(0));
  for (const id of olds) await fake.direct.deleteVolume(id);
  await waitFor(async () => (await slotVolumes()).length === 0, "the slot's volume gone");
  const before = emulator.requests.records().length;

  const reports = await Promise.all([0, 1, 2].map((i) => keeper(i)));
  const volumes = await slotVolumes();
  t.equal(volumes.length, 1, "one new volume", { volumes, reports });
  t.notOk(olds.includes(volumes[0]!), "not the deleted one");
  t.same(
    reports.map((r) => r.failed),
    [0, 0, 0],
    "no keeper failed",
  );
  const replays = emulator
    .snapshotState()
    .events.filter((e) => e.kind === "idempotent-replay" && olds.includes(e.volumeId ?? ""));
  t.ok(replays.length > 0, "EC2 answered the slot's token with the deleted volume");
  const tokens = new Set(reports.flatMap((r) => createsOf(r).map((c) => c.clientToken)));
  t.equal(tokens.size, 1, "every keeper made it with the same next token");
  t.ok(
    emulator.requests
      .records()
      .slice(before)
      .every((r) => r.status === undefined || r.status < 500),
    "no fault injected here",
  );
});
