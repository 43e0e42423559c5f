/**
 * An unclean shutdown: the instance dies without a release (power loss, a terminate). EC2 makes
 * the volume available at once; its XFS was never cleanly unmounted, so its log holds metadata
 * not yet written in place. The next instance of the same workspace mounts it (XFS replays the
 * log), docker comes up ready on it and the data written before the crash is there.
 *
 * The crash, made real: data is written and synced, more is written unsynced, then
 * `xfs_io -x -c "shutdown -f"` (the godown ioctl: flush the log, then stop all I/O, as a power
 * cut right after a log write would leave it), dockerd is killed (SIGKILL), the instance
 * terminated; the dead machine's mount is dropped as its kernel would have vanished.
 */
import t from "tap";
import { join } from "node:path";
import { run } from "../src/exec.ts";
import { DATA_ROOT_SUBDIR } from "../src/layout.ts";
import { VolumeTag } from "../src/tags.ts";
import { findmnt, mountsUnder, POOL, startBootLab } from "./fixtures/boot-lab.ts";
import { assertLabPrerequisites, pollUntil } from "./fixtures/lab-prereq.ts";
import { releaseHost, volumeEnd, workspaceTags } from "./fixtures/lifecycle-lab.ts";
import { assertOutcome } from "./fixtures/lifecycle-lab.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-lifecycle-unclean" });
t.teardown(() => bl.close());
const overrides = { pool: POOL };

/** `xfs_repair -n` on the volume from a helper host: its exit code and whether it found a dirty log. */
async function xfsCheck(volumeId: string): Promise<{ exitCode: number; dirtyLog: boolean }> {
  return bl.withVolume(volumeId, async (device) => {
    const check = await run("xfs_repair", ["-n", device], { check: false });
    return { exitCode: check.exitCode, dirtyLog: /valuable metadata changes in a log/.test(check.stdout + check.stderr) };
  });
}

t.test("no release (the instance died): the next boot of the workspace mounts the volume, XFS replays its log, docker is ready and the data is there", async (t) => {
  const ids = { userId: "21", projectId: "p-crash", nodeId: "n-9" };
  const dead = await bl.addHost({ tags: workspaceTags(ids) });
  const first = await bl.boot(dead, { overrides });
  assertOutcome(t, first, "ready", "first instance ready");
  const volumeId = first.result!.volumeId!;
  const mountPoint = first.result!.mountPoint!;
  const dockerd = dead.dockerd!;
  await dockerd.docker(["volume", "create", "data"]);
  await dockerd.docker(["run", "--rm", "--network", "none", "-v", "data:/d", "lab/app:1", "sh", "-c", "echo hi > /d/f"]);
  await run("sync", ["-f", mountPoint]);
  await dockerd.docker(["run", "--rm", "--network", "none", "-v", "data:/d", "lab/app:1", "sh", "-c", "echo late > /d/unsynced"]);

  // The crash.
  await run("xfs_io", ["-x", "-c", "shutdown -f", mountPoint]);
  process.kill(dockerd.pid!, "SIGKILL");
  await dockerd.stop(); // sweeps what the killed dockerd left (shims, its mounts): the machine is gone
  bl.lab.ec2.terminateInstance(dead.instance.instanceId);
  const freed = await volumeEnd(bl, volumeId);
  t.equal(freed.state, "available", "EC2 makes the volume available at once");
  t.same(freed.attachments, []);
  t.equal(freed.tags[VolumeTag.claimedBy], dead.instance.instanceId, "still claimed-by the dead instance (no release ran)");
  t.notOk(freed.tags[VolumeTag.releasedAt], "and never released");
  for (const target of await mountsUnder(dead.paths.mountRoot)) await run("umount", [target]);
  t.notOk(await findmnt(mountPoint), "the dead machine's mount is gone");
  t.ok(await pollUntil(async () => !bl.lab.backend.attachments().some((a) => a.volumeId === volumeId)), "and its device");

  const before = await xfsCheck(volumeId);
  t.ok(before.dirtyLog && before.exitCode !== 0, "xfs_repair -n: the filesystem was not cleanly unmounted, its log must be replayed", before);

  const next = await bl.addHost({ tags: workspaceTags(ids) });
  const booted = await bl.boot(next, { overrides });
  assertOutcome(t, booted, "ready", "the next instance of the workspace is ready");
  t.equal(booted.plan.selection.source, "workspace", "it takes the workspace volume");
  t.equal(booted.result?.volumeId, volumeId, "the dead instance's volume");
  t.equal((await bl.tags(volumeId))[VolumeTag.claimedBy], next.instance.instanceId, "claimed-by the new instance");
  const docker = next.dockerd!;
  t.equal((await docker.info()).DockerRootDir, join(next.paths.mountRoot, volumeId, DATA_ROOT_SUBDIR), "docker on the volume");
  const read = await docker.docker(["run", "--rm", "--network", "none", "-v", "data:/d", "lab/app:1", "cat", "/d/f"]);
  t.equal(read.stdout.trim(), "hi", "the data synced before the crash is there");
  const ran = await docker.docker(["run", "--rm", "--network", "none", "lab/app:1", "echo", "ok"]);
  t.equal(ran.stdout.trim(), "ok", "the images run");

  await docker.stop();
  const released = await releaseHost(bl, next);
  t.equal(released.result?.outcome, "released", "a clean release now", { log: released.log.join("\n") });
  const after = await xfsCheck(volumeId);
  t.same(after, { exitCode: 0, dirtyLog: false }, "xfs_repair -n: clean (the log was replayed at the mount, and this unmount was clean)");
});

t.test("the lab closes and leaves no loop device, mount or dockerd behind; nothing force-detached or left attached", async (t) => {
  const state = bl.lab.ec2.snapshotState();
  t.same(Object.values(state.volumes).filter((v) => v.forceDetachCount > 0).map((v) => v.volumeId), [], "forceDetachCount 0 everywhere");
  t.same(Object.values(state.volumes).filter((v) => v.attachment).map((v) => v.volumeId), [], "no volume attached");
  const left = await bl.close();
  t.same(left, { rootExists: false, loopDevices: [], mounts: [], dockerds: [] });
});
