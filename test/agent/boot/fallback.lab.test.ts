/**
 * The boot path without a pool volume to take: the pool's volumes are all in another zone (never
 * tried), then a volume is made from the pool's snapshot, or, without a snapshot, the node comes
 * up degraded on docker's default data-root. And instance tags read through DescribeInstances when
 * IMDS serves none: `ebs-cache:enabled=false` disables the agent.
 */
import t, { type Test } from "tap";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { ExitCode } from "../../../src/errors.ts";
import { DATA_ROOT_SUBDIR } from "../../../src/layout.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { CreateVolumeCommand } from "@aws-sdk/client-ec2";
import { workspaceIdTags } from "../../../src/agent/workspace-ids.ts";
import { labelRecord, LABEL_PREFIX, POOL, startBootLab, type InProcessBoot } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";
import { workspaceTags } from "../../fixtures/lab/lifecycle-lab.ts";

await assertLabPrerequisites();

// The pool's volumes all live in us-east-1b; the hosts below boot in us-east-1a.
const bl = await startBootLab({ name: "test-boot-fallback", poolSize: 2, poolZone: "us-east-1b" });
t.teardown(() => bl.close());

function assertOutcome(t: Test, booted: InProcessBoot, outcome: string, message: string): void {
  t.equal(
    booted.report?.outcome,
    outcome,
    message,
    booted.report?.outcome === outcome ? {} : { result: booted.report, log: booted.log.join("\n") },
  );
}

/** The other zone's pool volumes are untouched: available, never attached, never tagged as claimed. */
async function otherZoneUntouched(t: Test): Promise<void> {
  for (const volumeId of bl.poolVolumes) {
    const volume = await bl.describe(volumeId);
    t.equal(volume.AvailabilityZone, "us-east-1b");
    t.equal(volume.State, "available", `${volumeId} (us-east-1b) still available`);
    t.notOk((await bl.tags(volumeId))[VolumeTag.claimedBy], `${volumeId} never claimed`);
  }
  t.same(
    bl.attachCalls().filter((id) => bl.poolVolumes.includes(id)),
    [],
    "no AttachVolume for a volume of another zone",
  );
}

t.test(
  "pool volumes of another zone are never tried: with creating from the snapshot off, the node degrades",
  async (t) => {
    const host = await bl.addHost({ availabilityZone: "us-east-1a" });
    const requests = bl.emulatorAttachRequests();
    const booted = await bl.boot(host, { overrides: { pool: POOL, createFromSnapshot: false } });
    assertOutcome(t, booted, "degraded", "outcome degraded");
    t.equal(booted.exitCode, ExitCode.degraded, "exit code 4");
    t.equal(booted.plan.selection.source, "none", "the plan finds nothing to claim in us-east-1a");
    t.match(booted.report?.reason, /no available volume in the pool/, "the reason says so");
    t.equal(bl.emulatorAttachRequests(), requests, "the emulator got no AttachVolume at all");
    await otherZoneUntouched(t);
    t.equal(
      (await host.dockerd!.info()).DockerRootDir,
      host.paths.defaultDataRoot,
      "docker up on its default data-root",
    );
  },
);

