/**
 * A machine that changes tenants never sees the previous tenant's workspace. A machine used by
 * user A (its workspace volume mounted, a file written into a docker volume on it) is stopped —
 * the volume stays attached — and started as a warm buffer for another tenant: in osparc's
 * order (StartInstances, then one CreateTags with `warm_buffer_machine=false` and the labels
 * tag: the boot runs before the tags), in the reverse order (tags first), and with no labels at
 * all (a start to refill hot buffers). Each time A's volume is never mounted for the new tenant
 * (mounts, docker's data-root, the file), ends `available` and released with A's ids intact, and
 * A's next machine gets it back with the file.
 */
import t, { type Test } from "tap";
import { CreateTagsCommand } from "@aws-sdk/client-ec2";
import { access } from "node:fs/promises";
import { join } from "node:path";
import {
  createAutoscalerActor,
  Osparc,
  type OsparcBoot,
  type OsparcNode,
} from "../../../src/lab/machines/autoscaler.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { mountsUnder, POOL, startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";
import { ISO_TIME, volumeEnd } from "../../fixtures/lab/lifecycle-lab.ts";

await assertLabPrerequisites();

// A's, B's and C's workspaces are made of pool volumes (new users start from the pool's stock), and
// the hot-buffer refill takes one more: five leave stock for every scenario.
const bl = await startBootLab({ name: "test-osparc-tenant", poolSize: 5 });
t.teardown(() => bl.close());
const osparc = createAutoscalerActor({ lab: bl.lab, agentConfig: { pool: POOL } });
const WAIT = { workspace: { waitForLabelsTagSeconds: 30 } };
const APP = "lab/app:1";

const labelsOf = (user: string) => ({
  "product-name": "osparc",
  "user-id": user,
  "project-id": `p-${user}`,
  "node-id": `n-${user}`,
});
const A = labelsOf("user_a");

function assertBoot(t: Test, run: OsparcBoot, outcome: string, message: string): void {
  t.equal(
    run.report?.outcome,
    outcome,
    message,
    run.report?.outcome === outcome
      ? {}
      : { result: run.report, phase1: run.phase1.log.join("\n"), log: run.log.join("\n") },
  );
}

/** Where the file user A wrote lives, seen from a data-root. */
const secretIn = (dataRoot: string) => join(dataRoot, "volumes", "a-data", "_data", "secret");
const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

/**
 * User A's machine: launched as an activated machine for A, booted on a new workspace volume, a file written into a
 * docker volume on it, joined.
 */
async function machineOfA(t: Test): Promise<{ node: OsparcNode; volumeId: string }> {
  const node = await osparc.launch(A, { extraTags: { [Osparc.warmBufferTag]: "false" } });
  const boot = await osparc.boot(node);
  assertBoot(t, boot, "ready", "A's machine: ready");
  t.ok(
    ["new-workspace", "workspace"].includes(boot.phase1.plan.selection.source),
    "on A's workspace volume (new the first time, then the one A left)",
  );
  const volumeId = boot.report!.volumeId!;
  const docker = node.host.dockerd!;
  await docker.docker(["volume", "create", "a-data"]);
  await docker.docker([
    "run",
    "--rm",
    "--network",
    "none",
    "-v",
    "a-data:/d",
    APP,
    "sh",
    "-c",
    "echo user_a > /d/secret",
  ]);
  t.ok(await exists(secretIn((await docker.info()).DockerRootDir)), "A's file is on A's volume");
  await osparc.join(node);
  await osparc.attachNode(node);
  return { node, volumeId };
}

/** Stopped with A's volume attached, then tagged as a stopped warm buffer (`warm_buffer_machine=true`). */
async function stopAsBuffer(t: Test, node: OsparcNode, volumeId: string): Promise<void> {
  await osparc.stop(node);
  t.equal(node.lastRelease?.plan.shutdown.kind, "stop", "seen as a stop");
  t.same(
    (await volumeEnd(bl, volumeId)).attachments,
    [`attached ${node.instanceId}`],
    "A's volume stays attached over the stop",
  );
  await osparc.ec2.send(
    new CreateTagsCommand({ Resources: [node.instanceId], Tags: [{ Key: Osparc.warmBufferTag, Value: "true" }] }),
  );
}

/**
 * What the new tenant's boot must show: A's volume never mounted, handed back released with A's ids, docker elsewhere.
 */
