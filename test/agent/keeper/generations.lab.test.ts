/**
 * Image-set generations on the lab, against the EC2 emulator over HTTP: two golden snapshots of
 * one pool (an old generation and a new one, by `ebs-cache:built-at`) and pool volumes of each.
 * A boot claims a volume of the new generation while one is available and an old one when none
 * is; the keeper trims the old generation first; gc shows `superseded` only once the grace has
 * passed and then deletes exactly the old available pool volumes: never the one in use, a kept
 * one, a workspace volume of the old generation or a foreign one.
 */
import t, { type Test } from "tap";
import { CreateVolumeCommand, DescribeVolumesCommand } from "@aws-sdk/client-ec2";
import { bootLabHost, writeLabConfig } from "../../../src/lab/machines/agent.ts";
import {
  buildGoldenSnapshot,
  createPoolVolumes,
  poolTags,
  type GoldenSnapshot,
} from "../../../src/lab/volumes/golden.ts";
import { runKeeper } from "../../../src/agent/keeper/run.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { run } from "../../../src/exec.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { agentBundle, compileCacheEnv } from "../../fixtures/lab/agent-bundle.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const POOL = "gen";
const bl = await startBootLab({ name: "test-generations", golden: false });
t.teardown(() => bl.close());
const { lab, ec2 } = bl;
const [zoneA, zoneB] = [`${lab.region}a`, `${lab.region}b`] as const;
const day = 24 * 3600_000;
const labLog = createMemoryLogger("debug");

// Built in this order on purpose: the old generation's snapshot is the later one by start time,
// so only built-at can tell that it is the older generation.
const fresh = await buildGoldenSnapshot(lab, {
  pool: POOL,
  imageSet: "gen-set-2",
  images: [{ tag: "lab/gen:2" }],
  builtAt: new Date(Date.now() - day),
  log: labLog,
});
const stale = await buildGoldenSnapshot(lab, {
  pool: POOL,
  imageSet: "gen-set-1",
  images: [{ tag: "lab/gen:1" }],
  builtAt: new Date(Date.now() - 7 * day),
  log: labLog,
});

const pool = (golden: GoldenSnapshot, imageSet: string, count: number, availabilityZone: string = zoneA) =>
  createPoolVolumes(lab, golden, { pool: POOL, imageSet, count, availabilityZone });

/** A volume made from the golden snapshot with exactly these tags (a workspace volume, a foreign one). */
async function volumeFrom(golden: GoldenSnapshot, tags: Record<string, string>, zone: string = zoneA): Promise<string> {
  const created = await ec2.send(
    new CreateVolumeCommand({
      AvailabilityZone: zone,
      SnapshotId: golden.snapshotId,
      TagSpecifications: [
        { ResourceType: "volume", Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) },
      ],
    }),
  );
  const id = created.VolumeId!;
  if (!(await bl.waitAvailable(id))) throw new Error(`${id} did not become available`);
  return id;
}

async function states(): Promise<Map<string, string>> {
  return new Map([...(await described()).entries()].map(([id, d]) => [id, d.state]));
}

async function described(): Promise<Map<string, { state: string; tags: Record<string, string> }>> {
  const out = await ec2.send(new DescribeVolumesCommand({}));
  return new Map(
    (out.Volumes ?? []).map((v) => [
      v.VolumeId!,
      { state: v.State!, tags: Object.fromEntries((v.Tags ?? []).map((x) => [x.Key!, x.Value!])) },
    ]),
  );
}

const host = await lab.addHost({ availabilityZone: zoneA });
/** gc as the CLI process systemd's timer runs, with this grace. */
async function gc(graceHours: number | null, args: string[]) {
  const config = await writeLabConfig(lab, host, { pool: POOL, gc: { supersededGraceHours: graceHours } });
  const result = await run(process.execPath, [await agentBundle(), "gc", ...args, "--config", config], {
    check: false,
    env: await compileCacheEnv(),
  });
  const decisions =
    result.exitCode === 0 && args.includes("--json")
      ? (
          JSON.parse(result.stdout) as {
            decisions: Array<{ volumeId: string; verdict: string; reason: string; done?: string }>;
          }
        ).decisions
      : [];
  return { ...result, decisions, verdicts: Object.fromEntries(decisions.map((d) => [d.volumeId, d.verdict])) };
}

