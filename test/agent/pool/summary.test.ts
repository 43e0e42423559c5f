/** The pool's summary (src/agent/pool/summary.ts): zones by state and generation, cost, the keeper's target. Pure. */
import { Ajv } from "ajv";
import { readFile } from "node:fs/promises";
import t from "tap";
import { poolReport, poolViewSettingsFrom, type PoolViewSettings } from "../../../src/agent/pool/summary.ts";
import { renderPoolReport } from "../../../src/agent/pool/view.ts";
import type { SnapshotInfo, VolumeInfo } from "../../../src/agent/ports.ts";
import { SnapshotTag, VolumeTag } from "../../../src/tags.ts";

const now = new Date("2026-12-01T12:00:00Z");
const OLD = "2026-11-01T10:00:00.000Z";
const NEW = "2026-11-30T10:00:00.000Z";
const prices = { gibMonthUsd: 0.08, iopsMonthUsd: 0.005, throughputMonthUsd: 0.04, snapshotGibMonthUsd: 0.05 };
const keeper = {
  zones: ["eu-west-1a", "eu-west-1b", "eu-west-1c"],
  minAvailable: 2,
  maxAvailable: 3,
  maxVolumes: 20,
  maxGiB: 500,
};
const settings: PoolViewSettings = { quarantineHours: 6, prices, pool: "p", imageSet: null, keeper };

const snap = (id: string, builtAt: string, state: SnapshotInfo["state"] = "completed"): SnapshotInfo => ({
  snapshotId: id,
  state,
  startTime: new Date(builtAt),
  volumeSizeGiB: 10,
  tags: {
    [VolumeTag.managed]: "true",
    [VolumeTag.kind]: "pool",
    [VolumeTag.pool]: "p",
    [VolumeTag.imageSet]: "set",
    [VolumeTag.builtAt]: builtAt,
  },
});
const snapshots = [
  snap("snap-old", OLD),
  snap("snap-new", NEW),
  snap("snap-pending", "2026-12-01T11:00:00.000Z", "pending"),
];

let n = 0;
function vol(
  zone: string,
  snapshotId: string,
  extra: Partial<VolumeInfo> & { tags?: Record<string, string> } = {},
): VolumeInfo {
  const { tags, ...rest } = extra;
  return {
    volumeId: `vol-${String(++n).padStart(8, "0")}`,
    availabilityZone: zone,
    state: "available",
    sizeGiB: 10,
    snapshotId,
    volumeType: "gp3",
    iops: 3000,
    throughputMiBps: 125,
    // No built-at of their own: the generation comes from the snapshot.
    tags: {
      [VolumeTag.managed]: "true",
      [VolumeTag.kind]: "pool",
      [VolumeTag.pool]: "p",
      [VolumeTag.imageSet]: "set",
      ...tags,
    },
    ...rest,
  };
}
const inUse = {
  state: "in-use" as const,
  attachment: { instanceId: "i-1", device: "/dev/sdf", state: "attached" as const },
};
const volumes = [
  vol("eu-west-1a", "snap-new"),
  vol("eu-west-1a", "snap-new", inUse),
  vol("eu-west-1a", "snap-old"),
  vol("eu-west-1a", "snap-new", { state: "creating" }),
  vol("eu-west-1a", "snap-new", {
    tags: { [VolumeTag.lastError]: "i-9: no device", [VolumeTag.lastErrorAt]: "2026-12-01T11:30:00.000Z" },
  }),
  vol("eu-west-1b", "snap-old", { ...inUse, sizeGiB: 20, iops: 6000, throughputMiBps: 250 }),
  vol("eu-west-1b", "snap-new", { volumeType: "io2", iops: 10000, throughputMiBps: undefined }),
  vol("eu-west-1b", "snap-new", { tags: { [VolumeTag.kind]: "workspace" } }),
  vol("eu-west-1b", "snap-old", { state: "error" }),
];

const report = poolReport({ volumes, snapshots }, settings, now);
const pool = report.pools[0]!;
const zone = (name: string) => pool.zones.find((z) => z.zone === name)!;

t.test("the current generation is the newest completed snapshot's; volumes take their snapshot's", async (t) => {
  t.same(
    pool.currentGeneration,
    { generation: `set@${NEW}`, imageSet: "set", builtAt: NEW },
    "the pending snapshot is not current yet",
  );
  const a = zone("eu-west-1a");
  t.same(
    a.generations.map((g) => [g.kind, g.generation, g.current, g.superseded, g.volumes]),
    [
      ["pool", `set@${NEW}`, true, false, 4],
      ["pool", `set@${OLD}`, false, true, 1],
    ],
    "newest first; the old one is superseded",
  );
  t.same(report.volumes.find((v) => v.volumeId === "vol-00000003")?.superseded, true);
  const tagged = poolReport(
    { volumes: [vol("eu-west-1a", "snap-unknown", { tags: { [VolumeTag.builtAt]: NEW } })], snapshots },
    settings,
    now,
  );
  t.equal(tagged.volumes[0]?.generation, `set@${NEW}`, "a volume's own built-at counts even when its snapshot is gone");
  const orphan = poolReport({ volumes: [vol("eu-west-1a", "snap-gone")], snapshots }, settings, now);
  t.same(
    [orphan.volumes[0]?.generation, orphan.volumes[0]?.superseded],
    ["set@unknown", true],
    "no build time to learn: the oldest of all",
  );
});

