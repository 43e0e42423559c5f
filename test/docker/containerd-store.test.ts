import { containerdRootOnVolume } from "../../src/layout.ts";
import t from "tap";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  ContainerdConfigError,
  containerdRootOf,
  createContainerdConfig,
  CONTAINERD_MACHINE_LOCAL_STATE,
  DEFAULT_CONTAINERD_ROOT,
  prepareContainerdRoot,
  withContainerdRoot,
} from "../../src/docker/containerd-store.ts";
import { DataRootError, prepareDataRoot } from "../../src/docker/data-root.ts";

/** The head of Debian's /etc/containerd/config.toml (containerd 2.1.9+ds1-5, sid). */
const DEBIAN = `version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
`;
const P = "/etc/containerd/config.toml";

t.test("containerd's root on a volume is its containerd/ folder, beside docker/", async (t) => {
  t.equal(containerdRootOnVolume("/var/lib/ebs-cache/vol-1"), "/var/lib/ebs-cache/vol-1/containerd");
});

t.test("containerdRootOf: the top-level root, or the default; a root inside a table is not containerd's", async (t) => {
  t.equal(containerdRootOf(DEBIAN, P), DEFAULT_CONTAINERD_ROOT);
  t.equal(containerdRootOf("", P), DEFAULT_CONTAINERD_ROOT);
  t.equal(containerdRootOf(`version = 3\nroot = '/srv/c'\n`, P), "/srv/c");
  t.equal(containerdRootOf(`root = "/srv/\\u0063" # comment\n`, P), "/srv/c");
  t.equal(containerdRootOf(`[plugins.x]\nroot = "/not/this"\n`, P), DEFAULT_CONTAINERD_ROOT);
  t.throws(() => containerdRootOf(`root = [1]\n`, P), ContainerdConfigError, "a root that is not a string is refused");
});

t.test("withContainerdRoot: sets, replaces and removes only the top-level root line", async (t) => {
  const set = withContainerdRoot(DEBIAN, "/var/lib/ebs-cache/vol-1/containerd", P);
  t.equal(
    set,
    DEBIAN.replace("version = 2\n", 'version = 2\nroot = "/var/lib/ebs-cache/vol-1/containerd"\n'),
    "inserted after version, the rest byte for byte",
  );
  t.equal(containerdRootOf(set, P), "/var/lib/ebs-cache/vol-1/containerd");
  const replaced = withContainerdRoot(set, "/var/lib/ebs-cache/vol-2/containerd", P);
  t.equal(replaced, DEBIAN.replace("version = 2\n", 'version = 2\nroot = "/var/lib/ebs-cache/vol-2/containerd"\n'));
  t.equal(withContainerdRoot(set, undefined, P), DEBIAN, "removing the line gives the original back");
  t.equal(withContainerdRoot(DEBIAN, undefined, P), DEBIAN, "nothing to remove: unchanged");
  t.equal(withContainerdRoot("", "/v/containerd", P), 'root = "/v/containerd"\n', "no file: one line");
  t.equal(withContainerdRoot("[plugins]\n", "/v/c", P), 'root = "/v/c"\n[plugins]\n', "before the first table");
  t.throws(() => withContainerdRoot(DEBIAN, "relative/path", P), ContainerdConfigError);
  t.throws(
    () => withContainerdRoot("root = 5\n", "/v/c", P),
    ContainerdConfigError,
    "a root line it does not understand is left alone",
  );
});

t.test("the file: backup before the first change, no write when unchanged, restore", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "containerd-config-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const path = join(dir, "config.toml");
  await writeFile(path, DEBIAN, { mode: 0o600 });
  const config = createContainerdConfig({ path });
  t.equal(await config.root(), DEFAULT_CONTAINERD_ROOT);
  t.equal(await config.setRoot("/mnt/vol/containerd"), true, "changed");
  t.equal(await config.root(), "/mnt/vol/containerd");
  t.equal(await readFile(config.backupPath, "utf8"), DEBIAN, "the backup is the file as found");
  t.equal((await stat(path)).mode & 0o777, 0o600, "mode kept");
  t.equal(await config.setRoot("/mnt/vol/containerd"), false, "a second identical change writes nothing");
  t.equal(await config.setRoot("/mnt/other/containerd"), true);
  t.equal(await readFile(config.backupPath, "utf8"), DEBIAN, "later changes keep the first backup");
  await config.restoreBackup();
  t.equal(await readFile(path, "utf8"), DEBIAN, "restored");

  const absent = join(dir, "absent.toml");
  const fresh = createContainerdConfig({ path: absent });
  t.equal(await fresh.setRoot("/mnt/vol/containerd"), true);
  t.ok(existsSync(fresh.absentMarkerPath), "no file before: a marker says so");
  await fresh.restoreBackup();
  t.notOk(existsSync(absent), "restoring removes the file");

  const bad = join(dir, "bad.toml");
  await writeFile(bad, "root = [1]\n");
  await t.rejects(createContainerdConfig({ path: bad }).setRoot("/mnt/vol/containerd"), ContainerdConfigError);
  t.equal(await readFile(bad, "utf8"), "root = [1]\n", "a refused file is left as it was");
});

