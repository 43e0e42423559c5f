/**
 * The need list (`.ebs-cache-agent/reads.json`): volume content, so validated and bounded; and
 * the order the pre-warm reads it in: the images about to run first.
 */
import t from "tap";
import {
  imagesAboutToRun,
  imagesOfNode,
  isDataRootPath,
  isVolumeFilePath,
  MAX_READ_LIST_BYTES,
  MAX_READ_LIST_FILES,
  needOrder,
  parseReadList,
  ReadListError,
  readListText,
} from "../../../src/agent/prewarm/need.ts";
import { VolumeTag } from "../../../src/tags.ts";

const list = (images: Array<{ image: unknown; files: unknown }>) => JSON.stringify({ version: 1, images });
const list2 = (images: Array<{ image: unknown; files: unknown }>) => JSON.stringify({ version: 2, images });
const SNAPSHOT = "containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/12/fs";

t.test("paths inside the data-root only", async (t) => {
  for (const good of ["overlay2/abc/diff/usr/bin/python3", "a", "overlay2/x/diff/with space/f"])
    t.ok(isDataRootPath(good), good);
  for (const bad of [
    "",
    "/etc/shadow",
    "../etc/shadow",
    "overlay2/../../etc",
    "a//b",
    "a/./b",
    "a/",
    "a\nb",
    "a\u0000b",
    7,
    null,
  ])
    t.notOk(isDataRootPath(bad), JSON.stringify(bad));
  t.notOk(isDataRootPath("a/".repeat(3000)), "too long");
});

t.test("version 2 paths: below the volume's data-root or containerd's root only", async (t) => {
  for (const good of ["docker/overlay2/abc/diff/usr/bin/python3", `${SNAPSHOT}/usr/bin/python3`, "containerd/x"])
    t.ok(isVolumeFilePath(good), good);
  for (const bad of [
    "overlay2/abc/diff/usr/bin/python3",
    ".ebs-cache-agent/reads.json",
    "docker",
    "containerd",
    "containerd/",
    "/containerd/x",
    "containerd/../etc/shadow",
    "containerd/a/../../etc",
    "containerd/./x",
    "docker//x",
    "containerd/a\nb",
    "dockerx/y",
    7,
  ])
    t.notOk(isVolumeFilePath(bad), JSON.stringify(bad));
  t.notOk(isVolumeFilePath(`containerd/${"a/".repeat(3000)}b`), "too long");
});

