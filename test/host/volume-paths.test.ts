/**
 * Paths on a volume resolved without following links (src/host/volume-paths.ts), the layout
 * check that refuses a volume holding a link, FIFO, socket or device where docker or the agent
 * expects a folder or a file (src/host/volume-layout.ts), on a real filesystem; and the rule that
 * no other module of src/ reaches the volume through node:fs. The same corpus on a real boot,
 * with docker and quarantine: test/agent/boot/symlink.lab.test.ts.
 */
import { execFileSync } from "node:child_process";
import { lstat, mkdir, readdir, readFile, rename, rm, symlink, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import t from "tap";
import { checkVolumeLayout } from "../../src/host/volume-layout.ts";
import {
  mkdirBeneath,
  readFileBeneath,
  removeBeneath,
  resolveBeneath,
  VolumePathError,
} from "../../src/host/volume-paths.ts";
import { LINKS, makeLink, makeSpecial, SPECIALS } from "../fixtures/builders/odd-files.ts";
import { tempFolders } from "../fixtures/builders/temp-folders.ts";

const folder = await tempFolders("volume-paths-");

const LAYER = "b".repeat(64);
const CONTAINER = "d".repeat(64);

/** A volume as docker and the agent leave it: the data-root, containerd's root beside it, the marker. */
async function volume(): Promise<string> {
  const root = await folder();
  const files: Record<string, string> = {
    ".ebs-cache-agent/prepared-for": "i-0123\n",
    "docker/engine-id": "engine",
    "docker/image/overlay2/repositories.json": "{}",
    [`docker/image/overlay2/layerdb/sha256/${"c".repeat(64)}/cache-id`]: LAYER,
    [`docker/image/overlay2/layerdb/mounts/${CONTAINER}/mount-id`]: "a".repeat(64),
    [`docker/image/overlay2/imagedb/content/sha256/${"e".repeat(64)}`]: "{}",
    [`docker/overlay2/${LAYER}/diff/bin/sh`]: "binary",
    [`docker/overlay2/${LAYER}/link`]: "IMAGELAYERLINK000000000000",
    [`docker/containers/${CONTAINER}/config.v2.json`]: "{}",
    "docker/network/files/local-kv.db": "kv",
    "docker/volumes/metadata.db": "meta",
    "docker/volumes/v1/_data/file": "user data",
    "docker/swarm/certificates/swarm-node.key": "key",
    "docker/buildkit/cache.db": "cache",
    "containerd/io.containerd.metadata.v1.bolt/meta.db": "meta",
    [`containerd/io.containerd.content.v1.content/blobs/sha256/${"f".repeat(64)}`]: "blob",
    "containerd/io.containerd.snapshotter.v1.overlayfs/metadata.db": "meta",
    "containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs/etc/passwd": "root",
  };
  for (const [relative, content] of Object.entries(files)) {
    await mkdir(dirname(join(root, relative)), { recursive: true });
    await writeFile(join(root, relative), content);
  }
  for (const empty of ["docker/tmp", "docker/plugins", "docker/runtimes", "docker/trust", "docker/containerd/daemon"])
    await mkdir(join(root, empty), { recursive: true });
  await mkdir(join(root, "docker/overlay2/l"), { recursive: true });
  await symlink(`../${LAYER}/diff`, join(root, "docker/overlay2/l/IMAGELAYERLINK000000000000"));
  // What overlay2 makes on XFS for its quotas (loop0's numbers stand in for the volume's device).
  for (const store of ["overlay2", "volumes"])
    execFileSync("mknod", [join(root, "docker", store, "backingFsBlockDev"), "b", "7", "0"]);
  // Image content: a link inside a layer's diff is an ordinary file of the image.
  await symlink("/etc", join(root, `docker/overlay2/${LAYER}/diff/etc-link`));
  await symlink("usr/bin", join(root, "containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs/bin"));
  return root;
}

/**
 * A FIFO, a device node and a socket made once, moved into place for each case and back (cheaper than making each
 * anew).
 */
const STOCK = await folder();
for (const kind of SPECIALS) makeSpecial(kind, join(STOCK, kind));

/** Puts a thing that is not a folder or a regular file at `path` (whose folder exists); returns how to take it away. */
const ODD: Record<string, (path: string, canary: string) => Promise<() => Promise<void>>> = {
  ...Object.fromEntries(
    Object.keys(LINKS).map((kind) => [
      kind,
      async (path: string, canary: string) => {
        await makeLink(kind, canary, path);
        return () => rm(path);
      },
    ]),
  ),
  ...Object.fromEntries(
    SPECIALS.map((kind) => [
      kind,
      async (path: string) => {
        await rename(join(STOCK, kind), path);
        return () => rename(path, join(STOCK, kind));
      },
    ]),
  ),
};

/** Paths the layout check covers, with what belongs there. */
const CHECKED = [
  ".ebs-cache-agent",
  ".ebs-cache-agent/prepared-for",
  "docker",
  "docker/engine-id",
  "docker/swarm",
  "docker/swarm/certificates",
  "docker/containers",
  `docker/containers/${CONTAINER}`,
  `docker/containers/${CONTAINER}/config.v2.json`,
  "docker/network",
  "docker/network/files",
  "docker/network/files/local-kv.db",
  "docker/volumes",
  "docker/volumes/metadata.db",
  "docker/volumes/backingFsBlockDev",
  "docker/volumes/v1",
  "docker/volumes/v1/_data",
  "docker/image",
  "docker/image/overlay2",
  "docker/image/overlay2/repositories.json",
  "docker/image/overlay2/layerdb",
  "docker/image/overlay2/layerdb/mounts",
  `docker/image/overlay2/layerdb/mounts/${CONTAINER}/mount-id`,
  "docker/image/overlay2/imagedb",
  "docker/overlay2",
  "docker/overlay2/l",
  "docker/overlay2/backingFsBlockDev",
  `docker/overlay2/${LAYER}`,
  `docker/overlay2/${LAYER}/diff`,
  `docker/overlay2/${LAYER}/link`,
  "docker/tmp",
  "docker/buildkit",
  "docker/plugins",
  "docker/runtimes",
  "docker/trust",
  "docker/containerd",
  "containerd",
  "containerd/io.containerd.metadata.v1.bolt",
  "containerd/io.containerd.metadata.v1.bolt/meta.db",
  "containerd/io.containerd.content.v1.content/blobs",
  "containerd/io.containerd.snapshotter.v1.overlayfs/snapshots",
  "containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/1",
];

t.test("a volume as docker and the agent leave it passes, links inside image content included", async () => {
  await checkVolumeLayout(await volume());
});

t.test("each checked path, as each odd thing, refuses the volume naming the path", async (t) => {
  const canary = await folder();
  await writeFile(join(canary, "file"), "host");
  const root = await volume();
  const aside = join(await folder(), "aside");
  let cases = 0;
  for (const relative of CHECKED) {
    const path = join(root, relative);
    // The path's own content is put aside meanwhile, out of the volume, and put back after.
    await rename(path, aside);
    for (const [name, make] of Object.entries(ODD)) {
      const takeAway = await make(path, canary);
      const error = await checkVolumeLayout(root).catch((e: unknown) => e);
      await takeAway();
      if (!(error instanceof VolumePathError)) {
        t.fail(`${relative} as ${name} passed`, { error });
        continue;
      }
      if (!error.message.includes(`${path} on the volume is a `)) t.fail(`${relative} as ${name}: ${error.message}`);
      cases++;
    }
    await rename(aside, path);
  }
  await checkVolumeLayout(root);
  t.equal(cases, CHECKED.length * Object.keys(ODD).length, `${cases} cases refused`);
  t.same((await readdir(canary)).sort(), ["file"], "the canary holds what it held");
  t.equal(await readFile(join(canary, "file"), "utf8"), "host");
});

t.test("an overlay2 short link must point at a layer's diff beside it", async (t) => {
  const root = await volume();
  await symlink("/etc", join(root, "docker/overlay2/l/ESCAPELINK0000000000000000"));
  await t.rejects(checkVolumeLayout(root), {
    message: /overlay2\/l\/ESCAPELINK0000000000000000 on the volume is a symlink, where a symlink to/,
  });
  const other = await volume();
  await symlink(`../../../${LAYER}/diff`, join(other, "docker/overlay2/l/UPLINK00000000000000000000"));
  await t.rejects(checkVolumeLayout(other), VolumePathError, "not even up and down again");
});

t.test("resolveBeneath: a link on the way refuses, the last component is told, never followed", async (t) => {
  const root = await folder();
  const outside = await folder();
  await mkdir(join(root, "a"));
  await symlink(outside, join(root, "a", "b"));
  t.same(await resolveBeneath(root, "a/b"), { path: join(root, "a/b"), kind: "symlink" });
  await t.rejects(resolveBeneath(root, "a/b/c"), {
    message: /a\/b on the volume is a symlink, where a folder is expected/,
  });
  t.same(await resolveBeneath(root, "x/y"), { path: join(root, "x/y"), kind: "missing" });
  for (const bad of ["../etc", "/etc", "a/../../etc", "a/"])
    await t.rejects(resolveBeneath(root, bad), { message: /not a plain relative path/ }, bad);
});

t.test("readFileBeneath: a FIFO, a device, a link are refused, never read (no hang)", async (t) => {
  const root = await folder();
  await mkdir(join(root, "m"));
  await writeFile(join(root, "m", "ok"), "i-1\n");
  t.equal(await readFileBeneath(root, "m/ok"), "i-1");
  t.equal(await readFileBeneath(root, "m/none"), undefined);
  for (const [name, make] of [
    ["fifo", ODD["a FIFO"]!],
    ["device", ODD["a device node"]!],
    ["link", ODD["a link to a device"]!],
    ["loop", ODD["a link loop"]!],
  ] as const) {
    const takeAway = await make(join(root, "m", name), root);
    await t.rejects(readFileBeneath(root, `m/${name}`), VolumePathError, name);
    await takeAway();
  }
});

t.test("mkdirBeneath and removeBeneath: no link is gone through; a link is removed as a link", async (t) => {
  const root = await folder();
  const outside = await folder();
  await symlink(outside, join(root, ".ebs-cache-agent"));
  await t.rejects(mkdirBeneath(root, ".ebs-cache-agent"), VolumePathError);
  await t.rejects(mkdirBeneath(root, ".ebs-cache-agent/x"), VolumePathError);
  t.same(await readdir(outside), [], "nothing made in the link's target");
  t.equal(await removeBeneath(root, ".ebs-cache-agent"), true);
  t.ok((await lstat(outside)).isDirectory(), "the target stays");
  t.equal(await mkdirBeneath(root, "a/b", 0o711), join(root, "a/b"));
  t.equal((await lstat(join(root, "a/b"))).mode & 0o777, 0o711);
  await t.rejects(removeBeneath(root, ""), { message: /refusing to remove the volume's root/ });
});

/**
 * The modules of src/ that import node:fs, each touching only the host's own paths (config,
 * state, daemon.json, devices, /proc, /sys, mount points); every path on a mounted volume goes
 * through src/host/volume-paths.ts. The lab (src/lab) builds volumes and is not the agent.
 */
const HOST_SIDE_FS = new Set([
  // The calibration file the acceptance run writes: the state folder or --output, never a volume (it mounts read-only).
  "agent/acceptance/wire.ts",
  "agent/boot/preflight.ts",
  "agent/boot/prepared-record.ts",
  // systemd's unit folder on the host (presence, enablement, ordering), read only.
  "agent/doctor/observe.ts",
  // prewarm-mount.json in the state folder, and an inotify watch of that folder (the run's labels' gate).
  "agent/prewarm/mount-run.ts",
  "agent/prewarm/state.ts",
  // /proc/<pid>/stat: whether a state's or a lock's writer still runs, read only.
  "agent/process-identity.ts",
  "agent/refresh/state.ts",
  "agent/workspace-record.ts",
  "cli/wiring.ts",
  "config/load.ts",
  // config.toml on the host; containerd's root on the volume goes through volume-paths.ts.
  "docker/containerd-store.ts",
  "docker/daemon-json.ts",
  "docker/owned-file.ts",
  "docker/dockerd-command.ts",
  // The snapshot build's private dockerd: its config, pidfile and log in the build's work folder.
  "docker/build-dockerd.ts",
  // The build's private containerd: its config, socket and state in the work folder, and its root
  // folder on the image the build itself formatted (never a volume in use); the daemons' pidfiles.
  "docker/build-containerd.ts",
  "docker/build-process.ts",
  // The machine's /run/docker/plugins, removed after a private dockerd when it made it.
  "docker/plugin-discovery-dir.ts",
  // The host's own data-root, recorded in the state folder before the first switch.
  "docker/original-data-root.ts",
  "fs-atomic.ts",
  "host/device.ts",
  "host/facts.ts",
  "host/filesystem.ts",
  "host/fill.ts",
  // The snapshot builder's disk image and manifest, on the build machine: never a mounted volume.
  "host/image-blocks.ts",
  // The snapshot build's image file and its marker in the work folder: never a mounted volume.
  "host/image-file.ts",
  // The snapshot upload's image, read unmounted (its start, a file by xfs_db's map); the build's
  // record on the mounted image is written through volume-paths.ts.
  "host/pool-image.ts",
  // sysfs: the instance-store disks are listed, never opened for writing.
  "host/instance-store.ts",
  // The golden build's own volume, on the build machine, before it is a snapshot.
  "host/record-reads.ts",
  "host/snapshot-manifest.ts",
  "host/fio.ts",
  // sysfs: the device's read counters, read only.
  "host/read-pacer.ts",
  "host/mount.ts",
  // /proc and /sys/fs: which mount namespaces still hold a filesystem, read only.
  "host/mount-namespaces.ts",
  "host/serial.ts",
  "host/volume-reads.ts",
  "metrics/textfile.ts",
  "status/records.ts",
]);
/** Modules that work on a mounted volume: no node:fs of their own. */
const ON_THE_VOLUME = [
  "docker/data-root.ts",
  "agent/boot/activation-marker.ts",
  "agent/volume-record.ts",
  "host/volume-layout.ts",
  "host/volume-marker.ts",
];

t.test("no module of src/ but volume-paths.ts and the listed host-side ones imports node:fs", async (t) => {
  const src = join(import.meta.dirname, "..", "..", "src");
  const importing: string[] = [];
  for (const entry of await readdir(src, { recursive: true })) {
    if (!entry.endsWith(".ts") || entry.startsWith("lab/")) continue;
    if (
      /from\s+["'](?:node:)?fs(?:\/promises)?["']|require\(\s*["'](?:node:)?fs/.test(
        await readFile(join(src, entry), "utf8"),
      )
    )
      importing.push(entry);
  }
  t.ok(importing.includes("host/volume-paths.ts"), "the scan finds the helper");
  t.same(
    importing.filter((file) => file !== "host/volume-paths.ts" && !HOST_SIDE_FS.has(file)),
    [],
    "a new module on the volume uses src/host/volume-paths.ts; a new host-side one is listed here",
  );
  for (const file of ON_THE_VOLUME)
    t.notOk(
      HOST_SIDE_FS.has(file) || importing.includes(file),
      `${file} reaches the volume only through volume-paths.ts`,
    );
});
