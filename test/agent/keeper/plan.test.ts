/** The keeper's planner: pure, tested with plain objects. */
import t from "tap";
import { keeperFacts, type KeeperReport } from "../../../src/agent/keeper/run.ts";
import { readInitialization } from "../../../src/agent/keeper/observe.ts";
import {
  planKeeper,
  slotToken,
  type KeeperObservation,
  type KeeperSettings,
  type VolumeShape,
} from "../../../src/agent/keeper/plan.ts";
import type { SnapshotInfo, VolumeInfo } from "../../../src/agent/ports.ts";
import { VolumeTag } from "../../../src/tags.ts";

const settings: KeeperSettings = {
  pool: "p1",
  imageSet: null,
  volumeType: "gp3",
  zones: ["eu-west-1a", "eu-west-1b"],
  minAvailable: 2,
  maxAvailable: 3,
  maxVolumes: 10,
  maxGiB: 1000,
  initializationRateMiBps: 200,
  quarantineHours: 6,
};
const now = new Date("2026-06-01T12:00:00Z");
const snapshot: SnapshotInfo = {
  snapshotId: "snap-new",
  state: "completed",
  volumeSizeGiB: 50,
  startTime: new Date("2026-05-01T00:00:00Z"),
  tags: { [VolumeTag.imageSet]: "s1", [VolumeTag.images]: "a:1" },
};
const poolTags = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "p1" };

function volume(id: string, zone: string, over: Partial<VolumeInfo> = {}): VolumeInfo {
  return {
    volumeId: id,
    availabilityZone: zone,
    state: "available",
    sizeGiB: 50,
    snapshotId: "snap-new",
    tags: { ...poolTags },
    ...over,
  };
}
const observed = (volumes: VolumeInfo[], over: Partial<KeeperObservation> = {}): KeeperObservation => ({
  now,
  volumes,
  snapshot,
  snapshots: [{ ...snapshot, snapshotId: "snap-old", startTime: new Date("2026-01-01T00:00:00Z") }, snapshot],
  initialization: {},
  ...over,
});
const creates = (plan: ReturnType<typeof planKeeper>) => plan.steps.filter((s) => s.step === "create");

t.test("empty pool: minAvailable per zone, the emptiest zone first, tagged like a pool volume", async (t) => {
  const plan = planKeeper(settings, observed([]));
  t.same(
    creates(plan).map((s) => s.zone),
    ["eu-west-1a", "eu-west-1b", "eu-west-1a", "eu-west-1b"],
  );
  const first = creates(plan)[0]!;
  t.same([first.snapshotId, first.sizeGiB, first.initializationRateMiBps, first.slot], ["snap-new", 50, 200, 0]);
  t.same(first.tags, { ...poolTags, [VolumeTag.imageSet]: "s1", [VolumeTag.images]: "a:1" });
  t.ok(first.clientToken.length <= 64 && /^[\x20-\x7e]+$/.test(first.clientToken), "a token EC2 accepts");
  t.same(JSON.parse(JSON.stringify(plan)), plan, "serializable (printed by --dry-run)");
});

t.test(
  "a volume on its way is neither stock nor trimmed: a release between detach and tags, a boot's new volume",
  async (t) => {
    const zone = "eu-west-1a";
    const claim = (by: string, at: string) => ({ ...poolTags, [VolumeTag.claimedBy]: by, [VolumeTag.claimedAt]: at });
    const plan = planKeeper(
      { ...settings, zones: [zone], minAvailable: 1, maxAvailable: 1 },
      observed([
        volume("vol-releasing", zone, { tags: claim("i-1", "2026-06-01T11:58:00Z") }),
        volume("vol-booting", zone, { state: "creating", tags: claim("i-2", "2026-06-01T11:59:00Z") }),
        volume("vol-free-1", zone),
        volume("vol-free-2", zone),
        volume("vol-abandoned", zone, { tags: claim("i-dead", "2026-06-01T09:00:00Z") }),
      ]),
    );
    const trimmed = plan.steps.filter((s) => s.step === "trim").map((s) => s.volumeId);
    t.notOk(trimmed.includes("vol-releasing"), "never trimmed under its release");
    t.notOk(trimmed.includes("vol-booting"), "never trimmed under the boot that made it");
    t.equal(plan.zones[0]!.available, 3, "the free and the abandoned volumes are stock, the ones on their way are not");
    t.equal(plan.zones[0]!.creating, 0, "a boot's volume being created is not stock on its way");
    t.equal(trimmed.length, 2, "surplus over maxAvailable 1 trimmed from the stock only");
  },
);

