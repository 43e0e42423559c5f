/**
 * The pool keeper (runKeeper, `pool fill`) in process against the cloud fake (the EC2
 * emulator's rules, no root): it fills each zone from the pool's snapshot up to its minimum,
 * stops at the caps, leaves the stock alone when full, and a failed create is counted.
 */
import t from "tap";
import { keeperSettingsFrom, runKeeper } from "../../../src/agent/keeper/run.ts";
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