t.test(
  "prepareContainerdRoot: creates the root; on a pool volume's first boot drops only the machine-local state",
  async (t) => {
    const volume = await mkdtemp(join(tmpdir(), "containerd-root-"));
    t.teardown(() => rm(volume, { recursive: true, force: true }));
    const root = containerdRootOnVolume(volume);
    await prepareContainerdRoot(root, { dropMachineState: true });
    t.equal((await stat(root)).mode & 0o777, 0o711, "created 0711, as containerd makes it");
    const kept = [
      "io.containerd.content.v1.content",
      "io.containerd.metadata.v1.bolt",
      "io.containerd.snapshotter.v1.overlayfs",
    ];
    for (const name of [...kept, ...CONTAINERD_MACHINE_LOCAL_STATE]) {
      await mkdir(join(root, name, "x"), { recursive: true });
      await writeFile(join(root, name, "x", "f"), "data");
    }
    await prepareContainerdRoot(root, { dropMachineState: false });
    t.same(
      (await readdir(root)).sort(),
      [...kept, ...CONTAINERD_MACHINE_LOCAL_STATE].sort(),
      "without dropMachineState nothing is removed",
    );
    await prepareContainerdRoot(root, { dropMachineState: true });
    t.same(
      (await readdir(root)).sort(),
      kept.sort(),
      "the images' content, snapshots and metadata stay; the instance's state goes",
    );
    await prepareContainerdRoot(root, { dropMachineState: true });
    t.same((await readdir(root)).sort(), kept.sort(), "again: nothing more to do");

    const elsewhere = await mkdtemp(join(tmpdir(), "containerd-elsewhere-"));
    t.teardown(() => rm(elsewhere, { recursive: true, force: true }));
    await mkdir(join(elsewhere, "tmpmounts"));
    const linked = join(volume, "linked");
    await symlink(elsewhere, linked);
    await t.rejects(
      prepareContainerdRoot(linked, { dropMachineState: true }),
      ContainerdConfigError,
      "a root that is a symlink is refused",
    );
    t.same(await readdir(elsewhere), ["tmpmounts"], "and nothing it points to is removed");
    await t.rejects(
      prepareContainerdRoot("relative/containerd", { dropMachineState: true }),
      ContainerdConfigError,
      "a relative root is refused",
    );
  },
);

t.test(
  "prepareDataRoot with the containerd store: a data-root without image/ is recognised by containerd's metadata " +
    "beside it",
  async (t) => {
    const volume = await mkdtemp(join(tmpdir(), "containerd-data-root-"));
    t.teardown(() => rm(volume, { recursive: true, force: true }));
    const dataRoot = join(volume, "docker");
    await mkdir(join(dataRoot, "containers", "c1"), { recursive: true });
    await mkdir(join(dataRoot, "swarm"), { recursive: true });
    await t.rejects(
      prepareDataRoot(dataRoot, { kind: "pool", imageStore: "containerd" }),
      DataRootError,
      "no containerd metadata beside it: refused",
    );
    await t.rejects(
      prepareDataRoot(dataRoot, { kind: "pool" }),
      DataRootError,
      "as the graphdriver store refuses a data-root without image/",
    );
    t.same((await readdir(dataRoot)).sort(), ["containers", "swarm"], "nothing removed by a refusal");
    await mkdir(join(volume, "containerd", "io.containerd.metadata.v1.bolt"), { recursive: true });
    const report = await prepareDataRoot(dataRoot, { kind: "pool", imageStore: "containerd" });
    t.same(report.drivers, [], "no graph driver layout");
    t.same(await readdir(dataRoot), ["containers"], "swarm identity removed");
    t.same(await readdir(join(dataRoot, "containers")), [], "and the containers");
  },
);