t.test("a snapshot tagged unverified: shown as such, never the current generation", async (t) => {
  const NEWER = "2026-12-01T08:00:00.000Z";
  const unread = snap("snap-unread", NEWER);
  unread.tags[SnapshotTag.unverified] = "true";
  const uploading = { ...snap("snap-uploading", "2026-12-01T09:00:00.000Z", "pending") };
  uploading.tags[SnapshotTag.unverified] = "true";
  const marked = poolReport({ volumes, snapshots: [...snapshots, unread, uploading] }, settings, now).pools[0]!;
  t.equal(marked.currentGeneration?.generation, `set@${NEW}`, "the newer, completed one does not count while marked");
  t.same(
    marked.snapshots.unverified,
    [
      { snapshotId: "snap-unread", state: "completed", generation: `set@${NEWER}` },
      { snapshotId: "snap-uploading", state: "pending", generation: "set@2026-12-01T09:00:00.000Z" },
    ],
    "each listed, oldest first, with its state and the generation it would carry",
  );
  t.equal(marked.snapshots.completed, pool.snapshots.completed + 1, "it is counted (and priced) as a snapshot");
  t.same(pool.snapshots.unverified, [], "none without the tag: snapshots made before it are verified ones");
  const text = renderPoolReport(poolReport({ volumes, snapshots: [...snapshots, unread] }, settings, now));
  t.match(
    text,
    /unverified snapshot snap-unread \(completed, generation set@2026-12-01T08:00:00.000Z\): never current/,
  );
});

t.test("zones count volumes by state, quarantined apart", async (t) => {
  t.same(zone("eu-west-1a").states, { available: 2, inUse: 1, creating: 1, other: 0, quarantined: 1 });
  t.same(zone("eu-west-1b").states, { available: 2, inUse: 1, creating: 0, other: 1, quarantined: 0 });
  t.same([zone("eu-west-1a").volumes, zone("eu-west-1a").gib, zone("eu-west-1b").gib], [5, 50, 50]);
  t.same(
    zone("eu-west-1b").generations.map((g) => g.kind),
    ["pool", "pool", "workspace"],
    "workspace volumes are a group of their own",
  );
});

t.test("costs per zone, per generation and in all, snapshots apart", async (t) => {
  t.equal(zone("eu-west-1a").monthlyUsd, 4, "5 x 10 GiB at 0.08");
  // 20 GiB with 3000 extra IOPS and 125 extra MiB/s: 1.60 + 15 + 5; three of 10 GiB: 2.40 (io2 by its GiB only).
  t.equal(zone("eu-west-1b").monthlyUsd, 24);
  t.equal(zone("eu-west-1b").generations.find((g) => g.superseded)?.monthlyUsd, 22.4);
  t.same(
    pool.snapshots,
    { completed: 2, gib: 20, monthlyUsd: 1, unverified: [] },
    "completed snapshots only, at their volume size",
  );
  t.same([pool.volumesMonthlyUsd, pool.snapshotsMonthlyUsd, pool.monthlyUsd], [28, 1, 29]);
  t.same(report.total, {
    volumes: 9,
    gib: 100,
    snapshots: 2,
    snapshotGiB: 20,
    volumesMonthlyUsd: 28,
    snapshotsMonthlyUsd: 1,
    monthlyUsd: 29,
  });
  t.same(report.notes, [
    "vol-00000007: io2: priced per GiB at cost.gibMonthUsd only; io2's own GiB price and provisioned IOPS not counted",
  ]);
});