t.test(
  "what counts as stock: creating yes; attached, quarantined, other image sets, foreign and deleting volumes no",
  async (t) => {
    const zone = "eu-west-1a";
    const plan = planKeeper(
      { ...settings, zones: [zone], imageSet: "s1" },
      observed([
        volume("vol-creating", zone, { state: "creating", tags: { ...poolTags, [VolumeTag.imageSet]: "s1" } }),
        volume("vol-attached", zone, {
          state: "in-use",
          attachment: { instanceId: "i-1", device: "/dev/sdf", state: "attached" },
          tags: { ...poolTags, [VolumeTag.imageSet]: "s1" },
        }),
        volume("vol-quarantined", zone, {
          tags: {
            ...poolTags,
            [VolumeTag.imageSet]: "s1",
            [VolumeTag.lastError]: "x",
            [VolumeTag.lastErrorAt]: "2026-06-01T11:00:00Z",
          },
        }),
        volume("vol-other-set", zone, { tags: { ...poolTags, [VolumeTag.imageSet]: "s0" } }),
        volume("vol-foreign", zone, {
          tags: { [VolumeTag.kind]: "pool", [VolumeTag.pool]: "p1", [VolumeTag.imageSet]: "s1" },
        }),
        volume("vol-deleting", zone, { state: "deleting", tags: { ...poolTags, [VolumeTag.imageSet]: "s1" } }),
      ]),
    );
    t.same(plan.zones[0], {
      zone,
      available: 0,
      superseded: 0,
      creating: 1,
      total: 4,
      heldByStopped: 0,
      oldestStoppedDays: null,
      create: 1,
      trim: 0,
    });
    t.same(
      plan.totals,
      { volumes: 4, gib: 200, maxVolumes: 10, maxGiB: 1000 },
      "every live managed volume of the pool counts toward the caps; foreign and deleting ones do not",
    );
  },
);

