/** Image-set generations: pure ordering of snapshots and volumes. */
import t from "tap";
import {
  compareGenerations,
  currentGeneration,
  currentSnapshot,
  generationName,
  isSuperseded,
  isUsableSnapshot,
  snapshotGeneration,
  volumeGeneration,
} from "../../src/agent/volume-rules.ts";
import type { SnapshotInfo } from "../../src/agent/ports.ts";
import { SnapshotTag, VolumeTag } from "../../src/tags.ts";

const snap = (id: string, tags: Record<string, string>, over: Partial<SnapshotInfo> = {}): SnapshotInfo => ({
  snapshotId: id,
  state: "completed",
  volumeSizeGiB: 8,
  tags,
  ...over,
});

t.test("a snapshot's generation is its built-at, else its start time", async (t) => {
  const tagged = snapshotGeneration(
    snap(
      "snap-1",
      { [VolumeTag.imageSet]: "set-a", [VolumeTag.builtAt]: "2026-11-01T00:00:00Z" },
      { startTime: new Date("2026-11-05T00:00:00Z") },
    ),
  );
  t.equal(tagged.builtAt?.toISOString(), "2026-11-01T00:00:00.000Z", "the build time wins over the snapshot's start");
  t.equal(generationName(tagged), "set-a@2026-11-01T00:00:00.000Z");
  const legacy = snapshotGeneration(snap("snap-2", {}, { startTime: new Date("2026-11-05T00:00:00Z") }));
  t.equal(legacy.builtAt?.toISOString(), "2026-11-05T00:00:00.000Z");
  t.equal(generationName(legacy), "-@2026-11-05T00:00:00.000Z");
  const malformed = snapshotGeneration(snap("snap-3", { [VolumeTag.builtAt]: "yesterday" }));
  t.equal(malformed.builtAt, null, "a malformed built-at with no start time: unknown");
});

t.test("a volume takes its snapshot's generation when it has none of its own", async (t) => {
  const snapshots = new Map([["snap-1", snap("snap-1", { [VolumeTag.builtAt]: "2026-11-01T00:00:00Z" })]]);
  t.equal(
    volumeGeneration(
      { tags: { [VolumeTag.builtAt]: "2026-11-03T00:00:00Z" }, snapshotId: "snap-1" },
      snapshots,
    ).builtAt?.toISOString(),
    "2026-11-03T00:00:00.000Z",
  );
  t.equal(
    volumeGeneration({ tags: {}, snapshotId: "snap-1" }, snapshots).builtAt?.toISOString(),
    "2026-11-01T00:00:00.000Z",
  );
  t.equal(volumeGeneration({ tags: {}, snapshotId: "snap-gone" }, snapshots).builtAt, null);
  t.equal(generationName(volumeGeneration({ tags: {} })), "-@unknown");
});

t.test("the current generation and what it supersedes", async (t) => {
  const snapshots = [
    snap("snap-old", { [VolumeTag.imageSet]: "set-a", [VolumeTag.builtAt]: "2026-10-01T00:00:00Z" }),
    snap("snap-new", { [VolumeTag.imageSet]: "set-b", [VolumeTag.builtAt]: "2026-11-01T00:00:00Z" }),
    snap(
      "snap-pending",
      { [VolumeTag.imageSet]: "set-c", [VolumeTag.builtAt]: "2026-12-01T00:00:00Z" },
      { state: "pending" },
    ),
  ];
  const current = currentGeneration(snapshots);
  t.equal(current?.imageSet, "set-b", "the newest completed snapshot, not a pending one");
  t.equal(currentGeneration(snapshots, "set-a")?.imageSet, "set-a", "restricted to the configured image set");
  t.equal(currentGeneration([]), undefined);
  t.ok(isSuperseded({ imageSet: "set-a", builtAt: new Date("2026-10-01T00:00:00Z") }, current));
  t.notOk(
    isSuperseded({ imageSet: "set-b", builtAt: new Date("2026-11-01T00:00:00Z") }, current),
    "the current generation itself",
  );
  t.ok(isSuperseded({ imageSet: null, builtAt: null }, current), "an unknown generation is the oldest");
  t.notOk(
    isSuperseded({ imageSet: null, builtAt: null }, { imageSet: null, builtAt: null }),
    "no order without a current build time",
  );
  t.notOk(
    isSuperseded({ imageSet: "x", builtAt: new Date(0) }, undefined),
    "no current generation: nothing superseded",
  );
  const order = [
    { imageSet: null, builtAt: null },
    { imageSet: "a", builtAt: new Date("2026-10-01T00:00:00Z") },
    { imageSet: "b", builtAt: new Date("2026-11-01T00:00:00Z") },
  ].sort(compareGenerations);
  t.same(
    order.map((g) => g.imageSet),
    ["b", "a", null],
    "newest first, unknown last",
  );
});

