/**
 * The first boot phase's workspace record lost between the phases, and osparc's labels tag
 * rewritten meanwhile for another user's task (with keep): the second phase and the release must
 * not act on the other task's word on this user's workspace. A state folder that takes no write
 * (read-only, or full: under the test's own host folder, never the machine's) costs one clear line:
 * the record's copy on the volume carries the phases through. Where no copy is left anywhere, phase
 * 2 degrades with nothing mounted, and the release writes no keep and says why once.
 */
import t, { type Test } from "tap";
import { CreateTagsCommand } from "@aws-sdk/client-ec2";
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { bootLabHost } from "../../../src/lab/machines/agent.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import { run } from "../../../src/exec.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { closeLabLeavingNothing, LABEL_PREFIX, mountsUnder, POOL, startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";
import { assertOutcome, releaseHost, volumeEnd, workspaceTags } from "../../fixtures/lab/lifecycle-lab.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-lost-record", poolSize: 1 });
t.teardown(() => bl.close());
const overrides = { pool: POOL, prewarm: { strategy: "off" as const } };
const stateDir = (host: LabHost) => join(host.paths.hostRoot, "var/lib/ebs-cache-agent");

async function phase(host: LabHost, which: "first" | "second") {
  const log = createMemoryLogger("debug");
  const outcome = await bootLabHost(bl.lab, host, {
    overrides,
    log,
    ...(which === "first" ? { withDocker: false } : { mayClaim: false }),
  });
  return { ...outcome, log: log.lines };
}

/** Another user's task: osparc writes its labels (with the agent's keep) over this instance's. */
async function rewriteLabels(host: LabHost, userId: string): Promise<void> {
  const tags = workspaceTags({ userId }, { labels: { [`${LABEL_PREFIX}.keep`]: "true" } });
  await bl.ec2.send(
    new CreateTagsCommand({
      Resources: [host.instance.instanceId],
      Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })),
    }),
  );
}

/** The host's state folder made read-only (a bind mount of itself), until the test ends. */
async function readOnlyStateFolder(t: Test, host: LabHost): Promise<void> {
  const dir = stateDir(host);
  await mkdir(dir, { recursive: true });
  await run("mount", ["--bind", dir, dir]);
  t.teardown(() => run("umount", [dir], { check: false }));
  await run("mount", ["-o", "remount,bind,ro", dir]);
}

/** The host's state folder on a tiny tmpfs, filled to the last block, until the test ends. */
async function fullStateFolder(t: Test, host: LabHost): Promise<void> {
  const dir = stateDir(host);
  await mkdir(dir, { recursive: true });
  await run("mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", dir]);
  t.teardown(() => run("umount", [dir], { check: false }));
  await run("dd", ["if=/dev/zero", `of=${join(dir, "ballast")}`, "bs=4k"], { check: false });
}

const stateFolderLines = (log: readonly string[]) => log.filter((line) => /^<4>boot\.state-folder: /.test(line));

t.test(
  "a read-only state folder: the record's copy on the volume carries phase 2 and the release; another user's " +
    "labels change nothing on A's workspace",
  async (t) => {
    const host = await bl.addHost({ tags: workspaceTags({ userId: "A-ro" }) });
    await readOnlyStateFolder(t, host);
    const first = await phase(host, "first");
    assertOutcome(t, first, "prepared", "phase 1 prepares A's workspace");
    const volumeId = first.report!.volumeId!;
    t.equal(stateFolderLines(first.log).length, 1, "one clear line about the state folder");
    t.match(stateFolderLines(first.log)[0], /state folder .* takes no write \(read-only filesystem/);
    await host.startDocker();
    await rewriteLabels(host, "B-ro");

    const second = await phase(host, "second");
    assertOutcome(t, second, "ready", "phase 2 goes on, on A's workspace");
    t.equal(second.report?.volumeId, volumeId);
    t.match(
      second.log.join("\n"),
      new RegExp(`workspace user-id=A-ro \\(recorded by the first boot phase .* on ${volumeId}\\)`),
    );

    await host.dockerd!.stop();
    const released = await releaseHost(bl, host);
    assertOutcome(t, released, "released", "released");
    const end = await volumeEnd(bl, volumeId);
    t.equal(end.state, "available");
    t.equal(end.tags[VolumeTag.userId], "A-ro");
    t.notOk(end.tags[VolumeTag.keep], "no keep from B's labels");
    t.ok(end.tags[VolumeTag.expiresAt], "A's workspace expires as A's release asks");
    t.same(await mountsUnder(host.paths.mountRoot), [], "nothing left mounted");
  },
);

t.test(
  "no copy of the record anywhere: phase 2 degrades with nothing left mounted; the release writes no keep on A's " +
    "workspace and says why once",
  async (t) => {
    const host = await bl.addHost({ tags: workspaceTags({ userId: "A-lost" }) });
    const first = await phase(host, "first");
    assertOutcome(t, first, "prepared", "phase 1 prepares A's workspace");
    const volumeId = first.report!.volumeId!;
    await host.startDocker();
    await rm(join(stateDir(host), "workspace.json"));
    await rm(join(first.report!.mountPoint!, ".ebs-cache-agent", "workspace.json"), { force: true });
    await rewriteLabels(host, "B-lost");

    const second = await phase(host, "second");
    assertOutcome(t, second, "degraded", "phase 2 degrades: the workspace is not B's");
    t.same(await mountsUnder(host.paths.mountRoot), [], "A's workspace is not left mounted");
    t.equal((await host.dockerd!.info()).DockerRootDir, host.paths.defaultDataRoot, "docker on its own data-root");

    await host.dockerd!.stop();
    const released = await releaseHost(bl, host);
    assertOutcome(t, released, "released", "released");
    const end = await volumeEnd(bl, volumeId);
    t.equal(end.state, "available");
    t.notOk(end.tags[VolumeTag.keep], "no keep from B's labels on A's workspace");
    t.ok(end.tags[VolumeTag.expiresAt], "it expires");
    const warned = released.log.filter((line) => line.startsWith("<4>") && line.includes("user-id=B-lost"));
    t.equal(warned.length, 1, "one warning");
    t.match(
      warned[0],
      new RegExp(`${volumeId} is the workspace of user-id=A-lost, and the labels .* name user-id=B-lost`),
    );
  },
);

t.test("a full state folder: a boot is ready with one clear line, and the release converges", async (t) => {
  const host = await bl.addHost();
  await fullStateFolder(t, host);
  const booted = await bl.boot(host, { overrides });
  assertOutcome(t, booted, "ready", "ready on the pool volume");
  t.equal(stateFolderLines(booted.log).length, 1, "one clear line about the state folder");
  t.match(stateFolderLines(booted.log)[0], /takes no write \(no space left/);
  await host.dockerd!.stop();
  assertOutcome(t, await releaseHost(bl, host), "released", "released");
  t.same(await mountsUnder(host.paths.mountRoot), [], "nothing left mounted");
});

t.test("the lab closes and leaves no loop device, mount or dockerd behind; nothing was force-detached", async (t) => {
  await closeLabLeavingNothing(t, bl, { noneAttached: true });
});
