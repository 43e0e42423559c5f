/**
 * Workspace volumes across machines: the first instance of a user/project/node gets a new
 * workspace volume (the pool's stock adopted, from the pool's snapshot once the pool is empty, or
 * blank and formatted by the agent), writes into
 * a docker volume on it and releases it at shutdown; a second instance (another host) with the
 * same ids claims the same volume and finds the data, without the first machine's swarm
 * identity or containers. TTL and keep come from the instance tags.
 */
import t, { type Test } from "tap";
import { DeleteTagsCommand } from "@aws-sdk/client-ec2";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DATA_ROOT_SUBDIR } from "../../../src/layout.ts";
import { initSwarm } from "../../../src/lab/docker/images.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import { VolumeTag } from "../../../src/tags.ts";
import {
  labelRecord,
  LABEL_PREFIX,
  mountsUnder,
  POOL,
  startBootLab,
  closeLabLeavingNothing,
} from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";
import { readWorkspaceRecord } from "../../../src/agent/workspace-record.ts";
import { releaseHost, volumeEnd, workspaceTags, WORKSPACE_TAG } from "../../fixtures/lab/lifecycle-lab.ts";
import { assertOutcome, ISO_TIME } from "../../fixtures/lab/lifecycle-lab.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-lifecycle-ws", poolSize: 1 });
t.teardown(() => bl.close());
const overrides = { pool: POOL };

/** After a release: nothing of the volume left on the host, daemon.json back on docker's default. */
async function assertHostReleased(t: Test, host: LabHost): Promise<void> {
  t.same(await mountsUnder(host.paths.mountRoot), [], "nothing mounted under the host's mount root");
  t.same(
    bl.lab.backend.attachments().filter((a) => a.instanceId === host.instance.instanceId),
    [],
    "no device of the volume left on the host",
  );
  const daemon = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
  t.equal(daemon["data-root"], host.paths.defaultDataRoot, "daemon.json data-root back on the host's default");
  t.same(
    Object.keys(labelRecord((daemon.labels as string[] | undefined) ?? [])).filter((key) =>
      key.startsWith(`${LABEL_PREFIX}.`),
    ),
    [],
    "no agent label left in daemon.json",
  );
}