t.test(
  "the current snapshot: built-at beats start time; completed only; the later of one generation's snapshots",
  async (t) => {
    const snapshots = [
      snap(
        "snap-new",
        { [VolumeTag.builtAt]: "2026-11-01T00:00:00Z" },
        { startTime: new Date("2026-11-01T01:00:00Z") },
      ),
      // An older image set snapshotted again later: newest by start time, not by generation.
      snap(
        "snap-old-again",
        { [VolumeTag.builtAt]: "2026-10-01T00:00:00Z" },
        { startTime: new Date("2026-11-20T00:00:00Z") },
      ),
      snap("snap-pending", { [VolumeTag.builtAt]: "2026-12-01T00:00:00Z" }, { state: "pending" }),
    ];
    t.equal(currentSnapshot(snapshots)?.snapshotId, "snap-new");
    const twice = [
      ...snapshots,
      snap(
        "snap-new-again",
        { [VolumeTag.builtAt]: "2026-11-01T00:00:00Z" },
        { startTime: new Date("2026-11-02T00:00:00Z") },
      ),
    ];
    t.equal(
      currentSnapshot(twice)?.snapshotId,
      "snap-new-again",
      "one generation snapshotted twice: the later snapshot",
    );
    t.equal(
      currentSnapshot([
        snap("a", {}, { startTime: new Date("2026-01-01T00:00:00Z") }),
        snap("b", {}, { startTime: new Date("2026-02-01T00:00:00Z") }),
      ])?.snapshotId,
      "b",
      "without built-at: the newest start, as before",
    );
    t.equal(currentSnapshot(snapshots, "no-such-set"), undefined);
  },
);

t.test("a snapshot marked unverified is never current; one without the marker (made before it) still is", async (t) => {
  const built = (day: string) => ({ [VolumeTag.imageSet]: "set", [VolumeTag.builtAt]: `2026-12-${day}T00:00:00Z` });
  // Made before the marker existed (Packer's flow, an older upload): no tag, usable as always.
  const old = snap("snap-old", built("01"), { startTime: new Date("2026-12-01T01:00:00Z") });
  // An upload completed in EBS whose read-back failed, or has not run yet (a kill in between).
  const unread = snap("snap-unread", { ...built("02"), [SnapshotTag.unverified]: "true" });
  t.ok(isUsableSnapshot(old), "no marker: usable");
  t.notOk(isUsableSnapshot(unread), "completed, but marked: not usable");
  t.notOk(
    isUsableSnapshot({ ...unread, tags: { ...unread.tags, [SnapshotTag.unverified]: "" } }),
    "whatever its value",
  );
  t.notOk(isUsableSnapshot({ ...old, state: "pending" }), "pending: not usable");
  t.equal(currentSnapshot([old, unread])?.snapshotId, "snap-old", "the newer generation is passed over while marked");
  t.equal(currentSnapshot([old, unread], "set")?.snapshotId, "snap-old", "… with the image set configured too");
  t.same(currentGeneration([old, unread])?.builtAt, new Date("2026-12-01T00:00:00Z"), "the current generation, too");
  t.equal(currentSnapshot([unread]), undefined, "a pool whose only snapshot is marked has none");
  const { [SnapshotTag.unverified]: _removed, ...verified } = unread.tags;
  t.equal(
    currentSnapshot([old, { ...unread, tags: verified }])?.snapshotId,
    "snap-unread",
    "once the upload read it back and removed the marker: current",
  );
});
