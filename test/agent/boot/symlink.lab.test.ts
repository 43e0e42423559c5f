/**
 * The symlink corpus: pool volumes of the agent's own layout (from the golden snapshot) where
 * one path that the agent or docker uses is, in turn, a link to a canary folder of the host, a
 * link to a file of it, a link to a device, a dangling link, a link loop, or a FIFO / device node
 * / socket. Each is claimed through the real boot (EC2 emulator, loop devices, private dockerd):
 * it is quarantined before docker starts on it (tagged last-error, handed back available, never
 * force-detached; dockerd never started on its data-root and daemon.json never switched to it),
 * the boot takes its next candidate, and the canary stays the same, byte for byte and mode for
 * mode (every entry's content hash and stat). Every path is here once and every kind at several
 * paths (see CASES); every path as every kind, without docker, on a plain folder:
 * test/host/volume-paths.test.ts.
 *
 * Cheap to build: every case volume is a copy of the golden snapshot's image (cp --reflink), its
 * one odd path made by mounting the copy here; several cases share a boot: a pool of nine odd
 * volumes of the current generation and one good volume of an older generation, tried last
 * (claim order: the newest generation first), with claim.maxVolumes 10.
 */
import { createHash } from "node:crypto";
import { lstat, mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { CreateTagsCommand } from "@aws-sdk/client-ec2";
import t from "tap";
import { run } from "../../../src/exec.ts";
import { DATA_ROOT_SUBDIR } from "../../../src/layout.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { startBootLab, closeLabLeavingNothing } from "../../fixtures/lab/boot-lab.ts";
import { assertDockerPrerequisites, assertLabPrerequisites, onPath } from "../../fixtures/lab/lab-prereq.ts";
import { LINKS, makeLink, makeSpecial, SPECIALS } from "../../fixtures/builders/odd-files.ts";
import { withImageDevice } from "../../fixtures/lab/volume-image.ts";

await assertLabPrerequisites();
assertDockerPrerequisites("boot.symlink");
for (const tool of ["mkfifo", "mknod", "python3"])
  if (!(await onPath(tool))) throw new Error(`${tool} is missing: the corpus cannot be made`);

const bl = await startBootLab({ name: "test-boot-symlink" });
t.teardown(() => bl.close());

/** The paths, relative to the volume's root; `<layer>` is the first of the golden volume's overlay2 layers. */
const PATHS = [
  ".ebs-cache-agent",
  ".ebs-cache-agent/prepared-for",
  DATA_ROOT_SUBDIR,
  "docker/engine-id",
  "docker/swarm",
  "docker/containers",
  "docker/network",
  "docker/network/files",
  "docker/network/files/local-kv.db",
  "docker/volumes",
  "docker/volumes/backingFsBlockDev",
  "docker/image",
  "docker/image/overlay2",
  "docker/image/overlay2/repositories.json",
  "docker/image/overlay2/layerdb",
  "docker/image/overlay2/layerdb/mounts",
  "docker/overlay2",
  "docker/overlay2/l",
  "docker/overlay2/backingFsBlockDev",
  "docker/overlay2/<layer>",
  "docker/tmp",
  "docker/buildkit",
  "docker/plugins",
  "docker/runtimes",
  "docker/containerd",
  "containerd",
];

interface Case {
  path: string;
  kind: string;
}
/** Every odd thing: the links, then the special files. */
const KINDS = [...Object.keys(LINKS), ...SPECIALS];
/**
 * Every path once, the kinds in turn (so each kind meets three or four paths, the agent's own
 * and docker's), and the data-root itself (refused by the identification, which reads the
 * volume without mounting it, not by the layout check) as every kind. Each path as each kind
 * is test/host/volume-paths.test.ts's ("each checked path, as each odd thing"), on a plain folder:
 * the layout check those paths meet here first on every boot.
 */
const IN_TURN: Case[] = PATHS.map((path, index) => ({ path, kind: KINDS[index % KINDS.length]! }));
const CASES: Case[] = [
  ...IN_TURN,
  ...KINDS.filter((kind) => !IN_TURN.some((each) => each.path === DATA_ROOT_SUBDIR && each.kind === kind)).map(
    (kind) => ({ path: DATA_ROOT_SUBDIR, kind }),
  ),
];
/** Odd volumes per boot: with the good one, claim.maxVolumes' ceiling (10). */
const PER_BOOT = 9;

/** The host's canary: folders and files of several modes, one of them a link inside it. */
const canary = join(bl.lab.root, "canary");
await mkdir(join(canary, "sub", "deeper"), { recursive: true });
await writeFile(join(canary, "file"), "the host's own file\n", { mode: 0o640 });
await writeFile(join(canary, "sub", "secret"), "0600\n", { mode: 0o600 });
await writeFile(join(canary, "sub", "deeper", "exec"), "#!/bin/sh\n", { mode: 0o755 });
await run("chmod", ["0750", canary]);
await run("chmod", ["0700", join(canary, "sub")]);

/** Every entry of the folder (itself included), by lstat, with a sha256 of each file: what must not change. */
async function treeState(dir: string): Promise<Record<string, string>> {
  const state: Record<string, string> = {};
  const visit = async (relative: string): Promise<void> => {
    const path = join(dir, relative);
    const info = await lstat(path, { bigint: true });
    const content = info.isFile()
      ? createHash("sha256")
          .update(await readFile(path))
          .digest("hex")
      : "";
    state[relative || "."] = [
      info.mode.toString(8),
      info.uid,
      info.gid,
      info.size,
      info.nlink,
      info.mtimeNs,
      info.ctimeNs,
      content,
    ].join(" ");
    if (info.isDirectory()) for (const name of (await readdir(path)).sort()) await visit(join(relative, name));
  };
  await visit("");
  return state;
}

t.test("the canary's state tells a change of mode, of content, an entry added", async (t) => {
  const probe = join(bl.lab.root, "probe");
  await mkdir(probe);
  await writeFile(join(probe, "f"), "x");
  const before = await treeState(probe);
  await run("chmod", ["0600", join(probe, "f")]);
  t.not(JSON.stringify(await treeState(probe)), JSON.stringify(before), "a chmod");
  const afterChmod = await treeState(probe);
  await writeFile(join(probe, "f"), "y");
  t.not(JSON.stringify(await treeState(probe)), JSON.stringify(afterChmod), "a byte");
  const afterWrite = await treeState(probe);
  await mkdir(join(probe, "new"));
  t.not(JSON.stringify(await treeState(probe)), JSON.stringify(afterWrite), "an entry");
  await rm(probe, { recursive: true });
});

const canaryBefore = await treeState(canary);

/** Mounts a volume's image here (see withImageDevice), runs `work`, unmounts. */
async function editImage<T>(volumeId: string, work: (mountPoint: string) => Promise<T>): Promise<T> {
  const mountPoint = join(bl.lab.root, "edit", volumeId);
  await mkdir(mountPoint, { recursive: true });
  return withImageDevice(bl.lab.root, volumeId, async (device) => {
    await run("mount", ["-o", "nouuid", device, mountPoint]);
    try {
      return await work(mountPoint);
    } finally {
      await run("umount", [mountPoint]);
    }
  });
}

/** Makes the case's odd thing in place of whatever the golden volume had at its path. */
async function makeCase(mountPoint: string, each: Case): Promise<string> {
  let relative = each.path;
  if (relative.includes("<layer>")) {
    const layer = (await readdir(join(mountPoint, "docker", "overlay2"))).find((name) => /^[0-9a-f]{64}$/.test(name));
    if (!layer) throw new Error("the golden volume has no overlay2 layer");
    relative = relative.replace("<layer>", layer);
  }
  const path = join(mountPoint, relative);
  await mkdir(dirname(path), { recursive: true });
  await rm(path, { recursive: true, force: true });
  if (each.kind in LINKS) await makeLink(each.kind, canary, path);
  else makeSpecial(each.kind as (typeof SPECIALS)[number], path);
  return relative;
}

const groups: Case[][] = [];
for (let at = 0; at < CASES.length; at += PER_BOOT) groups.push(CASES.slice(at, at + PER_BOOT));
let refused = 0;

for (const [index, group] of groups.entries()) {
  t.test(
    `boot ${index + 1}/${groups.length}: ${group.length} odd volumes quarantined before docker, then the good one`,
    async (t) => {
      const pool = `symlink-${index}`;
      const started = Date.now();
      const [good, ...odd] = await bl.createPool(pool, group.length + 1);
      // The good volume is of an older generation: claimed only once every odd one was handed back.
      await bl.ec2.send(
        new CreateTagsCommand({
          Resources: [good!],
          Tags: [{ Key: VolumeTag.builtAt, Value: "2000-01-01T00:00:00Z" }],
        }),
      );
      const made = new Map<string, { each: Case; relative: string }>();
      for (const [at, each] of group.entries()) {
        const volumeId = odd[at]!;
        made.set(volumeId, { each, relative: await editImage(volumeId, (mountPoint) => makeCase(mountPoint, each)) });
      }
      const host = await bl.addHost();
      const labLines = bl.labLog.length;
      const booted = await bl.boot(host, { overrides: { pool, claim: { maxVolumes: 10 } } });
      const log = booted.log.join("\n");
      const bootMs = Date.now() - started;
      t.equal(
        booted.report?.outcome,
        "ready",
        "ready on the good volume",
        booted.report?.outcome === "ready" ? {} : { result: booted.report, log },
      );
      t.equal(booted.report?.volumeId, good, "the good volume, tried last");
      const dataRoot = join(host.paths.mountRoot, good!, DATA_ROOT_SUBDIR);
      t.equal((await host.dockerd!.info()).DockerRootDir, dataRoot, "docker runs on it");
      t.equal(
        booted.report?.timeline.filter((step) => step.step === "switch-data-root").length,
        1,
        "switch-data-root ran once",
      );
      const switches = booted.log.filter((line) => line.includes("daemon.json data-root switched"));
      t.ok(switches.length === 1 && switches[0]!.includes(good!), "daemon.json switched once: to the good volume", {
        switches,
      });
      const dockerdStarts = bl.labLog.slice(labLines).filter((line) => line.includes("lab.dockerd-start"));
      t.ok(
        dockerdStarts.some((line) => line.includes(good!)),
        "dockerd started on the good volume's data-root",
      );

      for (const [volumeId, { each, relative }] of made) {
        const name = `${relative} as ${each.kind}`;
        t.notOk(
          dockerdStarts.some((line) => line.includes(volumeId)),
          `${name}: dockerd never started on it`,
        );
        t.notOk(
          switches.some((line) => line.includes(volumeId)),
          `${name}: daemon.json's data-root never switched to it`,
        );
        t.ok(await bl.waitAvailable(volumeId), `${name}: handed back, available`);
        t.equal(bl.lab.ec2.snapshotState().volumes[volumeId]?.forceDetachCount, 0, `${name}: never force-detached`);
        const tags = await bl.tags(volumeId);
        const quarantined = tags[VolumeTag.lastError] ?? "";
        // The data-root itself is the identification's to refuse (its layout, read without mounting).
        const named =
          relative === DATA_ROOT_SUBDIR
            ? /not the agent's cache filesystem/.test(quarantined)
            : quarantined.includes(`${relative} on the volume is a `);
        t.ok(named, `${name}: quarantined, naming it`, named ? {} : { lastError: quarantined });
        if (named) refused++;
      }
      t.same(await treeState(canary), canaryBefore, "the canary is unchanged, byte for byte and mode for mode");
      t.notOk(
        await lstat(`${canary}-absent`).then(
          () => true,
          () => false,
        ),
        "no dangling link's target was made",
      );
      await host.dockerd?.stop();
      t.comment(`made and booted in ${bootMs} ms`);
    },
  );
}

/**
 * A volume found attached and mounted (a reboot, a rerun) is not one this boot claimed: the undo
 * leaves it mounted and attached, untagged (src/agent/boot/undo.ts), and the node degrades.
 * docker is kept off it all the same.
 */
t.test(
  "a reboot checks again: a link that appeared on a volume already prepared for this instance keeps docker off it",
  async (t) => {
    const pool = "symlink-reboot";
    const [volumeId] = await bl.createPool(pool, 1);
    const host = await bl.addHost();
    const first = await bl.boot(host, { overrides: { pool } });
    t.equal(
      first.report?.outcome,
      "ready",
      "ready on the volume",
      first.report?.outcome === "ready" ? {} : { log: first.log.join("\n") },
    );
    const mountPoint = first.report!.mountPoint!;
    await host.dockerd!.stop();
    await rm(join(mountPoint, "docker", "swarm"), { recursive: true, force: true });
    await makeLink("a link to a host folder", canary, join(mountPoint, "docker", "swarm"));

    const reboot = await bl.boot(host, { overrides: { pool } });
    const log = reboot.log.join("\n");
    t.match(log, /already prepared for this instance|boot\.reuse/, "the volume attached to this instance is reused");
    t.equal(reboot.report?.outcome, "degraded", "the node degrades (no other candidate on a reuse)", { log });
    t.match(reboot.report?.reason ?? "", /docker\/swarm on the volume is a symlink/, "naming the link");
    t.notOk(
      reboot.log.some((line) => line.includes("daemon.json data-root switched") && line.includes(volumeId!)),
      "daemon.json not switched to it",
    );
    t.not(
      (await host.dockerd!.info()).DockerRootDir,
      join(mountPoint, DATA_ROOT_SUBDIR),
      "docker runs on its default data-root, not on the volume",
    );
    t.same(await treeState(canary), canaryBefore, "the canary is unchanged");
    await host.dockerd?.stop();
  },
);

t.test("the corpus", async (t) => {
  t.equal(
    refused,
    CASES.length,
    `${refused} of ${CASES.length} cases (${PATHS.length} paths, kinds in turn; the data-root as each of ` +
      `${KINDS.length} kinds) quarantined before docker`,
  );
  t.same(await treeState(canary), canaryBefore, "the canary at the end");
});

t.test(
  "the lab closes and leaves no loop device, mount or dockerd behind; no volume was ever force-detached",
  async (t) => {
    await closeLabLeavingNothing(t, bl);
  },
);