t.test("no pool volume in this zone: a volume is created from the pool's snapshot, attached and ready", async (t) => {
  const host = await bl.addHost({ availabilityZone: "us-east-1a" });
  const instanceId = host.instance.instanceId;
  // The volume made as an operator configures it (config volumes): encrypted with a KMS key, gp3
  // throughput above the baseline, the operator's tags.
  const volumes = {
    encrypted: true,
    kmsKeyId: "alias/ebs-cache",
    throughputMiBps: 250,
    tags: ["CostCenter=42", "Owner=platform"],
  };
  const booted = await bl.boot(host, { overrides: { pool: POOL, volumes } });
  assertOutcome(t, booted, "ready", "outcome ready");
  t.equal(booted.exitCode, 0);
  t.equal(booted.plan.selection.source, "snapshot", "the plan creates a volume from the snapshot");
  const volumeId = booted.report!.volumeId!;
  t.notOk(bl.poolVolumes.includes(volumeId), "a new volume, not one of the other zone");
  const volume = await bl.describe(volumeId);
  t.equal(volume.SnapshotId, bl.golden?.snapshotId, "made from the golden snapshot");
  t.equal(volume.AvailabilityZone, "us-east-1a", "in the instance's zone");
  t.equal(volume.Attachments?.[0]?.InstanceId, instanceId, "attached to this instance");
  t.equal(volume.Attachments?.[0]?.State, "attached");
  const tags = await bl.tags(volumeId);
  t.equal(tags[VolumeTag.pool], POOL, "tagged for the pool");
  t.equal(tags[VolumeTag.kind], "pool");
  t.equal(tags[VolumeTag.managed], "true");
  t.equal(tags[VolumeTag.claimedBy], instanceId, "claimed-by this instance");
  t.match(tags, { CostCenter: "42", Owner: "platform" }, "the operator's tags beside the agent's");
  t.equal(volume.Encrypted, true, "encrypted");
  t.match(volume.KmsKeyId, /:alias\/ebs-cache$/, "with the configured key");
  t.same([volume.Iops, volume.Throughput], [3000, 250], "gp3's baseline IOPS, the configured throughput");
  t.same(bl.attachCalls(instanceId), [volumeId], "one AttachVolume, for the new volume");
  await otherZoneUntouched(t);

  const dockerd = host.dockerd!;
  const info = await dockerd.info();
  t.equal(info.DockerRootDir, join(host.paths.mountRoot, volumeId, DATA_ROOT_SUBDIR), "docker runs on the new volume");
  t.equal(labelRecord(info.Labels)[`${LABEL_PREFIX}.state`], "ready", "label state=ready");
  const ran = await dockerd.docker(["run", "--rm", "--network", "none", "lab/app:1", "echo", "ok"]);
  t.equal(ran.stdout.trim(), "ok", "the snapshot's images run");
});

t.test(
  "workspace.requireEncrypted: the user's workspace volume EBS does not encrypt is not attached; the node " +
    "degrades with the reason",
  async (t) => {
    const ids = { "user-id": "u-plain" };
    const host = await bl.addHost({ availabilityZone: "us-east-1a", tags: workspaceTags({ userId: ids["user-id"] }) });
    const instanceId = host.instance.instanceId;
    const created = await bl.ec2.send(
      new CreateVolumeCommand({
        AvailabilityZone: "us-east-1a",
        SnapshotId: bl.golden!.snapshotId,
        TagSpecifications: [
          {
            ResourceType: "volume",
            Tags: Object.entries({
              [VolumeTag.managed]: "true",
              [VolumeTag.kind]: "workspace",
              [VolumeTag.pool]: POOL,
              ...workspaceIdTags(ids),
            }).map(([Key, Value]) => ({ Key, Value })),
          },
        ],
      }),
    );
    const plain = created.VolumeId!;
    await pollUntil(async () => (await bl.describe(plain)).State === "available");
    const createsBefore = bl.calls.filter((c) => c.command === "CreateVolumeCommand").length;

    const booted = await bl.boot(host, {
      overrides: { pool: POOL, workspace: { requireEncrypted: true }, volumes: { encrypted: true } },
    });
    assertOutcome(t, booted, "degraded", "outcome degraded");
    t.equal(booted.exitCode, ExitCode.degraded, "exit code 4");
    t.match(
      booted.report?.reason,
      new RegExp(
        `the workspace volume ${plain} of these ids is not encrypted and workspace\\.requireEncrypted is set: ` +
          `not attached`,
      ),
      "the reason names the volume and the switch",
    );
    t.same(bl.attachCalls(instanceId), [], "no AttachVolume");
    t.equal(
      bl.calls.filter((c) => c.command === "CreateVolumeCommand").length,
      createsBefore,
      "no new workspace volume (it would split the user's data)",
    );
    const after = await bl.describe(plain);
    t.equal(after.State, "available", "the volume is left as it was");
    t.same(after.Attachments, []);
    const labels = labelRecord((await host.dockerd!.info()).Labels);
    t.equal(labels[`${LABEL_PREFIX}.state`], "degraded", "label state=degraded");
    t.match(labels[`${LABEL_PREFIX}.reason`], /not encrypted/, "a label gives the reason");
  },
);

