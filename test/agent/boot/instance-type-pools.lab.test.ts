/**
 * Pools by instance type (config `instanceTypePools`) on the lab: `pool fill` stocks both pools,
 * the default one at its snapshot's size and the large type's at the rule's size; a machine of
 * the large type (IMDS `instance-type` g4dn.8xlarge) then claims from its pool, not from the
 * default pool that has a volume available in the same zone, and its filesystem is grown to the
 * larger volume.
 */
import { statfs } from "node:fs/promises";
import t from "tap";
import { CreateSnapshotCommand, CreateVolumeCommand, DescribeSnapshotsCommand } from "@aws-sdk/client-ec2";
import { keeperSettingsForPools, runKeepers } from "../../../src/agent/keeper/run.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { validateConfig } from "../../../src/config/index.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { goldenPoolTags, POOL, startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-type-pools", golden: true });
t.teardown(() => bl.close());
const golden = bl.golden!;
const zone = `${bl.lab.region}a`;
const LARGE = "gpu";
const largeGiB = golden.sizeGiB + 2;
const rules = [`g4dn.*=${LARGE}:${largeGiB}`];
const tagList = (tags: Record<string, string>) => Object.entries(tags).map(([Key, Value]) => ({ Key, Value }));

/** The large pool's snapshot: the golden image set again, tagged for its own pool (as a build for it makes one). */
async function largePoolSnapshot(): Promise<string> {
  const source = await bl.ec2.send(
    new CreateVolumeCommand({
      AvailabilityZone: zone,
      SnapshotId: golden.snapshotId,
      TagSpecifications: [{ ResourceType: "volume", Tags: tagList({ Name: "gpu-build" }) }],
    }),
  );
  if (!(await pollUntil(async () => (await bl.describe(source.VolumeId!)).State === "available")))
    throw new Error("the build volume stayed creating");
  const { SnapshotId } = await bl.ec2.send(
    new CreateSnapshotCommand({
      VolumeId: source.VolumeId!,
      TagSpecifications: [{ ResourceType: "snapshot", Tags: tagList(goldenPoolTags(LARGE, golden)) }],
    }),
  );
  const done = await pollUntil(
    async () =>
      (await bl.ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [SnapshotId!] }))).Snapshots?.[0]?.State ===
      "completed",
  );
  if (!done) throw new Error(`snapshot ${SnapshotId} never completed`);
  return SnapshotId!;
}

t.test("pool fill stocks both pools at their sizes; a g4dn boot claims from its own pool", async (t) => {
  const largeSnapshot = await largePoolSnapshot();
  const { config, problems } = validateConfig({
    pool: POOL,
    instanceTypePools: rules,
    keeper: { zones: [zone], minAvailable: 1, maxAvailable: 1, initializationRateMiBps: null },
  });
  t.same(problems, []);
  const log = createMemoryLogger();
  const cloud = createCloudVolumes({ client: bl.lab.ec2Client(bl.lab.credentials("keeper")), pollMs: 50 });
  const pools = keeperSettingsForPools(config);
  t.same(
    pools.map((p) => [p.pool, p.sizeGiB]),
    [
      [POOL, undefined],
      [LARGE, largeGiB],
    ],
    "the default pool and the rule's",
  );
  const outcomes = await runKeepers({ cloud, log }, pools, { dryRun: false });
  t.same(
    outcomes.map((o) => [o.plan.pool, o.failed]),
    [
      [POOL, 0],
      [LARGE, 0],
    ],
    "no pool failed",
    outcomes.every((o) => o.failed === 0) ? {} : { log: log.lines.join("\n") },
  );
  const made = outcomes.map((o) => o.results.filter((r) => r.done === "created").map((r) => r.volumeId!));
  t.equal(made[0]!.length, 1, "one volume in the default pool");
  t.equal(made[1]!.length, 1, "one volume in the large pool");
  const [smallVolume, largeVolume] = [made[0]![0]!, made[1]![0]!];
  t.equal((await bl.describe(smallVolume)).Size, golden.sizeGiB, "the default pool's at its snapshot's size");
  const large = await bl.describe(largeVolume);
  t.same([large.Size, large.SnapshotId], [largeGiB, largeSnapshot], "the large pool's at the rule's size");
  t.equal((await bl.tags(largeVolume))[VolumeTag.pool], LARGE);

  const host = await bl.addHost({ instanceType: "g4dn.8xlarge" });
  const booted = await bl.boot(host, { overrides: { pool: POOL, instanceTypePools: rules } });
  t.equal(
    booted.report?.outcome,
    "ready",
    "the boot came up",
    booted.report?.outcome === "ready" ? {} : { log: booted.log },
  );
  t.equal(booted.report?.volumeId, largeVolume, "the large type claims the large pool's volume");
  t.equal((await bl.describe(smallVolume)).State, "available", "the default pool's volume is left for others");
  t.match(booted.log.join("\n"), /pool gpu \(\d+ GiB volumes\): instance type g4dn\.8xlarge matches g4dn\.\*/);
  const fs = await statfs(booted.report!.mountPoint!);
  const sizeGiB = (fs.blocks * fs.bsize) / 1024 ** 3;
  t.ok(sizeGiB > golden.sizeGiB + 1, `the filesystem grown to the volume: ${sizeGiB.toFixed(2)} GiB`);
});
