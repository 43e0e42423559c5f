/**
 * The refresh's pure parts: osparc's chunked `pre_pulled_images` tag (single, chunks in any key
 * order, a missing chunk, bad JSON, not an array, bad and repeated entries, references without a
 * registry), and the plan (current generation ∪ pre-pulled − listed; workspace volumes skipped;
 * mark-current only when it changes something).
 */
import t from "tap";
import { LABELS_CHUNK_SIZE } from "../../../src/agent/labels-tag.ts";
import { asListed, readPrePulledImages } from "../../../src/agent/refresh/images.ts";
import { planRefresh, type RefreshObservation, type RefreshSettings } from "../../../src/agent/refresh/plan.ts";
import type { SnapshotInfo } from "../../../src/agent/ports.ts";
import { VolumeTag } from "../../../src/tags.ts";

const KEY = "io.simcore.autoscaling.pre_pulled_images";

/** The tags osparc's `dump_as_ec2_tags` writes for a JSON value: whole up to 256 characters, else chunks. */
function asOsparcWrites(value: unknown, key = KEY): Record<string, string> {
  const text = JSON.stringify(value);
  if (text.length <= LABELS_CHUNK_SIZE) return { [key]: text };
  const tags: Record<string, string> = {};
  for (let i = 0; i * LABELS_CHUNK_SIZE < text.length; i++)
    tags[`${key}_${i}`] = text.slice(i * LABELS_CHUNK_SIZE, (i + 1) * LABELS_CHUNK_SIZE);
  return tags;
}

const manyImages = (n: number) =>
  Array.from({ length: n }, (_, i) => `registry.osparc.io/simcore/services/dynamic/sim4life-core-${i}:3.2.${i}`);

t.test("pre_pulled_images: absent, single, chunked in any key order", async (t) => {
  t.same(readPrePulledImages({ Name: "node" }, KEY), { images: [], warnings: [] }, "absent: nothing, no warning");
  t.same(readPrePulledImages(asOsparcWrites(["redis:7", "itisfoundation/dy-sidecar:1.2"]), KEY), {
    images: ["redis:7", "itisfoundation/dy-sidecar:1.2"],
    warnings: [],
  });
  const images = manyImages(12);
  const tags = asOsparcWrites(images);
  t.ok(Object.keys(tags).length >= 4, "long lists are chunked as osparc chunks them");
  const reversed = Object.fromEntries(Object.entries(tags).reverse());
  t.same(
    readPrePulledImages(reversed, KEY),
    { images, warnings: [] },
    "chunks joined in index order, whatever the key order",
  );
});

t.test("pre_pulled_images: a missing chunk, bad JSON, not an array: one warning, no image", async (t) => {
  const tags = asOsparcWrites(manyImages(12));
  delete tags[`${KEY}_1`];
  const missing = readPrePulledImages(tags, KEY);
  t.same(missing.images, []);
  t.equal(missing.warnings.length, 1);
  t.match(missing.warnings[0], /chunk _1 missing/);
  const bad = readPrePulledImages({ [KEY]: '["redis:7",' }, KEY);
  t.same(bad.images, []);
  t.match(bad.warnings, [/not valid JSON/]);
  t.match(readPrePulledImages({ [KEY]: '{"redis": "7"}' }, KEY).warnings, [/must hold a JSON array/]);
  t.match(readPrePulledImages({ [KEY]: "[]", [`${KEY}_0`]: "[]" }, KEY).warnings, [/both whole and in 1 chunk/]);
});

t.test("pre_pulled_images: bad entries skipped one by one, repeats once, references without a registry", async (t) => {
  const read = readPrePulledImages(
    asOsparcWrites([
      "redis",
      "docker.io/library/redis:latest",
      "redis:latest",
      "Bad/Name:1",
      42,
      "x;rm -rf /",
      "org/app:1",
      "index.docker.io/org/app:1",
    ]),
    KEY,
  );
  t.same(read.images, ["redis", "org/app:1"], "one entry per image as docker lists it");
  t.equal(read.warnings.length, 3, "the three invalid entries, one warning each");
  t.match(read.warnings[0], /entry 3.*not a valid Docker image reference.*lowercase/);
  t.match(read.warnings[1], /entry 4 must be a string/);
  t.match(read.warnings[2], /entry 5/);
});

t.test("references compared as docker lists them", async (t) => {
  t.equal(asListed("redis"), "redis:latest");
  t.equal(asListed("docker.io/library/redis:7"), "redis:7");
  t.equal(asListed("docker.io/org/app"), "org/app:latest");
  t.equal(asListed("library/redis"), "redis:latest", "Docker Hub's library/ is not shown");
  t.equal(
    asListed("localhost/library/redis"),
    "localhost/library/redis:latest",
    "another registry's library/ is a path",
  );
  t.equal(
    asListed("127.0.0.1:5000/lab/app"),
    "127.0.0.1:5000/lab/app:latest",
    "a registry with a port is kept, its port no tag",
  );
  t.equal(asListed("registry.osparc.io/simcore/app:3"), "registry.osparc.io/simcore/app:3");
});

// ---- the plan ----

