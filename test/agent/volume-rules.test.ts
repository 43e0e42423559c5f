/**
 * The shared volume rules: pure, tested with plain objects; and boot, gc, the pool view and the keeper agreeing on
 * them.
 */
import t from "tap";
import { selectSource } from "../../src/agent/boot/plan.ts";
import { judgeVolume } from "../../src/agent/gc/plan.ts";
import { planKeeper, type KeeperSettings } from "../../src/agent/keeper/plan.ts";
import { poolReport } from "../../src/agent/pool/summary.ts";
import type { SnapshotInfo, VolumeInfo } from "../../src/agent/ports.ts";
import {
  CANDIDATE_ORDER,
  candidateOrder,
  hostStoreOr,
  isClaimable,
  isInTransit,
  isQuarantined,
  matchesSelector,
  orderCandidates,
  parseTimestamp,
  poolSelector,
  tagTime,
  volumeGeneration,
  type CandidateFacts,
} from "../../src/agent/volume-rules.ts";
import { VolumeTag } from "../../src/tags.ts";
import { observed, settings } from "../fixtures/builders/boot-plan.ts";

const now = new Date("2026-06-01T12:00:00Z");
const hoursAgo = (h: number) => new Date(now.getTime() - h * 3600_000).toISOString();
const minutesAgo = (m: number) => new Date(now.getTime() - m * 60_000).toISOString();
const poolTags = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "p1" };
const graphdriver = { store: "graphdriver" as const, engineVersion: "28.5.2" };

function volume(id: string, tags: Record<string, string> = {}, over: Partial<VolumeInfo> = {}): VolumeInfo {
  return {
    volumeId: id,
    availabilityZone: "eu-west-1a",
    state: "available",
    sizeGiB: 50,
    tags: { ...poolTags, ...tags },
    ...over,
  };
}

t.test(
  "the candidate order reads as its list: generation, initialized, engine, then the instance's own order",
  async (t) => {
    t.same(
      CANDIDATE_ORDER.map((c) => c.name),
      ["newest-generation", "initialized-first", "same-engine-first", "rendezvous"],
    );
    const facts = (over: Partial<CandidateFacts>): CandidateFacts => ({
      volumeId: "vol-x",
      generationRank: 0,
      initialized: false,
      sameEngine: false,
      score: "5",
      ...over,
    });
    const [generation, initialized, engine, rendezvous] = CANDIDATE_ORDER;
    t.ok(generation!.compare(facts({ generationRank: 0 }), facts({ generationRank: 1 })) < 0, "newer generation first");
    t.ok(initialized!.compare(facts({ initialized: true }), facts({})) < 0, "initialized first");
    t.ok(engine!.compare(facts({ sameEngine: true }), facts({})) < 0, "same engine first");
    t.ok(rendezvous!.compare(facts({ score: "1" }), facts({ score: "2" })) < 0, "lower score first");
    t.equal(rendezvous!.compare(facts({}), facts({})), 0);
  },
);

t.test("candidateOrder: each criterion decides only where those above it tie", async (t) => {
  const current = { [VolumeTag.imageSet]: "s", [VolumeTag.builtAt]: "2026-05-01T00:00:00Z" };
  const older = { [VolumeTag.imageSet]: "s", [VolumeTag.builtAt]: "2026-04-01T00:00:00Z" };
  const init = { [VolumeTag.initialized]: "2026-05-02T00:00:00Z" };
  const same = { [VolumeTag.engineVersion]: "28.1.0" };
  const other = { [VolumeTag.engineVersion]: "20.10.24" };
  const volumes = [
    volume("vol-old-init-same", { ...older, ...init, ...same }),
    volume("vol-cur-cold-same", { ...current, ...same }),
    volume("vol-cur-init-other", { ...current, ...init, ...other }),
    volume("vol-cur-init-same-1", { ...current, ...init, ...same }),
    volume("vol-cur-init-same-2", { ...current, ...init, ...same }),
    volume("vol-none", {}),
  ];
  const { fitting, mismatched } = candidateOrder("i-1", volumes, graphdriver);
  t.same(fitting, [
    ...orderCandidates("i-1", ["vol-cur-init-same-1", "vol-cur-init-same-2"]),
    "vol-cur-init-other",
    "vol-cur-cold-same",
    "vol-old-init-same",
    "vol-none",
  ]);
  t.same(mismatched, []);

  // A malformed built-at is no build time: the volume is of the oldest generation, behind one of an unknown set.
  const malformed = volume("vol-bad", { [VolumeTag.builtAt]: "last tuesday" });
  t.equal(volumeGeneration(malformed).builtAt, null);
  t.same(candidateOrder("i-1", [malformed, volume("vol-cur", current)], graphdriver).fitting, ["vol-cur", "vol-bad"]);

  // Misfits are set apart in the same order, never candidates.
  const containerd = { [VolumeTag.imageStore]: "containerd" };
  const split = candidateOrder(
    "i-1",
    [volume("vol-c-old", { ...older, ...containerd }), volume("vol-c-cur", { ...current, ...containerd })],
    graphdriver,
  );
  t.same(split.fitting, []);
  t.same(
    split.mismatched.map((m) => m.volume),
    ["vol-c-cur", "vol-c-old"],
  );
});

