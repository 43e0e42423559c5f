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
 *
 * What the dead instance asked for its volume outlives it: the claim writes its keep and its TTL
 * on the volume's tags, so gc run days later (its `now` moved ahead) keeps a volume whose
 * instance asked keep and gives the others their instance's TTL, whether the instance was
 * terminated while stopped (an osparc warm buffer: no release runs) or lost its power in the
 * middle of its release; the workspace's next instance gets the volume. A keep withdrawn before
 * a clean release goes with it.
 */
import t from "tap";
import { join } from "node:path";
import {
  DeleteTagsCommand,
  DescribeInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { run } from "../../../src/exec.ts";
import { DATA_ROOT_SUBDIR } from "../../../src/layout.ts";
import { VolumeTag } from "../../../src/tags.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import {
  findmnt,
  LABEL_PREFIX,
  mountsUnder,
  POOL,
  startBootLab,
  closeLabLeavingNothing,
} from "../../fixtures/lab/boot-lab.ts";
import { runKilled } from "../../fixtures/kill/kill-matrix.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";
import { gcAt, releaseHost, verdictOf, volumeEnd, workspaceTags } from "../../fixtures/lab/lifecycle-lab.ts";
import { assertOutcome } from "../../fixtures/lab/lifecycle-lab.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-lifecycle-unclean" });
t.teardown(() => bl.close());
const overrides = { pool: POOL };

/** `xfs_repair -n` on the volume from a helper host: its exit code and whether it found a dirty log. */
async function xfsCheck(volumeId: string): Promise<{ exitCode: number; dirtyLog: boolean }> {
  return bl.withVolume(volumeId, async (device) => {
    const check = await run("xfs_repair", ["-n", device], { check: false });
    return {
      exitCode: check.exitCode,
      dirtyLog: /valuable metadata changes in a log/.test(check.stdout + check.stderr),
    };
  });
}

t.test(
  "no release (the instance died): the next boot of the workspace mounts the volume, XFS replays its log, docker " +
    "is ready and the data is there",
  async (t) => {
    const ids = { userId: "21", projectId: "p-crash", nodeId: "n-9" };
    const dead = await bl.addHost({ tags: workspaceTags(ids) });
    const first = await bl.boot(dead, { overrides });
    assertOutcome(t, first, "ready", "first instance ready");
    const volumeId = first.report!.volumeId!;
    const mountPoint = first.report!.mountPoint!;
    const dockerd = dead.dockerd!;
    await dockerd.docker(["volume", "create", "data"]);
    await dockerd.docker([
      "run",
      "--rm",
      "--network",
      "none",
      "-v",
      "data:/d",
      "lab/app:1",
      "sh",
      "-c",
      "echo hi > /d/f",
    ]);
    await run("sync", ["-f", mountPoint]);
    await dockerd.docker([
      "run",
      "--rm",
      "--network",
      "none",
      "-v",
      "data:/d",
      "lab/app:1",
      "sh",
      "-c",
      "echo late > /d/unsynced",
    ]);

    // The crash.
    await run("xfs_io", ["-x", "-c", "shutdown -f", mountPoint]);
    process.kill(dockerd.pid!, "SIGKILL");
    await dockerd.stop(); // sweeps what the killed dockerd left (shims, its mounts): the machine is gone
    bl.lab.ec2.terminateInstance(dead.instance.instanceId);
    const freed = await volumeEnd(bl, volumeId);
    t.equal(freed.state, "available", "EC2 makes the volume available at once");
    t.same(freed.attachments, []);
    t.equal(
      freed.tags[VolumeTag.claimedBy],
      dead.instance.instanceId,
      "still claimed-by the dead instance (no release ran)",
    );
    t.notOk(freed.tags[VolumeTag.releasedAt], "and never released");
    for (const target of await mountsUnder(dead.paths.mountRoot)) await run("umount", [target]);
    t.notOk(await findmnt(mountPoint), "the dead machine's mount is gone");
    t.ok(
      await pollUntil(async () => !bl.lab.backend.attachments().some((a) => a.volumeId === volumeId)),
      "and its device",
    );

    const before = await xfsCheck(volumeId);
    t.ok(
      before.dirtyLog && before.exitCode !== 0,
      "xfs_repair -n: the filesystem was not cleanly unmounted, its log must be replayed",
      before,
    );

    const next = await bl.addHost({ tags: workspaceTags(ids) });
    const booted = await bl.boot(next, { overrides });
    assertOutcome(t, booted, "ready", "the next instance of the workspace is ready");
    t.equal(booted.plan.selection.source, "workspace", "it takes the workspace volume");
    t.equal(booted.report?.volumeId, volumeId, "the dead instance's volume");
    t.equal((await bl.tags(volumeId))[VolumeTag.claimedBy], next.instance.instanceId, "claimed-by the new instance");
    const docker = next.dockerd!;
    t.equal(
      (await docker.info()).DockerRootDir,
      join(next.paths.mountRoot, volumeId, DATA_ROOT_SUBDIR),
      "docker on the volume",
    );
    const read = await docker.docker(["run", "--rm", "--network", "none", "-v", "data:/d", "lab/app:1", "cat", "/d/f"]);
    t.equal(read.stdout.trim(), "hi", "the data synced before the crash is there");
    const ran = await docker.docker(["run", "--rm", "--network", "none", "lab/app:1", "echo", "ok"]);
    t.equal(ran.stdout.trim(), "ok", "the images run");

    await docker.stop();
    const released = await releaseHost(bl, next);
    t.equal(released.report?.outcome, "released", "a clean release now", { log: released.log.join("\n") });
    const after = await xfsCheck(volumeId);
    t.same(
      after,
      { exitCode: 0, dirtyLog: false },
      "xfs_repair -n: clean (the log was replayed at the mount, and this unmount was clean)",
    );
  },
);

