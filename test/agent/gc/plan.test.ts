/** gc's planner: pure, every kind of volume. */
import t from "tap";
import { judgeVolume, planGc, sparedSince, type RetireOptions } from "../../../src/agent/gc/plan.ts";
import { parseTimestamp } from "../../../src/agent/volume-rules.ts";
import type { SnapshotInfo, VolumeInfo } from "../../../src/agent/ports.ts";
import { SnapshotTag, VolumeTag } from "../../../src/tags.ts";

const now = new Date("2026-11-30T12:00:00Z");
const managed = { [VolumeTag.managed]: "true" };
function vol(id: string, tags: Record<string, string>, over: Partial<VolumeInfo> = {}): VolumeInfo {
  return { volumeId: id, availabilityZone: "eu-west-1a", state: "available", sizeGiB: 10, tags, ...over };
}
const opts = { now, ttlHours: 24, maxDeletes: 10 };
const verdict = (v: VolumeInfo) => judgeVolume(v, opts).verdict;

t.test("verdicts", async (t) => {
  t.equal(verdict(vol("vol-1", { ...managed, [VolumeTag.expiresAt]: "2026-11-30T11:00:00.000Z" })), "delete");
  t.equal(verdict(vol("vol-2", { ...managed, [VolumeTag.expiresAt]: "2026-11-30T13:00:00.000Z" })), "not-expired");
  t.equal(
    verdict(vol("vol-3", { ...managed, [VolumeTag.expiresAt]: "2026-01-01T00:00:00Z", [VolumeTag.keep]: "true" })),
    "kept",
  );
  t.equal(
    verdict(vol("vol-4", { [VolumeTag.expiresAt]: "2020-01-01T00:00:00Z" })),
    "foreign",
    "no managed tag: never touched",
  );
  t.equal(
    verdict(vol("vol-5", { [VolumeTag.managed]: "yes", [VolumeTag.expiresAt]: "2020-01-01T00:00:00Z" })),
    "foreign",
  );
  t.equal(
    verdict(
      vol(
        "vol-6",
        { ...managed, [VolumeTag.expiresAt]: "2020-01-01T00:00:00Z" },
        { state: "in-use", attachment: { instanceId: "i-1", device: "/dev/sdf", state: "attached" } },
      ),
    ),
    "in-use",
  );
  t.equal(verdict(vol("vol-7", { ...managed, [VolumeTag.expiresAt]: "tomorrow" })), "malformed");
  t.equal(
    verdict(vol("vol-8", { ...managed, [VolumeTag.expiresAt]: "2020-01-01T00:00:00Z", [VolumeTag.keep]: "maybe" })),
    "malformed",
    "a malformed keep is not read as false",
  );
  t.equal(verdict(vol("vol-9", managed)), "never-claimed", "a fresh pool volume waits for its first machine");
  const unreleased = judgeVolume(vol("vol-a", { ...managed, [VolumeTag.claimedBy]: "i-dead" }), opts);
  t.equal(unreleased.verdict, "tag-expiry", "claimed but never released: tagged to expire");
  t.equal(unreleased.tags?.[VolumeTag.expiresAt], "2026-12-01T12:00:00.000Z", "now + TTL");
  t.equal(
    verdict(vol("vol-b", { ...managed, [VolumeTag.claimedBy]: "i-x", [VolumeTag.releasedAt]: "2026-11-30T00:00:00Z" })),
    "never-claimed",
  );
  // An instance died between tagging its claim and removing the earlier release's expiry.
  const reclaimed = {
    ...managed,
    [VolumeTag.claimedBy]: "i-dead",
    [VolumeTag.claimedAt]: "2026-11-30T10:00:00.000Z",
    [VolumeTag.releasedAt]: "2026-11-29T09:00:00.000Z",
    [VolumeTag.expiresAt]: "2026-11-30T09:00:00.000Z",
  };
  const stale = judgeVolume(vol("vol-c", reclaimed), opts);
  t.equal(
    stale.verdict,
    "tag-expiry",
    "claimed after its release: the old expiry is not this claim's, a new TTL is given",
  );
  t.equal(stale.tags?.[VolumeTag.expiresAt], "2026-12-01T12:00:00.000Z");
  t.equal(
    verdict(vol("vol-d", { ...reclaimed, [VolumeTag.claimedAt]: "2026-11-29T08:00:00.000Z" })),
    "delete",
    "claimed before its release: the release's expiry holds",
  );
});