async function assertNotSeen(t: Test, node: OsparcNode, boot: OsparcBoot, volumeId: string): Promise<void> {
  t.notOk(
    boot.phase1.plan.steps.some((s) => s.step === "reuse-attached"),
    "A's volume is not reused",
  );
  t.equal(boot.phase1.plan.steps[0]?.step, "hand-back-attached", "it is handed back first");
  t.notOk(
    boot.phase1.log.some((line) => line.includes("boot.mount") && line.includes(volumeId)),
    "never mounted by the new tenant's boot",
  );
  t.notOk(
    (await mountsUnder(node.host.paths.mountRoot)).some((m) => m.includes(volumeId)),
    "not mounted now",
  );
  const dataRoot = (await node.host.dockerd!.info()).DockerRootDir;
  t.notOk(dataRoot.includes(volumeId), `docker's data-root (${dataRoot}) is not on A's volume`);
  t.notOk(await exists(secretIn(dataRoot)), "A's file is not visible to the new tenant");
  const volumes = (await node.host.dockerd!.docker(["volume", "ls", "--format", "{{.Name}}"])).stdout.split("\n");
  t.notOk(volumes.includes("a-data"), "nor A's docker volume");
  const end = await volumeEnd(bl, volumeId);
  t.same(
    [end.state, end.attachments, end.forceDetachCount],
    ["available", [], 0],
    "A's volume is available, detached without force",
  );
  t.match(
    end.tags,
    {
      [VolumeTag.userId]: "user_a",
      [VolumeTag.projectId]: "p-user_a",
      [VolumeTag.nodeId]: "n-user_a",
      [VolumeTag.kind]: "workspace",
    },
    "with A's ids intact",
  );
  t.match(end.tags[VolumeTag.releasedAt], ISO_TIME, "tagged released");
  t.match(end.tags[VolumeTag.expiresAt], ISO_TIME, "with an expiry, as a release");
  t.notOk(end.tags[VolumeTag.claimedBy], "no claim left on it");
}

/** A's next machine gets the volume back, with the file. */
async function assertABack(t: Test, volumeId: string): Promise<void> {
  const again = await osparc.launch(A, { extraTags: { [Osparc.warmBufferTag]: "false" } });
  const boot = await osparc.boot(again);
  assertBoot(t, boot, "ready", "A's next machine: ready");
  t.equal(boot.report?.volumeId, volumeId, "on A's workspace volume");
  t.ok(await exists(secretIn((await again.host.dockerd!.info()).DockerRootDir)), "with A's file");
  await osparc.terminate(again);
}

const scenarios: Array<{
  name: string;
  labels: Record<string, string>;
  order: "osparc" | "tags-first";
  expect: string;
}> = [
  {
    name: "osparc's order (StartInstances, then one CreateTags with false + labels): another user",
    labels: labelsOf("user_b"),
    order: "osparc",
    expect: "new-workspace",
  },
  {
    name: "the reverse order (tags first, then StartInstances): another user",
    labels: labelsOf("user_c"),
    order: "tags-first",
    expect: "new-workspace",
  },
  { name: "a start with no labels at all (a hot-buffer refill)", labels: {}, order: "osparc", expect: "pool" },
];

for (const scenario of scenarios) {
  t.test(scenario.name, async (t) => {
    const { node, volumeId } = await machineOfA(t);
    await stopAsBuffer(t, node, volumeId);
    const boot = await osparc.activateWarmBuffer(node, scenario.labels, { overrides: WAIT, order: scenario.order });
    assertBoot(t, boot, "ready", "the new tenant's boot: ready");
    if (scenario.order === "osparc")
      t.ok(
        boot.phase1.log.some((line) => /waiting up to 30 s for the instance's tags/.test(line)),
        "the boot ran before the tags and waited for them",
      );
    else
      t.notOk(
        boot.phase1.log.some((line) => /waiting up to/.test(line)),
        "tags first: nothing to wait for",
      );
    t.ok(
      boot.phase1.log.some((line) => /workspace record is of an earlier activation/.test(line)),
      "A's record is not taken for the new tenant",
    );
    t.equal(boot.phase1.plan.selection.source, scenario.expect, `then ${scenario.expect}`);
    await assertNotSeen(t, node, boot, volumeId);
    await osparc.terminate(node);
    await assertABack(t, volumeId);
  });
}

t.test("the same tenant started again keeps its workspace (a reboot of one activation reads its record)", async (t) => {
  const { node, volumeId } = await machineOfA(t);
  // A second boot of the same activation (no StartInstances: the same LaunchTime): the tag is gone since the join.
  t.same(
    Object.keys(await osparc.instanceTags(node)).filter((key) => key.startsWith(Osparc.labelsTag)),
    [],
    "no labels tag any more",
  );
  await node.host.dockerd!.stop();
  const boot = await osparc.boot(node);
  assertBoot(t, boot, "ready", "ready again");
  t.equal(boot.phase1.plan.selection.source, "attached", "the workspace volume reused from this activation's record");
  t.equal(boot.report?.volumeId, volumeId);
  t.ok(await exists(secretIn((await node.host.dockerd!.info()).DockerRootDir)), "A's file");
  await osparc.terminate(node);
});