const HOUR = 3600_000;
const DAY = 24 * HOUR;

async function instanceState(instanceId: string): Promise<string | undefined> {
  const out = await bl.ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }));
  return out.Reservations?.[0]?.Instances?.[0]?.State?.Name;
}
const reached = (instanceId: string, state: string) =>
  pollUntil(async () => (await instanceState(instanceId)) === state);

/** The intent tags of a volume (absent ones left out). */
async function intentTags(volumeId: string): Promise<Record<string, string>> {
  const tags = await bl.tags(volumeId);
  return Object.fromEntries(
    [VolumeTag.keep, VolumeTag.keepBy, VolumeTag.ttlHours].filter((key) => key in tags).map((key) => [key, tags[key]!]),
  );
}

/** A file in a docker volume of the node, to find again on the workspace's next instance. */
async function writeMark(host: LabHost, text: string): Promise<void> {
  await host.dockerd!.docker(["volume", "create", "work"]);
  await host.dockerd!.docker([
    "run",
    "--rm",
    "--network",
    "none",
    "-v",
    "work:/d",
    "lab/app:1",
    "sh",
    "-c",
    `echo ${text} > /d/mark`,
  ]);
}
async function readMark(host: LabHost): Promise<string> {
  return (
    await host.dockerd!.docker(["run", "--rm", "--network", "none", "-v", "work:/d", "lab/app:1", "cat", "/d/mark"])
  ).stdout.trim();
}

