/** gc's planner: pure, every kind of volume. */
import t from "tap";
import { judgeVolume, parseTimestamp, planGc } from "../src/agent/gc/plan.ts";
import type { VolumeInfo } from "../src/agent/ports.ts";
import { VolumeTag } from "../src/tags.ts";

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
  t.equal(verdict(vol("vol-3", { ...managed, [VolumeTag.expiresAt]: "2026-01-01T00:00:00Z", [VolumeTag.keep]: "true" })), "kept");
  t.equal(verdict(vol("vol-4", { [VolumeTag.expiresAt]: "2020-01-01T00:00:00Z" })), "foreign", "no managed tag: never touched");
  t.equal(verdict(vol("vol-5", { [VolumeTag.managed]: "yes", [VolumeTag.expiresAt]: "2020-01-01T00:00:00Z" })), "foreign");
  t.equal(verdict(vol("vol-6", { ...managed, [VolumeTag.expiresAt]: "2020-01-01T00:00:00Z" }, { state: "in-use", attachment: { instanceId: "i-1", device: "/dev/sdf", state: "attached" } })), "in-use");
  t.equal(verdict(vol("vol-7", { ...managed, [VolumeTag.expiresAt]: "tomorrow" })), "malformed");
  t.equal(verdict(vol("vol-8", { ...managed, [VolumeTag.expiresAt]: "2020-01-01T00:00:00Z", [VolumeTag.keep]: "maybe" })), "malformed", "a malformed keep is not read as false");
  t.equal(verdict(vol("vol-9", managed)), "never-claimed", "a fresh pool volume waits for its first machine");
  const unreleased = judgeVolume(vol("vol-a", { ...managed, [VolumeTag.claimedBy]: "i-dead" }), opts);
  t.equal(unreleased.verdict, "tag-expiry", "claimed but never released: tagged to expire");
  t.equal(unreleased.tags?.[VolumeTag.expiresAt], "2026-12-01T12:00:00.000Z", "now + TTL");
  t.equal(verdict(vol("vol-b", { ...managed, [VolumeTag.claimedBy]: "i-x", [VolumeTag.releasedAt]: "2026-11-30T00:00:00Z" })), "never-claimed");
  // An instance died between tagging its claim and removing the earlier release's expiry.
  const reclaimed = {
    ...managed,
    [VolumeTag.claimedBy]: "i-dead",
    [VolumeTag.claimedAt]: "2026-11-30T10:00:00.000Z",
    [VolumeTag.releasedAt]: "2026-11-29T09:00:00.000Z",
    [VolumeTag.expiresAt]: "2026-11-30T09:00:00.000Z",
  };
  const stale = judgeVolume(vol("vol-c", reclaimed), opts);
  t.equal(stale.verdict, "tag-expiry", "claimed after its release: the old expiry is not this claim's, a new TTL is given");
  t.equal(stale.tags?.[VolumeTag.expiresAt], "2026-12-01T12:00:00.000Z");
  t.equal(verdict(vol("vol-d", { ...reclaimed, [VolumeTag.claimedAt]: "2026-11-29T08:00:00.000Z" })), "delete", "claimed before its release: the release's expiry holds");
});

t.test("the cap keeps the oldest expiries", async (t) => {
  const volumes = [3, 1, 2].map((h) => vol(`vol-${h}`, { ...managed, [VolumeTag.expiresAt]: new Date(now.getTime() - h * 3600_000).toISOString() }));
  const plan = planGc(volumes, { ...opts, maxDeletes: 2 });
  t.same(plan.filter((d) => d.verdict === "delete").map((d) => d.volumeId).sort(), ["vol-2", "vol-3"]);
  t.same(plan.filter((d) => d.verdict === "over-cap").map((d) => d.volumeId), ["vol-1"]);
  t.equal(planGc(volumes, { ...opts, maxDeletes: 0 }).filter((d) => d.verdict === "delete").length, 0);
});

t.test("timestamps", async (t) => {
  t.ok(parseTimestamp("2026-11-30T12:00:00Z"));
  t.ok(parseTimestamp("2026-11-30T12:00:00.123+02:00"));
  for (const bad of ["", "2026-11-30", "1700000000", "2026-13-45T99:00:00Z", "never"]) t.equal(parseTimestamp(bad), undefined, bad);
});
