/**
 * The prune's planner (src/agent/prune/plan.ts) and the choice of the current generation's
 * images (src/agent/prune/observe.ts currentImages), on observed state built in memory: the
 * threshold and the target, images kept because they are current, in use (by id, whatever
 * their tags) or a parent of a kept one, the order of removals, and every case that prunes
 * nothing (workspace, foreign, untagged, docker elsewhere, a pre-warm reading, nothing mounted);
 * and the pure halves of the adapters that feed it (docker's image list, statfs's figures).
 */
import t from "tap";
import { currentImages } from "../../../src/agent/prune/observe.ts";
import { planPrune, type PruneObservation } from "../../../src/agent/prune/plan.ts";
import { removalReferences } from "../../../src/agent/prune/apply.ts";
import type { FilesystemFill, ImageEntry, SnapshotInfo } from "../../../src/agent/ports.ts";
import { toImageEntry } from "../../../src/docker/engine.ts";
import { fillOf } from "../../../src/host/fill.ts";
import { VolumeTag } from "../../../src/tags.ts";

const MiB = 2 ** 20;
const settings = { thresholdPercent: 85, targetPercent: 75 };
const volume = {
  volumeId: "vol-1",
  mountPoint: "/var/lib/ebs-cache/vol-1",
  dataRoot: "/var/lib/ebs-cache/vol-1/docker",
};
const poolTags = {
  [VolumeTag.managed]: "true",
  [VolumeTag.kind]: "pool",
  [VolumeTag.pool]: "p",
  [VolumeTag.images]: "lab/app:1",
};

/** A filesystem of 1000 MiB, `percent` full. */
function fill(percent: number): FilesystemFill {
  const capacity = 1000 * MiB;
  const used = (percent / 100) * capacity;
  return {
    mountPoint: volume.mountPoint,
    device: "/dev/nvme1n1",
    sizeBytes: capacity,
    usedBytes: used,
    availableBytes: capacity - used,
    usedRatio: used / capacity,
    inodes: 1000,
    freeInodes: 900,
  };
}

function image(
  id: string,
  tags: string[],
  sizeMiB: number,
  created: number,
  extra: Partial<ImageEntry> = {},
): ImageEntry {
  return { id: `sha256:${id}`, repoTags: tags, repoDigests: [], created, sizeBytes: sizeMiB * MiB, ...extra };
}

function observed(over: Partial<PruneObservation> = {}): PruneObservation {
  return {
    volume,
    tags: poolTags,
    fill: fill(90),
    dockerRootDir: volume.dataRoot,
    current: { images: ["lab/app:1", "lab/tool"], source: "snapshot" },
    images: [
      image("cur", ["lab/app:1"], 300, 300),
      image("tool", ["lab/tool:latest"], 50, 300),
      image("old", ["lab/app:0"], 100, 100),
      image("older", ["lab/legacy:9"], 60, 50),
      image("used", ["lab/used:1"], 200, 10),
    ],
    containerImageIds: ["sha256:used"],
    ...over,
  };
}

const verdicts = (plan: ReturnType<typeof planPrune>) =>
  Object.fromEntries(plan.images.map((d) => [d.id.slice(7), d.verdict]));

t.test("above the threshold: removes images outside the generation, oldest first, until the target", async (t) => {
  const plan = planPrune(settings, observed());
  t.equal(plan.verdict, "prune");
  t.same(
    plan.removals.map((d) => d.id),
    ["sha256:older", "sha256:old"],
    "oldest first; both needed to get from 90 % to 75 %",
  );
  t.same(
    verdicts(plan),
    { cur: "current", tool: "current", old: "remove", older: "remove", used: "in-use" },
    "`lab/tool` matches `lab/tool:latest`",
  );
  t.ok(Math.abs(plan.projectedUsedRatio! - 0.74) < 1e-9, "the projection: 900 - 160 MiB of 1000");
});

t.test("stops at the target: the rest is spared", async (t) => {
  const plan = planPrune(settings, observed({ fill: fill(80) }));
  t.equal(plan.verdict, "below-threshold", "80 % is below 85 %");
  const near = planPrune(settings, observed({ fill: fill(86) }));
  t.same(
    near.removals.map((d) => d.id),
    ["sha256:older", "sha256:old"],
    "86 % - 60 MiB = 80 %: still above 75 %",
  );
  const just = planPrune({ thresholdPercent: 85, targetPercent: 80 }, observed({ fill: fill(86) }));
  t.same(
    just.removals.map((d) => d.id),
    ["sha256:older"],
    "one removal reaches 80 %",
  );
  t.equal(verdicts(just).old, "spared");
});