t.test(
  "tag timestamps: the strict reading (gc, generations) and the lenient one (quarantine, on its way)",
  async (t) => {
    t.same(parseTimestamp("2026-06-01T12:00:00Z"), now);
    t.same(parseTimestamp("2026-06-01T12:00Z"), now, "seconds may be left out");
    t.same(parseTimestamp("2026-06-01T14:00:00.000+02:00"), now, "an offset is read");
    for (const text of [
      "",
      "2026-06-01",
      "2026-06-01 12:00:00Z",
      "2026-06-01T12:00:00",
      "2026-13-01T00:00:00Z",
      "soon",
    ])
      t.equal(parseTimestamp(text), undefined, JSON.stringify(text));

    t.equal(tagTime({}, VolumeTag.claimedAt), undefined, "absent");
    t.equal(tagTime({ [VolumeTag.claimedAt]: "soon" }, VolumeTag.claimedAt), undefined, "unreadable");
    t.equal(tagTime({ [VolumeTag.claimedAt]: "2026-06-01T12:00:00Z" }, VolumeTag.claimedAt), now.getTime());
    t.equal(
      tagTime({ [VolumeTag.claimedAt]: "2026-06-01" }, VolumeTag.claimedAt),
      Date.parse("2026-06-01"),
      "a date alone reads leniently, not strictly",
    );
  },
);

t.test("quarantine: a last-error less than the quarantine ago; without a readable time, recent", async (t) => {
  const q = (tags: Record<string, string>, hours = 6) => isQuarantined(volume("vol-q", tags), now, hours);
  t.equal(q({}), false, "no last-error");
  t.equal(q({ [VolumeTag.lastErrorAt]: hoursAgo(1) }), false, "a time without an error is no error");
  t.equal(q({ [VolumeTag.lastError]: "boom", [VolumeTag.lastErrorAt]: hoursAgo(1) }), true, "recent");
  t.equal(q({ [VolumeTag.lastError]: "boom", [VolumeTag.lastErrorAt]: hoursAgo(7) }), false, "older than 6 h");
  t.equal(q({ [VolumeTag.lastError]: "boom", [VolumeTag.lastErrorAt]: hoursAgo(6) }), false, "exactly 6 h: out");
  t.equal(q({ [VolumeTag.lastError]: "boom" }), true, "no time: counts as recent");
  t.equal(q({ [VolumeTag.lastError]: "boom", [VolumeTag.lastErrorAt]: "never" }), true, "unreadable time: recent");
  t.equal(q({ [VolumeTag.lastError]: "" }), true, "an empty error is still an error");
  t.equal(q({ [VolumeTag.lastError]: "boom" }, 0), false, "quarantineHours 0 turns it off");
});

t.test("on its way: another instance's claim younger than 15 minutes, pool volumes only", async (t) => {
  const transit = (tags: Record<string, string>, over: Partial<VolumeInfo> = {}, instanceId?: string) =>
    isInTransit(volume("vol-t", tags, over), now, instanceId);
  const other = { [VolumeTag.claimedBy]: "i-other" };
  t.equal(transit({}), false, "never claimed");
  t.equal(transit({ ...other, [VolumeTag.claimedAt]: minutesAgo(5) }), true, "claimed 5 min ago");
  t.equal(transit({ ...other, [VolumeTag.claimedAt]: minutesAgo(15) }), false, "15 min: an instance that died");
  t.equal(transit({ ...other, [VolumeTag.claimedAt]: minutesAgo(5) }, {}, "i-other"), false, "its own claim");
  t.equal(
    transit({ ...other, [VolumeTag.claimedAt]: minutesAgo(5), [VolumeTag.kind]: "workspace" }),
    false,
    "a workspace volume is never on its way",
  );
  t.equal(
    transit(other, { createTime: new Date(now.getTime() - 60_000) }),
    true,
    "no claimed-at yet (a boot's new volume): its create time",
  );
  t.equal(
    transit({ ...other, [VolumeTag.claimedAt]: "garbage" }, { createTime: new Date(now.getTime() - 60_000) }),
    true,
    "an unreadable claimed-at: its create time",
  );
  t.equal(transit({ ...other, [VolumeTag.claimedAt]: "garbage" }), false, "no time at all: not on its way");
});

t.test("isClaimable: the zone and the instance only when given", async (t) => {
  const at = { now, quarantineHours: 6 };
  t.equal(isClaimable(volume("vol-a"), at), true);
  t.equal(isClaimable(volume("vol-a", {}, { availabilityZone: "eu-west-1b" }), at), true, "no zone: any zone");
  t.equal(
    isClaimable(volume("vol-a", {}, { availabilityZone: "eu-west-1b" }), { ...at, availabilityZone: "eu-west-1a" }),
    false,
  );
  t.equal(isClaimable(volume("vol-a", {}, { state: "creating" }), at), false);
  t.equal(
    isClaimable(volume("vol-a", {}, { attachment: { instanceId: "i-1", device: "/dev/sdf", state: "detaching" } }), at),
    false,
  );
  const claimed = volume("vol-a", { [VolumeTag.claimedBy]: "i-1", [VolumeTag.claimedAt]: minutesAgo(1) });
  t.equal(isClaimable(claimed, at), false, "on its way to some instance");
  t.equal(isClaimable(claimed, { ...at, instanceId: "i-1" }), true, "but not to its own");
});

