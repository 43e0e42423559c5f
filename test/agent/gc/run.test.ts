/**
 * gc (runGc) in process against the cloud fake (the EC2 emulator's rules, no root): what it
 * deletes, what it never touches, the cap, the dry run, and the look right before each delete.
 */
import t from "tap";
import { runGc } from "../../../src/agent/gc/run.ts";
import { gcSummary } from "../../../src/cli/gc.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { fakeRecorder, startFakeCloud, type FakeCloud } from "../../fixtures/fakes/index.ts";

const HOUR = 3600_000;
const managed = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "default" };

/** A released volume whose expiry passed an hour ago (or is an hour ahead with `expired: false`). */
const released = (expired: boolean, extra: Record<string, string> = {}) => ({
  ...managed,
  [VolumeTag.releasedAt]: new Date(Date.now() - 30 * HOUR).toISOString(),
  [VolumeTag.expiresAt]: new Date(Date.now() + (expired ? -1 : 1) * HOUR).toISOString(),
  ...extra,
});

const gc = (fake: FakeCloud, options: { dryRun?: boolean; maxDeletes?: number } = {}) =>
  runGc(
    { cloud: fake.cloud, log: createMemoryLogger("debug") },
    {
      dryRun: options.dryRun ?? false,
      maxDeletes: options.maxDeletes ?? 10,
      ttlHours: 24,
      retire: { graceHours: null, quarantineHours: 24 },
    },
  );

const exists = async (fake: FakeCloud, volumeId: string) => (await fake.direct.describeVolume(volumeId)) !== undefined;

t.test("deletes the expired managed volumes only: kept, in use, not expired, foreign stay", async (t) => {
  const fake = await startFakeCloud(t);
  const node = fake.addInstance();
  const expired = await fake.volume({ tags: released(true) });
  const notYet = await fake.volume({ tags: released(false) });
  const kept = await fake.volume({ tags: released(true, { [VolumeTag.keep]: "true" }) });
  const inUse = await fake.volume({ tags: released(true) });
  await fake.attach(inUse.volumeId, node);
  const foreign = await fake.volume({ tags: { [VolumeTag.expiresAt]: new Date(0).toISOString() } });
  const recorder = fakeRecorder(fake.script);
  const outcome = await runGc(
    { cloud: fake.cloud, log: createMemoryLogger("debug"), recorder },
    { dryRun: false, maxDeletes: 10, ttlHours: 24, retire: { graceHours: null, quarantineHours: 24 } },
  );
  t.equal(outcome.deleted, 1);
  t.equal(outcome.failed, 0);
  t.notOk(await exists(fake, expired.volumeId), "the expired volume deleted");
  for (const v of [notYet, kept, inUse, foreign]) t.ok(await exists(fake, v.volumeId), `${v.volumeId} left`);
  const verdicts = Object.fromEntries(outcome.decisions.map((d) => [d.volumeId, d.verdict]));
  t.equal(verdicts[kept.volumeId], "kept");
  t.equal(verdicts[inUse.volumeId], "in-use");
  t.notOk(
    fake.script.of("cloud.deleteVolume").some((c) => c.args[0] === foreign.volumeId),
    "no DeleteVolume of a volume the agent does not manage",
  );
  t.equal(recorder.recorded.filter((r) => r.kind === "gcFinished").length, 1, "the outcome recorded");
});

t.test("a dry run deletes nothing; the cap bounds a run", async (t) => {
  const fake = await startFakeCloud(t);
  const volumes = [];
  for (let i = 0; i < 3; i++) volumes.push(await fake.volume({ tags: released(true) }));
  const dry = await gc(fake, { dryRun: true });
  t.equal(fake.script.of("cloud.deleteVolume").length, 0, "dry run: no DeleteVolume");
  t.equal(dry.decisions.filter((d) => d.verdict === "delete").length, 3, "but it says what it would delete");
  t.same([dry.wouldDelete, dry.deleted], [3, 0], "in its figures too: would delete 3, deleted none");
  t.equal(
    gcSummary(dry, true),
    "dry run, nothing changed: would delete 3, would tag 0 to expire; 0 failed, 3 managed volumes seen",
    "and in its last line",
  );
  const dryCapped = await gc(fake, { dryRun: true, maxDeletes: 2 });
  t.equal(
    gcSummary(dryCapped, true),
    "dry run, nothing changed: would delete 2, would tag 0 to expire, 1 over this run's cap (next run); " +
      "0 failed, 3 managed volumes seen",
    "within the cap, the rest named",
  );
  const capped = await gc(fake, { maxDeletes: 2 });
  t.equal(capped.deleted, 2);
  t.equal(capped.decisions.filter((d) => d.verdict === "over-cap").length, 1, "the third waits for the next run");
  t.equal(
    gcSummary(capped, false),
    "2 deleted, 0 spared, 0 tagged to expire, 1 over this run's cap (next run), 0 failed, 3 managed volumes seen",
    "a real run says what it did",
  );
  const next = await gc(fake);
  t.equal(next.deleted, 1);
  for (const v of volumes) t.notOk(await exists(fake, v.volumeId));
});

t.test("a volume claimed between the plan and its delete is spared", async (t) => {
  const fake = await startFakeCloud(t);
  const node = fake.addInstance();
  const volume = await fake.volume({ tags: released(true) });
  // Between gc's listing and its delete, a boot attaches the volume.
  fake.script.before("cloud.describeVolume", () => fake.attach(volume.volumeId, node));
  const outcome = await gc(fake);
  t.equal(outcome.deleted, 0);
  t.equal(outcome.spared, 1);
  t.equal(fake.script.of("cloud.deleteVolume").length, 0, "no DeleteVolume");
  t.equal((await fake.describe(volume.volumeId)).attachment?.instanceId, node.instanceId);
});

t.test("a failed DeleteVolume is counted and the others go on", async (t) => {
  const fake = await startFakeCloud(t);
  const a = await fake.volume({ tags: released(true) });
  const b = await fake.volume({ tags: released(true) });
  fake.script.failNext("cloud.deleteVolume", new Error("InternalError (scripted)"));
  const outcome = await gc(fake);
  t.equal(outcome.failed, 1);
  t.equal(outcome.deleted, 1);
  t.equal([await exists(fake, a.volumeId), await exists(fake, b.volumeId)].filter(Boolean).length, 1, "one left");
});

t.test("a volume claimed and never released gets an expiry, not a delete", async (t) => {
  const fake = await startFakeCloud(t);
  const volume = await fake.volume({
    tags: { ...managed, [VolumeTag.claimedBy]: "i-0123456789abcdef0", [VolumeTag.claimedAt]: new Date().toISOString() },
  });
  const outcome = await gc(fake);
  t.equal(outcome.deleted, 0);
  const tags = (await fake.describe(volume.volumeId)).tags;
  t.ok(tags[VolumeTag.expiresAt], "expires-at written");
  t.ok(tags[VolumeTag.releasedAt], "released-at written");
});
