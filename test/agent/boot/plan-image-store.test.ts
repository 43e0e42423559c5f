/**
 * The boot planner and the image store: a volume built with the store the host's dockerd does
 * not use would hide its images, so it is never a candidate; volumes built by the host's engine
 * major come first. Pure, tested with plain objects.
 */
import t from "tap";
import { createSpecFrom, lookupsNeeded, planBoot, selectSource } from "../../../src/agent/boot/plan.ts";
import { orderCandidates } from "../../../src/agent/volume-rules.ts";
import type { SnapshotInfo, VolumeInfo } from "../../../src/agent/ports.ts";
import { observed, settings } from "../../fixtures/builders/boot-plan.ts";
import { configuredStore, type HostStore } from "../../../src/docker/image-store.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { workspaceIdTags } from "../../../src/agent/workspace-ids.ts";

const containerd28: HostStore = { store: "containerd", engineVersion: "28.5.2" };
const graphdriver28: HostStore = { store: "graphdriver", engineVersion: "28.5.2" };

/** A pool volume built with `store` (undefined: no tag, as before the tags existed) by docker `engine`. */
function volume(id: string, store?: string, engine?: string, over: Partial<VolumeInfo> = {}): VolumeInfo {
  const tags: Record<string, string> = {
    [VolumeTag.managed]: "true",
    [VolumeTag.kind]: "pool",
    [VolumeTag.pool]: "p1",
  };
  if (store !== undefined) tags[VolumeTag.imageStore] = store;
  if (engine !== undefined) tags[VolumeTag.engineVersion] = engine;
  return { volumeId: id, availabilityZone: "eu-west-1a", state: "available", sizeGiB: 10, tags, ...over };
}
function snapshotOf(store?: string): SnapshotInfo {
  const tags: Record<string, string> = { [VolumeTag.images]: "a:1" };
  if (store !== undefined) tags[VolumeTag.imageStore] = store;
  return { snapshotId: "snap-1", state: "completed", volumeSizeGiB: 10, tags };
}

t.test(
  "the host's store comes from daemon.json: containerd only when asked for, docker 29's default not guessed",
  async (t) => {
    t.equal(configuredStore({ features: { "containerd-snapshotter": true } }), "containerd");
    t.equal(configuredStore({ features: { "containerd-snapshotter": false } }), "graphdriver");
    t.equal(configuredStore({}), "graphdriver", "no key: graphdriver (the agent pins it on 29+)");
    t.equal(configuredStore({ features: "yes" }), "graphdriver", "a features value that is no object asks for nothing");
    t.equal(
      configuredStore({ features: { "containerd-snapshotter": "true" } }),
      "graphdriver",
      "only the boolean true counts, as dockerd reads it",
    );
  },
);

t.test("pool volumes of the other store are no candidates; the rest keep the instance's order", async (t) => {
  const pool = [
    volume("vol-c1", "containerd", "28.5.2"),
    volume("vol-g1", "graphdriver", "28.5.2"),
    volume("vol-c2", "containerd", "28.5.2"),
    volume("vol-u"),
  ];
  const onContainerd = selectSource(settings, observed({ pool, hostStore: containerd28 }));
  t.equal(onContainerd.source, "pool");
  t.same(
    onContainerd.source === "pool" ? onContainerd.candidates : [],
    orderCandidates("i-0aaa", ["vol-c1", "vol-c2"]),
    "only the containerd volumes, in this instance's order",
  );
  const onGraphdriver = selectSource(settings, observed({ pool, hostStore: graphdriver28 }));
  t.same(
    onGraphdriver.source === "pool" ? [...onGraphdriver.candidates].sort() : [],
    ["vol-g1", "vol-u"],
    "a graphdriver host takes the graphdriver volume and the untagged one (built before the tags: graphdriver)",
  );
});

t.test("no observed store is the graphdriver store: a containerd volume is never taken on a guess", async (t) => {
  const sel = selectSource(settings, observed({ pool: [volume("vol-c1", "containerd")], snapshot: snapshotOf() }));
  t.equal(sel.source, "snapshot", "the only pool volume does not fit: the untagged snapshot (graphdriver) does");
});

