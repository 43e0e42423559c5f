/**
 * The pool keeper (runKeeper, `pool fill`) in process against the cloud fake (the EC2
 * emulator's rules, no root): it fills each zone from the pool's snapshot up to its minimum,
 * stops at the caps, leaves the stock alone when full, and a failed create is counted.
 */
import t from "tap";
import { keeperSettingsForPools, keeperSettingsFrom, runKeeper, runKeepers } from "../../../src/agent/keeper/run.ts";
import type { KeeperFacts } from "../../../src/agent/outcomes.ts";
import { defaultConfig } from "../../../src/config/index.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { fakeRecorder, startFakeCloud, ZONE, type FakeCloud } from "../../fixtures/fakes/index.ts";

const POOL = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "default" };
const ZONE_B = "us-east-1b";

const settings = (keeper: Partial<ReturnType<typeof keeperSettingsFrom>> = {}) => ({
  ...keeperSettingsFrom({
    pool: "default",
    imageSet: null,
    volumeType: "gp3",
    claim: { quarantineHours: 24 },
    volumes: defaultConfig().volumes,
    keeper: {
      zones: [ZONE, ZONE_B],
      minAvailable: 2,
      maxAvailable: 4,
      maxVolumes: 20,
      maxGiB: 2000,
      initializationRateMiBps: null,
    },
  }),
  ...keeper,
});

async function poolVolumes(fake: FakeCloud) {
  return fake.direct.findVolumes({ tags: POOL });
}

t.test("fills each zone from the pool's snapshot up to its minimum, then does nothing", async (t) => {
  const fake = await startFakeCloud(t);
  const snapshotId = await fake.snapshot({ ...POOL, [VolumeTag.images]: "lab/app:1" });
  await fake.volume({ tags: { ...POOL }, snapshotId });
  const recorder = fakeRecorder(fake.script);
  const log = createMemoryLogger("debug");
  const outcome = await runKeeper({ cloud: fake.cloud, log, recorder }, settings(), { dryRun: false });
  t.equal(outcome.failed, 0, log.lines.join("\n"));
  const volumes = await poolVolumes(fake);
  const inZone = (zone: string) => volumes.filter((v) => v.availabilityZone === zone && v.state === "available");
  t.equal(inZone(ZONE).length, 2, "zone a filled to its minimum");
  t.equal(inZone(ZONE_B).length, 2, "zone b filled to its minimum");
  t.ok(
    volumes.every((v) => v.snapshotId === snapshotId),
    "every volume from the pool's snapshot",
  );
  t.equal(recorder.recorded.filter((r) => r.kind === "keeperFinished").length, 1);

  const creates = fake.script.of("cloud.createVolume").length;
  const again = await runKeeper({ cloud: fake.cloud, log }, settings(), { dryRun: false });
  t.equal(fake.script.of("cloud.createVolume").length, creates, "a full pool: nothing created");
  t.equal(again.failed, 0);
});

t.test("a dry run creates nothing; the volume cap stops the fill", async (t) => {
  const fake = await startFakeCloud(t);
  await fake.snapshot({ ...POOL });
  const log = createMemoryLogger("debug");
  const dry = await runKeeper({ cloud: fake.cloud, log }, settings(), { dryRun: true });
  t.ok(
    dry.plan.steps.some((s) => s.step === "create"),
    "the plan creates",
  );
  t.equal(fake.script.of("cloud.createVolume").length, 0, "the dry run does not");
  await runKeeper({ cloud: fake.cloud, log }, settings({ maxVolumes: 3 }), { dryRun: false });
  t.equal((await poolVolumes(fake)).length, 3, "at most maxVolumes");
});

t.test("a CreateVolume that fails once is counted; the next run fills the rest", async (t) => {
  const fake = await startFakeCloud(t);
  await fake.snapshot({ ...POOL });
  fake.script.failNext("cloud.createVolume", new Error("InsufficientVolumeCapacity (scripted)"));
  const log = createMemoryLogger("debug");
  const first = await runKeeper({ cloud: fake.cloud, log }, settings({ zones: [ZONE] }), { dryRun: false });
  t.ok(first.failed >= 1, "the failure counted");
  await runKeeper({ cloud: fake.cloud, log }, settings({ zones: [ZONE] }), { dryRun: false });
  t.equal((await poolVolumes(fake)).filter((v) => v.state === "available").length, 2, "filled by the next run");
});

t.test("without a snapshot the keeper creates nothing", async (t) => {
  const fake = await startFakeCloud(t);
  const log = createMemoryLogger("debug");
  const outcome = await runKeeper({ cloud: fake.cloud, log }, settings(), { dryRun: false });
  t.equal(fake.script.of("cloud.createVolume").length, 0);
  t.equal(outcome.results.length, 0);
});

t.test("runKeepers: each pool of instanceTypePools at its size, one report for all, a bad size fails", async (t) => {
  const fake = await startFakeCloud(t);
  const gpu = { ...POOL, [VolumeTag.pool]: "gpu" };
  const tiny = { ...POOL, [VolumeTag.pool]: "tiny" };
  await fake.snapshot({ ...POOL, [VolumeTag.images]: "lab/app:1" }, 1);
  await fake.snapshot({ ...gpu, [VolumeTag.images]: "lab/app:1" }, 1);
  await fake.snapshot({ ...tiny, [VolumeTag.images]: "lab/app:1" }, 3);
  const pools = keeperSettingsForPools({
    pool: "default",
    imageSet: null,
    volumeType: "gp3",
    claim: { quarantineHours: 24 },
    volumes: defaultConfig().volumes,
    keeper: {
      zones: [ZONE],
      minAvailable: 1,
      maxAvailable: 1,
      maxVolumes: 20,
      maxGiB: 2000,
      initializationRateMiBps: null,
    },
    instanceTypePools: ["g4dn.*=gpu:4", "t3.nano=tiny:2"],
  });
  t.same(
    pools.map((p) => [p.pool, p.sizeGiB]),
    [
      ["default", undefined],
      ["gpu", 4],
      ["tiny", 2],
    ],
  );
  const recorder = fakeRecorder(fake.script);
  const log = createMemoryLogger("debug");
  const outcomes = await runKeepers({ cloud: fake.cloud, log, recorder }, pools, { dryRun: false });
  t.same(
    outcomes.map((o) => o.failed),
    [0, 0, 1],
    "tiny's 2 GiB is below its 3 GiB snapshot: that pool fails",
  );
  t.match(
    log.lines.join("\n"),
    /keeper\.pool-size: instanceTypePools gives pool tiny 2 GiB volumes, below its snapshot/,
  );
  const sizes = async (tags: Record<string, string>) => (await fake.direct.findVolumes({ tags })).map((v) => v.sizeGiB);
  t.same(await sizes(POOL), [1], "the default pool at its snapshot's size");
  t.same(await sizes(gpu), [4], "gpu at the rule's size");
  t.same(await sizes(tiny), [], "nothing made for tiny");
  const reports = recorder.recorded.filter((r) => r.kind === "keeperFinished");
  t.equal(reports.length, 1, "one report for the run (the textfile is replaced as a whole)");
  const facts = reports[0]!.value as KeeperFacts;
  t.same(facts.poolVolumes, { default: 1, gpu: 1, tiny: 0 });
  t.same(
    facts.actions.map((a) => `${a.pool} ${a.action} ${a.outcome}`),
    ["default create done", "gpu create done"],
  );
});