t.test("at exactly the threshold nothing is pruned", async (t) => {
  t.equal(planPrune(settings, observed({ fill: fill(85) })).verdict, "below-threshold");
});

t.test("the largest first among images of the same age; unique bytes when docker counted them", async (t) => {
  const plan = planPrune(
    { thresholdPercent: 86, targetPercent: 85 },
    observed({
      images: [
        image("a", ["x:1"], 10, 100),
        image("b", ["y:1"], 500, 100, { uniqueBytes: 20 * MiB }),
        image("c", ["z:1"], 30, 100),
      ],
      containerImageIds: [],
    }),
  );
  t.same(
    plan.removals.map((d) => d.id),
    ["sha256:c", "sha256:b"],
    "c (30 MiB) before b (20 MiB unique of 500), then the target is reached",
  );
  t.equal(plan.removals[1]!.freesBytes, 20 * MiB);
});

t.test("an image a container uses is kept by id, whatever tag it carries, and so is its parent", async (t) => {
  const plan = planPrune(
    settings,
    observed({
      images: [
        image("base", [], 100, 1),
        image("child", ["lab/old:1", "lab/old:also"], 100, 2, { parentId: "sha256:base" }),
        image("stray", [], 100, 3),
      ],
      containerImageIds: ["sha256:child"],
    }),
  );
  t.same(verdicts(plan), { base: "parent-of-kept", child: "in-use", stray: "remove" });
  t.same(removalReferences(plan.removals[0]!), ["sha256:stray"], "an untagged image is removed by id");
  t.same(
    removalReferences({ id: "sha256:x", references: ["a:1", "b:2"] }),
    ["a:1", "b:2"],
    "a tagged one tag by tag, never forced by id",
  );
});

t.test("current by digest", async (t) => {
  const digest = "sha256:" + "ab".repeat(32);
  const plan = planPrune(
    settings,
    observed({
      current: { images: [`registry.example.com/app:1@${digest}`], source: "snapshot" },
      images: [
        image("d", [], 100, 1, { repoDigests: [`registry.example.com/app@${digest}`] }),
        image("e", ["x:1"], 200, 2),
      ],
      containerImageIds: [],
    }),
  );
  t.same(verdicts(plan), { d: "current", e: "remove" });
});

t.test(
  "osparc's pulls are kept: an image the pre_pulled_images tag lists, outside the generation, is never removed",
  async (t) => {
    const plan = planPrune(
      settings,
      observed({ prePulled: { images: ["lab/app:0", "registry.osparc.io/simcore/services/dynamic/x:1.0"] } }),
    );
    t.same(
      verdicts(plan),
      { cur: "current", tool: "current", old: "pre-pulled", older: "remove", used: "in-use" },
      "lab/app:0 is osparc's pull: kept; lab/legacy:9 goes",
    );
    t.same(
      plan.removals.map((d) => d.id),
      ["sha256:older"],
    );
    const digest = planPrune(
      settings,
      observed({
        images: [image("pulled", [], 300, 1, { repoDigests: ["r/s@sha256:abc"] })],
        prePulled: { images: ["r/s:2@sha256:abc"] },
      }),
    );
    t.same(verdicts(digest), { pulled: "pre-pulled" }, "by digest too");
  },
);

t.test(
  "a workspace volume is pruned of images above the threshold, as a pool volume, never of anything else",
  async (t) => {
    const plan = planPrune(
      settings,
      observed({ tags: { ...poolTags, [VolumeTag.kind]: "workspace" }, prePulled: { images: [] } }),
    );
    t.equal(plan.verdict, "prune");
    t.same(
      plan.removals.map((d) => d.id),
      ["sha256:older", "sha256:old"],
      "images only: the plan has no other kind of removal",
    );
  },
);

t.test("nothing to remove when every image is kept", async (t) => {
  const plan = planPrune(
    settings,
    observed({ images: [image("cur", ["lab/app:1"], 300, 1), image("used", ["u:1"], 10, 1)] }),
  );
  t.equal(plan.verdict, "nothing-to-remove");
  t.same(plan.removals, []);
});