t.test("parse: a builder's list, and every way it can be wrong", async (t) => {
  t.same(
    parseReadList(list([{ image: "alpine:3.20", files: ["overlay2/l1/diff/bin/sh"] }])),
    { images: [{ image: "alpine:3.20", files: ["docker/overlay2/l1/diff/bin/sh"] }] },
    "version 1: data-root paths, the same files named from the volume's root",
  );
  t.same(
    parseReadList(
      list2([{ image: "alpine:3.20", files: [`${SNAPSHOT}/bin/sh`, "docker/overlay2/l1/diff/etc/passwd"] }]),
    ),
    { images: [{ image: "alpine:3.20", files: [`${SNAPSHOT}/bin/sh`, "docker/overlay2/l1/diff/etc/passwd"] }] },
    "version 2: volume paths, as they are",
  );
  const refused: Array<[string, RegExp]> = [
    ["not json", /not JSON/],
    ["[]", /JSON object/],
    [JSON.stringify({ version: 3, images: [] }), /version 3 is neither 1 nor 2/],
    [JSON.stringify({ version: "2", images: [] }), /version "2" is neither/],
    [list2([{ image: "alpine", files: ["overlay2/l1/diff/bin/sh"] }]), /files\[0\] .*inside the volume's docker\//],
    [list2([{ image: "alpine", files: [".ebs-cache-agent/reads.json"] }]), /not a plain path inside the volume/],
    [list2([{ image: "alpine", files: ["containerd/../../etc/passwd"] }]), /not a plain path/],
    [list2([{ image: "alpine", files: ["/containerd/x"] }]), /not a plain path/],
    [list2([{ image: "alpine", files: ["containerd"] }]), /not a plain path/],
    [
      list2([
        { image: "a", files: Array.from({ length: MAX_READ_LIST_FILES / 2 }, (_, i) => `containerd/f${i}`) },
        { image: "b", files: Array.from({ length: MAX_READ_LIST_FILES / 2 + 1 }, (_, i) => `docker/f${i}`) },
      ]),
      /more than/,
    ],
    [JSON.stringify({ version: 1 }), /images. must be an array/],
    [list([{ image: "Bad Ref", files: [] }]), /images\[0\]\.image/],
    [list([{ image: "alpine", files: "x" }]), /files must be an array/],
    [
      list([{ image: "alpine", files: ["ok", "../../etc/passwd"] }]),
      /files\[1\] .*not a plain path inside the data-root/,
    ],
    [list([{ image: "alpine", files: ["/etc/passwd"] }]), /not a plain path/],
    [
      list([{ image: "alpine", files: Array.from({ length: MAX_READ_LIST_FILES + 1 }, (_, i) => `f${i}`) }]),
      /more than/,
    ],
    [" ".repeat(MAX_READ_LIST_BYTES + 1), /larger than/],
  ];
  for (const [text, message] of refused) {
    t.throws(() => parseReadList(text), ReadListError, text.slice(0, 40));
    t.throws(() => parseReadList(text), { message }, text.slice(0, 40));
  }
});

t.test("an odd image reference in the list: Docker's grammar, or the list is refused", async (t) => {
  const digest = `sha256:${"a".repeat(64)}`;
  for (const image of [`redis@${digest}`, `redis:7@${digest}`, "Registry.Example.com:5000/app:1"])
    t.same(parseReadList(list([{ image, files: ["x"] }])).images[0]?.image, image, image);
  const refused: Array<[unknown, RegExp]> = [
    ["Alpine:3", /must be lowercase/],
    ["ghcr.io/Org/app:1", /must be lowercase/],
    [`redis@sha256:${"A".repeat(64)}`, /64 lowercase hex/],
    ["a".repeat(256), /at most 255/],
    ["a b", /whitespace/],
    ["../../etc", /"\.\."/],
    [7, /must be a string/],
    [null, /must be a string/],
  ];
  for (const [image, message] of refused)
    t.throws(() => parseReadList(list([{ image, files: ["x"] }])), { name: "ReadListError", message }, String(image));
  for (const entry of [null, 5, "x", [], {}])
    t.throws(
      () => parseReadList(JSON.stringify({ version: 1, images: [entry] })),
      ReadListError,
      JSON.stringify(entry),
    );
});

t.test("stored: version 1 while every file is in the data-root, version 2 once one is not", async (t) => {
  const graphdriver = { images: [{ image: "a:1", files: ["docker/overlay2/l/diff/bin/sh"] }] };
  t.same(JSON.parse(readListText(graphdriver)), {
    version: 1,
    images: [{ image: "a:1", files: ["overlay2/l/diff/bin/sh"] }],
  });
  t.same(parseReadList(readListText(graphdriver)), graphdriver, "read back as written");
  const mixed = { images: [...graphdriver.images, { image: "b:1", files: [`${SNAPSHOT}/bin/sh`] }] };
  t.same(JSON.parse(readListText(mixed)), { version: 2, ...mixed });
  t.same(parseReadList(readListText(mixed)), mixed, "read back as written");
  t.same(JSON.parse(readListText({ images: [] })), { version: 1, images: [] }, "an empty list: version 1");
});

t.test("order: the images about to run first, each file once", async (t) => {
  const parsed = parseReadList(
    list([
      { image: "other", files: ["o1", "shared"] },
      { image: "docker.io/library/python:3.12", files: ["p1", "p2", "shared"] },
      { image: "itisfoundation/sim4life:1.0", files: ["s1"] },
    ]),
  );
  t.same(
    needOrder(parsed, ["itisfoundation/sim4life:1.0", "python:3.12"]),
    {
      files: ["docker/s1", "docker/p1", "docker/p2", "docker/shared", "docker/o1"],
      wanted: 4,
    },
    "wanted images in the node's order (python matched across spellings), then the rest in the list's order",
  );
  t.same(
    needOrder(parsed, []),
    { files: ["docker/o1", "docker/shared", "docker/p1", "docker/p2", "docker/s1"], wanted: 0 },
    "nothing wanted: the list's order",
  );
});

t.test("the node's images: pre-pulled first, then the volume's set and config's, each once", async (t) => {
  t.same(imagesAboutToRun(["a:1", "b"], ["b:latest", "c"]), ["a:1", "b", "c"]);
  const tag = "io.simcore.autoscaling.ec2_instance.pre_pulled_images";
  t.same(
    imagesOfNode({ [VolumeTag.images]: "redis:7,nginx:1" }, ["busybox:1"], {
      tags: { [tag]: JSON.stringify(["itisfoundation/s4l:2", "redis:7"]) },
      prePulledImagesTag: tag,
    }),
    ["itisfoundation/s4l:2", "redis:7", "nginx:1", "busybox:1"],
  );
  t.same(
    imagesOfNode({ [VolumeTag.images]: "redis:7" }, [], { tags: { [tag]: "{not json" }, prePulledImagesTag: tag }),
    ["redis:7"],
    "a bad pre-pulled tag drops only its images",
  );
  t.same(
    imagesOfNode({}, ["x"], { tags: { [tag]: '["y"]' }, prePulledImagesTag: null }),
    ["x"],
    "tag not read when null",
  );
});
