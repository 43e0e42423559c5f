/**
 * The need list read from a volume through volume-paths (a temp folder stands for the mounted
 * volume: no root needed), and filefrag's output and range arithmetic on recorded text.
 */
import t from "tap";
import { mkdir, mkdtemp, rm, symlink, truncate, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ReadListError } from "../../src/agent/prewarm/need.ts";
import { parseFilefrag, subtractRanges } from "../../src/host/extents.ts";
import { fileRanges, readReadList } from "../../src/host/need-reads.ts";
import { isDataRootPath } from "../../src/read-list.ts";
import { VolumePathError } from "../../src/host/volume-paths.ts";
import { LINKS, makeLink, makeSpecial, SPECIALS } from "../fixtures/builders/odd-files.ts";

const volume = async (t: { teardown(fn: () => unknown): void }) => {
  const root = await mkdtemp(join(tmpdir(), "need-reads-"));
  t.teardown(() => rm(root, { recursive: true, force: true }));
  return root;
};

t.test("the list on the volume: read when it is a plain file, refused through a link", async (t) => {
  const root = await volume(t);
  t.equal(await readReadList(root), undefined, "no list: undefined");
  await mkdir(join(root, ".ebs-cache-agent"));
  await writeFile(
    join(root, ".ebs-cache-agent/reads.json"),
    JSON.stringify({ version: 1, images: [{ image: "a", files: ["f"] }] }),
  );
  t.same(await readReadList(root), { images: [{ image: "a", files: ["docker/f"] }] });
  await writeFile(
    join(root, ".ebs-cache-agent/reads.json"),
    '{"version":1,"images":[{"image":"a","files":["../../x"]}]}',
  );
  await t.rejects(readReadList(root), ReadListError);

  const other = await volume(t);
  await writeFile(join(other, "outside.json"), JSON.stringify({ version: 1, images: [] }));
  await symlink(other, join(root, "linked"));
  await rm(join(root, ".ebs-cache-agent"), { recursive: true });
  await symlink(other, join(root, ".ebs-cache-agent"));
  await t.rejects(readReadList(root), VolumePathError, "the agent's folder a symlink: not followed");
});

t.test("a huge list on the volume: read up to the bound only, then refused", async (t) => {
  const root = await volume(t);
  await mkdir(join(root, ".ebs-cache-agent"));
  await writeFile(join(root, ".ebs-cache-agent/reads.json"), "");
  await truncate(join(root, ".ebs-cache-agent/reads.json"), 64 * 1024 ** 3);
  await t.rejects(readReadList(root), { name: "ReadListError", message: /larger than/ });
});

t.test(
  "files: only regular files inside the data-root are mapped; links and what lies behind them are left out",
  async (t) => {
    const root = await volume(t);
    const diff = join(root, "docker/overlay2/l1/diff");
    await mkdir(join(diff, "usr/lib"), { recursive: true });
    await writeFile(join(diff, "usr/lib/a.so"), Buffer.alloc(64 * 1024, 1));
    await symlink("usr/lib", join(diff, "lib"));
    await symlink("/etc/hostname", join(diff, "hostname"));
    const mapped = await fileRanges(root, [
      "docker/overlay2/l1/diff/usr/lib/a.so",
      "docker/overlay2/l1/diff/lib/a.so",
      "docker/overlay2/l1/diff/hostname",
      "docker/overlay2/l1/diff/missing",
    ]);
    t.equal(mapped.mapped, 1, "the regular file");
    t.equal(mapped.skipped, 3, "behind a link, a link, missing");
  },
);