t.test("the pool selector, and the host store when none was observed", async (t) => {
  t.same(poolSelector({ pool: "p1", imageSet: null }), poolTags);
  t.same(poolSelector({ pool: "p1", imageSet: "s1" }), { ...poolTags, [VolumeTag.imageSet]: "s1" });
  t.equal(matchesSelector({ ...poolTags, other: "x" }, poolSelector({ pool: "p1", imageSet: null })), true);
  t.equal(
    matchesSelector({ ...poolTags, [VolumeTag.pool]: "p2" }, poolSelector({ pool: "p1", imageSet: null })),
    false,
  );
  t.same(hostStoreOr(undefined), { store: "graphdriver" });
  t.same(hostStoreOr({ store: "containerd" }), { store: "containerd" });
});

t.test("boot, gc, the pool view and the keeper agree on quarantine and on a volume on its way", async (t) => {
  const current: SnapshotInfo = {
    snapshotId: "snap-new",
    state: "completed",
    volumeSizeGiB: 50,
    startTime: new Date("2026-05-01T00:00:00Z"),
    tags: { ...poolTags, [VolumeTag.imageSet]: "s", [VolumeTag.builtAt]: "2026-05-01T00:00:00Z" },
  };
  const old = { [VolumeTag.imageSet]: "s", [VolumeTag.builtAt]: "2026-01-01T00:00:00Z" };
  const cases: Array<{ name: string; tags: Record<string, string>; quarantined: boolean; inTransit: boolean }> = [
    { name: "clean", tags: {}, quarantined: false, inTransit: false },
    {
      name: "recent error",
      tags: { [VolumeTag.lastError]: "x", [VolumeTag.lastErrorAt]: hoursAgo(1) },
      quarantined: true,
      inTransit: false,
    },
    {
      name: "old error",
      tags: { [VolumeTag.lastError]: "x", [VolumeTag.lastErrorAt]: hoursAgo(9) },
      quarantined: false,
      inTransit: false,
    },
    {
      name: "error, malformed time",
      tags: { [VolumeTag.lastError]: "x", [VolumeTag.lastErrorAt]: "?" },
      quarantined: true,
      inTransit: false,
    },
    {
      name: "on its way",
      tags: { [VolumeTag.claimedBy]: "i-other", [VolumeTag.claimedAt]: minutesAgo(2) },
      quarantined: false,
      inTransit: true,
    },
  ];
  const keeperSettings: KeeperSettings = {
    pool: "p1",
    imageSet: null,
    volumeType: "gp3",
    zones: ["eu-west-1a"],
    minAvailable: 0,
    maxAvailable: 0,
    maxVolumes: 10,
    maxGiB: 1000,
    initializationRateMiBps: null,
    quarantineHours: 6,
  };
  for (const c of cases) {
    const v = volume("vol-1", { ...old, ...c.tags }, { snapshotId: "snap-new" });
    t.equal(isQuarantined(v, now, 6), c.quarantined, `${c.name}: the rule`);
    t.equal(isInTransit(v, now), c.inTransit, `${c.name}: the rule (on its way)`);
    const claimable = !c.quarantined && !c.inTransit;

    const boot = selectSource({ ...settings, createFromSnapshot: false }, observed({ now, pool: [v] }));
    t.equal(boot.source === "pool", claimable, `${c.name}: boot takes it only when claimable`);

    const view = poolReport(
      { volumes: [v], snapshots: [current] },
      {
        quarantineHours: 6,
        prices: { gibMonthUsd: 0.08, iopsMonthUsd: 0.005, throughputMonthUsd: 0.04, snapshotGibMonthUsd: 0.05 },
        pool: "p1",
        imageSet: null,
        keeper: null,
      },
      now,
    );
    t.equal(view.pools[0]!.zones[0]!.states.quarantined, c.quarantined ? 1 : 0, `${c.name}: pool view`);

    const keeper = planKeeper(keeperSettings, {
      now,
      volumes: [v],
      snapshot: current,
      snapshots: [current],
      initialization: {},
    });
    const zone = keeper.zones[0]!;
    t.equal(zone.superseded, claimable ? 1 : 0, `${c.name}: keeper's stock`);
    t.equal(
      keeper.steps.some((s) => s.step === "trim"),
      claimable,
      `${c.name}: the keeper trims only a claimable superseded volume`,
    );

    const gc = judgeVolume(v, {
      now,
      ttlHours: 24,
      retire: { snapshots: [current], graceHours: 0, quarantineHours: 6 },
    });
    if (c.quarantined) t.match(gc.reason, /superseded, but in quarantine/, `${c.name}: gc keeps it`);
    else if (!c.inTransit) t.equal(gc.verdict, "superseded", `${c.name}: gc retires it`);
  }
});