t.test(
  "terminated while stopped (a warm buffer: no release runs): the keep its labels tag asked is on the volume " +
    "from the claim; gc days later keeps it; the workspace's next instance gets it",
  async (t) => {
    const ids = { userId: "31", projectId: "p-kept" };
    const buffer = await bl.addHost({ tags: workspaceTags(ids, { labels: { [`${LABEL_PREFIX}.keep`]: "true" } }) });
    const id = buffer.instance.instanceId;
    const booted = await bl.boot(buffer, { overrides });
    assertOutcome(t, booted, "ready", "the buffer is ready on a new workspace volume");
    const volumeId = booted.report!.volumeId!;
    t.same(
      await intentTags(volumeId),
      { [VolumeTag.keep]: "true", [VolumeTag.keepBy]: id, [VolumeTag.ttlHours]: "24" },
      "from the claim on: keep, marked as this instance's, and its TTL",
    );
    const claimed = await bl.tags(volumeId);
    t.same(
      [claimed[VolumeTag.userId], claimed[VolumeTag.projectId], claimed[VolumeTag.workspaceKeys]],
      ["31", "p-kept", "user-id,project-id"],
      "and the workspace ids, since its creation",
    );
    await writeMark(buffer, "kept-workspace");

    // The autoscaler stops the buffer: the release at its shutdown keeps the volume attached.
    let atStop: Awaited<ReturnType<typeof releaseHost>> | undefined;
    bl.lab.ec2.setShutdownHook(id, async () => {
      await buffer.dockerd?.stop();
      atStop = await releaseHost(bl, buffer);
    });
    await bl.ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    t.ok(await reached(id, "stopped"), "stopped");
    bl.lab.ec2.setShutdownHook(id, undefined);
    t.same(atStop?.report?.kept, [volumeId], "the stop kept the volume attached");
    // ... and terminates it while stopped: no OS runs, no release.
    await bl.ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
    t.ok(await reached(id, "terminated"), "terminated while stopped");
    const freed = await volumeEnd(bl, volumeId);
    t.equal(freed.state, "available", "EC2 detached the volume");
    t.same(
      [freed.tags[VolumeTag.claimedBy], freed.tags[VolumeTag.releasedAt], freed.tags[VolumeTag.keep]],
      [id, undefined, "true"],
      "still claimed by the dead buffer, never released, and kept",
    );

    // Deletions allowed: only the keep spares it (the first test's released volume is expired by then and goes).
    for (const days of [3, 30]) {
      const gc = await gcAt(bl, Date.now() + days * DAY, { dryRun: false, maxDeletes: 20 });
      t.equal(verdictOf(gc, volumeId)?.verdict, "kept", `gc ${days} days later: kept`);
    }
    t.equal((await volumeEnd(bl, volumeId)).state, "available", "still there");

    const next = await bl.addHost({ tags: workspaceTags(ids) });
    const again = await bl.boot(next, { overrides });
    assertOutcome(t, again, "ready", "the workspace's next instance is ready");
    t.equal(again.report?.volumeId, volumeId, "on the kept volume");
    t.equal(await readMark(next), "kept-workspace", "with the workspace's data");
    t.same(
      await intentTags(volumeId),
      { [VolumeTag.keep]: "true", [VolumeTag.ttlHours]: "24" },
      "the dead buffer's keep stays, now nobody's to take back (this instance did not ask keep)",
    );
    await next.dockerd!.stop();
    const released = await releaseHost(bl, next);
    assertOutcome(t, released, "released", "released cleanly");
    t.equal((await bl.tags(volumeId))[VolumeTag.keep], "true", "and still kept after that release");
  },
);

