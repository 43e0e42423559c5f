/** The prune's choice of volume and its reading of a running pre-warm: pure, tested with plain objects. */
import t from "tap";
import { mountedVolumeOf, prewarmReads } from "../../../src/agent/prune/observe.ts";

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