t.test("never pruned: a foreign or unknown volume, no generation, docker elsewhere, nothing mounted", async (t) => {
  const cases: Array<[string, Partial<PruneObservation>, string]> = [
    [
      "an unreadable pre_pulled_images tag",
      { prePulled: { problem: "instance tag x: chunk _1 missing" } },
      "nothing-to-remove",
    ],
    ["not managed", { tags: { ...poolTags, [VolumeTag.managed]: "false" } }, "not-managed"],
    ["unknown to EC2", { tags: undefined }, "not-managed"],
    ["no kind tag", { tags: { [VolumeTag.managed]: "true" } }, "not-managed"],
    ["no image list anywhere", { current: { images: [], source: "none" } }, "no-generation"],
    ["docker on its default root", { dockerRootDir: "/var/lib/docker" }, "docker-elsewhere"],
    ["a background pre-warm reading the files", { prewarmRunning: true }, "prewarm-running"],
    ["nothing mounted", { fill: undefined }, "not-mounted"],
    ["no boot on a volume", { volume: undefined }, "no-volume"],
  ];
  for (const [name, over, verdict] of cases) {
    const plan = planPrune(settings, observed({ fill: fill(99), ...over }));
    t.equal(plan.verdict, verdict, name);
    t.same(plan.removals, [], `${name}: nothing removed`);
  }
});

t.test("the current images: the pool's newest completed snapshot, else the volume's own list", async (t) => {
  const snap = (
    id: string,
    builtAt: string,
    images: string,
    state: SnapshotInfo["state"] = "completed",
    imageSet = "set",
  ): SnapshotInfo => ({
    snapshotId: id,
    state,
    volumeSizeGiB: 1,
    tags: { [VolumeTag.imageSet]: imageSet, [VolumeTag.builtAt]: builtAt, [VolumeTag.images]: images },
  });
  const snapshots = [
    snap("snap-old", "2026-11-01T00:00:00Z", "a:1"),
    snap("snap-new", "2026-12-01T00:00:00Z", "a:2,b:2"),
    snap("snap-pending", "2026-12-02T00:00:00Z", "a:3", "pending"),
    snap("snap-other", "2026-12-03T00:00:00Z", "z:1", "completed", "other-set"),
  ];
  const own = { [VolumeTag.images]: "a:1" };
  t.match(
    currentImages(own, snapshots, "set"),
    { images: ["a:2", "b:2"], source: "snapshot", generation: "set@2026-12-01T00:00:00.000Z" },
    "newest completed of the image set",
  );
  t.match(
    currentImages(own, snapshots, null),
    { images: ["z:1"], source: "snapshot" },
    "no image set configured: the pool's newest of any set",
  );
  t.same(
    currentImages(own, undefined, "set"),
    { images: ["a:1"], source: "volume" },
    "EC2 could not be asked: the volume's own list",
  );
  t.same(currentImages(own, [], "set"), { images: ["a:1"], source: "volume" }, "no snapshot");
  t.same(currentImages({}, [], null), { images: [], source: "none" }, "no list anywhere");
});

t.test("what the adapters hand the planner: images as docker lists them, the fill as statfs gives it", async (t) => {
  t.same(
    toImageEntry({
      Id: "sha256:a",
      RepoTags: ["<none>:<none>"],
      RepoDigests: ["<none>@<none>"],
      Created: 5,
      Size: 100,
      SharedSize: 30,
      ParentId: "",
    }),
    { id: "sha256:a", repoTags: [], repoDigests: [], created: 5, sizeBytes: 100, uniqueBytes: 70 },
    "docker's <none> placeholders dropped, the unique bytes from SharedSize",
  );
  t.notOk(
    "uniqueBytes" in toImageEntry({ Id: "sha256:b", Size: 100, SharedSize: -1 }),
    "SharedSize -1: docker did not count it (API before 1.42)",
  );
  const fill = fillOf("/m", "/dev/loop1", { bsize: 4096, blocks: 1000, bfree: 300, bavail: 200, files: 64, ffree: 60 });
  t.same(
    [fill.sizeBytes, fill.usedBytes, fill.availableBytes],
    [4096000, 2867200, 819200],
    "blocks reserved for root are neither used nor available",
  );
  t.ok(Math.abs(fill.usedRatio - 700 / 900) < 1e-12, "used / (used + available), as df counts it");
  t.same([fill.inodes, fill.freeInodes, fill.device], [64, 60, "/dev/loop1"]);
});
