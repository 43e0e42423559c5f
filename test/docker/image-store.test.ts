import t from "tap";
import { readHostStore, storeTags } from "../../src/docker/image-store.ts";
import { candidateOrder, orderCandidates, storeFit, volumeStore } from "../../src/agent/volume-rules.ts";
import { VolumeTag } from "../../src/tags.ts";

const containerd28 = { [VolumeTag.imageStore]: "containerd", [VolumeTag.engineVersion]: "28.5.2" };
const graphdriver28 = { [VolumeTag.imageStore]: "graphdriver", [VolumeTag.engineVersion]: "28.5.2" };
const graphdriver20 = { [VolumeTag.imageStore]: "graphdriver", [VolumeTag.engineVersion]: "20.10.24" };

t.test(
  "volumeStore: no tag is graphdriver (every volume before the tag), a tag is read, an unknown value is kept",
  async (t) => {
    t.same(volumeStore({}), { known: true, store: "graphdriver", recorded: false });
    t.same(volumeStore({ [VolumeTag.imageStore]: " " }), { known: true, store: "graphdriver", recorded: false });
    t.same(volumeStore(containerd28), { known: true, store: "containerd", recorded: true, engineVersion: "28.5.2" });
    t.same(volumeStore({ [VolumeTag.imageStore]: "zfs" }), { known: false, value: "zfs" });
  },
);

t.test("storeFit: the store decides, the engine only says whether it is the same major", async (t) => {
  t.same(storeFit(graphdriver28, { store: "graphdriver", engineVersion: "28.5.2" }), { fits: true, sameEngine: true });
  t.same(storeFit(graphdriver20, { store: "graphdriver", engineVersion: "28.5.2" }), { fits: true, sameEngine: false });
  t.same(
    storeFit({}, { store: "graphdriver" }),
    { fits: true, sameEngine: false },
    "an untagged volume fits a graphdriver host",
  );

  const hidden = storeFit(containerd28, { store: "graphdriver", engineVersion: "28.5.2" });
  t.equal(hidden.fits, false, "a containerd-store volume on a graphdriver host would hide its images");
  if (!hidden.fits) {
    t.match(
      hidden.reason,
      /containerd image store \(docker 28\.5\.2\).*graphdriver store: its images would be invisible/,
    );
    t.match(hidden.remediation, /graphdriver/);
  }
  const untagged = storeFit({}, { store: "containerd", engineVersion: "29.0.0" });
  t.equal(untagged.fits, false, "an untagged (graphdriver) volume does not fit a containerd host");
  if (!untagged.fits) {
    t.match(untagged.reason, /no ebs-cache:image-store tag/);
    t.match(untagged.remediation, /containerd-snapshotter=true/);
  }
  const unknown = storeFit({ [VolumeTag.imageStore]: "zfs" }, { store: "graphdriver" });
  t.equal(unknown.fits, false, "an unknown store never fits");
  if (!unknown.fits) t.match(unknown.reason, /ebs-cache:image-store=zfs/);
});

t.test(
  "candidateOrder by store: fitting volumes of the host's engine first, each in the instance's order; mismatches apart",
  async (t) => {
    const volumes = [
      { volumeId: "vol-a", tags: graphdriver20 },
      { volumeId: "vol-b", tags: containerd28 },
      { volumeId: "vol-c", tags: graphdriver28 },
      { volumeId: "vol-d", tags: {} },
      { volumeId: "vol-e", tags: graphdriver28 },
    ];
    const out = candidateOrder("i-1", volumes, { store: "graphdriver", engineVersion: "28.5.2" });
    t.same(out.fitting, [...orderCandidates("i-1", ["vol-c", "vol-e"]), ...orderCandidates("i-1", ["vol-a", "vol-d"])]);
    t.same(
      out.mismatched.map((m) => m.volume),
      ["vol-b"],
    );
    t.match(out.mismatched[0]!.reason, /invisible/);

    const onContainerd = candidateOrder("i-1", volumes, { store: "containerd", engineVersion: "28.5.2" });
    t.same(onContainerd.fitting, ["vol-b"]);
    t.same(
      onContainerd.mismatched.map((m) => m.volume),
      orderCandidates("i-1", ["vol-a", "vol-c", "vol-d", "vol-e"]),
    );
  },
);

t.test("storeTags: what the golden build and Packer write", async (t) => {
  t.same(storeTags({ store: "containerd", engineVersion: "28.5.2" }), {
    "ebs-cache:image-store": "containerd",
    "ebs-cache:engine-version": "28.5.2",
  });
  t.same(volumeStore(storeTags({ store: "containerd", engineVersion: "28.5.2" })), {
    known: true,
    store: "containerd",
    recorded: true,
    engineVersion: "28.5.2",
  });
});

t.test("readHostStore: daemon.json's store and the engine's version; a version unread is unknown", async (t) => {
  const containerd = { features: { "containerd-snapshotter": true } };
  t.same(await readHostStore({ daemonJson: async () => containerd, engineVersion: async () => "28.5.2" }), {
    store: "containerd",
    engineVersion: "28.5.2",
  });
  const failing = async (): Promise<string | undefined> => {
    throw new Error("dockerd: not found");
  };
  t.same(await readHostStore({ daemonJson: async () => ({}), engineVersion: failing }), { store: "graphdriver" });
  await t.rejects(
    readHostStore({ daemonJson: () => Promise.reject(new Error("daemon.json: bad JSON")), engineVersion: failing }),
    /bad JSON/,
    "an unreadable daemon.json is the boot's error to report, not a guess",
  );
});