t.test("the keeper's target per zone, and zones it stocks that have no volume yet", async (t) => {
  t.same(
    zone("eu-west-1a").keeper,
    { minAvailable: 2, maxAvailable: 3, stock: 3, belowMin: 0, aboveMax: 0 },
    "2 available + 1 creating; the quarantined one is no stock",
  );
  t.same(
    zone("eu-west-1b").keeper,
    { minAvailable: 2, maxAvailable: 3, stock: 1, belowMin: 1, aboveMax: 0 },
    "the workspace volume is no stock",
  );
  t.match(zone("eu-west-1c"), { volumes: 0, monthlyUsd: 0, keeper: { stock: 0, belowMin: 2 } });
  t.same(
    pool.keeper,
    { ...keeper, sizeGiB: null, volumes: 8, gib: 90 },
    "the caps beside what they count: pool volumes, every state",
  );
  const surplus = poolReport(
    { volumes: Array.from({ length: 5 }, () => vol("eu-west-1a", "snap-new")), snapshots },
    settings,
    now,
  );
  t.match(surplus.pools[0]!.zones[0]!.keeper, { stock: 5, aboveMax: 2 });
  const without = poolReport({ volumes, snapshots }, { ...settings, keeper: null }, now);
  t.ok(
    without.pools[0]!.zones.every((z) => z.keeper === null) && without.pools[0]!.keeper === null,
    "no keeper configured: no target",
  );
  t.notOk(
    without.pools[0]!.zones.some((z) => z.zone === "eu-west-1c"),
    "and no empty zone",
  );
  const other = poolReport({ volumes, snapshots }, { ...settings, pool: "q" }, now);
  t.same(
    other.pools.map((p) => [p.pool, p.keeper !== null]),
    [
      ["p", false],
      ["q", true],
    ],
    "the keeper's target belongs to the configured pool only",
  );
});

t.test("the configured image set picks the current generation", async (t) => {
  const other = {
    ...snap("snap-other", "2026-12-01T09:00:00.000Z"),
    tags: { ...snap("x", NEW).tags, [VolumeTag.imageSet]: "other", [VolumeTag.builtAt]: "2026-12-01T09:00:00.000Z" },
  };
  t.equal(
    poolReport({ volumes, snapshots: [...snapshots, other] }, settings, now).pools[0]?.currentGeneration?.generation,
    "other@2026-12-01T09:00:00.000Z",
  );
  t.equal(
    poolReport({ volumes, snapshots: [...snapshots, other] }, { ...settings, imageSet: "set" }, now).pools[0]
      ?.currentGeneration?.generation,
    `set@${NEW}`,
  );
});

t.test("settings from the configuration: no keeper zones, no keeper target", async (t) => {
  const config = {
    pool: "p",
    imageSet: null,
    claim: { quarantineHours: 6 },
    cost: prices,
    keeper: { ...keeper, initializationRateMiBps: 100 },
  };
  const stocked = { ...settings, stocked: [{ pool: "p", sizeGiB: null }] };
  t.same(poolViewSettingsFrom(config), stocked);
  t.equal(poolViewSettingsFrom({ ...config, keeper: { ...config.keeper, zones: [] } }).keeper, null);
  t.same(poolViewSettingsFrom(config, "p"), stocked, "pool --pool <the configured pool>: the keeper's target shows");
  const elsewhere = poolViewSettingsFrom(config, "q");
  t.equal(elsewhere.keeper, null, "pool --pool <another pool>: no target");
  t.same(
    poolReport({ volumes: [], snapshots: [] }, elsewhere, now).pools,
    [],
    "so the configured pool does not show up in another's listing",
  );
});