t.test("volumes built by the host's engine major come first, the others after them", async (t) => {
  const pool = [
    volume("vol-26a", "containerd", "26.1.5"),
    volume("vol-28a", "containerd", "28.5.2"),
    volume("vol-26b", "containerd", "26.1.5"),
    volume("vol-28b", "containerd", "28.1.0"),
  ];
  const sel = selectSource(settings, observed({ pool, hostStore: containerd28 }));
  if (sel.source !== "pool") return t.fail(`expected pool, got ${sel.source}`);
  t.same(sel.candidates.slice(0, 2), orderCandidates("i-0aaa", ["vol-28a", "vol-28b"]), "docker 28 volumes first");
  t.same(
    sel.candidates.slice(2),
    orderCandidates("i-0aaa", ["vol-26a", "vol-26b"]),
    "then the others that fit, in the instance's order",
  );
});

t.test("every pool volume mismatched and no snapshot that fits: none, with the first mismatch's reason", async (t) => {
  const pool = [volume("vol-g1", "graphdriver", "20.10.24"), volume("vol-g2", "graphdriver")];
  const sel = selectSource({ ...settings, createFromSnapshot: false }, observed({ pool, hostStore: containerd28 }));
  t.equal(sel.source, "none");
  const reason = sel.source === "none" ? sel.reason : "";
  t.match(reason, /no pool volume fits this host's image store/);
  t.match(reason, /graphdriver image store/, "says which store the volume has");
  t.match(reason, /containerd store/, "and which the host uses");
  t.match(reason, /vol-g[12]/, "names the volume");
  const plan = planBoot({ ...settings, createFromSnapshot: false }, observed({ pool, hostStore: containerd28 }));
  t.same(
    plan.steps.map((s) => s.step),
    ["degrade"],
    "the node degrades: nothing is claimed, nothing mounted",
  );
});

t.test("the snapshot is a fallback only when it fits too", async (t) => {
  const pool = [volume("vol-g1", "graphdriver")];
  const fits = selectSource(settings, observed({ pool, snapshot: snapshotOf("containerd"), hostStore: containerd28 }));
  t.equal(fits.source, "snapshot", "a containerd snapshot serves a containerd host when no pool volume fits");
  if (fits.source === "snapshot") {
    t.equal(fits.create.tags[VolumeTag.imageStore], "containerd", "the new volume records the snapshot's store");
  }
  const misfit = selectSource(
    settings,
    observed({ pool: [], snapshot: snapshotOf("graphdriver"), hostStore: containerd28 }),
  );
  t.equal(misfit.source, "none");
  t.match(
    misfit.source === "none" ? misfit.reason : "",
    /snapshot snap-1 does not fit: it was built with the graphdriver image store/,
  );
  const untagged = selectSource(settings, observed({ pool: [], snapshot: snapshotOf(), hostStore: containerd28 }));
  t.equal(untagged.source, "none", "an untagged snapshot is graphdriver: no containerd volume is made from it");
});

t.test(
  "the claim's fallback refuses a snapshot of the other store; the claim step carries the host's store",
  async (t) => {
    const sel = selectSource(settings, observed({ pool: [volume("vol-c1", "containerd")], hostStore: containerd28 }));
    if (sel.source !== "pool" || !sel.fallback) return t.fail("expected pool candidates with a fallback");
    t.same(sel.fallback.hostStore, containerd28);
    t.equal(
      createSpecFrom(sel.fallback, snapshotOf("graphdriver")),
      undefined,
      "a graphdriver snapshot makes no volume for a containerd host",
    );
    t.equal(createSpecFrom(sel.fallback, snapshotOf("containerd"))?.snapshotId, "snap-1");
    const plan = planBoot(settings, observed({ pool: [volume("vol-c1", "containerd")], hostStore: containerd28 }));
    const claim = plan.steps.find((s) => s.step === "claim-volume");
    t.same(
      claim && "hostStore" in claim ? claim.hostStore : undefined,
      containerd28,
      "a relist after a loss filters by the same store",
    );
    t.same(plan.hostStore, containerd28, "switch-data-root and verify-docker follow the observed store");
    t.same(JSON.parse(JSON.stringify(plan)), plan, "still serializable");
  },
);

t.test("the snapshot is looked up when every pool volume is of the other store", async (t) => {
  const pool = [volume("vol-g1", "graphdriver")];
  t.equal(lookupsNeeded(settings, observed({ pool, hostStore: containerd28 }), "snapshot"), true);
  t.equal(
    lookupsNeeded(settings, observed({ pool, hostStore: graphdriver28 }), "snapshot"),
    false,
    "not when one fits",
  );
});

t.test("workspace volumes of the other store: the node degrades rather than split the user's data", async (t) => {
  const ids = { "user-id": "1", "project-id": "p", "node-id": "n" };
  const ws = volume("vol-ws", "graphdriver", "28.5.2", {
    tags: {
      [VolumeTag.managed]: "true",
      [VolumeTag.kind]: "workspace",
      [VolumeTag.pool]: "p1",
      ...workspaceIdTags(ids),
      [VolumeTag.imageStore]: "graphdriver",
    },
  });
  const sel = selectSource(
    { ...settings, workspace: ids },
    observed({
      workspace: [ws],
      pool: [volume("vol-c1", "containerd")],
      snapshot: snapshotOf("containerd"),
      hostStore: containerd28,
    }),
  );
  t.equal(sel.source, "none", "neither a new workspace volume nor the pool");
  t.match(sel.source === "none" ? sel.reason : "", /no workspace volume fits this host's image store: vol-ws/);
});

t.test("a blank workspace volume records the host's store; one from the snapshot the snapshot's", async (t) => {
  const ids = { "user-id": "1", "project-id": "p", "node-id": "n" };
  const blank = selectSource(
    { ...settings, workspace: ids, workspaceCreate: "blank" },
    observed({ hostStore: containerd28 }),
  );
  if (blank.source !== "new-workspace" || blank.from === "pool")
    return t.fail(`expected new-workspace, got ${blank.source}`);
  t.equal(blank.create.tags[VolumeTag.imageStore], "containerd", "this host's docker fills it, in its store");
  t.equal(blank.create.tags[VolumeTag.engineVersion], "28.5.2");
  const fromSnapshot = selectSource(
    { ...settings, workspace: ids },
    observed({ snapshot: snapshotOf("containerd"), hostStore: containerd28 }),
  );
  if (fromSnapshot.source !== "new-workspace" || fromSnapshot.from === "pool")
    return t.fail(`expected new-workspace, got ${fromSnapshot.source}`);
  t.equal(fromSnapshot.create.tags[VolumeTag.imageStore], "containerd");
  const misfit = selectSource(
    { ...settings, workspace: ids },
    observed({ snapshot: snapshotOf("graphdriver"), pool: [volume("vol-c1", "containerd")], hostStore: containerd28 }),
  );
  t.equal(misfit.source, "new-workspace", "a pool volume of the host's store becomes the workspace");
  t.same(
    misfit.source === "new-workspace" && misfit.from === "pool" ? misfit.candidates : [],
    ["vol-c1"],
    "its fitting stock only",
  );
});

t.test(
  "an attached volume of the other store is not mounted (the host's daemon.json changed since the claim)",
  async (t) => {
    const mine = volume("vol-9", "graphdriver", "28.5.2", {
      state: "in-use",
      attachment: { instanceId: "i-0aaa", device: "/dev/sdf", state: "attached" },
    });
    const sel = selectSource(settings, observed({ attached: [mine], hostStore: containerd28 }));
    t.equal(sel.source, "none");
    t.match(sel.source === "none" ? sel.reason : "", /vol-9.*not mounted/);
    t.equal(
      selectSource(settings, observed({ attached: [mine], hostStore: graphdriver28 })).source,
      "attached",
      "the same volume on a graphdriver host is reused",
    );
  },
);

t.test("a volume tagged with a store the agent does not know is never a candidate", async (t) => {
  const sel = selectSource(
    { ...settings, createFromSnapshot: false },
    observed({ pool: [volume("vol-x", "zfs")], hostStore: graphdriver28 }),
  );
  t.equal(sel.source, "none");
  t.match(sel.source === "none" ? sel.reason : "", /a store this agent does not know/);
});
