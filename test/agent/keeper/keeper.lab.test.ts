/**
 * The pool keeper (`pool fill`) on the lab, against the EC2 emulator over HTTP: fills three
 * zones from empty with volumes of the pool's newest snapshot at a provisioned initialization
 * rate, tags them initialized once EBS reports 100 %, tops up after claims within the cap, two
 * keepers racing never overshoot, surplus goes oldest snapshot first and then oldest volume,
 * and in-use, kept and foreign volumes are never touched; a dry run changes nothing.
 */
import { readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import t from "tap";
import {
  AttachVolumeCommand,
  CreateSnapshotCommand,
  CreateVolumeCommand,
  DescribeSnapshotsCommand,
  DescribeVolumesCommand,
  type EC2Client,
} from "@aws-sdk/client-ec2";
import { runKeeper, type KeeperReport } from "../../../src/agent/keeper/run.ts";
import { slotToken, type CreateStep, type KeeperSettings } from "../../../src/agent/keeper/plan.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { run } from "../../../src/exec.ts";
import { writeLabConfig } from "../../../src/lab/machines/agent.ts";
import { poolTags } from "../../../src/lab/volumes/golden.ts";
import { startLab } from "../../../src/lab/lab.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { agentBundle, compileCacheEnv } from "../../fixtures/lab/agent-bundle.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";
import { parsePromText, sampleOf } from "../../fixtures/oracles/prom-text.ts";

await assertLabPrerequisites();

const log = createMemoryLogger();
// EBS's provisioned-rate initialization of a 1 GiB volume at 100 MiB/s takes ~10 s; sped up, it is done by the next
// run.
const lab = await startLab({ name: "test-keeper", log, initializationSpeedup: 1000 });
t.teardown(() => lab.close());
const ec2 = lab.ec2Client();
// The keeper's host: its role holds the reclaim policy beside the nodes' (docs/keeper.md).
const host = await lab.addHost({ role: "keeper" });
const [zoneA, zoneB, zoneC] = [`${lab.region}a`, `${lab.region}b`, `${lab.region}c`] as const;
const WRITES = new Set(["CreateVolume", "DeleteVolume", "CreateTags", "DeleteTags", "AttachVolume", "DetachVolume"]);

interface Seen {
  volumeId: string;
  zone: string;
  state: string;
  snapshotId?: string;
  attached?: string;
  initializationRate?: number;
  tags: Record<string, string>;
}

async function volumes(client: EC2Client = ec2): Promise<Seen[]> {
  const out = await client.send(new DescribeVolumesCommand({}));
  return (out.Volumes ?? []).map((v) => ({
    volumeId: v.VolumeId!,
    zone: v.AvailabilityZone!,
    state: v.State!,
    ...(v.SnapshotId ? { snapshotId: v.SnapshotId } : {}),
    ...(v.Attachments?.[0]?.InstanceId ? { attached: v.Attachments[0].InstanceId } : {}),
    ...(v.VolumeInitializationRate !== undefined ? { initializationRate: v.VolumeInitializationRate } : {}),
    tags: Object.fromEntries((v.Tags ?? []).map((x) => [x.Key!, x.Value!])),
  }));
}

const ofPool = (list: Seen[], pool: string) =>
  list.filter((v) => v.tags[VolumeTag.pool] === pool && v.tags[VolumeTag.managed] === "true" && v.state !== "deleting");
const perZone = (list: Seen[], state = "available") =>
  Object.fromEntries(
    [zoneA, zoneB, zoneC].map((zone) => [
      zone,
      list.filter((v) => v.zone === zone && v.state === state && !v.attached).length,
    ]),
  );

const tagList = (tags: Record<string, string>) => Object.entries(tags).map(([Key, Value]) => ({ Key, Value }));

async function createRaw(
  zone: string,
  tags: Record<string, string>,
  snapshotId?: string,
  sizeGiB = 1,
): Promise<string> {
  const out = await ec2.send(
    new CreateVolumeCommand({
      AvailabilityZone: zone,
      ...(snapshotId ? { SnapshotId: snapshotId } : { Size: sizeGiB }),
      TagSpecifications: [{ ResourceType: "volume", Tags: tagList(tags) }],
    }),
  );
  return out.VolumeId!;
}

async function allAvailable(): Promise<void> {
  if (!(await pollUntil(async () => (await volumes()).every((v) => v.state !== "creating"))))
    throw new Error("volumes stayed creating");
}

/** A completed snapshot tagged as the pool's (as the Packer flow makes one), of a volume of `sizeGiB`. */
async function poolSnapshot(pool: string, sizeGiB = 1): Promise<string> {
  const tags = poolTags(pool, "set-1", ["alpine:3.20"]);
  const source = await createRaw(zoneA, { Name: `source-${pool}` }, undefined, sizeGiB);
  await allAvailable();
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

function settings(pool: string, over: Partial<KeeperSettings> = {}): KeeperSettings {
  return {
    pool,
    imageSet: null,
    volumeType: "gp3",
    zones: [zoneA, zoneB, zoneC],
    minAvailable: 2,
    maxAvailable: 3,
    maxVolumes: 20,
    maxGiB: 100,
    initializationRateMiBps: 100,
    quarantineHours: 6,
    ...over,
  };
}

/** One keeper in this process, with its own SDK client (as another host would have). */
function keeper(pool: string, over: Partial<KeeperSettings> = {}, dryRun = false): Promise<KeeperReport> {
  const cloud = createCloudVolumes({ client: lab.ec2Client(host.credentials), pollMs: 50 });
  return runKeeper({ cloud, log }, settings(pool, over), { dryRun });
}

// The agent's bundle: this file starts the CLI seven times (fixtures/lab/agent-bundle.ts).
const CLI = await agentBundle();
const CLI_ENV = await compileCacheEnv();

async function cli(config: string, args: string[]) {
  return run(process.execPath, [CLI, "pool", "fill", ...args, "--config", config], { check: false, env: CLI_ENV });
}

const fillSnapshot = await poolSnapshot("fill");
const config = await writeLabConfig(lab, host, {
  pool: "fill",
  keeper: {
    zones: [zoneA, zoneB, zoneC],
    minAvailable: 2,
    maxAvailable: 3,
    maxVolumes: 8,
    maxGiB: 100,
    initializationRateMiBps: 100,
  },
  // Config volumes: added to every CreateVolume, and covered by the slot's token.
  volumes: { encrypted: true, throughputMiBps: 250, tags: ["CostCenter=42"] },
});
/** The first volume's create step, as the dry run showed it. */
let dryStep: CreateStep | undefined;

/** The token of a create step's slot, its zone holding no volume of the pool yet: whenever it is asked, one. */
function slotTokenOf(step: CreateStep): string {
  return slotToken("fill", step.zone, step.slot, step, []);
}

t.test("--dry-run prints the plan and writes nothing", async (t) => {
  const before = lab.ec2.requests.records().length;
  const dry = await cli(config, ["--dry-run", "--json"]);
  t.equal(dry.exitCode, 0, dry.stderr);
  const printed = JSON.parse(dry.stdout) as { pools: KeeperReport[] };
  t.same(Object.keys(printed), ["pools"], "one pool configured: a list under pools all the same");
  t.equal(printed.pools.length, 1);
  const outcome = printed.pools[0]!;
  t.same(
    outcome.plan.zones.map((z) => [z.zone, z.available, z.create]),
    [
      [zoneA, 0, 2],
      [zoneB, 0, 2],
      [zoneC, 0, 2],
    ],
    "two to create per zone",
  );
  t.equal(outcome.plan.snapshotId, fillSnapshot, "from the pool's snapshot");
  const first = outcome.plan.steps.find((s) => s.step === "create");
  t.match(first, { creation: { encrypted: true, throughputMiBps: 250, tags: { CostCenter: "42" } } }, "config volumes");
  dryStep = first?.step === "create" ? first : undefined;
  // A slot's token is what the slot is and what its zone holds, never when it is asked.
  t.equal(dryStep && slotTokenOf(dryStep), dryStep?.clientToken, "the token printed is the slot's");
  t.same(outcome.results, [], "nothing done");
  const writes = lab.ec2.requests
    .records()
    .slice(before)
    .filter((r) => WRITES.has(r.action));
  t.same(writes, [], "the emulator's ledger shows no write");
  t.same(ofPool(await volumes(), "fill"), [], "no volume made");
  const text = await cli(config, ["--dry-run"]);
  t.match(text.stdout, /would create slot 0 from snap-/);
  t.match(text.stdout, /dry run: nothing changed/);
  // A pool added (instanceTypePools): the same shape, one more entry.
  const twoPools = join(dirname(config), "two-pools.json");
  const json = JSON.parse(await readFile(config, "utf8")) as Record<string, unknown>;
  await writeFile(twoPools, JSON.stringify({ ...json, instanceTypePools: ["g4dn.*=fill-gpu:20"] }));
  const both = JSON.parse((await cli(twoPools, ["--dry-run", "--json"])).stdout) as { pools: KeeperReport[] };
  t.same(
    [Object.keys(both), both.pools.map((p) => p.plan.pool)],
    [["pools"], ["fill", "fill-gpu"]],
    "two pools: the same object, a list of two under pools",
  );
});

t.test("fills three zones to the target from empty", async (t) => {
  const fill = await cli(config, ["--json"]);
  t.equal(fill.exitCode, 0, fill.stderr);
  const outcome = (JSON.parse(fill.stdout) as { pools: KeeperReport[] }).pools[0]!;
  t.equal(outcome.results.filter((r) => r.done === "created").length, 6, "six volumes made");
  t.equal(outcome.rounds, 7, "a recount after each volume (the last finds nothing to do)");
  // The wait for them, one progress line (paced: no count of lines asserted), its end always told.
  t.match(fill.stderr, /keeper\.progress: 6 of 6 volumes available \(100\.0 %\)$/m, "the wait's end is logged");
  for (const line of fill.stderr.split("\n").filter((l) => l.includes("keeper.progress: ") && l.includes("waiting")))
    t.match(line, /: \d of 6 volumes available \(.+\); waiting for (vol-\w+|a new volume) \(.+\): \w/);
  // The dry run showed the request as sent: the step it printed is a token the emulator received, for a
  // volume made as configured.
  const received = lab.ec2.snapshotState().clientTokens ?? {};
  const sent = dryStep?.clientToken;
  t.ok(
    sent !== undefined && Object.hasOwn(received, sent),
    "the dry run's step reached EC2 with the first CreateVolume",
  );
  const madeId = received[sent!]!.volumeId;
  const made = (await ec2.send(new DescribeVolumesCommand({ VolumeIds: [madeId] }))).Volumes![0]!;
  t.same([made.Encrypted, made.Throughput], [true, 250], "encrypted, at the configured throughput, as shown");
  const pool = ofPool(await volumes(), "fill");
  t.same(perZone(pool), { [zoneA]: 2, [zoneB]: 2, [zoneC]: 2 });
  // The run's figures for node_exporter (metrics.textfileDir, inside the lab host's root).
  const prom = parsePromText(
    await readFile(join(host.paths.hostRoot, "var/lib/prometheus/node-exporter/ebs_cache_agent_keeper.prom"), "utf8"),
  );
  t.equal(
    sampleOf(prom, "ebs_cache_agent_keeper_actions_total", { action: "create", pool: "fill", outcome: "done" })?.value,
    6,
    "the textfile counts six creates",
  );
  t.equal(sampleOf(prom, "ebs_cache_agent_keeper_pool_volumes", { pool: "fill" })?.value, 6, "and six volumes stocked");
  for (const v of pool) {
    t.equal(v.snapshotId, fillSnapshot, `${v.volumeId} from the snapshot`);
    t.equal(v.initializationRate, 100, `${v.volumeId} at the provisioned initialization rate`);
    t.same(
      [
        v.tags[VolumeTag.managed],
        v.tags[VolumeTag.kind],
        v.tags[VolumeTag.imageSet],
        v.tags[VolumeTag.images],
        v.tags[VolumeTag.createdBy],
      ],
      ["true", "pool", "set-1", "alpine:3.20", undefined],
      "tagged as a pool volume of the snapshot's image set, never created-by (not to be formatted)",
    );
  }
  const again = await keeper("fill", { maxVolumes: 8 });
  t.same(
    again.results.filter((r) => r.step === "create"),
    [],
    "a second run creates nothing",
  );
  t.equal(
    again.results.filter((r) => r.done === "tagged").length,
    6,
    "and tags the six initialized (EBS reports 100 %)",
  );
  t.ok(
    ofPool(await volumes(), "fill").every((v) => /^\d{4}-/.test(v.tags[VolumeTag.initialized] ?? "")),
    "every volume tagged ebs-cache:initialized",
  );
});

t.test("tops up after claims, within the cap", async (t) => {
  const inA = ofPool(await volumes(), "fill").filter((v) => v.zone === zoneA);
  for (const [i, v] of inA.entries()) {
    await ec2.send(
      new AttachVolumeCommand({
        VolumeId: v.volumeId,
        InstanceId: host.instance.instanceId,
        Device: `/dev/sd${"fg"[i]}`,
      }),
    );
  }
  const topUp = await keeper("fill", { maxVolumes: 8 });
  t.equal(topUp.results.filter((r) => r.done === "created").length, 2, "two volumes: the cap of 8 allows both");
  const pool = ofPool(await volumes(), "fill");
  t.same(perZone(pool), { [zoneA]: 2, [zoneB]: 2, [zoneC]: 2 }, "zone a is back to its target");
  t.equal(pool.length, 8);
  t.ok(
    inA.every((v) => pool.find((p) => p.volumeId === v.volumeId)?.attached === host.instance.instanceId),
    "the claimed volumes are untouched",
  );

  const claimed = pool.find((v) => v.zone === zoneA && !v.attached)!;
  await ec2.send(
    new AttachVolumeCommand({ VolumeId: claimed.volumeId, InstanceId: host.instance.instanceId, Device: "/dev/sdh" }),
  );
  const capped = await keeper("fill", { maxVolumes: 8 });
  t.same(
    capped.results.filter((r) => r.step === "create"),
    [],
    "at the cap: nothing created",
  );
  t.match(
    capped.plan.zones.find((z) => z.zone === zoneA)?.short ?? "",
    /cap \(8 volumes/,
    "the plan says why zone a stays short",
  );
  t.equal(ofPool(await volumes(), "fill").length, 8);
});

t.test("two keepers racing never overshoot the target or the cap", async (t) => {
  await poolSnapshot("race");
  const before = lab.ec2.requests.records().length;
  const [a, b] = await Promise.all([
    keeper("race", { minAvailable: 3, maxAvailable: 3 }),
    keeper("race", { minAvailable: 3, maxAvailable: 3 }),
  ]);
  t.same([a.failed, b.failed], [0, 0]);
  const race = ofPool(await volumes(), "race");
  t.same(perZone(race), { [zoneA]: 3, [zoneB]: 3, [zoneC]: 3 }, "exactly the target in each zone");
  t.equal(race.length, 9, "nine volumes, though both keepers planned nine");
  const creates = lab.ec2.requests
    .records()
    .slice(before)
    .filter((r) => r.action === "CreateVolume").length;
  t.ok(
    creates > 9,
    `the keepers sent ${creates} CreateVolume for 9 volumes: the slots' tokens made one volume per slot`,
  );

  await poolSnapshot("capped");
  const runs = await Promise.all(
    [1, 2, 3].map(() => keeper("capped", { minAvailable: 3, maxAvailable: 3, maxVolumes: 5 })),
  );
  t.same(
    runs.map((r) => r.failed),
    [0, 0, 0],
  );
  const capped = ofPool(await volumes(), "capped");
  t.equal(capped.length, 5, "three keepers at once: exactly the cap of 5 volumes");
  t.same(perZone(capped), { [zoneA]: 2, [zoneB]: 2, [zoneC]: 1 }, "spread over the zones, the emptiest first");
});

t.test("trims surplus oldest snapshot first, then oldest volume; never in-use, kept or foreign volumes", async (t) => {
  const old = await poolSnapshot("trim");
  const managed = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "trim" };
  const current = await createRaw(zoneA, managed, await poolSnapshot("trim"));
  await allAvailable();
  const oldest = await createRaw(zoneA, managed, old);
  await allAvailable();
  const older = await createRaw(zoneA, managed, old);
  const kept = await createRaw(zoneA, { ...managed, [VolumeTag.keep]: "true" }, old);
  const inUse = await createRaw(zoneA, managed, old);
  const foreign = await createRaw(zoneA, { [VolumeTag.kind]: "pool", [VolumeTag.pool]: "trim" }, old);
  await allAvailable();
  await ec2.send(
    new AttachVolumeCommand({ VolumeId: inUse, InstanceId: host.instance.instanceId, Device: "/dev/sdi" }),
  );
  const only = { zones: [zoneA], minAvailable: 0 };

  const dry = await keeper("trim", { ...only, maxAvailable: 3 }, true);
  t.same(
    dry.plan.steps.filter((s) => s.step === "trim").map((s) => "volumeId" in s && s.volumeId),
    [oldest],
    "4 in stock, 3 allowed: the oldest volume of the oldest snapshot",
  );
  const first = await keeper("trim", { ...only, maxAvailable: 3 });
  t.same(
    first.results.filter((r) => r.done === "deleted").map((r) => r.volumeId),
    [oldest],
  );
  const second = await keeper("trim", { ...only, maxAvailable: 2 });
  t.same(
    second.results.filter((r) => r.done === "deleted").map((r) => r.volumeId),
    [older],
    "then the next of the old snapshot, though the current one's volume was made first",
  );
  const third = await keeper("trim", { ...only, maxAvailable: 0 });
  t.same(
    third.results.filter((r) => r.done === "deleted").map((r) => r.volumeId),
    [current],
    "down to none: the kept volume stays",
  );

  const left = new Map((await volumes()).map((v) => [v.volumeId, v]));
  for (const id of [kept, inUse, foreign])
    t.ok(left.has(id) && left.get(id)!.state !== "deleting", `${id} is still there`);
  t.equal(left.get(inUse)?.attached, host.instance.instanceId, "the in-use volume stays attached");
});

t.test(
  "volumes as configured: encrypted with the KMS key, gp3 IOPS and throughput, the operator's tags; pool prices them",
  async (t) => {
    // 8 GiB: gp3 takes at most 500 IOPS per GiB, so 4000 IOPS need 8.
    const snapshot = await poolSnapshot("conf", 8);
    const keyId = "1234abcd-12ab-34cd-56ef-1234567890ab";
    const configured = join(dirname(config), "volumes.json");
    const json = JSON.parse(await readFile(config, "utf8")) as Record<string, unknown>;
    await writeFile(
      configured,
      JSON.stringify({
        ...json,
        pool: "conf",
        keeper: {
          zones: [zoneA],
          minAvailable: 1,
          maxAvailable: 1,
          maxVolumes: 2,
          maxGiB: 100,
          initializationRateMiBps: null,
        },
        volumes: {
          encrypted: true,
          kmsKeyId: keyId,
          iops: 4000,
          throughputMiBps: 250,
          tags: ["CostCenter=42", "Owner=platform team"],
        },
      }),
    );
    const fill = await cli(configured, ["--json"]);
    t.equal(fill.exitCode, 0, fill.stderr);
    const made =
      (await ec2.send(new DescribeVolumesCommand({ Filters: [{ Name: "tag:ebs-cache:pool", Values: ["conf"] }] })))
        .Volumes ?? [];
    t.equal(made.length, 1, "one volume made by pool fill");
    const v = made[0]!;
    t.equal(v.SnapshotId, snapshot);
    t.equal(v.Encrypted, true, "encrypted");
    t.match(v.KmsKeyId, new RegExp(`:key/${keyId}$`), "with the configured key");
    t.same([v.VolumeType, v.Iops, v.Throughput], ["gp3", 4000, 250], "the configured IOPS and throughput");
    const tags = Object.fromEntries((v.Tags ?? []).map((x) => [x.Key!, x.Value!]));
    t.match(
      tags,
      { CostCenter: "42", Owner: "platform team", [VolumeTag.managed]: "true", [VolumeTag.pool]: "conf" },
      "the operator's tags beside the agent's",
    );

    const view = await run(process.execPath, [CLI, "pool", "--json", "--config", configured], {
      check: false,
      env: CLI_ENV,
    });
    t.equal(view.exitCode, 0, view.stderr);
    const report = JSON.parse(view.stdout) as {
      volumes: Array<{ volumeId: string; iops: number | null; throughputMiBps: number | null; monthlyUsd: number }>;
    };
    // 8 GiB × 0.08 + (4000 − 3000) IOPS × 0.005 + (250 − 125) MiB/s × 0.04 (the default prices).
    t.match(
      report.volumes.find((r) => r.volumeId === v.VolumeId),
      { iops: 4000, throughputMiBps: 250, monthlyUsd: 10.64 },
      "pool prices the provisioned IOPS and throughput",
    );

    const tooMany = join(dirname(config), "volumes-bad.json");
    await writeFile(
      tooMany,
      JSON.stringify({ ...json, pool: "conf", volumes: { kmsKeyId: keyId, tags: ["aws:x=1"] } }),
    );
    const refused = await cli(tooMany, ["--json"]);
    t.not(refused.exitCode, 0, "a bad volumes config is refused before anything runs");
    t.match(refused.stderr, /volumes\.kmsKeyId: set, but volumes\.encrypted is false/);
    t.match(refused.stderr, /volumes\.tags\[0\]: the key of "aws:x=1" starts with aws:/);
  },
);

t.test(
  "DescribeVolumeStatus failing costs only the initialized tags: the same run still trims and creates, the next " +
    "one tags",
  async (t) => {
    const snapshotId = await poolSnapshot("status");
    const managed = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "status" };
    const made: string[] = [];
    for (let i = 0; i < 4; i++) made.push(await createRaw(zoneA, managed, snapshotId));
    await allAvailable();
    const over = { zones: [zoneA, zoneB], minAvailable: 1, maxAvailable: 3 };

    // Every DescribeVolumeStatus throttled, past the client's retries: EC2 answers none of them.
    lab.ec2.setFaults({ actions: { DescribeVolumeStatus: { throttleRate: 1 } } });
    const failing = await keeper("status", over).finally(() => lab.ec2.setFaults({}));
    t.same(
      failing.unread.map((u) => u.volumeId).sort(),
      [...made].sort(),
      "each volume's status read failed, and is reported",
    );
    t.ok(
      failing.unread.every((u) => u.zone === zoneA && /RequestLimitExceeded|limit/i.test(u.error)),
      "with its zone and EC2's error",
      { unread: failing.unread },
    );
    t.equal(failing.failed, 4, "the run counts them as failures (exit 1 for the timer)");
    t.same(
      failing.results.filter((r) => r.step === "tag-initialized"),
      [],
      "nothing tagged initialized",
    );
    t.equal(
      failing.results.filter((r) => r.step === "trim" && r.done === "deleted").length,
      1,
      "4 in zone a, 3 allowed: one trimmed all the same",
    );
    t.same(
      failing.results.filter((r) => r.done === "created").map((r) => r.zone),
      [zoneB],
      "and zone b gets its volume",
    );
    t.ok(
      log.lines.some((line) => /^<4>keeper\.status-unread: could not read the volume's initialization/.test(line)),
      "a warning per volume",
    );

    const next = await keeper("status", over);
    t.same(next.unread, [], "EC2 answers again");
    const left = ofPool(await volumes(), "status").filter((v) => v.state === "available");
    t.equal(
      next.results.filter((r) => r.done === "tagged").length,
      left.length,
      "the next run tags every volume it could not read",
    );
    t.ok(
      left.every((v) => /^\d{4}-/.test(v.tags[VolumeTag.initialized] ?? "")),
      "every available volume tagged ebs-cache:initialized",
    );
  },
);