t.test(
  "no pool volume and no snapshot: degraded, docker up on its default data-root, label state=degraded, exit code 4",
  async (t) => {
    const host = await bl.addHost({ availabilityZone: "us-east-1a" });
    const before = await readFile(host.paths.daemonJson, "utf8");
    const requests = bl.emulatorAttachRequests();
    // A pool nobody built: no volume, no snapshot.
    const booted = await bl.boot(host, { overrides: { pool: "nothing-here" } });
    assertOutcome(t, booted, "degraded", "outcome degraded");
    t.equal(booted.exitCode, ExitCode.degraded, "exit code 4");
    t.equal(booted.plan.selection.source, "none");
    t.match(booted.report?.reason, /no completed snapshot/, "the reason names the missing snapshot");
    t.equal(bl.emulatorAttachRequests(), requests, "no AttachVolume");

    const dockerd = host.dockerd;
    t.ok(dockerd && (await dockerd.isActive()), "docker is up");
    const info = await dockerd!.info();
    t.equal(info.DockerRootDir, host.paths.defaultDataRoot, "DockerRootDir is the host's default data-root");
    const labels = labelRecord(info.Labels);
    t.equal(labels[`${LABEL_PREFIX}.state`], "degraded", "label state=degraded");
    t.match(labels[`${LABEL_PREFIX}.reason`], /no completed snapshot/, "a label gives the reason");
    const after = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
    t.equal(
      after["data-root"],
      (JSON.parse(before) as Record<string, unknown>)["data-root"],
      "daemon.json data-root unchanged",
    );
    t.equal(
      (await dockerd!.docker(["image", "ls", "-q"])).stdout.trim(),
      "",
      "the default root holds no cached image (as without the agent)",
    );
  },
);

t.test(
  "IMDS serving no tags: tags come from DescribeInstances, ebs-cache:enabled=false gives disabled, nothing " +
    "attached, docker untouched",
  async (t) => {
    const host = await bl.addHost({
      availabilityZone: "us-east-1a",
      metadataTags: false,
      tags: { "ebs-cache:enabled": "false" },
    });
    const before = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
    const requests = bl.emulatorAttachRequests();
    const booted = await bl.boot(host, { overrides: { pool: POOL } });
    assertOutcome(t, booted, "disabled", "outcome disabled");
    t.equal(booted.exitCode, 0, "exit code 0");
    t.equal(booted.identity.tagsSource, "ec2", "the tags came from EC2");
    t.equal(booted.identity.tags["ebs-cache:enabled"], "false");
    const described = bl.calls.filter(
      (c) =>
        c.command === "DescribeInstancesCommand" &&
        (c.input.InstanceIds as string[] | undefined)?.includes(host.instance.instanceId),
    );
    t.equal(described.length, 1, "one DescribeInstances (tags and attached volumes)");
    t.equal(booted.plan.selection.source, "disabled");
    t.equal(bl.emulatorAttachRequests(), requests, "no AttachVolume");
    t.same(
      bl.lab.backend.attachments().filter((a) => a.instanceId === host.instance.instanceId),
      [],
      "nothing attached to the instance",
    );
    t.notOk(host.dockerd, "docker was neither started nor restarted");
    const after = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
    t.equal(after["data-root"], before["data-root"], "daemon.json data-root unchanged");
    t.same(
      after.labels,
      [`${LABEL_PREFIX}.state=disabled`, `${LABEL_PREFIX}.reason=disabled by configuration or instance tag`],
      "only the disabled label is published (for docker's next start)",
    );
  },
);

t.test("the lab closes and leaves no loop device, mount or dockerd behind", async (t) => {
  const left = await bl.close();
  t.same(left, { rootExists: false, loopDevices: [], mounts: [], dockerds: [] });
});
