/** The prune's choice of volume and its reading of a running pre-warm: pure, tested with plain objects. */
import t from "tap";
import { mountedVolumeOf, observePrune, prewarmReads } from "../../../src/agent/prune/observe.ts";
import type { PruneDeps } from "../../../src/agent/prune/deps.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";

const mounted = {
  volumeId: "vol-1",
  mountPoint: "/var/lib/ebs-cache/vol-1",
  dataRoot: "/var/lib/ebs-cache/vol-1/docker",
};

t.test("the volume the last boot left docker on: only after ready or warming, with everything known", async (t) => {
  t.same(mountedVolumeOf({ outcome: "ready", ...mounted }), mounted);
  t.same(mountedVolumeOf({ outcome: "warming", ...mounted }), mounted);
  t.equal(mountedVolumeOf(undefined), undefined, "no record");
  for (const outcome of ["degraded", "disabled", "failed"])
    t.equal(mountedVolumeOf({ outcome, ...mounted }), undefined, outcome);
  t.equal(
    mountedVolumeOf({ outcome: "ready", volumeId: "vol-1", mountPoint: mounted.mountPoint }),
    undefined,
    "no data-root",
  );
});

t.test("a pre-warm reads the volume only while its process runs and it initializes or follows", async (t) => {
  t.equal(prewarmReads(undefined), false);
  t.equal(prewarmReads({ phase: "initializing", running: true }), true);
  t.equal(prewarmReads({ phase: "following", running: true }), true);
  t.equal(prewarmReads({ phase: "initializing", running: false }), false, "interrupted");
  t.equal(prewarmReads({ phase: "done", running: true }), false);
  t.equal(prewarmReads({ phase: undefined, running: false }), false);
});

t.test(
  "observePrune: osparc's pre-pulled images from the instance's tags, a workspace volume's images too",
  async (t) => {
    const KEY = "io.simcore.autoscaling.pre_pulled_images";
    const deps = (over: Partial<PruneDeps> & { kind?: string } = {}): PruneDeps => ({
      lastBoot: async () => ({ outcome: "ready", ...mounted }),
      cloud: {
        describeVolume: async () => ({
          volumeId: "vol-1",
          availabilityZone: "eu-west-1a",
          state: "in-use",
          sizeGiB: 10,
          tags: { [VolumeTag.managed]: "true", [VolumeTag.kind]: over.kind ?? "pool", [VolumeTag.images]: "a:1" },
        }),
        findSnapshots: async () => [],
      },
      fill: async () => ({
        mountPoint: mounted.mountPoint,
        device: "/dev/nvme1n1",
        sizeBytes: 100,
        usedBytes: 90,
        availableBytes: 10,
        usedRatio: 0.9,
        inodes: 10,
        freeInodes: 5,
      }),
      docker: {
        info: async () => ({ dockerRootDir: mounted.dataRoot }),
        imageEntries: async () => [],
        containerImageIds: async () => [],
      } as unknown as PruneDeps["docker"],
      instanceTags: async () => ({ [KEY]: '["osparc/pulled:1"]' }),
      log: createMemoryLogger("debug"),
      ...over,
    });
    const read = await observePrune(deps(), { imageSet: null, prePulledImagesTag: KEY });
    t.same(read.prePulled, { images: ["osparc/pulled:1"] }, "the tag's images");
    t.same(
      (await observePrune(deps({ kind: "workspace" }), { imageSet: null, prePulledImagesTag: KEY })).prePulled,
      { images: ["osparc/pulled:1"] },
      "a workspace volume is looked at too",
    );
    const lost = await observePrune(
      deps({
        instanceTags: async () => {
          throw new Error("DescribeInstances throttled");
        },
      }),
      { imageSet: null, prePulledImagesTag: KEY },
    );
    t.match(lost.prePulled, { problem: /instance's tags could not be read.*throttled/ }, "a lost answer: a problem");
    t.equal(
      (await observePrune(deps(), { imageSet: null, prePulledImagesTag: null })).prePulled,
      undefined,
      "tag off (null): not read",
    );
  },
);