/** Boot phase 1 (`boot --no-docker`): selects, claims, mounts and points daemon.json at the volume. */
async function claimFor(t: Test): Promise<string | undefined> {
  const booter = await lab.addHost({ availabilityZone: zoneA });
  const log = createMemoryLogger("debug");
  const outcome = await bootLabHost(lab, booter, { overrides: { pool: POOL }, withDocker: false, log });
  t.equal(
    outcome.report?.outcome,
    "prepared",
    "the first boot phase prepared a volume",
    outcome.report?.outcome === "prepared" ? {} : { result: outcome.report, log: log.lines.join("\n") },
  );
  return outcome.report?.volumeId;
}

const v = {
  newest: (await pool(fresh, "gen-set-2", 1))[0]!,
  old: await pool(stale, "gen-set-1", 3),
};

t.test("the golden builds carry their generation", async (t) => {
  const tags = await bl.tags(v.newest);
  t.equal(tags[VolumeTag.builtAt], fresh.builtAt, "a pool volume carries its snapshot's built-at");
  t.ok(Date.parse(fresh.builtAt!) > Date.parse(stale.builtAt!), "the snapshot built second is the older generation");
});

t.test("a boot claims the new generation while one is available, an old one when none is", async (t) => {
  const before = (await states()).size;
  const first = await claimFor(t);
  t.equal(first, v.newest, "the only new-generation volume, though three old ones are listed beside it");
  const second = await claimFor(t);
  t.ok(
    second !== undefined && v.old.includes(second),
    `no new one left: an old one (${second}), warm, rather than a cold volume from the snapshot`,
  );
  t.equal((await states()).size, before, "no volume was created from a snapshot");
});

t.test("the keeper trims the old generation first, never the new one", async (t) => {
  // The new-generation volume is the oldest volume of the zone: only its generation saves it.
  const current = await pool(fresh, "gen-set-2", 1, zoneB);
  const older = await pool(stale, "gen-set-1", 2, zoneB);
  // The keeper's role (the nodes' policy and the reclaim policy): the emulator decides each call by it.
  const cloud = createCloudVolumes({ client: lab.ec2Client(lab.credentials("keeper")), pollMs: 50 });
  const settings = {
    pool: POOL,
    imageSet: null,
    volumeType: "gp3",
    zones: [zoneB],
    minAvailable: 1,
    maxAvailable: 2,
    maxVolumes: 50,
    maxGiB: 500,
    initializationRateMiBps: null,
    quarantineHours: 6,
  };
  const outcome = await runKeeper({ cloud, log: labLog }, settings, { dryRun: false });
  t.equal(outcome.failed, 0);
  t.equal(
    outcome.plan.snapshotId,
    fresh.snapshotId,
    "the current generation's snapshot, though the old one's started later",
  );
  t.same(
    outcome.plan.zones.map((z) => [z.zone, z.available, z.superseded]),
    [[zoneB, 1, 2]],
    "one current volume is the stock; two superseded ones are not",
  );
  const trimmed = outcome.results
    .filter((r) => r.step === "trim" && r.done === "deleted")
    .map((r) => ("volumeId" in r ? r.volumeId : ""));
  t.equal(trimmed.length, 1, "three available, at most two: one goes");
  t.ok(older.includes(trimmed[0]!), "an old-generation one");
  t.same(
    outcome.results.filter((r) => r.step === "create"),
    [],
    "the current stock is at minAvailable: nothing created",
  );
  t.ok((await states()).get(current[0]!) === "available", "the new-generation volume stays");
});