const SETTINGS: RefreshSettings = { concurrency: 1, pullSeconds: 600, prePulledImagesTag: KEY, imageSet: null };
const snap = (id: string, tags: Record<string, string>, over: Partial<SnapshotInfo> = {}): SnapshotInfo => ({
  snapshotId: id,
  state: "completed",
  volumeSizeGiB: 8,
  tags,
  ...over,
});
const OLD = snap("snap-old", {
  [VolumeTag.imageSet]: "platform",
  [VolumeTag.builtAt]: "2026-11-01T00:00:00.000Z",
  [VolumeTag.images]: "lab/a:1,lab/b:1",
});
const NEW = snap("snap-new", {
  [VolumeTag.imageSet]: "platform",
  [VolumeTag.builtAt]: "2026-11-20T00:00:00.000Z",
  [VolumeTag.images]: "lab/a:1, lab/b:2,lab/c:1",
});
const PENDING = snap(
  "snap-next",
  { [VolumeTag.imageSet]: "platform", [VolumeTag.builtAt]: "2026-11-30T00:00:00.000Z", [VolumeTag.images]: "lab/z:9" },
  { state: "pending" },
);
const poolVolume = (tags: Record<string, string> = {}) => ({
  volumeId: "vol-0123456789abcdef0",
  snapshotId: "snap-old",
  tags: { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "p", ...OLD.tags, ...tags },
});
const observed = (over: Partial<RefreshObservation> = {}): RefreshObservation => ({
  volume: poolVolume(),
  snapshots: [OLD, NEW, PENDING],
  instanceTags: {},
  present: ["lab/a:1", "lab/b:1"],
  ...over,
});

t.test("plan: the current generation's images the volume lacks, then mark-current", async (t) => {
  const plan = planRefresh(SETTINGS, observed());
  t.equal(plan.skipped, null);
  t.equal(plan.generation, "platform@2026-11-20T00:00:00.000Z", "the newest completed snapshot, not the pending one");
  t.same(plan.present, ["lab/a:1"]);
  t.same(plan.steps, [
    { step: "pull", image: "lab/b:2", sources: ["generation"] },
    { step: "pull", image: "lab/c:1", sources: ["generation"] },
    {
      step: "mark-current",
      volumeId: "vol-0123456789abcdef0",
      generation: "platform@2026-11-20T00:00:00.000Z",
      images: ["lab/a:1", "lab/b:2", "lab/c:1"],
      tags: {
        [VolumeTag.builtAt]: "2026-11-20T00:00:00.000Z",
        [VolumeTag.imageSet]: "platform",
        [VolumeTag.images]: "lab/a:1, lab/b:2,lab/c:1",
      },
    },
  ]);
});

t.test("plan: pre-pulled images join the generation's; one pull per image whatever its spelling", async (t) => {
  const plan = planRefresh(
    SETTINGS,
    observed({
      instanceTags: asOsparcWrites(["lab/c:1", "docker.io/library/redis", "lab/a:1"]),
      present: ["lab/a:1", "lab/b:2", "redis:latest"],
    }),
  );
  t.same(
    plan.steps.filter((s) => s.step === "pull"),
    [{ step: "pull", image: "lab/c:1", sources: ["generation", "pre-pulled"] }],
  );
  t.same(plan.present, ["lab/a:1", "lab/b:2", "docker.io/library/redis"]);
  t.same(
    planRefresh(
      { ...SETTINGS, prePulledImagesTag: null },
      observed({ instanceTags: asOsparcWrites(["org/x:1"]) }),
    ).wanted.map((w) => w.image),
    ["lab/a:1", "lab/b:2", "lab/c:1"],
    "tag not read when configured null",
  );
  const badTag = planRefresh(SETTINGS, observed({ instanceTags: { [KEY]: "[oops" } }));
  t.match(badTag.warnings, [/not valid JSON/], "a bad tag is a warning");
  t.equal(badTag.steps.filter((s) => s.step === "pull").length, 2, "and the generation is still refreshed");
});

t.test("plan: nothing to pull and already current: no step", async (t) => {
  const plan = planRefresh(
    SETTINGS,
    observed({ volume: poolVolume(NEW.tags), present: ["lab/a:1", "lab/b:2", "lab/c:1", "lab/b:1"] }),
  );
  t.same(plan.steps, []);
  t.equal(plan.present.length, 3);
});

t.test("plan: a volume newer than the current snapshot is never tagged back", async (t) => {
  const plan = planRefresh(
    SETTINGS,
    observed({ volume: poolVolume({ [VolumeTag.builtAt]: "2026-11-25T00:00:00.000Z" }) }),
  );
  t.notOk(plan.steps.some((s) => s.step === "mark-current"));
});

t.test("plan: workspace volumes, no volume, a pool without snapshots", async (t) => {
  const workspace = planRefresh(
    SETTINGS,
    observed({ volume: poolVolume({ [VolumeTag.kind]: "workspace" }), instanceTags: asOsparcWrites(["org/x:1"]) }),
  );
  t.match(workspace.skipped, /workspace volume: only pool volumes are refreshed/);
  t.same(workspace.steps, []);
  t.match(planRefresh(SETTINGS, observed({ volume: undefined })).skipped, /no cache volume/);
  const bare = planRefresh(SETTINGS, observed({ snapshots: [PENDING], instanceTags: asOsparcWrites(["org/x:1"]) }));
  t.equal(bare.generation, null);
  t.match(bare.warnings, [/no completed snapshot/]);
  t.same(
    bare.steps,
    [{ step: "pull", image: "org/x:1", sources: ["pre-pulled"] }],
    "the pre-pulled images alone; nothing to mark",
  );
  const otherSet = planRefresh({ ...SETTINGS, imageSet: "other" }, observed());
  t.equal(otherSet.generation, null, "only snapshots of the configured image set count");
});
