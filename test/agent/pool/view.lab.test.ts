/**
 * `pool` on the lab, run as a process against the EC2 emulator over HTTP: two generations (two
 * snapshots of the pool, one newer) in two zones, in use and available, one volume with gp3 IOPS
 * and throughput above the baseline, a third zone the keeper stocks but that is empty, and a
 * foreign volume. The JSON says per zone what is there, which generation is superseded, what it
 * costs, and what the keeper lacks; the table says the same for people.
 */
import { readFile } from "node:fs/promises";
import t from "tap";
import { Ajv } from "ajv";
import {
  AttachVolumeCommand,
  CreateSnapshotCommand,
  CreateVolumeCommand,
  DescribeSnapshotsCommand,
  DescribeVolumesCommand,
  type CreateVolumeCommandInput,
} from "@aws-sdk/client-ec2";
import type { PoolReport } from "../../../src/agent/pool/summary.ts";
import { run } from "../../../src/exec.ts";
import { writeLabConfig } from "../../../src/lab/machines/agent.ts";
import { poolTags } from "../../../src/lab/volumes/golden.ts";
import { startLab } from "../../../src/lab/lab.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const log = createMemoryLogger();
const lab = await startLab({ name: "test-pool-view", log });
t.teardown(() => lab.close());
const ec2 = lab.ec2Client();
const host = await lab.addHost();
const [zoneA, zoneB, zoneC] = [`${lab.region}a`, `${lab.region}b`, `${lab.region}c`] as const;
// The volume in use is in zone a, with the host.
if (host.instance.availabilityZone !== zoneA)
  throw new Error(`the lab host is in ${host.instance.availabilityZone}, not ${zoneA}`);

const OLD = "2026-11-01T10:00:00.000Z";
const NEW = "2026-11-30T10:00:00.000Z";
const tagList = (tags: Record<string, string>) => Object.entries(tags).map(([Key, Value]) => ({ Key, Value }));

async function createVolume(
  zone: string,
  tags: Record<string, string>,
  more: Partial<CreateVolumeCommandInput> = {},
): Promise<string> {
  const out = await ec2.send(
    new CreateVolumeCommand({
      AvailabilityZone: zone,
      ...(more.SnapshotId ? {} : { Size: 1 }),
      TagSpecifications: [{ ResourceType: "volume", Tags: tagList(tags) }],
      ...more,
    }),
  );
  const id = out.VolumeId!;
  const ready = await pollUntil(
    async () => (await ec2.send(new DescribeVolumesCommand({ VolumeIds: [id] }))).Volumes?.[0]?.State === "available",
  );
  if (!ready) throw new Error(`${id} stayed creating`);
  return id;
}

/** A completed snapshot of the pool, built at `builtAt` (as the golden build or the Packer flow tags one). */
async function generationSnapshot(builtAt: string): Promise<string> {
  const source = await createVolume(zoneA, { Name: `source-${builtAt}` });
  const tags = { ...poolTags("cost", "set-1", ["alpine:3.20"]), [VolumeTag.builtAt]: builtAt };
  const id = (
    await ec2.send(
      new CreateSnapshotCommand({
        VolumeId: source,
        TagSpecifications: [{ ResourceType: "snapshot", Tags: tagList(tags) }],
      }),
    )
  ).SnapshotId!;
  const done = await pollUntil(
    async () =>
      (await ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [id] }))).Snapshots?.[0]?.State === "completed",
  );
  if (!done) throw new Error(`snapshot ${id} never completed`);
  return id;
}

