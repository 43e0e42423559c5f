/**
 * Where an image's files are on the golden volume (src/host/image-layers.ts), pure: the chain id
 * of its top snapshot, the layer folders of containerd's mounts as ctr prints them (recorded from
 * containerd 2.1.9 under docker 28: the container's mount and an image's view), their paths from
 * the volume's root, and the layer that serves a path the container read.
 */
import t from "tap";
import { chainId, layerPaths, servedFile, snapshotLayerDirs } from "../../src/host/image-layers.ts";

const SNAPSHOTS = "/mnt/golden/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots";
const ROOT = "containerd/io.containerd.snapshotter.v1.overlayfs/snapshots";

t.test("chain id: the first diff id, then sha256 of `parent diff` per layer (OCI image-spec)", async (t) => {
  const a = "sha256:85e612e0f2557c96b8fbd3876b9742eafe606f5f8937d05e6519dc16d68cd824";
  const b = "sha256:0000000000000000000000000000000000000000000000000000000000000001";
  t.equal(chainId([a]), a, "one layer: its diff id");
  // sha256 of "<a> <b>", computed with `printf '%s %s' a b | sha256sum`.
  t.equal(chainId([a, b]), "sha256:174bb9c87a742c6aaa053a8242db0bf8c84d81f6964fb61a0c6402e989c59d26");
  t.equal(chainId([]), undefined, "no layers: no snapshot");
});

t.test("containerd's mounts: the layers top-most first", async (t) => {
  const view = JSON.stringify([
    {
      Type: "overlay",
      Source: "overlay",
      Target: "",
      Options: ["index=off", `lowerdir=${SNAPSHOTS}/7/fs:${SNAPSHOTS}/2/fs:${SNAPSHOTS}/1/fs`],
    },
  ]);
  t.same(snapshotLayerDirs(view), [`${SNAPSHOTS}/7/fs`, `${SNAPSHOTS}/2/fs`, `${SNAPSHOTS}/1/fs`], "a view");
  const container = JSON.stringify([
    {
      type: "overlay",
      source: "overlay",
      options: [
        `workdir=${SNAPSHOTS}/3/work`,
        `upperdir=${SNAPSHOTS}/3/fs`,
        `lowerdir=${SNAPSHOTS}/2/fs:${SNAPSHOTS}/1/fs`,
        "index=off",
      ],
    },
  ]);
  t.same(
    snapshotLayerDirs(container),
    [`${SNAPSHOTS}/3/fs`, `${SNAPSHOTS}/2/fs`, `${SNAPSHOTS}/1/fs`],
    "an active snapshot: its upperdir on top",
  );
  const bind = JSON.stringify([{ Type: "bind", Source: `${SNAPSHOTS}/1/fs`, Target: "", Options: ["ro", "rbind"] }]);
  t.same(snapshotLayerDirs(bind), [`${SNAPSHOTS}/1/fs`], "an image of one layer: a bind mount of it");

  for (const [bad, why] of [
    ["nope", /not JSON/],
    ["[]", /not one mount/],
    [
      JSON.stringify([
        { Type: "bind", Source: "/a" },
        { Type: "bind", Source: "/b" },
      ]),
      /not one mount/,
    ],
    [JSON.stringify([{ Type: "overlay", Options: ["index=off"] }]), /no lowerdir/],
    [JSON.stringify([{ Type: "overlay", Options: [7] }]), /not strings/],
    [JSON.stringify([{ Type: "erofs", Source: "/a" }]), /"erofs" mount/],
    [JSON.stringify([{ Type: "bind", Source: "relative" }]), /"bind" mount, not/],
  ] as const)
    t.throws(() => snapshotLayerDirs(bad), { message: why }, bad);
});

t.test("layer folders as paths from the volume's root, each checked to be the store's", async (t) => {
  t.same(layerPaths("/mnt/golden", ROOT, "fs", [`${SNAPSHOTS}/7/fs`, `${SNAPSHOTS}/1/fs`]), [
    `${ROOT}/7/fs`,
    `${ROOT}/1/fs`,
  ]);
  t.same(layerPaths("/v", "docker/overlay2", "diff", ["/v/docker/overlay2/abc/diff"]), ["docker/overlay2/abc/diff"]);
  for (const bad of [
    "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs",
    `${SNAPSHOTS}/1/work`,
    `${SNAPSHOTS}/1`,
    `${SNAPSHOTS}/1/fs/usr`,
    `${SNAPSHOTS}/../snapshots/1/fs/..`,
    `${SNAPSHOTS}/../../../../etc/fs`,
  ])
    t.throws(() => layerPaths("/mnt/golden", ROOT, "fs", [bad]), { message: /is not a layer folder/ }, bad);
});

t.test("the layer that serves a path: the top-most holding it, a regular file there", async (t) => {
  const layers = [`${ROOT}/3/fs`, `${ROOT}/2/fs`, `${ROOT}/1/fs`];
  t.equal(servedFile(layers, "usr/bin/python3", ["missing", "file"]), `${ROOT}/2/fs/usr/bin/python3`);
  t.equal(servedFile(layers, "app/a.txt", ["file"]), `${ROOT}/3/fs/app/a.txt`, "the upper layer's copy");
  t.equal(servedFile(layers, "app/gone", ["other"]), undefined, "a whiteout (or a link) on top: none");
  t.equal(servedFile(layers, "tmp/out", ["missing", "missing", "missing"]), undefined, "in no layer");
  t.equal(servedFile(layers, "x", []), undefined, "not looked up");
});