t.test("every pool the keeper stocks shows its size and target: pool and each pool of instanceTypePools", async (t) => {
  const config = {
    pool: "p",
    imageSet: "set",
    claim: { quarantineHours: 6 },
    cost: prices,
    keeper: { ...keeper, zones: ["eu-west-1a"], initializationRateMiBps: null },
    instanceTypePools: ["g4dn.*=gpu:500", "g5.*=gpu:500", "m5.*=small:100"],
  };
  const gpuSnapshot = { ...snap("snap-gpu", NEW), tags: { ...snap("x", NEW).tags, [VolumeTag.pool]: "gpu" } };
  const gpuVolume = vol("eu-west-1a", "snap-gpu", { sizeGiB: 500, tags: { [VolumeTag.pool]: "gpu" } });
  const all = poolReport(
    { volumes: [...volumes, gpuVolume], snapshots: [...snapshots, gpuSnapshot] },
    poolViewSettingsFrom(config),
    now,
  );
  t.same(
    all.pools.map((p) => [p.pool, p.keeper?.sizeGiB, p.keeper?.volumes, p.zones.find((z) => z.keeper)?.keeper]),
    [
      ["gpu", 500, 1, { minAvailable: 2, maxAvailable: 3, stock: 1, belowMin: 1, aboveMax: 0 }],
      ["p", null, 8, { minAvailable: 2, maxAvailable: 3, stock: 3, belowMin: 0, aboveMax: 0 }],
      ["small", 100, 0, { minAvailable: 2, maxAvailable: 3, stock: 0, belowMin: 2, aboveMax: 0 }],
    ],
    "gpu with its volume, p at its snapshot's size, small with nothing yet: each its size and target",
  );
  t.equal(all.pools[0]?.currentGeneration?.generation, `set@${NEW}`, "a rule's pool: of the configured image set");
  const text = renderPoolReport(all);
  t.match(text, /^pool gpu:[^]*keeper: 2\.\.3 available in each of eu-west-1a, 500 GiB volumes; caps 20 volumes/m);
  t.match(text, /^pool small:[^]*keeper: 2\.\.3 available in each of eu-west-1a, 100 GiB volumes; caps/m);
  t.match(text, /^pool p:[^]*keeper: 2\.\.3 available in each of eu-west-1a, volumes of the snapshot's size/m);
  t.same(
    poolReport({ volumes: [], snapshots: [] }, poolViewSettingsFrom(config, "small"), now).pools.map((p) => [
      p.pool,
      p.keeper?.sizeGiB,
    ]),
    [["small", 100]],
    "pool --pool small: that pool alone, with its target",
  );
  t.same(
    poolReport({ volumes: [], snapshots: [] }, poolViewSettingsFrom(config, "q"), now).pools,
    [],
    "pool --pool <a pool nobody stocks>: no target",
  );
  const schema = JSON.parse(
    await readFile(new URL("../../../schema/pool.schema.json", import.meta.url), "utf8"),
  ) as object;
  const validate = new Ajv({ allErrors: true, strict: true }).compile(schema);
  t.ok(validate(JSON.parse(JSON.stringify(all))), `valid: ${JSON.stringify(validate.errors)}`);
});

t.test("the rendering shows each zone's groups, the keeper and the money", async (t) => {
  const text = renderPoolReport(report);
  t.match(
    text,
    new RegExp(
      String.raw`^pool p: current generation set@2026-11-30T10:00:00\.000Z; 9 ` +
        String.raw`volumes, 100 GiB, USD 28\.00\/month \+ 2 snapshots \(20 GiB ` +
        String.raw`at most\) USD 1\.00\/month = USD 29\.00\/month$`,
      "m",
    ),
  );
  t.match(
    text,
    /^ {2}ZONE\s+KIND\s+GENERATION\s+AVAILABLE\s+IN-USE\s+CREATING\s+OTHER\s+QUARANTINED\s+GiB\s+USD\/MONTH\s+KEEPER$/m,
  );
  t.match(text, /eu-west-1a\s+pool\s+set@2026-11-01T10:00:00\.000Z \(superseded\)\s+1\s+0\s+0\s+0\s+0\s+10\s+0\.80/);
  t.match(text, /eu-west-1b\s+all\s+2\s+1\s+0\s+1\s+0\s+50\s+24\.00\s+2\.\.3 available: has 1, 1 short/);
  t.match(text, /eu-west-1c\s+all\s+0\s+0\s+0\s+0\s+0\s+0\s+0\.00\s+2\.\.3 available: has 0, 2 short/);
  t.match(
    text,
    new RegExp(
      String.raw`keeper: 2\.\.3 available in each of eu-west-1a, eu-west-1b, eu-west-1c, ` +
        String.raw`volumes of the snapshot's size; caps 20 volumes / 500 GiB, the pool has 8 / 90`,
    ),
  );
  t.match(
    text,
    new RegExp(
      String.raw`^total: 9 volumes, 100 GiB, USD 28\.00\/month; 2 snapshots, ` +
        String.raw`20 GiB at most, USD 1\.00\/month; USD 29\.00\/month in all$`,
      "m",
    ),
  );
  t.match(text, /^note: vol-00000007: io2/m);
  t.match(text, /^VOLUME\s+KIND\s+POOL\s+ZONE\s+STATE/m);
});

t.test("--json is valid against schema/pool.schema.json", async (t) => {
  const schema = JSON.parse(
    await readFile(new URL("../../../schema/pool.schema.json", import.meta.url), "utf8"),
  ) as object;
  const validate = new Ajv({ allErrors: true, strict: true }).compile(schema);
  const check = (doc: unknown, what: string) =>
    t.ok(
      validate(JSON.parse(JSON.stringify(doc))),
      `${what}${validate.errors ? `: ${JSON.stringify(validate.errors)}` : ""}`,
    );
  check(report, "a pool with a keeper, two generations, a quarantined and an io2 volume");
  check(poolReport({ volumes: [], snapshots: [] }, { ...settings, keeper: null }, now), "nothing at all");
  check(
    poolReport(
      { volumes: [vol("eu-west-1a", "snap-gone", { tags: { [VolumeTag.pool]: "" } })], snapshots: [] },
      settings,
      now,
    ),
    "a volume of no known generation",
  );
  t.notOk(validate({ ...JSON.parse(JSON.stringify(report)), extra: 1 }), "the schema would catch an unknown key");
});