const oldSnapshot = await generationSnapshot(OLD);
const newSnapshot = await generationSnapshot(NEW);
// Pool volumes as the keeper makes them, but without a built-at of their own: their generation is their snapshot's.
const tags = poolTags("cost", "set-1", ["alpine:3.20"]);
const v = {
  currentA: await createVolume(zoneA, tags, { SnapshotId: newSnapshot }),
  inUseA: await createVolume(zoneA, tags, { SnapshotId: newSnapshot }),
  oldA: await createVolume(zoneA, tags, { SnapshotId: oldSnapshot }),
  // Tagged with its build time as the keeper does now: it counts whatever the snapshot.
  fastB: await createVolume(
    zoneB,
    { ...tags, [VolumeTag.builtAt]: NEW },
    { SnapshotId: newSnapshot, Size: 8, VolumeType: "gp3", Iops: 4000, Throughput: 250 },
  ),
  oldB: await createVolume(zoneB, tags, { SnapshotId: oldSnapshot }),
  foreign: await createVolume(zoneA, { Name: "not ours" }),
};
await ec2.send(
  new AttachVolumeCommand({ VolumeId: v.inUseA, InstanceId: host.instance.instanceId, Device: "/dev/sdf" }),
);
if (
  !(await pollUntil(
    async () =>
      (await ec2.send(new DescribeVolumesCommand({ VolumeIds: [v.inUseA] }))).Volumes?.[0]?.State === "in-use",
  ))
) {
  throw new Error(`${v.inUseA} never in use`);
}

const settings = {
  pool: "cost",
  keeper: {
    zones: [zoneA, zoneB, zoneC],
    minAvailable: 2,
    maxAvailable: 3,
    maxVolumes: 10,
    maxGiB: 100,
    initializationRateMiBps: 100,
  },
};
const config = await writeLabConfig(lab, host, settings);
const pool = (args: string[]) =>
  run(process.execPath, ["src/cli.ts", "pool", ...args, "--config", config], { check: false });

t.test("pool --json: per zone by state and generation, the cost, the keeper's target", async (t) => {
  const out = await pool(["--json"]);
  t.equal(out.exitCode, 0, out.stderr);
  const report = JSON.parse(out.stdout) as PoolReport;
  const schema = JSON.parse(
    await readFile(new URL("../../../schema/pool.schema.json", import.meta.url), "utf8"),
  ) as object;
  const validate = new Ajv({ allErrors: true, strict: true }).compile(schema);
  t.ok(validate(report), `valid against schema/pool.schema.json: ${JSON.stringify(validate.errors)}`);

  t.same(
    report.pools.map((p) => p.pool),
    ["cost"],
    "one pool; the foreign volume is not in it",
  );
  t.notOk(
    report.volumes.some((r) => r.volumeId === v.foreign),
    "nor among the volumes",
  );
  const [p] = report.pools;
  t.same(
    p!.currentGeneration,
    { generation: `set-1@${NEW}`, imageSet: "set-1", builtAt: NEW },
    "the newest completed snapshot's",
  );
  const zone = (name: string) => p!.zones.find((z) => z.zone === name)!;
  t.same(
    p!.zones.map((z) => z.zone),
    [zoneA, zoneB, zoneC],
    "the keeper's empty zone c is listed too",
  );

  t.same(zone(zoneA).states, { available: 2, inUse: 1, creating: 0, other: 0, quarantined: 0 });
  t.same(
    zone(zoneA).generations.map((g) => [
      g.generation,
      g.current,
      g.superseded,
      g.volumes,
      g.states.inUse,
      g.monthlyUsd,
    ]),
    [
      [`set-1@${NEW}`, true, false, 2, 1, 0.16],
      [`set-1@${OLD}`, false, true, 1, 0, 0.08],
    ],
    "untagged volumes take their snapshot's generation; the old one is superseded",
  );
  t.same(
    zone(zoneB).generations.map((g) => [g.generation, g.superseded, g.monthlyUsd]),
    [
      [`set-1@${NEW}`, false, 10.64],
      [`set-1@${OLD}`, true, 0.08],
    ],
    "8 GiB at 0.08 + 1000 IOPS at 0.005 + 125 MiB/s at 0.04, as EC2 describes the volume (gp3 takes at most 500 " +
      "IOPS per GiB)",
  );
  const fast = report.volumes.find((r) => r.volumeId === v.fastB)!;
  t.match(fast, { volumeType: "gp3", iops: 4000, throughputMiBps: 250, monthlyUsd: 10.64 });
  t.match(
    report.volumes.find((r) => r.volumeId === v.currentA),
    { volumeType: "gp3", iops: 3000, throughputMiBps: 125, monthlyUsd: 0.08 },
    "EC2's gp3 defaults",
  );
  t.same([zone(zoneA).monthlyUsd, zone(zoneB).monthlyUsd, zone(zoneC).monthlyUsd], [0.24, 10.72, 0]);

  t.same(zone(zoneA).keeper, { minAvailable: 2, maxAvailable: 3, stock: 2, belowMin: 0, aboveMax: 0 });
  t.same(zone(zoneB).keeper, { minAvailable: 2, maxAvailable: 3, stock: 2, belowMin: 0, aboveMax: 0 });
  t.same(zone(zoneC).keeper, { minAvailable: 2, maxAvailable: 3, stock: 0, belowMin: 2, aboveMax: 0 });
  t.match(p!.keeper, { maxVolumes: 10, maxGiB: 100, volumes: 5, gib: 12 });

  t.same(
    p!.snapshots,
    { completed: 2, gib: 2, monthlyUsd: 0.1, unverified: [] },
    "the pool's two snapshots at 0.05 per GiB",
  );
  t.same(report.total, {
    volumes: 5,
    gib: 12,
    snapshots: 2,
    snapshotGiB: 2,
    volumesMonthlyUsd: 10.96,
    snapshotsMonthlyUsd: 0.1,
    monthlyUsd: 11.06,
  });
  t.same(
    report.prices,
    { gibMonthUsd: 0.08, iopsMonthUsd: 0.005, throughputMonthUsd: 0.04, snapshotGibMonthUsd: 0.05 },
    "the defaults: us-east-1 list prices",
  );
  t.same(report.notes, []);
});

