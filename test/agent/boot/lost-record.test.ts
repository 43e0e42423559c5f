/**
 * The first phase's workspace record lost (the state folder's copy gone, and no copy on the
 * volume: the fakes' mount points are plain folders) and the labels tag rewritten for another
 * user's task before the second phase: in process, against the port fakes, no root. Phase 2 does
 * not mount the workspace for the other ids, moves docker off it (docker's default data-root has
 * no `data-root` key) and leaves it unmounted; the release gives it back without the other
 * task's keep and says so once.
 */
import t from "tap";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { runBoot } from "../../../src/agent/boot/run.ts";
import { labelsTagAsOsparcWrites } from "../../../src/agent/labels-tag.ts";
import { runRelease } from "../../../src/agent/release/run.ts";
import { workspaceIdTags } from "../../../src/agent/workspace-ids.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { DEFAULT_ROOT, fakeNode } from "../../fixtures/fakes/index.ts";

t.test(
  "a lost record and another user's labels: phase 2 degrades with nothing mounted, the release adds no keep",
  async (t) => {
    const labelsOf = (user: string, extra: Record<string, unknown> = {}) =>
      labelsTagAsOsparcWrites("io.simcore.autoscaling.ec2_instance.docker_node_labels", { "user-id": user, ...extra });
    const node = await fakeNode(t, { tags: labelsOf("A") });
    const ofA = await node.fake.volume({
      tags: {
        [VolumeTag.managed]: "true",
        [VolumeTag.kind]: "workspace",
        [VolumeTag.pool]: "default",
        ...workspaceIdTags({ "user-id": "A" }),
      },
    });
    node.docker.state.images.set("*", []);

    const first = await runBoot(node.config, node.adapters(), { dryRun: false, withDocker: false });
    t.equal(first.report?.outcome, "prepared", "phase 1 prepared A's workspace");
    t.equal(first.report?.volumeId, ofA.volumeId);
    await node.docker.service.start(); // docker.service, on the volume daemon.json names
    t.not(node.docker.state.runningRoot, DEFAULT_ROOT, "docker runs on the workspace");

    await rm(join(node.config.paths.stateDir, "workspace.json"));
    for (const key of Object.keys(node.instance.tags)) if (key.startsWith("io.simcore")) delete node.instance.tags[key];
    Object.assign(node.instance.tags, labelsOf("B", { "io.simcore.ebs-cache.keep": "true" }));

    const second = await runBoot(node.config, node.adapters(), { dryRun: false, mayClaim: false });
    t.equal(second.report?.outcome, "degraded", "phase 2 degrades: the workspace is not B's");
    t.equal(node.docker.state.runningRoot, DEFAULT_ROOT, "docker moved off the workspace");
    t.equal(node.docker.state.daemonJson["data-root"], undefined, "daemon.json back on docker's default");
    t.same(node.host.mounted.get(node.host.deviceOf(ofA.volumeId)) ?? [], [], "the workspace is not left mounted");
    t.equal(
      (await node.fake.describe(ofA.volumeId)).attachment?.instanceId,
      node.instance.instanceId,
      "still attached: the release gives it back",
    );

    await node.docker.service.stop(); // systemd stops docker before the release
    const released = await runRelease(node.config, node.adapters(), { dryRun: false });
    t.equal(released.report?.outcome, "released");
    const end = await node.fake.describe(ofA.volumeId);
    t.equal(end.state, "available");
    t.notOk(end.tags[VolumeTag.keep], "no keep from B's labels on A's workspace");
    t.ok(end.tags[VolumeTag.expiresAt], "it expires as any release's");
    const warnings = node.log.lines.filter((line) => line.startsWith("<4>release.") && line.includes("user-id=B"));
    t.equal(warnings.length, 1, "one warning");
    t.match(warnings[0], /is the workspace of user-id=A, and the labels .* name user-id=B/, "naming both sets of ids");
    t.equal(node.fake.forceDetaches(), 0, "never force-detached");
  },
);