t.test("gc: superseded only after the grace, then exactly the old available pool volumes go", async (t) => {
  const oldTags = poolTags(POOL, "gen-set-1", stale.images, stale.built, stale.builtAt);
  const kept = await volumeFrom(stale, { ...oldTags, [VolumeTag.keep]: "true" });
  const workspace = await volumeFrom(stale, {
    ...oldTags,
    [VolumeTag.kind]: "workspace",
    [VolumeTag.userId]: "7",
    [VolumeTag.workspaceKeys]: "user-id",
  });
  const foreign = await volumeFrom(stale, {
    [VolumeTag.pool]: POOL,
    [VolumeTag.kind]: "pool",
    [VolumeTag.builtAt]: stale.builtAt!,
  });
  const before = await states();
  // The old generation's available pool volumes, kept aside: those the keeper left in zone b and those of zone a nobody
  // claimed.
  const expected = [...(await described()).entries()]
    .filter(
      ([id, d]) =>
        d.state === "available" &&
        d.tags[VolumeTag.managed] === "true" &&
        d.tags[VolumeTag.kind] === "pool" &&
        d.tags[VolumeTag.builtAt] === stale.builtAt &&
        id !== kept,
    )
    .map(([id]) => id)
    .sort();
  t.ok(expected.length >= 3, `old available pool volumes to retire: ${expected.join(", ")}`);

  const within = await gc(24, ["--dry-run", "--json"]);
  t.equal(within.exitCode, 0, "gc --dry-run runs", { stderr: within.stderr });
  t.same(
    within.decisions.filter((d) => d.verdict === "superseded"),
    [],
    "the new generation came out less than 24 h ago (its snapshot's start): nothing superseded yet",
  );
  t.match(
    within.decisions.find((d) => d.volumeId === expected[0])?.reason,
    /superseded by gen-set-2@.*retired from /,
    "the dry run says when it will be",
  );

  const after = await gc(0, ["--dry-run", "--json"]);
  t.same(
    after.decisions
      .filter((d) => d.verdict === "superseded")
      .map((d) => d.volumeId)
      .sort(),
    expected,
    "past the grace: the old available pool volumes",
  );
  const text = await gc(0, ["--dry-run"]);
  for (const id of expected)
    t.match(
      text.stdout,
      new RegExp(`^${id}  superseded +generation gen-set-1@`, "m"),
      `gc --dry-run prints ${id} as superseded`,
    );
  t.same(await states(), before, "a dry run changes nothing");

  const asked = lab.ec2.requests.records().length;
  const real = await gc(0, ["--json"]);
  t.equal(real.exitCode, 0, "gc runs", { stderr: real.stderr });
  const reads = lab.ec2.requests
    .records()
    .slice(asked)
    .map((r) => r.action)
    .filter((a) => a.startsWith("Describe"));
  // Plus one DescribeVolumes of each volume right before its DeleteVolume: gc looks again.
  t.same(
    reads.sort(),
    ["DescribeSnapshots", "DescribeVolumes", ...expected.map(() => "DescribeVolumes")],
    "one listing of the volumes, one of the pools' snapshots, and one look again per deletion",
  );
  t.same(
    real.decisions
      .filter((d) => d.done === "deleted" || d.done === "gone")
      .map((d) => d.volumeId)
      .sort(),
    expected,
    "exactly those deleted",
  );
  const left = await states();
  for (const id of expected) t.not(left.get(id), "available", `${id} retired`);
  const inUse = v.old.find((id) => before.get(id) === "in-use");
  t.ok(inUse && left.get(inUse) === "in-use", "the old volume in use stays");
  t.equal(left.get(kept), "available", "the kept one stays");
  t.equal(left.get(workspace), "available", "the old generation's workspace volume stays");
  t.equal(left.get(foreign), "available", "the foreign one stays (gc never sees it)");
  t.equal(left.get(v.newest), "in-use", "the claimed new one stays");
  t.equal(real.verdicts[kept], "kept");
  t.equal(real.verdicts[workspace], "never-claimed");
  t.notOk(foreign in real.verdicts, "a foreign volume is not even looked at");
  const again = await gc(0, ["--json"]);
  t.same(
    again.decisions.filter((d) => d.verdict === "superseded"),
    [],
    "a second run has nothing left to retire",
  );
});