t.test("the look right before a deletion: anything that would keep the volume spares it", async (t) => {
  const expired = vol("vol-e", {
    ...managed,
    [VolumeTag.kind]: "workspace",
    [VolumeTag.releasedAt]: "2026-11-29T10:00:00.000Z",
    [VolumeTag.expiresAt]: "2026-11-30T10:00:00.000Z",
  });
  const spared = (fresh: VolumeInfo) => sparedSince(expired, fresh, opts);
  const tagged = (tags: Record<string, string>) => ({ ...expired, tags: { ...expired.tags, ...tags } });
  t.equal(spared(expired), undefined, "unchanged: it goes");
  t.equal(
    spared(tagged({ [VolumeTag.initialized]: "2026-11-30T11:00:00.000Z" })),
    undefined,
    "a tag that spares nothing: it goes",
  );
  t.match(spared(tagged({ [VolumeTag.keep]: "true" })), /ebs-cache:keep="true" since it was judged/, "kept since");
  t.match(
    spared(tagged({ [VolumeTag.claimedBy]: "i-new", [VolumeTag.claimedAt]: "2026-11-30T11:59:00.000Z" })),
    /ebs-cache:claimed-by="i-new", ebs-cache:claimed-at=.* since it was judged/,
    "claimed since",
  );
  t.match(
    spared({
      ...expired,
      state: "in-use",
      attachment: { instanceId: "i-new", device: "/dev/sdf", state: "attaching" },
    }),
    /now attached to i-new/,
    "attached since",
  );
  t.match(spared({ ...expired, state: "creating" }), /now creating/, "another state");
  t.match(
    spared(
      tagged({ [VolumeTag.expiresAt]: "2026-12-02T10:00:00.000Z", [VolumeTag.releasedAt]: "2026-12-01T10:00:00.000Z" }),
    ),
    /ebs-cache:released-at=.*ebs-cache:expires-at=.* since it was judged/,
    "released again, a new expiry",
  );
  const { [VolumeTag.managed]: _managed, ...unmanaged } = expired.tags;
  t.match(spared({ ...expired, tags: unmanaged }), /ebs-cache:managed=\(removed\)/, "no longer managed");
  // Judged again on what EC2 says now, whatever the tags compared: the verdict itself must still delete.
  t.match(
    sparedSince(
      { ...expired, tags: { ...expired.tags, [VolumeTag.expiresAt]: "2026-11-30T13:00:00.000Z" } },
      tagged({ [VolumeTag.expiresAt]: "2026-11-30T13:00:00.000Z" }),
      opts,
    ),
    /^now not-expired/,
    "a verdict that no longer deletes",
  );
});

t.test("the cap keeps the oldest expiries", async (t) => {
  const volumes = [3, 1, 2].map((h) =>
    vol(`vol-${h}`, { ...managed, [VolumeTag.expiresAt]: new Date(now.getTime() - h * 3600_000).toISOString() }),
  );
  const plan = planGc(volumes, { ...opts, maxDeletes: 2 });
  t.same(
    plan
      .filter((d) => d.verdict === "delete")
      .map((d) => d.volumeId)
      .sort(),
    ["vol-2", "vol-3"],
  );
  t.same(
    plan.filter((d) => d.verdict === "over-cap").map((d) => d.volumeId),
    ["vol-1"],
  );
  t.equal(planGc(volumes, { ...opts, maxDeletes: 0 }).filter((d) => d.verdict === "delete").length, 0);
});

t.test("timestamps", async (t) => {
  t.ok(parseTimestamp("2026-11-30T12:00:00Z"));
  t.ok(parseTimestamp("2026-11-30T12:00:00.123+02:00"));
  for (const bad of ["", "2026-11-30", "1700000000", "2026-13-45T99:00:00Z", "never"])
    t.equal(parseTimestamp(bad), undefined, bad);
});