t.test("files walked several at once: their ranges in the list's order, what is left out counted", async (t) => {
  const root = await volume(t);
  const diff = join(root, "docker/overlay2/l1/diff");
  await mkdir(join(diff, "deep/er/still"), { recursive: true });
  const files: string[] = [];
  for (let i = 0; i < 20; i++) {
    // Each file its own size and folder depth, so that walks end in another order than they began.
    const path = `docker/overlay2/l1/diff/${i % 3 === 0 ? "deep/er/still/" : ""}f${i}`;
    await writeFile(join(root, path), Buffer.alloc((i + 1) * 8192, i));
    files.push(path);
  }
  const listed = [...files].reverse().flatMap((path, i) => (i % 4 === 0 ? [path, `${path}.missing`] : [path]));
  const mapped = await fileRanges(root, listed);
  t.same([mapped.mapped, mapped.skipped], [20, 5]);
  const oneByOne = [];
  for (const path of listed) oneByOne.push(...(await fileRanges(root, [path])).ranges);
  t.same(mapped.ranges, oneByOne, "the ranges of each file as mapped alone, in the list's order");
  t.same(
    mapped.files.map((file) => file.path),
    listed.filter((path) => !path.endsWith(".missing")).map((path) => join(root, path)),
    "the files mapped, in the list's order, by their paths on the volume",
  );
  t.same(
    mapped.files.flatMap((file) => file.ranges),
    mapped.ranges,
    "each file's own ranges: together the list's",
  );
});

t.test("a listed name over 255 bytes (lstat: ENAMETOOLONG) is left out, the list kept", async (t) => {
  const root = await volume(t);
  const diff = join(root, "docker/overlay2/l1/diff");
  await mkdir(diff, { recursive: true });
  await writeFile(join(diff, "a.so"), Buffer.alloc(64 * 1024, 1));
  // The list bounds a path's characters (4096), not a name's bytes: both pass its checks.
  const long = `docker/overlay2/l1/diff/${"n".repeat(256)}`;
  const wide = `docker/overlay2/l1/diff/${"é".repeat(200)}`;
  t.ok(
    [long, wide].every((path) => isDataRootPath(path)),
    "valid list paths",
  );
  const mapped = await fileRanges(root, [long, "docker/overlay2/l1/diff/a.so", `${long}/x`, wide]);
  t.same([mapped.mapped, mapped.skipped], [1, 3]);
});

t.test("a listed file that is no regular file is never handed to filefrag (a FIFO would hang it)", async (t) => {
  const root = await volume(t);
  const canary = await volume(t);
  await writeFile(join(canary, "file"), Buffer.alloc(64 * 1024, 1));
  const diff = join(root, "docker/overlay2/l1/diff");
  await mkdir(join(diff, "folder"), { recursive: true });
  const odd = ["folder"];
  for (const kind of SPECIALS) {
    makeSpecial(kind, join(diff, kind));
    odd.push(kind);
  }
  for (const kind of Object.keys(LINKS)) {
    await makeLink(kind, canary, join(diff, kind));
    odd.push(kind, `${kind}/file`);
  }
  const mapped = await fileRanges(
    root,
    odd.map((name) => `docker/overlay2/l1/diff/${name}`),
  );
  t.same([mapped.mapped, mapped.skipped, mapped.ranges], [0, odd.length, []], odd.join(", "));
});

t.test("a filefrag that does not answer is killed after its bound: an error, so the list is not used", async (t) => {
  // A file swapped for a FIFO after the walk would block filefrag's open: a filefrag that hangs stands for it.
  const root = await volume(t);
  const bin = await volume(t);
  await writeFile(join(bin, "filefrag"), "#!/bin/sh\nexec sleep 600\n", { mode: 0o755 });
  const path = process.env.PATH;
  process.env.PATH = `${bin}:${path}`;
  t.teardown(() => void (process.env.PATH = path));
  await mkdir(join(root, "docker"));
  await writeFile(join(root, "docker/a.so"), "x");
  const started = Date.now();
  await t.rejects(fileRanges(root, ["docker/a.so"], { filefragTimeoutMs: 200 }), {
    name: "AgentError",
    message: /^filefrag did not map 1 file of the need list within 0\.2 s/,
  });
  t.ok(Date.now() - started < 5000, "not held");
});

t.test("a listed file on a filesystem mounted below the volume is not the volume's: left out", async (t) => {
  // No mount without root: "/" stands for the volume, /proc for a filesystem mounted below it.
  const mapped = await fileRanges("/", ["proc/version"]);
  t.same([mapped.mapped, mapped.skipped], [0, 1]);
});