t.test("the caps: volumes and GiB of the whole pool", async (t) => {
  const inUse = (id: string) =>
    volume(id, "eu-west-1c", {
      state: "in-use",
      attachment: { instanceId: "i-1", device: "/dev/sdf", state: "attached" },
    });
  const byCount = planKeeper({ ...settings, maxVolumes: 5 }, observed([inUse("v1"), inUse("v2")]));
  t.equal(creates(byCount).length, 3, "5 - 2 in use elsewhere");
  t.match(byCount.zones.find((z) => z.zone === "eu-west-1b")?.short, /cap \(5 volumes/);
  const byGiB = planKeeper({ ...settings, maxGiB: 249 }, observed([inUse("v1"), inUse("v2")]));
  t.equal(creates(byGiB).length, 2, "100 GiB used, 149 left: two volumes of 50 GiB");
  t.same(
    creates(planKeeper(settings, observed([], { snapshot: undefined }))),
    [],
    "no snapshot: nothing to create from",
  );
  t.same(
    planKeeper(settings, observed([], { snapshot: undefined })).zones[0]?.short,
    "the pool has no completed snapshot",
  );
});

t.test("surplus: oldest generation first, then oldest volume; never kept, quarantined or attached", async (t) => {
  const zone = "eu-west-1a";
  const at = (iso: string) => new Date(iso);
  const plan = planKeeper(
    { ...settings, zones: [zone], minAvailable: 0, maxAvailable: 1 },
    observed([
      volume("vol-new-early", zone, { createTime: at("2026-05-02T00:00:00Z") }),
      volume("vol-old-late", zone, { snapshotId: "snap-old", createTime: at("2026-05-30T00:00:00Z") }),
      volume("vol-old-early", zone, { snapshotId: "snap-old", createTime: at("2026-05-03T00:00:00Z") }),
      volume("vol-kept", zone, {
        snapshotId: "snap-old",
        createTime: at("2026-01-02T00:00:00Z"),
        tags: { ...poolTags, [VolumeTag.keep]: "true" },
      }),
      volume("vol-quarantined", zone, {
        snapshotId: "snap-old",
        tags: { ...poolTags, [VolumeTag.lastError]: "x", [VolumeTag.lastErrorAt]: "2026-06-01T11:00:00Z" },
      }),
      volume("vol-new-late", zone, { createTime: at("2026-05-31T00:00:00Z") }),
    ]),
  );
  t.same(
    plan.steps.filter((s) => s.step === "trim").map((s) => "volumeId" in s && s.volumeId),
    ["vol-old-early", "vol-old-late", "vol-new-early"],
    "2 current + 3 superseded (the kept one counts), 1 allowed: the newest current one stays, the kept one is " +
      "never trimmed",
  );
  t.same(plan.zones[0], {
    zone,
    available: 2,
    superseded: 3,
    creating: 0,
    total: 6,
    heldByStopped: 0,
    oldestStoppedDays: null,
    create: 0,
    trim: 3,
  });
});

const built = (iso: string) => ({ ...poolTags, [VolumeTag.builtAt]: iso });
const generations = {
  snapshot: {
    ...snapshot,
    snapshotId: "snap-g3",
    startTime: new Date("2026-05-01T00:00:00Z"),
    tags: { ...snapshot.tags, [VolumeTag.builtAt]: "2026-04-30T00:00:00Z" },
  },
  snapshots: [
    {
      ...snapshot,
      snapshotId: "snap-g1",
      startTime: new Date("2026-03-01T00:00:00Z"),
      tags: { ...snapshot.tags, [VolumeTag.builtAt]: "2026-02-28T00:00:00Z" },
    },
    {
      ...snapshot,
      snapshotId: "snap-g3",
      startTime: new Date("2026-05-01T00:00:00Z"),
      tags: { ...snapshot.tags, [VolumeTag.builtAt]: "2026-04-30T00:00:00Z" },
    },
    // An old image set snapshotted again later: its start time is newest, its build time is not.
    {
      ...snapshot,
      snapshotId: "snap-g2-again",
      startTime: new Date("2026-05-20T00:00:00Z"),
      tags: { ...snapshot.tags, [VolumeTag.builtAt]: "2026-03-31T00:00:00Z" },
    },
  ],
};

t.test("generations: only the current one is stock; new volumes come from its snapshot", async (t) => {
  const zone = "eu-west-1a";
  const plan = planKeeper(
    { ...settings, zones: [zone] },
    observed(
      [
        volume("vol-g1", zone, { snapshotId: "snap-g1", tags: { ...poolTags } }),
        volume("vol-g2", zone, { snapshotId: "snap-g2-again", tags: built("2026-03-31T00:00:00Z") }),
        volume("vol-unknown", zone, { snapshotId: "snap-deleted", tags: { ...poolTags } }),
        volume("vol-g3", zone, { snapshotId: "snap-g3", tags: built("2026-04-30T00:00:00Z") }),
      ],
      generations,
    ),
  );
  t.same(
    plan.zones[0],
    {
      zone,
      available: 1,
      superseded: 3,
      creating: 0,
      total: 4,
      heldByStopped: 0,
      oldestStoppedDays: null,
      create: 1,
      trim: 0,
    },
    "3 superseded volumes do not make up the 2 current ones wanted",
  );
  t.equal(plan.generation, "s1@2026-04-30T00:00:00.000Z");
  const create = creates(plan)[0]!;
  t.same(
    [create.snapshotId, create.tags[VolumeTag.builtAt]],
    ["snap-g3", "2026-04-30T00:00:00Z"],
    "from the current generation's snapshot, its built-at copied",
  );
  t.same(
    plan.steps.filter((s) => s.step === "trim"),
    [],
    "below minAvailable of the current generation: the superseded ones stay (a boot gets them warm)",
  );
});

t.test(
  "generations: superseded trimmed first, oldest generation first, once the current stock is at minAvailable",
  async (t) => {
    const zone = "eu-west-1a";
    const trims = (volumes: VolumeInfo[]) =>
      planKeeper({ ...settings, zones: [zone] }, observed(volumes, generations))
        .steps.filter((s) => s.step === "trim")
        .map((s) => "volumeId" in s && s.volumeId);
    const current = [1, 2].map((i) =>
      volume(`vol-g3-${i}`, zone, {
        snapshotId: "snap-g3",
        tags: built("2026-04-30T00:00:00Z"),
        createTime: new Date(`2026-05-0${i}T00:00:00Z`),
      }),
    );
    const older = [
      volume("vol-g2", zone, {
        snapshotId: "snap-g2-again",
        tags: built("2026-03-31T00:00:00Z"),
        createTime: new Date("2026-01-01T00:00:00Z"),
      }),
      volume("vol-g1", zone, {
        snapshotId: "snap-g1",
        tags: { ...poolTags },
        createTime: new Date("2026-05-29T00:00:00Z"),
      }),
      volume("vol-unknown", zone, {
        snapshotId: "snap-deleted",
        tags: { ...poolTags },
        createTime: new Date("2026-05-30T00:00:00Z"),
      }),
    ];
    t.same(
      trims([...current, ...older]),
      ["vol-unknown", "vol-g1"],
      "2 current + 3 superseded, at most 3: an unknown generation is the oldest, then g1 (whatever the volumes' " +
        "ages); g2 stays",
    );
    t.same(trims([current[0]!, ...older]), [], "1 current, 2 wanted: nothing superseded goes yet");
    const four = [3, 4, 5, 6].map((i) =>
      volume(`vol-g3-${i}`, zone, {
        snapshotId: "snap-g3",
        tags: built("2026-04-30T00:00:00Z"),
        createTime: new Date(`2026-05-0${i}T00:00:00Z`),
      }),
    );
    t.same(
      trims([...four, ...older]),
      ["vol-unknown", "vol-g1", "vol-g2", "vol-g3-3"],
      "4 current, at most 3: every superseded one goes, then the oldest current one",
    );
  },
);

t.test("volumes EBS reports initialized are tagged; others not", async (t) => {
  const zone = "eu-west-1a";
  const plan = planKeeper(
    { ...settings, zones: [zone] },
    observed(
      [
        volume("vol-done", zone),
        volume("vol-half", zone),
        volume("vol-tagged", zone, { tags: { ...poolTags, [VolumeTag.initialized]: "2026-01-01T00:00:00Z" } }),
      ],
      {
        initialization: {
          "vol-done": { type: "provisioned-rate", progress: 100 },
          "vol-half": { type: "provisioned-rate", progress: 50 },
        },
      },
    ),
  );
  t.same(
    plan.steps.filter((s) => s.step === "tag-initialized").map((s) => "volumeId" in s && s.volumeId),
    ["vol-done"],
  );
});

t.test(
  "a status that cannot be read costs only that volume's initialized tag: the others are read, and the plan " +
    "still creates and trims",
  async (t) => {
    const zone = "eu-west-1a";
    const ids = [
      "vol-done",
      "vol-throttled",
      "vol-half",
      "vol-surplus-1",
      "vol-surplus-2",
      "vol-surplus-3",
      "vol-surplus-4",
    ];
    const asked: string[] = [];
    const read = await readInitialization(ids, async (volumeId) => {
      asked.push(volumeId);
      if (volumeId === "vol-throttled") throw new Error("RequestLimitExceeded: Request limit exceeded.");
      return { type: "provisioned-rate", progress: volumeId === "vol-half" ? 50 : 100 };
    });
    t.same([...asked].sort(), [...ids].sort(), "every volume asked about, the ones after the failure included");
    t.same(
      read.unread,
      { "vol-throttled": "RequestLimitExceeded: Request limit exceeded." },
      "the failure recorded for its volume",
    );
    t.same(
      Object.keys(read.initialization).sort(),
      ids.filter((id) => id !== "vol-throttled").sort(),
      "every other status read",
    );

    const plan = planKeeper(
      { ...settings, zones: [zone, "eu-west-1b"], minAvailable: 1, maxAvailable: 5 },
      observed(
        ids.map((id) => volume(id, zone)),
        read,
      ),
    );
    t.same(
      plan.steps
        .filter((s) => s.step === "tag-initialized")
        .map((s) => "volumeId" in s && s.volumeId)
        .sort(),
      ["vol-done", "vol-surplus-1", "vol-surplus-2", "vol-surplus-3", "vol-surplus-4"],
      "the read ones at 100 % tagged, the unread one not",
    );
    t.same(plan.steps.filter((s) => s.step === "trim").length, 2, "7 in stock, 5 allowed: two trimmed");
    t.same(
      creates(plan).map((s) => s.zone),
      ["eu-west-1b"],
      "and the empty zone gets its volume",
    );
  },
);

t.test(
  "slot tokens: equal for keepers that see the same pool, whenever they ask; different once it changed",
  async (t) => {
    const shape: VolumeShape = {
      snapshotId: "snap-new",
      sizeGiB: 10,
      volumeType: "gp3",
      initializationRateMiBps: null,
      tags: {},
    };
    const base = slotToken("p1", "eu-west-1a", 2, shape, ["vol-b", "vol-a"]);
    t.equal(slotToken("p1", "eu-west-1a", 2, shape, ["vol-a", "vol-b"]), base, "same pool: same token");
    t.not(
      slotToken("p1", "eu-west-1a", 2, shape, ["vol-a", "vol-c"]),
      base,
      "other volumes (one deleted, one made): another token",
    );
    t.not(slotToken("p1", "eu-west-1b", 2, shape, ["vol-a", "vol-b"]), base, "another zone");
    t.not(
      slotToken("p1", "eu-west-1a", 2, { ...shape, snapshotId: "snap-newer" }, ["vol-a", "vol-b"]),
      base,
      "another snapshot",
    );
    // Keepers on either side of an hour, or a day apart (clocks of hosts that differ): the same slot, the same token.
    const seen = [volume("vol-a", "eu-west-1a")];
    const at = (iso: string) => creates(planKeeper(settings, observed(seen, { now: new Date(iso) })));
    const tokens = (plan: ReturnType<typeof at>) => plan.map((s) => s.clientToken);
    t.same(tokens(at("2026-06-01T11:59:59.900Z")), tokens(at("2026-06-01T12:00:00.100Z")), "across the hour");
    t.same(tokens(at("2026-06-01T12:00:00Z")), tokens(at("2026-06-04T12:00:00Z")), "three days later");
    const token = (change: Partial<VolumeShape>) =>
      slotToken("p1", "eu-west-1a", 2, { ...shape, ...change }, ["vol-a", "vol-b"]);
    t.equal(token({ tags: {} }), base, "the same shape: the same token");
    t.not(token({ sizeGiB: 500 }), base, "the pool's size changed (instanceTypePools): another token, another volume");
    t.not(token({ volumeType: "io2" }), base, "another volume type");
    t.not(token({ initializationRateMiBps: 300 }), base, "another initialization rate");
    t.not(token({ tags: { "ebs-cache:image-set": "x" } }), base, "other tags");
    const a = planKeeper(settings, observed([volume("vol-a", "eu-west-1a")]));
    const b = planKeeper(settings, observed([volume("vol-a", "eu-west-1a")]));
    t.same(
      creates(a).map((s) => s.clientToken),
      creates(b).map((s) => s.clientToken),
      "two keepers planning from the same pool: the same tokens",
    );
    const claimed = planKeeper(
      settings,
      observed([
        volume("vol-a", "eu-west-1a", {
          state: "in-use",
          attachment: { instanceId: "i-1", device: "/dev/sdf", state: "attached" },
        }),
      ]),
    );
    t.notSame(creates(claimed)[0]?.clientToken, undefined);
    t.not(
      creates(claimed).find((s) => s.zone === "eu-west-1a")?.slot,
      0,
      "a claimed volume still holds its slot: the top-up takes the next",
    );
  },
);

t.test("the run's facts for the metrics textfile", async (t) => {
  const plan = planKeeper(settings, observed([volume("vol-a", "eu-west-1a")]));
  const outcome: KeeperReport = {
    plan,
    final: plan,
    rounds: 2,
    failed: 2,
    unread: [{ volumeId: "vol-u", zone: "eu-west-1a", error: "throttled" }],
    results: [
      { ...creates(plan)[0]!, done: "created", volumeId: "vol-n" },
      { ...creates(plan)[1]!, done: "failed", error: "x" },
      { step: "trim", volumeId: "vol-t", zone: "eu-west-1a", reason: "r", done: "skipped" },
    ],
  };
  const at = new Date("2026-06-01T12:05:00Z");
  t.same(keeperFacts(outcome, at), {
    actions: [
      { action: "create", pool: "p1", outcome: "done" },
      { action: "create", pool: "p1", outcome: "failed" },
      { action: "tag-initialized", pool: "p1", outcome: "failed" },
    ],
    poolVolumes: { p1: 1 },
    heldByStopped: { p1: { volumes: 0, oldestSeconds: null } },
    failed: 2,
    finishedAt: at,
  });
});

t.test(
  "a pool of instanceTypePools: volumes of its size, the caps counted at it; below the snapshot's, none",
  async (t) => {
    const large = planKeeper({ ...settings, sizeGiB: 500, maxGiB: 1600 }, observed([]));
    t.same(
      creates(large).map((s) => [s.snapshotId, s.sizeGiB]),
      [
        ["snap-new", 500],
        ["snap-new", 500],
        ["snap-new", 500],
      ],
      "500 GiB each, and only three fit in 1600 GiB",
    );
    t.match(large.zones.find((z) => z.create === 1)?.short ?? "", /the pool's cap/);
    t.equal(large.problem, undefined);

    const small = planKeeper({ ...settings, sizeGiB: 20 }, observed([]));
    t.same(creates(small), [], "no volume below the snapshot's size (EC2 would refuse it)");
    t.match(small.problem, /gives pool p1 20 GiB volumes, below its snapshot snap-new's 50 GiB: no volume made/);
    t.match(small.zones[0]?.short, /below its snapshot/);
    t.equal(
      planKeeper({ ...settings, sizeGiB: 50 }, observed([])).problem,
      undefined,
      "the snapshot's own size is fine",
    );
  },
);

t.test("a create's token changes with the pool's size, and only then", async (t) => {
  const pool = (sizeGiB?: number) =>
    creates(planKeeper({ ...settings, maxGiB: 10_000, ...(sizeGiB !== undefined ? { sizeGiB } : {}) }, observed([])));
  const at = (sizeGiB?: number) => pool(sizeGiB).map((s) => [s.zone, s.sizeGiB, s.clientToken]);
  t.ok(pool(500).length > 0 && pool(500).every((s) => s.sizeGiB === 500), "the steps make 500 GiB volumes");
  t.same(at(500), at(500), "the same settings and pool: the same tokens");
  const tokens = new Set([...pool(), ...pool(500), ...pool(600)].map((s) => s.clientToken));
  t.equal(tokens.size, 3 * pool().length, "the snapshot's size, 500 and 600 GiB: no token shared");
});
