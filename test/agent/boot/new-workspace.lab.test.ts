/**
 * A new user starts from the pool's stock (osparc: every new `node_id` on a cold launch is a
 * user with no workspace yet): the boot claims an initialized pool volume and makes it the
 * workspace of its ids in the same claim, cleaned as the pool volume it was (a previous tenant's
 * named docker volume does not travel). Two boots at once for the same ids (osparc launches the
 * tasks of one user with identical labels as one RunInstances of count N) end with at most one
 * workspace: the other runs on a pool volume as a plain node.
 */
import t from "tap";
import { CreateTagsCommand } from "@aws-sdk/client-ec2";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DATA_ROOT_SUBDIR } from "../../../src/layout.ts";
import { POOL, startBootLab, withMounted } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";
import { assertOutcome, workspaceTags } from "../../fixtures/lab/lifecycle-lab.ts";
import { VolumeTag } from "../../../src/tags.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-new-workspace", poolSize: 3 });
t.teardown(() => bl.close());
const overrides = { pool: POOL };

t.test("a new user with stock in the pool: an initialized pool volume becomes the workspace", async (t) => {
  // The keeper's mark on one of them: the boot takes an initialized one first.
  const initialized = bl.poolVolumes[2]!;
  await bl.ec2.send(
    new CreateTagsCommand({
      Resources: [initialized],
      Tags: [{ Key: VolumeTag.initialized, Value: "2026-01-01T00:00:00.000Z" }],
    }),
  );
  // A previous tenant left a named docker volume on it (a pool node that ran without a release).
  await bl.withVolume(initialized, (device, helper) =>
    withMounted(
      device,
      join(helper.paths.hostRoot, "tenant"),
      async (dir) => {
        const data = join(dir, DATA_ROOT_SUBDIR, "volumes", "leftover", "_data");
        await mkdir(data, { recursive: true });
        await writeFile(join(data, "secret"), "the previous tenant's\n");
      },
      { readOnly: false },
    ),
  );
  const host = await bl.addHost({ tags: workspaceTags({ userId: "31", projectId: "p-new", nodeId: "n-new" }) });
  const since = bl.calls.length;
  const booted = await bl.boot(host, { overrides });
  assertOutcome(t, booted, "ready", "ready on the adopted volume");
  t.equal(booted.plan.selection.source, "new-workspace");
  t.equal(booted.report?.source, "pool", "counted as a pool boot: a warm cache, no snapshot read");
  t.equal(booted.report?.volumeId, initialized, "the initialized pool volume");
  const tags = await bl.tags(initialized);
  t.match(
    tags,
    {
      [VolumeTag.kind]: "workspace",
      [VolumeTag.userId]: "31",
      [VolumeTag.projectId]: "p-new",
      [VolumeTag.nodeId]: "n-new",
      [VolumeTag.workspaceKeys]: "user-id,project-id,node-id",
      [VolumeTag.claimedBy]: host.instance.instanceId,
      [VolumeTag.pool]: POOL,
    },
    "tagged as the workspace of the ids, claimed by the instance",
  );
  t.notOk(tags[VolumeTag.images], "no image list: a workspace's content is its user's");
  t.notOk(
    bl.calls.slice(since).some((c) => c.command === "CreateVolumeCommand"),
    "no CreateVolume: the snapshot is not read",
  );
  t.notOk(
    booted.log.some((line) => line.includes("starts from the pool's snapshot")),
    "not the empty pool's path",
  );
  const volumes = (await host.dockerd!.docker(["volume", "ls", "-q"])).stdout.trim();
  t.equal(volumes, "", "cleaned as the pool volume it was: no docker volume of an earlier tenant");
  await host.dockerd!.stop();
});

t.test("two boots at once for the same ids: one workspace, the other a plain node on a pool volume", async (t) => {
  const ids = { userId: "32", projectId: "p-twin", nodeId: "n-twin" };
  const [a, b] = await Promise.all([
    bl.addHost({ tags: workspaceTags(ids) }),
    bl.addHost({ tags: workspaceTags(ids) }),
  ]);
  const booted = await Promise.all([bl.boot(a, { overrides }), bl.boot(b, { overrides })]);
  for (const one of booted) assertOutcome(t, one, "ready", "both nodes come up");
  const volumes = booted.map((one) => one.report!.volumeId!);
  t.not(volumes[0], volumes[1], "two volumes");
  const kinds = await Promise.all(volumes.map(async (id) => (await bl.tags(id))[VolumeTag.kind]));
  const workspaces = kinds.filter((kind) => kind === "workspace").length;
  t.ok(workspaces <= 1, `at most one workspace for the ids (kinds: ${kinds.join(", ")})`);
  for (const [i, id] of volumes.entries()) {
    const tags = await bl.tags(id);
    if (tags[VolumeTag.kind] === "pool") {
      t.notOk(tags[VolumeTag.userId], `${id}: a plain pool volume carries no ids`);
      t.ok(tags[VolumeTag.images], `${id}: its image list restored`);
      t.ok(
        booted[i]!.log.some((line) => /no second workspace/.test(line)),
        `${id}: the plain node says why it is one`,
      );
    }
  }
  t.equal(booted.filter((one) => one.report?.source === "pool").length, 2, "both from the pool's stock");

  // A third boot of the same ids while the workspace is held: planned as a plain pool node at once.
  if (workspaces === 1) {
    await bl.createPool(POOL, 1);
    const c = await bl.addHost({ tags: workspaceTags(ids) });
    const third = await bl.boot(c, { overrides });
    assertOutcome(t, third, "ready", "the third node comes up");
    t.equal(third.plan.selection.source, "pool", "the workspace is held: the pool");
    t.ok(
      third.log.some((line) => /is held by i-[0-9a-f]+: this node runs on a pool volume as a plain node/.test(line)),
      "and says so",
    );
    t.equal((await bl.tags(third.report!.volumeId!))[VolumeTag.kind], "pool", "no second workspace");
    await c.dockerd!.stop();
  }
  await Promise.all([a.dockerd!.stop(), b.dockerd!.stop()]);
});