t.test("files in containerd's root: mapped as the data-root's, never through a link", async (t) => {
  const root = await volume(t);
  const fs = join(root, "containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/4/fs");
  await mkdir(join(fs, "usr/bin"), { recursive: true });
  await writeFile(join(fs, "usr/bin/python3"), Buffer.alloc(64 * 1024, 1));
  await symlink("usr/bin", join(fs, "bin"));
  const outside = await volume(t);
  await mkdir(join(outside, "snapshots/5/fs"), { recursive: true });
  await writeFile(join(outside, "snapshots/5/fs/secret"), "x");
  await symlink(join(outside, "snapshots/5"), join(root, "containerd/io.containerd.snapshotter.v1.overlayfs/l"));
  const mapped = await fileRanges(root, [
    "containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/4/fs/usr/bin/python3",
    "containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/4/fs/bin/python3",
    "containerd/io.containerd.snapshotter.v1.overlayfs/l/fs/secret",
  ]);
  t.equal(mapped.mapped, 1, "the snapshot's regular file");
  t.equal(mapped.skipped, 2, "behind a link in the snapshot, and behind a link out of the volume");

  // containerd's root itself a link out of the volume: nothing of it is read.
  await rm(join(root, "containerd"), { recursive: true });
  await symlink(join(outside), join(root, "containerd"));
  const escaped = await fileRanges(root, ["containerd/snapshots/5/fs/secret"]);
  t.same([escaped.mapped, escaped.skipped], [0, 1], "containerd/ a symlink: not followed");
});

t.test("a version 2 list on the volume is read with its containerd paths", async (t) => {
  const root = await volume(t);
  await mkdir(join(root, ".ebs-cache-agent"));
  const file = "containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/4/fs/bin/sh";
  await writeFile(
    join(root, ".ebs-cache-agent/reads.json"),
    JSON.stringify({ version: 2, images: [{ image: "a", files: [file] }] }),
  );
  t.same(await readReadList(root), { images: [{ image: "a", files: [file] }] });
});

t.test("filefrag -v -e output and range arithmetic", async (t) => {
  const text = [
    "Filesystem type is: 58465342",
    "File size of /v/docker/overlay2/l1/diff/usr/bin/python3 is 6832024 (1668 blocks of 4096 bytes)",
    " ext:     logical_offset:        physical_offset: length:   expected: flags:",
    "   0:        0..    1023:      24576..     25599:   1024:            ",
    "   1:     1024..    1667:      40960..     41603:    644:      25600: last,eof",
    "/v/docker/overlay2/l1/diff/usr/bin/python3: 2 extents found",
    "File size of /v/docker/with space/f is 10 (1 block of 4096 bytes)",
    " ext:     logical_offset:        physical_offset: length:   expected: flags:",
    "   0:        0..       0:          0..         0:      0:             last,unknown_loc,delalloc,eof",
    "/v/docker/with space/f: 1 extent found",
  ].join("\n");
  const parsed = parseFilefrag(text);
  t.same(parsed.get("/v/docker/overlay2/l1/diff/usr/bin/python3"), [
    { start: 24576 * 4096, end: 25600 * 4096 },
    { start: 40960 * 4096, end: 41604 * 4096 },
  ]);
  t.same(parsed.get("/v/docker/with space/f"), [], "delayed allocation: nothing on the device yet");

  t.same(
    subtractRanges(
      [
        { start: 0, end: 100 },
        { start: 200, end: 300 },
      ],
      [
        { start: 10, end: 20 },
        { start: 90, end: 210 },
        { start: 250, end: 260 },
      ],
    ),
    [
      { start: 0, end: 10 },
      { start: 20, end: 90 },
      { start: 210, end: 250 },
      { start: 260, end: 300 },
    ],
  );
  t.same(subtractRanges([{ start: 0, end: 10 }], []), [{ start: 0, end: 10 }]);
  t.same(subtractRanges([{ start: 0, end: 10 }], [{ start: 0, end: 10 }]), []);
});
