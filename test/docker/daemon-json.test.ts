import t from "tap";
import { existsSync } from "node:fs";
import { chmod, lstat, mkdir, readdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  ABSENT_SUFFIX,
  BACKUP_SUFFIX,
  createDaemonConfig,
  DaemonJsonError,
  renderDaemonJson,
} from "../../src/docker/daemon-json.ts";
import { DataRootError, prepareDataRoot } from "../../src/docker/data-root.ts";
import { VolumePathError } from "../../src/host/volume-paths.ts";
import { chooseLabelMode, LabelError, nodeLabelChanges, readinessLabels } from "../../src/docker/labels.ts";
import { createSystemdDockerService, DockerServiceError, installedDockerdVersion } from "../../src/docker/service.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { tempFolders } from "../fixtures/builders/temp-folders.ts";

const folder = await tempFolders("ebs-cache-docker-json-");

t.test("daemon.json", async (t) => {
  t.test("keeps every other key and its order; sets and removes data-root", async (t) => {
    const path = join(await folder(), "daemon.json");
    const original =
      '{\n    "log-driver": "json-file",\n    "data-root": "/old",\n    "log-opts": {"max-size": "10m"},\n    ' +
      '"live-restore": true\n}\n';
    await writeFile(path, original);
    const config = createDaemonConfig({ path, log: createMemoryLogger() });
    t.equal(await config.dataRoot(), "/old");
    await config.setDataRoot("/mnt/ebs-cache/docker");
    const text = await readFile(path, "utf8");
    t.same(
      Object.keys(JSON.parse(text) as object),
      ["log-driver", "data-root", "log-opts", "live-restore"],
      "order kept",
    );
    t.same(JSON.parse(text), {
      "log-driver": "json-file",
      "data-root": "/mnt/ebs-cache/docker",
      "log-opts": { "max-size": "10m" },
      "live-restore": true,
    });
    t.match(text, /^\{\n {4}"log-driver"/, "the file's indentation is kept");
    t.equal(await config.dataRoot(), "/mnt/ebs-cache/docker");
    await config.setDataRoot(undefined);
    t.same(Object.keys(JSON.parse(await readFile(path, "utf8")) as object), ["log-driver", "log-opts", "live-restore"]);
    t.equal(await config.dataRoot(), undefined);
    await config.setDataRoot("/new");
    t.same(
      Object.keys(JSON.parse(await readFile(path, "utf8")) as object),
      ["log-driver", "log-opts", "live-restore", "data-root"],
      "a new key goes last",
    );
  });

  t.test("backup before the first change, then restore puts the bytes back", async (t) => {
    const dir = await folder();
    const path = join(dir, "daemon.json");
    const original = Buffer.from('{"data-root":"/var/lib/docker-old","debug":false}');
    await writeFile(path, original);
    const config = createDaemonConfig({ path });
    await config.setDataRoot("/vol/docker");
    t.same(await readFile(path + BACKUP_SUFFIX), original, "the backup is the original, verbatim");
    await config.setEngineLabels("ebs-cache", { "ebs-cache.state": "ready" });
    t.same(await readFile(path + BACKUP_SUFFIX), original, "a second change keeps the first backup");
    t.equal(JSON.parse(await readFile(path, "utf8")).debug, false);
    await config.restoreBackup();
    t.same(await readFile(path), original, "restored byte for byte");
    await config.restoreBackup();
    t.same(await readFile(path), original, "restoring twice is the same");

    const again = createDaemonConfig({ path });
    await again.setDataRoot("/var/lib/docker-old");
    t.same(await readFile(path), original, "a change that changes nothing writes nothing");
  });

  t.test("a missing file is {} and is created; restore removes it", async (t) => {
    const dir = await folder();
    const path = join(dir, "etc-docker", "daemon.json");
    const config = createDaemonConfig({ path });
    t.same(await config.read(), {});
    t.equal(await config.dataRoot(), undefined);
    t.same(await config.engineLabels(), []);
    await config.setDataRoot(undefined);
    t.notOk(existsSync(path), "nothing to change: no file is made");
    await config.setDataRoot("/vol/docker");
    t.same(JSON.parse(await readFile(path, "utf8")), { "data-root": "/vol/docker" });
    t.equal((await stat(path)).mode & 0o777, 0o644);
    t.ok(existsSync(path + ABSENT_SUFFIX), "the backup says there was no file");
    t.notOk(existsSync(path + BACKUP_SUFFIX));
    await config.restoreBackup();
    t.notOk(existsSync(path), "restore removed the file");
  });

  t.test("a file that does not parse is refused and left byte for byte", async (t) => {
    const dir = await folder();
    const path = join(dir, "daemon.json");
    const broken = Buffer.from('{"data-root": ');
    await writeFile(path, broken);
    const config = createDaemonConfig({ path });
    await t.rejects(config.dataRoot(), DaemonJsonError);
    await t.rejects(config.setDataRoot("/vol/docker"), DaemonJsonError);
    const error = await config.setEngineLabels("ebs-cache", { "ebs-cache.state": "ready" }).catch((e: unknown) => e);
    t.type(error, DaemonJsonError);
    t.match((error as DaemonJsonError).remediation, /fix the file/);
    t.same(await readFile(path), broken, "bytes unchanged");
    t.same((await readdir(dir)).sort(), ["daemon.json"], "no backup, no temp file");
    await t.rejects(config.restoreBackup(), DaemonJsonError, "no backup to restore");
  });

  t.test("a top level that is not an object is refused", async (t) => {
    const dir = await folder();
    const path = join(dir, "daemon.json");
    for (const text of ['["data-root", "/x"]', '"data-root"', "42", "null"]) {
      await writeFile(path, text);
      await t.rejects(createDaemonConfig({ path }).setDataRoot("/vol"), DaemonJsonError, text);
      t.equal(await readFile(path, "utf8"), text);
    }
    await writeFile(path, '{"labels": "a=b"}');
    await t.rejects(createDaemonConfig({ path }).setEngineLabels("ebs-cache", {}), /not an array/);
    await writeFile(path, '{"graph": "/srv/docker"}');
    t.equal(await createDaemonConfig({ path }).dataRoot(), "/srv/docker", "the old graph key is read");
    await t.rejects(createDaemonConfig({ path }).setDataRoot("/vol"), /deprecated "graph"/);
    await t.rejects(
      createDaemonConfig({ path: join(dir, "other.json") }).setDataRoot("relative/docker"),
      DaemonJsonError,
    );
  });

  t.test("engine labels: only the prefixed entries are replaced", async (t) => {
    const path = join(await folder(), "daemon.json");
    await writeFile(
      path,
      JSON.stringify({
        labels: ["team=science", "ebs-cache.state=warming", "ebs-cache.volume-id=vol-1", "ebs-cachex.keep=1"],
        debug: true,
      }),
    );
    const config = createDaemonConfig({ path });
    await config.setEngineLabels("ebs-cache", { "ebs-cache.state": "ready", "ebs-cache.pool": "sim4life" });
    t.same(await config.engineLabels(), [
      "team=science",
      "ebs-cachex.keep=1",
      "ebs-cache.state=ready",
      "ebs-cache.pool=sim4life",
    ]);
    await config.setEngineLabels("ebs-cache", {});
    t.same(await config.engineLabels(), ["team=science", "ebs-cachex.keep=1"]);
    t.same(Object.keys(await config.read()), ["labels", "debug"]);

    const refused: Array<Record<string, string>> = [
      { "ebs-cache.state": "ready\nnode.role=manager" },
      { "ebs-cache.a=b": "x" },
      { "ebs-cache.a b": "x" },
      { "other.state": "ready" },
      { "ebs-cache.": "x" },
    ];
    for (const bad of refused) {
      await t.rejects(config.setEngineLabels("ebs-cache", bad), LabelError, JSON.stringify(bad));
    }
    await t.rejects(config.setEngineLabels("Bad Prefix", {}), LabelError);
    t.same(await config.engineLabels(), ["team=science", "ebs-cachex.keep=1"], "refused changes write nothing");
  });

  t.test("the file's mode and a one-line layout are kept; no temp file is left", async (t) => {
    const dir = await folder();
    const path = join(dir, "daemon.json");
    await writeFile(path, '{"debug":true}');
    await chmod(path, 0o600);
    const config = createDaemonConfig({ path });
    await config.setDataRoot("/vol/docker");
    await config.setEngineLabels("ebs-cache", { "ebs-cache.state": "ready" });
    t.equal((await stat(path)).mode & 0o7777, 0o600);
    t.equal((await stat(path + BACKUP_SUFFIX)).mode & 0o7777, 0o600, "the backup has the mode too");
    t.equal(
      await readFile(path, "utf8"),
      '{"debug":true,"data-root":"/vol/docker","labels":["ebs-cache.state=ready"]}',
    );
    t.same((await readdir(dir)).sort(), ["daemon.json", "daemon.json" + BACKUP_SUFFIX]);
    await Promise.all([
      config.setDataRoot("/a"),
      config.setEngineLabels("ebs-cache", { "ebs-cache.state": "degraded" }),
    ]);
    t.match(
      await config.read(),
      { "data-root": "/a", labels: ["ebs-cache.state=degraded"] },
      "concurrent changes both land",
    );
  });

  t.test("a symlinked daemon.json: its target is written, the link stays", async (t) => {
    const dir = await folder();
    const target = join(dir, "real.json");
    const path = join(dir, "daemon.json");
    await writeFile(target, "{}");
    await symlink(target, path);
    await createDaemonConfig({ path }).setDataRoot("/vol");
    t.same(JSON.parse(await readFile(target, "utf8")), { "data-root": "/vol" });
    t.ok((await lstat(path)).isSymbolicLink(), "the link stays a link");
  });

  t.test("the graphdriver image store is pinned only for docker 29+ or when the key is there", async (t) => {
    const path = join(await folder(), "daemon.json");
    await writeFile(path, '{"features": {"buildkit": true}}');
    const config = createDaemonConfig({ path });
    await config.setImageStore("graphdriver", { engineVersion: "20.10.24+dfsg1" });
    t.same(await config.read(), { features: { buildkit: true } }, "20.10 knows no containerd store");
    await config.setImageStore("graphdriver", { engineVersion: "29.0.1" });
    t.same(await config.read(), { features: { buildkit: true, "containerd-snapshotter": false } });
    await writeFile(path, '{"features": {"containerd-snapshotter": true}}');
    await config.setImageStore("graphdriver", {});
    t.same(await config.read(), { features: { "containerd-snapshotter": false } }, "an explicit true is turned off");
  });

  t.test("rendering", async (t) => {
    t.equal(renderDaemonJson({ a: 1 }), '{\n  "a": 1\n}\n');
    t.equal(renderDaemonJson({ a: 1 }, '{\n\t"b": 2\n}'), '{\n\t"a": 1\n}\n');
  });
});

/** A data-root as another machine left it: images, a container, swarm and network state, volumes. */
async function fakeDataRoot(root: string): Promise<{ outside: string; mountId: string }> {
  const mountId = "a".repeat(64);
  const imageLayer = "b".repeat(64);
  const files: Record<string, string> = {
    "image/overlay2/repositories.json": '{"Repositories":{}}',
    [`image/overlay2/layerdb/sha256/${"c".repeat(64)}/cache-id`]: imageLayer,
    [`image/overlay2/layerdb/mounts/${"d".repeat(64)}/mount-id`]: mountId,
    [`image/overlay2/layerdb/mounts/${"d".repeat(64)}/init-id`]: `${mountId}-init`,
    [`overlay2/${imageLayer}/diff/bin/sh`]: "binary",
    [`overlay2/${imageLayer}/link`]: "IMAGELAYERLINK000000000000",
    [`overlay2/${mountId}/diff/tmp/scratch`]: "container writes",
    [`overlay2/${mountId}/link`]: "CONTAINERLINK0000000000000",
    [`overlay2/${mountId}-init/diff/etc/hosts`]: "init",
    [`overlay2/${mountId}-init/link`]: "CONTAINERINITLINK000000000",
    [`containers/${"d".repeat(64)}/config.v2.json`]: "{}",
    "containers/abc/config.v2.json": "{}",
    "swarm/worker/tasks.db": "tasks",
    "swarm/certificates/swarm-node.key": "key",
    "network/files/local-kv.db": "kv",
    "volumes/metadata.db": "meta",
    "volumes/v1/_data/file": "user data",
    "engine-id": "engine",
    "buildkit/cache.db": "cache",
  };
  for (const [relative, content] of Object.entries(files)) {
    await mkdir(join(root, relative, ".."), { recursive: true });
    await writeFile(join(root, relative), content);
  }
  await mkdir(join(root, "overlay2", "l"), { recursive: true });
  for (const [link, layer] of [
    ["IMAGELAYERLINK000000000000", imageLayer],
    ["CONTAINERLINK0000000000000", mountId],
    ["CONTAINERINITLINK000000000", `${mountId}-init`],
  ] as const) {
    await symlink(`../${layer}/diff`, join(root, "overlay2", "l", link));
  }
  const outside = join(root, "..", "outside");
  await mkdir(join(outside, "files"), { recursive: true });
  await writeFile(join(outside, "precious"), "not docker's");
  await writeFile(join(outside, "files", "local-kv.db"), "someone else's");
  return { outside, mountId };
}

t.test("data-root preparation", async (t) => {
  t.test("pool: swarm, containers, their layers, network state and volumes go; images stay", async (t) => {
    const root = join(await folder(), "docker");
    const { mountId } = await fakeDataRoot(root);
    const log = createMemoryLogger();
    const report = await prepareDataRoot(root, { kind: "pool", log });
    t.same(report.drivers, ["overlay2"]);
    for (const gone of ["swarm", "engine-id", "network/files/local-kv.db", "volumes/v1", "volumes/metadata.db"]) {
      t.notOk(existsSync(join(root, gone)), `${gone} removed`);
    }
    t.same(await readdir(join(root, "containers")), [], "containers/ emptied");
    t.same(await readdir(join(root, "image/overlay2/layerdb/mounts")), [], "no container mounts left");
    t.same((await readdir(join(root, "overlay2"))).sort(), ["b".repeat(64), "l"], "only the image layer is left");
    t.same(await readdir(join(root, "overlay2", "l")), ["IMAGELAYERLINK000000000000"]);
    t.equal(await readFile(join(root, "overlay2", "b".repeat(64), "diff/bin/sh"), "utf8"), "binary");
    t.ok(existsSync(join(root, "image/overlay2/repositories.json")));
    t.ok(existsSync(join(root, "buildkit/cache.db")), "build cache kept");
    t.ok(existsSync(join(root, "network/files")), "network/ itself kept");
    t.ok(report.removed.includes(join("overlay2", mountId)));
    t.same(report.skipped, []);
    t.ok(log.lines.some((line) => line.includes("docker.data-root-prepared: ")));

    const again = await prepareDataRoot(root, { kind: "pool" });
    t.same(again.removed, [], "a second run has nothing to do");
  });

  t.test("workspace: volumes are kept, swarm still goes", async (t) => {
    const root = join(await folder(), "docker");
    await fakeDataRoot(root);
    await prepareDataRoot(root, { kind: "workspace" });
    t.equal(await readFile(join(root, "volumes/v1/_data/file"), "utf8"), "user data");
    t.ok(existsSync(join(root, "volumes/metadata.db")));
    t.notOk(existsSync(join(root, "swarm")));
    t.same(await readdir(join(root, "containers")), []);
    t.notOk(existsSync(join(root, "network/files/local-kv.db")));
  });

  t.test("symlinks to remove: the links go, their targets stay", async (t) => {
    const dir = await folder();
    const root = join(dir, "docker");
    const { outside } = await fakeDataRoot(root);
    await symlink(outside, join(root, "containers", "evil"));
    await mkdir(join(root, "containers", "abc", "mounts"), { recursive: true });
    await symlink(outside, join(root, "containers", "abc", "mounts", "escape"));
    await rm(join(root, "swarm"), { recursive: true });
    await symlink(outside, join(root, "swarm"));
    const report = await prepareDataRoot(root, { kind: "pool", log: createMemoryLogger() });
    t.equal(await readFile(join(outside, "precious"), "utf8"), "not docker's", "target untouched");
    t.same((await readdir(outside)).sort(), ["files", "precious"]);
    t.notOk(existsSync(join(root, "swarm")), "the swarm link itself is gone");
    t.notOk(existsSync(join(root, "containers", "evil")));
    t.same(report.skipped, []);
  });

  t.test("a folder on the way that is a symlink refuses the volume: nothing is reached through it", async (t) => {
    for (const linked of ["network", "volumes", join("image", "overlay2", "layerdb")]) {
      const dir = await folder();
      const root = join(dir, "docker");
      const { outside } = await fakeDataRoot(root);
      await rm(join(root, linked), { recursive: true });
      await symlink(outside, join(root, linked));
      const error = await prepareDataRoot(root, { kind: "pool", log: createMemoryLogger() }).catch((e: unknown) => e);
      t.type(error, VolumePathError, `${linked} as a link`);
      t.match(
        (error as Error).message,
        new RegExp(`${linked.replaceAll("/", "\\/")} on the volume is a symlink`),
        "naming the link",
      );
      t.equal(
        await readFile(join(outside, "files", "local-kv.db"), "utf8"),
        "someone else's",
        "not reached through it",
      );
      t.same((await readdir(outside)).sort(), ["files", "precious"]);
    }
  });

  t.test("refuses what is not a data-root", async (t) => {
    const dir = await folder();
    await writeFile(join(dir, "file"), "x");
    await mkdir(join(dir, "empty"));
    await mkdir(join(dir, "real", "image"), { recursive: true });
    await symlink(join(dir, "real"), join(dir, "link"));
    for (const path of [
      join(dir, "missing"),
      join(dir, "file"),
      join(dir, "empty"),
      join(dir, "link"),
      "relative/docker",
      "/",
    ]) {
      await t.rejects(prepareDataRoot(path, { kind: "pool" }), DataRootError, path);
    }
    const error = await prepareDataRoot(join(dir, "empty"), { kind: "pool" }).catch((e: unknown) => e);
    t.match((error as DataRootError).message, /no image\/ folder/);
    t.match((error as DataRootError).remediation, /mounted/);
    t.ok(existsSync(join(dir, "empty")), "nothing removed");
  });
});

t.test("readiness labels", async (t) => {
  t.same(readinessLabels("ebs-cache", "ready", { "volume-id": "vol-0abc", pool: "sim4life", kind: undefined }), {
    "ebs-cache.state": "ready",
    "ebs-cache.volume-id": "vol-0abc",
    "ebs-cache.pool": "sim4life",
  });
  t.same(readinessLabels("io.simcore.ebs-cache", "degraded"), { "io.simcore.ebs-cache.state": "degraded" });
  t.throws(() => readinessLabels("ebs-cache", "ready", { state: "x" }), LabelError, "state is reserved");
  t.throws(() => readinessLabels("ebs-cache", "ready", { "Bad Name": "x" }), LabelError);
  t.throws(() => readinessLabels("ebs-cache", "ready", { pool: "a\nb" }), LabelError);
  t.throws(() => readinessLabels("-x", "ready"), LabelError);

  const manager = { swarm: { state: "active", controlAvailable: true } };
  const worker = { swarm: { state: "active", controlAvailable: false } };
  const alone = { swarm: { state: "inactive", controlAvailable: false } };
  t.equal(chooseLabelMode("auto", manager), "node");
  t.equal(chooseLabelMode("auto", worker), "engine");
  t.equal(chooseLabelMode("auto", alone), "engine");
  t.equal(chooseLabelMode("node", worker), "node");
  t.equal(chooseLabelMode("engine", manager), "engine");
  t.equal(chooseLabelMode("off", manager), "off");

  t.same(
    nodeLabelChanges(
      "ebs-cache",
      { "ebs-cache.state": "warming", "ebs-cache.pool": "p", team: "x", "ebs-cache.volume-id": "vol-1" },
      { "ebs-cache.state": "ready", "ebs-cache.volume-id": "vol-1" },
    ),
    { add: { "ebs-cache.state": "ready" }, remove: ["ebs-cache.pool"] },
  );
  t.same(nodeLabelChanges("ebs-cache", {}, { "ebs-cache.constructor": "x" }).add, { "ebs-cache.constructor": "x" });
});

t.test("systemd docker service", async (t) => {
  const dir = await folder();
  const calls = join(dir, "calls");
  const systemctl = join(dir, "systemctl");
  // A stand-in: records its arguments; `restart` fails as a broken docker would; is-active says inactive.
  await writeFile(
    systemctl,
    [
      "#!/bin/sh",
      `echo "$*" >> ${calls}`,
      'case "$1" in',
      '  restart) echo "Job for docker.service failed because the control process exited with error code." >&2; ' +
        "exit 1;;",
      "  is-active) exit 3;;",
      "esac",
      "exit 0",
    ].join("\n"),
  );
  await chmod(systemctl, 0o755);
  const service = createSystemdDockerService({ systemctl, log: createMemoryLogger() });
  await service.start();
  await service.stop();
  await service.reload();
  t.equal(await service.isActive(), false);
  const error = await service.restart().catch((e: unknown) => e);
  t.type(error, DockerServiceError);
  t.match(
    (error as DockerServiceError).message,
    /restart docker\.service exited with 1: Job for docker\.service failed/,
  );
  t.match((error as DockerServiceError).remediation, /journalctl -u docker\.service/);
  t.same((await readFile(calls, "utf8")).trim().split("\n"), [
    "start docker.service",
    "stop docker.service",
    "reload docker.service",
    "is-active --quiet docker.service",
    "restart docker.service",
  ]);
  t.throws(() => createSystemdDockerService({ unit: "--now docker" }), DockerServiceError);
  await t.rejects(createSystemdDockerService({ systemctl: join(dir, "nope") }).start(), DockerServiceError);

  const dockerd = join(dir, "dockerd");
  await writeFile(dockerd, '#!/bin/sh\necho "Docker version 29.0.1, build 198b5e3"\n');
  await chmod(dockerd, 0o755);
  t.equal(await installedDockerdVersion({ dockerd }), "29.0.1");
  await writeFile(dockerd, "#!/bin/sh\necho hello\n");
  await t.rejects(installedDockerdVersion({ dockerd }), DockerServiceError);
  await t.rejects(installedDockerdVersion({ dockerd: join(dir, "nope") }), DockerServiceError);
});