t.test(
  "a workspace volume adopted from the pool keeps its docker volume across release and a boot on another host",
  async (t) => {
    const ids = { userId: "17", projectId: "p-abc", nodeId: "n-1" };
    const hostA = await bl.addHost({ tags: { ...workspaceTags(ids), "ebs-cache:ttl-hours": "2" } });
    const a = await bl.boot(hostA, { overrides });
    assertOutcome(t, a, "ready", "first instance ready");
    t.equal(a.plan.selection.source, "new-workspace", "no workspace volume yet for the ids: one is made");
    const volumeId = a.report!.volumeId!;
    t.equal(volumeId, bl.poolVolumes[0], "the pool's volume in stock became it");
    const created = await bl.describe(volumeId);
    t.equal(created.SnapshotId, bl.golden?.snapshotId, "a volume of the pool's newest snapshot");
    const tags = await bl.tags(volumeId);
    t.match(
      tags,
      {
        [VolumeTag.managed]: "true",
        [VolumeTag.kind]: "workspace",
        [VolumeTag.pool]: POOL,
        [VolumeTag.userId]: "17",
        [VolumeTag.projectId]: "p-abc",
        [VolumeTag.nodeId]: "n-1",
        [VolumeTag.claimedBy]: hostA.instance.instanceId,
      },
      "tagged kind=workspace with the ids, claimed by the first instance",
    );
    t.notOk(tags[VolumeTag.createdBy], "not created-by=agent: a volume from a snapshot is never formatted");

    const dockerA = hostA.dockerd!;
    t.equal(
      (await dockerA.info()).DockerRootDir,
      join(hostA.paths.mountRoot, volumeId, DATA_ROOT_SUBDIR),
      "docker runs on the workspace volume",
    );
    await dockerA.docker(["volume", "create", "data"]);
    await dockerA.docker([
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
    // Machine state that must not follow the volume to the next machine.
    const nodeA = await initSwarm(dockerA);
    await dockerA.docker(["create", "--name", "leftover", "--network", "none", "lab/app:1", "true"]);

    const released = await releaseHost(bl, hostA);
    assertOutcome(t, released, "released", "release: released");
    t.equal(released.exitCode, 0, "exit code 0");
    t.same(released.report?.released, [volumeId]);
    t.ok(
      released.plan.steps.some((s) => s.step === "stop-docker"),
      "docker still ran on the volume: the release stopped it first (release.stopDocker)",
    );
    t.notOk(await dockerA.isActive(), "docker is stopped");
    const end = await volumeEnd(bl, volumeId);
    t.equal(end.state, "available", "the volume is available");
    t.same(end.attachments, [], "with no attachment");
    t.equal(end.forceDetachCount, 0, "never force-detached");
    t.match(end.tags[VolumeTag.releasedAt], ISO_TIME, "released-at, ISO_TIME 8601");
    const releasedAt = Date.parse(end.tags[VolumeTag.releasedAt] ?? "");
    t.equal(
      Date.parse(end.tags[VolumeTag.expiresAt] ?? ""),
      releasedAt + 2 * 3_600_000,
      "expires-at = released-at + 2 h (instance tag ebs-cache:ttl-hours)",
    );
    t.notOk(end.tags[VolumeTag.claimedBy], "claimed-by removed");
    t.notOk(end.tags[VolumeTag.claimedAt], "claimed-at removed");
    t.notOk(end.tags[VolumeTag.keep], "no keep");
    t.equal(end.tags[VolumeTag.nodeId], "n-1", "the ids stay");
    await assertHostReleased(t, hostA);

    const hostB = await bl.addHost({ tags: { ...workspaceTags(ids), "ebs-cache:keep": "true" } });
    const b = await bl.boot(hostB, { overrides });
    assertOutcome(t, b, "ready", "second instance (another host, same ids) ready");
    t.equal(b.plan.selection.source, "workspace", "it finds the workspace volume of the ids");
    t.same("candidates" in b.plan.selection ? b.plan.selection.candidates : [], [volumeId], "that one volume");
    t.equal(b.report?.volumeId, volumeId, "the same volume is claimed");
    const claimed = await bl.tags(volumeId);
    t.equal(claimed[VolumeTag.claimedBy], hostB.instance.instanceId, "claimed-by the second instance");
    t.notOk(
      claimed[VolumeTag.releasedAt] ?? claimed[VolumeTag.expiresAt],
      "the claim removed the old release's released-at / expires-at",
    );
    const dockerB = hostB.dockerd!;
    const read = await dockerB.docker([
      "run",
      "--rm",
      "--network",
      "none",
      "-v",
      "data:/d",
      "lab/app:1",
      "cat",
      "/d/f",
    ]);
    t.equal(read.stdout.trim(), "hi", "the file written on the first host is there");
    const info = await dockerB.info();
    t.equal(info.Swarm.LocalNodeState, "inactive", `the first machine's swarm identity (${nodeA}) did not come along`);
    t.equal((await dockerB.docker(["ps", "-aq"])).stdout.trim(), "", "nor its containers");
    t.equal(labelRecord(info.Labels)[`${LABEL_PREFIX}.kind`], "workspace", "label kind=workspace");

    await hostB.dockerd!.stop(); // as systemd does before ExecStop
    const kept = await releaseHost(bl, hostB);
    assertOutcome(t, kept, "released", "second release: released");
    t.notOk(
      kept.plan.steps.some((s) => s.step === "stop-docker"),
      "docker already stopped: no stop step",
    );
    const keptEnd = await volumeEnd(bl, volumeId);
    t.equal(keptEnd.state, "available");
    t.equal(keptEnd.tags[VolumeTag.keep], "true", "instance tag ebs-cache:keep=true: the volume is tagged keep");
    t.notOk(keptEnd.tags[VolumeTag.expiresAt], "and gets no expires-at");
    t.match(keptEnd.tags[VolumeTag.releasedAt], ISO_TIME, "released-at still written");
    t.ok(Date.parse(keptEnd.tags[VolumeTag.releasedAt] ?? "") >= releasedAt, "a new released-at");
    await assertHostReleased(t, hostB);
  },
);

t.test(
  "workspace.create=blank: an empty volume the agent formats, with an empty data-root docker fills; its data " +
    "comes back on another host, never reformatted",
  async (t) => {
    const ids = { userId: "18", projectId: "p-blank", nodeId: "n-2" };
    // The configured images cannot be on a blank volume: they are not expected there.
    const blank = { pool: POOL, workspace: { create: "blank", sizeGiB: 1 }, docker: { expectedImages: ["lab/app:1"] } };
    const hostC = await bl.addHost({ tags: workspaceTags(ids) });
    const c = await bl.boot(hostC, { overrides: blank });
    assertOutcome(t, c, "ready", "ready on the blank workspace volume");
    t.equal(c.plan.selection.source, "new-workspace");
    const volumeId = c.report!.volumeId!;
    const volume = await bl.describe(volumeId);
    t.notOk(volume.SnapshotId, "not from a snapshot");
    t.equal(volume.Size, 1, "workspace.sizeGiB");
    const tags = await bl.tags(volumeId);
    t.equal(tags[VolumeTag.createdBy], "agent", "created-by=agent");
    t.equal(tags[VolumeTag.kind], "workspace");
    t.equal(tags[VolumeTag.userId], "18");
    t.ok(
      c.log.some((line) => line.includes("formatting the blank volume the agent created")),
      "formatted by the agent",
    );
    t.ok(
      c.log.some((line) => line.includes("empty data-root created on the blank volume")),
      "an empty data-root, not the pool-volume cleanup",
    );
    const dockerC = hostC.dockerd!;
    const info = await dockerC.info();
    t.equal(info.DockerRootDir, join(hostC.paths.mountRoot, volumeId, DATA_ROOT_SUBDIR), "docker runs on it");
    t.equal((await dockerC.docker(["image", "ls", "-q"])).stdout.trim(), "", "no image: a blank volume");
    await dockerC.docker(["volume", "create", "notes"]);
    const mountpoint = (
      await dockerC.docker(["volume", "inspect", "--format", "{{.Mountpoint}}", "notes"])
    ).stdout.trim();
    t.ok(mountpoint.startsWith(info.DockerRootDir), "the docker volume is on the workspace volume");
    await writeFile(join(mountpoint, "todo.txt"), "buy milk\n");

    const released = await releaseHost(bl, hostC);
    assertOutcome(t, released, "released", "released");
    t.equal((await volumeEnd(bl, volumeId)).state, "available");

    const hostD = await bl.addHost({ tags: workspaceTags(ids) });
    const d = await bl.boot(hostD, { overrides: blank });
    assertOutcome(t, d, "ready", "ready on another host");
    t.equal(d.report?.volumeId, volumeId, "the same workspace volume");
    t.notOk(
      d.log.some((line) => line.includes("formatting")),
      "not formatted again: it holds a filesystem now",
    );
    t.ok(
      d.log.some((line) => line.includes("machine-local state removed")),
      "once docker initialized it, it is prepared like any volume",
    );
    const again = (
      await hostD.dockerd!.docker(["volume", "inspect", "--format", "{{.Mountpoint}}", "notes"])
    ).stdout.trim();
    t.equal(await readFile(join(again, "todo.txt"), "utf8"), "buy milk\n", "the docker volume's file is there");
    await hostD.dockerd!.stop();
    assertOutcome(t, await releaseHost(bl, hostD), "released", "released again");
  },
);

t.test(
  "osparc's way: a user-level workspace from a chunked tag comes back for the same user-id only, never for a " +
    "project-level request",
  async (t) => {
    // osparc's own placement example carries product-name + user-id only; the labels are long
    // enough to be written in chunks, and carry the agent's keep the osparc way.
    const tagsA = workspaceTags(
      { userId: "user_42" },
      { chunked: true, labels: { "product-name": "osparc", [`${LABEL_PREFIX}.keep`]: "true" } },
    );
    t.ok(Object.keys(tagsA).length >= 3 && !(WORKSPACE_TAG in tagsA), "the labels tag is chunked (_0, _1, …)", {
      keys: Object.keys(tagsA),
    });
    const hostA = await bl.addHost({ tags: tagsA });
    const a = await bl.boot(hostA, { overrides });
    assertOutcome(t, a, "ready", "ready on the chunked tag, no refusal");
    t.equal(
      a.plan.selection.source,
      "new-workspace",
      "only user-id (workspace.minimumKeys): a user-level workspace volume is created",
    );
    const volumeId = a.report!.volumeId!;
    const tags = await bl.tags(volumeId);
    t.equal(tags[VolumeTag.userId], "user_42", "the templated user id, as osparc renders it");
    t.equal(tags[VolumeTag.workspaceKeys], "user-id", "recorded as made for user-id only");
    t.notOk(
      tags[VolumeTag.projectId] ?? tags[VolumeTag.nodeId] ?? tags[VolumeTag.productName],
      "no other id tag (product-name is not an id key by default)",
    );
    const record = await readWorkspaceRecord(join(hostA.paths.hostRoot, "var/lib/ebs-cache-agent"));
    t.same(
      [record.record?.instanceId, record.record?.ids, record.record?.keep],
      [hostA.instance.instanceId, { "user-id": "user_42" }, true],
      "phase 1 recorded the ids and keep",
    );
    const dockerA = hostA.dockerd!;
    await dockerA.docker(["volume", "create", "data"]);
    await dockerA.docker([
      "run",
      "--rm",
      "--network",
      "none",
      "-v",
      "data:/d",
      "lab/app:1",
      "sh",
      "-c",
      "echo user42 > /d/f",
    ]);

    // After the join the autoscaler copies the labels onto the node and deletes the tags.
    await bl.ec2.send(
      new DeleteTagsCommand({
        Resources: [hostA.instance.instanceId],
        Tags: Object.keys(tagsA).map((Key) => ({ Key })),
      }),
    );
    t.notOk(
      Object.keys(hostA.instance.tags).some((key) => key.startsWith(WORKSPACE_TAG)),
      "the labels tag is gone from the instance",
    );
    await dockerA.stop();
    const released = await releaseHost(bl, hostA);
    assertOutcome(t, released, "released", "released without the tag");
    const end = await volumeEnd(bl, volumeId);
    t.equal(end.state, "available");
    t.equal(end.tags[VolumeTag.keep], "true", "keep from the labels tag, through phase 1's record: tagged keep");
    t.notOk(end.tags[VolumeTag.expiresAt], "and no expiry");

    // The same user, for a project: a project-level request is not served by the user's volume.
    const hostB = await bl.addHost({ tags: workspaceTags({ userId: "user_42", projectId: "p-7" }, { chunked: true }) });
    const b = await bl.boot(hostB, { overrides });
    assertOutcome(t, b, "ready", "the project-level instance is ready");
    t.equal(b.plan.selection.source, "new-workspace", "no volume of user-id + project-id: a new one, not the user's");
    t.not(b.report?.volumeId, volumeId, "another volume");
    t.equal(
      (await bl.tags(b.report!.volumeId!))[VolumeTag.workspaceKeys],
      "user-id,project-id",
      "made for user-id + project-id",
    );
    t.equal((await bl.describe(volumeId)).State, "available", "the user-level volume was not touched");
    const readB = await hostB.dockerd!.docker(["volume", "ls", "-q"]);
    t.notOk(readB.stdout.includes("data"), "the user's docker volume is not on the project's node");
    await hostB.dockerd!.stop();
    assertOutcome(t, await releaseHost(bl, hostB), "released", "project-level instance released");

    // The same user-id again (single tag this time): its volume comes back, with the file.
    const hostC = await bl.addHost({ tags: workspaceTags({ userId: "user_42" }) });
    const c = await bl.boot(hostC, { overrides });
    assertOutcome(t, c, "ready", "the second user-level instance is ready");
    t.equal(c.plan.selection.source, "workspace", "it finds the user's workspace volume");
    t.same(
      "candidates" in c.plan.selection ? c.plan.selection.candidates : [],
      [volumeId],
      "that volume only (not the project's)",
    );
    t.equal(c.report?.volumeId, volumeId);
    const read = await hostC.dockerd!.docker([
      "run",
      "--rm",
      "--network",
      "none",
      "-v",
      "data:/d",
      "lab/app:1",
      "cat",
      "/d/f",
    ]);
    t.equal(read.stdout.trim(), "user42", "the file written by the first instance is there");
    await hostC.dockerd!.stop();
    assertOutcome(t, await releaseHost(bl, hostC), "released", "released again");
  },
);

t.test("the lab closes and leaves no loop device, mount or dockerd behind; nothing was force-detached", async (t) => {
  await closeLabLeavingNothing(t, bl, { noneAttached: true });
});