t.test("superseded pool volumes: retired after the grace, only when they sit in the pool", async (t) => {
  const pool = (name: string, over: Record<string, string> = {}) => ({
    ...managed,
    [VolumeTag.kind]: "pool",
    [VolumeTag.pool]: name,
    ...over,
  });
  const snapshot = (
    id: string,
    poolName: string,
    builtAt: string | undefined,
    startTime: string,
    over: Partial<SnapshotInfo> = {},
  ): SnapshotInfo => ({
    snapshotId: id,
    state: "completed",
    volumeSizeGiB: 10,
    startTime: new Date(startTime),
    tags: pool(poolName, builtAt ? { [VolumeTag.builtAt]: builtAt, [VolumeTag.imageSet]: "set" } : {}),
    ...over,
  });
  const snapshots = [
    snapshot("snap-old", "p1", "2026-11-01T00:00:00Z", "2026-11-01T01:00:00Z"),
    // The current generation: built the day before, snapshotted 36 h before `now`.
    snapshot("snap-new", "p1", "2026-11-28T00:00:00Z", "2026-11-29T00:00:00Z"),
    snapshot("snap-newest-pending", "p1", "2026-11-30T00:00:00Z", "2026-11-30T00:00:00Z", { state: "pending" }),
    snapshot("snap-q", "q", "2026-11-01T00:00:00Z", "2026-11-01T01:00:00Z"),
  ];
  const old = (id: string, over: Record<string, string> = {}, info: Partial<VolumeInfo> = {}) =>
    vol(id, pool("p1", { [VolumeTag.builtAt]: "2026-11-01T00:00:00Z", ...over }), { snapshotId: "snap-old", ...info });
  const volumes = [
    old("vol-old"),
    vol("vol-old-untagged", pool("p1"), { snapshotId: "snap-old" }),
    old("vol-old-released", {
      [VolumeTag.claimedBy]: "i-1",
      [VolumeTag.releasedAt]: "2026-11-30T00:00:00Z",
      [VolumeTag.expiresAt]: "2026-12-01T00:00:00Z",
    }),
    old(
      "vol-old-in-use",
      {},
      { state: "in-use", attachment: { instanceId: "i-2", device: "/dev/sdf", state: "attached" } },
    ),
    old("vol-old-kept", { [VolumeTag.keep]: "true" }),
    old("vol-old-quarantined", { [VolumeTag.lastError]: "x", [VolumeTag.lastErrorAt]: "2026-11-30T10:00:00Z" }),
    old("vol-old-unreleased", { [VolumeTag.claimedBy]: "i-dead" }),
    vol(
      "vol-old-workspace",
      { ...pool("p1", { [VolumeTag.builtAt]: "2026-11-01T00:00:00Z" }), [VolumeTag.kind]: "workspace" },
      { snapshotId: "snap-old" },
    ),
    vol("vol-old-foreign", {
      [VolumeTag.kind]: "pool",
      [VolumeTag.pool]: "p1",
      [VolumeTag.builtAt]: "2026-11-01T00:00:00Z",
    }),
    vol("vol-unknown", pool("p1"), { snapshotId: "snap-deleted" }),
    vol("vol-new", pool("p1", { [VolumeTag.builtAt]: "2026-11-28T00:00:00Z" }), { snapshotId: "snap-new" }),
    vol("vol-q", pool("q", { [VolumeTag.builtAt]: "2026-11-01T00:00:00Z" }), { snapshotId: "snap-q" }),
    vol("vol-no-snapshots", pool("r", { [VolumeTag.builtAt]: "2020-01-01T00:00:00Z" })),
  ];
  const retire: RetireOptions = { snapshots, graceHours: 24, quarantineHours: 6 };
  const verdicts = (options: Partial<typeof opts> & { retire?: RetireOptions }) =>
    Object.fromEntries(planGc(volumes, { ...opts, ...options }).map((d) => [d.volumeId, d.verdict]));
  const after = verdicts({ retire });
  t.same(
    Object.entries(after)
      .filter(([, v]) => v === "superseded")
      .map(([id]) => id)
      .sort(),
    ["vol-old", "vol-old-released", "vol-old-untagged"],
    "36 h out, 24 h of grace: the old generation's pool volumes that sit in the pool",
  );
  t.same(
    [
      after["vol-old-in-use"],
      after["vol-old-kept"],
      after["vol-old-quarantined"],
      after["vol-old-unreleased"],
      after["vol-old-workspace"],
      after["vol-old-foreign"],
    ],
    ["in-use", "kept", "never-claimed", "tag-expiry", "never-claimed", "foreign"],
    "never one in use, kept, in quarantine, in doubt (never released), a workspace volume or a foreign one",
  );
  t.same(
    [after["vol-unknown"], after["vol-new"], after["vol-q"], after["vol-no-snapshots"]],
    ["never-claimed", "never-claimed", "never-claimed", "never-claimed"],
    "unknown generation, the current one, the only generation of its pool, a pool with no snapshot: left",
  );
  const before = planGc(volumes, { ...opts, retire: { ...retire, graceHours: 48 } });
  t.same(
    before.filter((d) => d.verdict === "superseded"),
    [],
    "within the grace (36 h of 48): nothing retired",
  );
  t.match(
    before.find((d) => d.volumeId === "vol-old")?.reason,
    /superseded by set@2026-11-28T00:00:00.000Z, retired from 2026-12-01T00:00:00.000Z/,
    "the grace counts from the snapshot's start (later than its build)",
  );
  t.equal(verdicts({ retire: { ...retire, graceHours: null } })["vol-old"], "never-claimed", "null: never retired");
  t.equal(verdicts({})["vol-old"], "never-claimed", "without snapshots gc judges expiry only");
  // This host pins the old image set for p1: its current generation is that set's, nothing older is left.
  const pinned = [...snapshots, snapshot("snap-new-set", "p1", "2026-11-28T00:00:00Z", "2026-11-29T00:00:00Z")].map(
    (s) =>
      s.snapshotId === "snap-new" || s.snapshotId === "snap-new-set"
        ? { ...s, tags: { ...s.tags, [VolumeTag.imageSet]: "set-b" } }
        : s,
  );
  t.equal(
    verdicts({ retire: { ...retire, snapshots: pinned, pool: { name: "p1", imageSet: "set" } } })["vol-old"],
    "never-claimed",
    "the configured image set's newest snapshot is the pool's current generation",
  );
  t.equal(
    verdicts({ retire: { ...retire, snapshots: pinned, pool: { name: "other", imageSet: "set" } } })["vol-old"],
    "superseded",
    "a pool this host does not use: the newest of any image set",
  );
  // snap-new's upload has not read it back yet (or found it wrong): it supersedes nothing, and
  // snap-old, the pool's only usable snapshot, is the current generation.
  const unread = snapshots.map((s) =>
    s.snapshotId === "snap-new" ? { ...s, tags: { ...s.tags, [SnapshotTag.unverified]: "true" } } : s,
  );
  t.same(
    Object.values(verdicts({ retire: { ...retire, snapshots: unread } })).filter((v) => v === "superseded"),
    [],
    "a newer snapshot marked unverified retires nothing",
  );
  const capped = planGc(volumes, { ...opts, maxDeletes: 2, retire });
  t.same(
    capped.filter((d) => d.verdict === "superseded").length + capped.filter((d) => d.verdict === "delete").length,
    2,
    "the cap counts retirements too",
  );
  t.equal(capped.filter((d) => d.verdict === "over-cap").length, 1);
  t.same(JSON.parse(JSON.stringify(capped)), capped, "serializable (printed by --dry-run --json)");
});

t.test("the cap: expired volumes before superseded ones, the oldest generation first", async (t) => {
  const tags = (builtAt: string) => ({
    ...managed,
    [VolumeTag.kind]: "pool",
    [VolumeTag.pool]: "p1",
    [VolumeTag.builtAt]: builtAt,
  });
  const snapshots: SnapshotInfo[] = [
    {
      snapshotId: "snap-3",
      state: "completed",
      volumeSizeGiB: 10,
      startTime: new Date("2026-11-03T00:00:00Z"),
      tags: tags("2026-11-03T00:00:00Z"),
    },
  ];
  const volumes = [
    vol("vol-g2", tags("2026-11-02T00:00:00Z")),
    vol("vol-g1", tags("2026-11-01T00:00:00Z")),
    vol("vol-expired", { ...managed, [VolumeTag.expiresAt]: "2026-11-30T00:00:00Z" }),
  ];
  const plan = planGc(volumes, { ...opts, maxDeletes: 2, retire: { snapshots, graceHours: 0, quarantineHours: 6 } });
  t.same(
    plan.map((d) => [d.volumeId, d.verdict]),
    [
      ["vol-g2", "over-cap"],
      ["vol-g1", "superseded"],
      ["vol-expired", "delete"],
    ],
  );
});