t.test(
  "power loss in the middle of the release (SIGKILL between its detach and its tags) and the instance gone: gc " +
    "days later gives the volume the TTL its instance asked, not gc's",
  async (t) => {
    const ids = { userId: "41", projectId: "p-ttl" };
    const host = await bl.addHost({ tags: { ...workspaceTags(ids), "ebs-cache:ttl-hours": "72" } });
    const booted = await bl.boot(host, { overrides });
    assertOutcome(t, booted, "ready", "ready on a new workspace volume");
    const volumeId = booted.report!.volumeId!;
    t.same(await intentTags(volumeId), { [VolumeTag.ttlHours]: "72" }, "its TTL from the claim on; no keep asked");

    await host.dockerd!.stop();
    const killed = await runKilled(
      bl,
      host,
      "release",
      { kind: "call", call: { action: "CreateTags", nth: 1 }, apply: "before" },
      overrides,
    );
    t.ok(killed.reached, "the release detached the volume and was killed right before its tags", {
      lines: killed.lines.slice(-10),
    });
    bl.lab.ec2.terminateInstance(host.instance.instanceId);
    const freed = await volumeEnd(bl, volumeId);
    t.same(
      [freed.state, freed.tags[VolumeTag.claimedBy], freed.tags[VolumeTag.releasedAt], freed.tags[VolumeTag.expiresAt]],
      ["available", host.instance.instanceId, undefined, undefined],
      "available, still claimed by the dead instance, no release tags",
    );

    const seen = Date.now() + 2 * DAY;
    const first = await gcAt(bl, seen, { dryRun: false });
    t.equal(verdictOf(first, volumeId)?.verdict, "tag-expiry", "gc two days later: never released, tagged to expire");
    t.match(verdictOf(first, volumeId)?.reason, /its instance's TTL of 72 h/);
    t.equal(
      (await bl.tags(volumeId))[VolumeTag.expiresAt],
      new Date(seen + 72 * HOUR).toISOString(),
      "expires 72 h after gc found it, the instance's TTL",
    );
    t.equal(
      verdictOf(await gcAt(bl, seen + 48 * HOUR, { dryRun: true }), volumeId)?.verdict,
      "not-expired",
      "two days on: not expired (gc's 24 h would have deleted it)",
    );
    t.equal(
      verdictOf(await gcAt(bl, seen + 73 * HOUR, { dryRun: true, maxDeletes: 20 }), volumeId)?.verdict,
      "delete",
      "past the instance's TTL: gc would delete it",
    );

    const next = await bl.addHost({ tags: workspaceTags(ids) });
    const again = await bl.boot(next, { overrides });
    assertOutcome(t, again, "ready", "before that, the workspace's next instance gets it");
    t.equal(again.report?.volumeId, volumeId);
    const tags = await bl.tags(volumeId);
    t.same(
      [tags[VolumeTag.releasedAt], tags[VolumeTag.expiresAt], tags[VolumeTag.ttlHours]],
      [undefined, undefined, "24"],
      "the expiry gc gave goes with the claim; the new instance's TTL is recorded",
    );
    await next.dockerd!.stop();
    assertOutcome(t, await releaseHost(bl, next), "released", "released cleanly");
  },
);

t.test(
  "keep asked at the claim, withdrawn before the release: the release takes back the keep its claim wrote",
  async (t) => {
    const host = await bl.addHost({ tags: { ...workspaceTags({ userId: "51" }), "ebs-cache:keep": "true" } });
    const booted = await bl.boot(host, { overrides });
    assertOutcome(t, booted, "ready", "ready");
    const volumeId = booted.report!.volumeId!;
    t.same(
      await intentTags(volumeId),
      { [VolumeTag.keep]: "true", [VolumeTag.keepBy]: host.instance.instanceId, [VolumeTag.ttlHours]: "24" },
      "kept from the claim",
    );
    await bl.ec2.send(
      new DeleteTagsCommand({ Resources: [host.instance.instanceId], Tags: [{ Key: "ebs-cache:keep" }] }),
    );
    await host.dockerd!.stop();
    const released = await releaseHost(bl, host);
    assertOutcome(t, released, "released", "released");
    const tags = await bl.tags(volumeId);
    t.same([tags[VolumeTag.keep], tags[VolumeTag.keepBy]], [undefined, undefined], "the keep the claim wrote is gone");
    t.equal(
      Date.parse(tags[VolumeTag.expiresAt] ?? ""),
      Date.parse(tags[VolumeTag.releasedAt] ?? "") + DAY,
      "and the volume expires a TTL after its release",
    );
  },
);

t.test(
  "the lab closes and leaves no loop device, mount or dockerd behind; nothing force-detached or left attached",
  async (t) => {
    await closeLabLeavingNothing(t, bl, { noneAttached: true });
  },
);
