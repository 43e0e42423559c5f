/**
 * The prune (runPrune) in process against the port fakes: above the threshold it removes images
 * of an older generation, never one a container uses nor one of the current generation, never
 * with force; below it, or with a dry run, nothing. No root, no dockerd.
 */
import t from "tap";
import type { FilesystemFill, ImageEntry } from "../../../src/agent/ports.ts";
import type { PruneDeps } from "../../../src/agent/prune/run.ts";
import { runPrune } from "../../../src/agent/prune/run.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { fakeImages, fakeRecorder, startFakeCloud } from "../../fixtures/fakes/index.ts";

const GiB = 1024 ** 3;
const MOUNT = "/var/lib/ebs-cache";

const image = (name: string, sizeGiB: number, created: number): ImageEntry => ({
  id: `sha256:${Buffer.from(name).toString("hex").padEnd(64, "0").slice(0, 64)}`,
  repoTags: [name],
  repoDigests: [],
  created,
  sizeBytes: sizeGiB * GiB,
  uniqueBytes: sizeGiB * GiB,
});

const OLD = image("lab/old:1", 3, 1_700_000_000);
const OLDER = image("lab/older:1", 2, 1_600_000_000);
const CURRENT = image("lab/app:2", 2, 1_800_000_000);

/** A volume holding the current generation's list in its tags, a filesystem `usedGiB` full of 10. */
async function pruneWorld(t: Parameters<typeof startFakeCloud>[0], usedGiB: number) {
  const fake = await startFakeCloud(t);
  const volume = await fake.volume({
    tags: {
      [VolumeTag.managed]: "true",
      [VolumeTag.kind]: "pool",
      [VolumeTag.pool]: "default",
      [VolumeTag.images]: "lab/app:2",
    },
  });
  const mountPoint = `${MOUNT}/${volume.volumeId}`;
  const images = fakeImages(fake.script, `${mountPoint}/docker`, [OLD, OLDER, CURRENT]);
  let used = usedGiB * GiB;
  const fill = async (): Promise<FilesystemFill> => {
    const live = images.entries.reduce((sum, e) => sum + e.sizeBytes, 0);
    used = Math.min(used, usedGiB * GiB - ([OLD, OLDER, CURRENT].reduce((s, e) => s + e.sizeBytes, 0) - live));
    return {
      mountPoint,
      device: "/dev/fake",
      sizeBytes: 10 * GiB,
      usedBytes: used,
      availableBytes: 10 * GiB - used,
      usedRatio: used / (10 * GiB),
      inodes: 1000,
      freeInodes: 500,
    };
  };
  const deps: PruneDeps = {
    lastBoot: async () => ({
      outcome: "ready",
      volumeId: volume.volumeId,
      mountPoint,
      dataRoot: `${mountPoint}/docker`,
    }),
    cloud: fake.cloud,
    fill,
    docker: images.docker,
    log: createMemoryLogger("debug"),
  };
  return { fake, images, deps };
}

const SETTINGS = { thresholdPercent: 80, targetPercent: 60 };

t.test("above the threshold: images of an older generation go, oldest first, down to the target", async (t) => {
  const { fake, images, deps } = await pruneWorld(t, 9);
  const recorder = fakeRecorder(fake.script);
  const outcome = await runPrune(deps, { settings: SETTINGS, imageSet: null, dryRun: false, recorder });
  t.equal(outcome.failed, 0);
  t.ok(outcome.removed >= 1, "something removed");
  const left = images.entries.map((e) => e.repoTags[0]);
  t.ok(left.includes("lab/app:2"), "the current generation's image stays");
  t.notOk(left.includes("lab/older:1"), "the oldest went first");
  t.ok((outcome.usedRatioAfter ?? 1) < (outcome.usedRatioBefore ?? 0), "the fill went down");
  t.equal(recorder.recorded.filter((r) => r.kind === "pruneFinished").length, 1);
});

t.test("an image a container uses is never removed (no force)", async (t) => {
  const { images, deps } = await pruneWorld(t, 9);
  images.inUse.add(OLDER.id);
  images.inUse.add(OLD.id);
  const outcome = await runPrune(deps, { settings: SETTINGS, imageSet: null, dryRun: false });
  const left = images.entries.map((e) => e.repoTags[0]);
  t.ok(left.includes("lab/older:1") && left.includes("lab/old:1"), "in use: kept");
  t.equal(outcome.removed, 0);
});

t.test("below the threshold, or a dry run: nothing removed", async (t) => {
  const low = await pruneWorld(t, 5);
  const idle = await runPrune(low.deps, { settings: SETTINGS, imageSet: null, dryRun: false });
  t.equal(idle.removals.length, 0);
  t.equal(low.fake.script.of("images.removeImage").length, 0);
  const high = await pruneWorld(t, 9);
  const dry = await runPrune(high.deps, { settings: SETTINGS, imageSet: null, dryRun: true });
  t.ok(dry.plan.removals.length > 0, "the dry run says what it would remove");
  t.equal(high.fake.script.of("images.removeImage").length, 0, "and removes nothing");
});