t.test("pool: the same for people, and the configured prices", async (t) => {
  const out = await pool([]);
  t.equal(out.exitCode, 0, out.stderr);
  t.comment(out.stdout);
  t.match(
    out.stdout,
    new RegExp(
      `^pool cost: current generation set-1@${NEW.replace(/\./g, "\\.")}; 5 volumes, 12 GiB, USD 10\\.96/month`,
      "m",
    ),
  );
  t.match(
    out.stdout,
    new RegExp(
      `${zoneA}\\s+pool\\s+set-1@${OLD.replace(/\./g, "\\.")} \\(superseded\\)\\s+1\\s+0\\s+0\\s+0\\s+0\\s+1\\s+0\\.08`,
    ),
  );
  t.match(
    out.stdout,
    new RegExp(`${zoneC}\\s+all\\s+0\\s+0\\s+0\\s+0\\s+0\\s+0\\s+0\\.00\\s+2\\.\\.3 available: has 0, 2 short`),
  );
  t.match(
    out.stdout,
    new RegExp(`${v.inUseA}.*in-use.*${host.instance.instanceId}`),
    "the volume lines are still there",
  );
  t.match(
    out.stdout,
    new RegExp(
      String.raw`^total: 5 volumes, 12 GiB, USD 10\.96\/month; 2 snapshots, 2 ` +
        String.raw`GiB at most, USD 0\.10\/month; USD 11\.06\/month in all$`,
      "m",
    ),
  );

  const priced = await writeLabConfig(lab, host, {
    pool: "cost",
    cost: { gibMonthUsd: 0.1, iopsMonthUsd: 0, throughputMonthUsd: 0, snapshotGibMonthUsd: 0 },
  });
  const other = await run(process.execPath, ["src/cli.ts", "pool", "--json", "--config", priced], {
    check: false,
  });
  t.equal(other.exitCode, 0, other.stderr);
  const report = JSON.parse(other.stdout) as PoolReport;
  t.same([report.total.volumesMonthlyUsd, report.total.snapshotsMonthlyUsd], [1.2, 0], "config cost.* sets the prices");
  t.equal(report.pools[0]?.keeper, null, "no keeper zones: no target");
  await writeLabConfig(lab, host, settings);
});

t.test("pool --pool: one pool only; the keeper's target with its own pool, not with another", async (t) => {
  const own = JSON.parse((await pool(["--pool", "cost", "--json"])).stdout) as PoolReport;
  t.same([own.pools.map((p) => p.pool), own.total.volumes, own.pools[0]?.zones.length], [["cost"], 5, 3]);
  const other = await pool(["--pool", "other", "--json"]);
  t.equal(other.exitCode, 0, other.stderr);
  const report = JSON.parse(other.stdout) as PoolReport;
  t.same(
    [report.pools, report.volumes, report.total.monthlyUsd],
    [[], [], 0],
    "nothing of pool cost, not even its keeper zones",
  );
});
