/**
 * Boots that converge and hold (lab): claim tags ensured on every run, a bad volume quarantined
 * and passed over for the next candidate, and SIGTERM during a boot undoing what it holds.
 */
import t from "tap";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { AttachVolumeCommand, CreateTagsCommand } from "@aws-sdk/client-ec2";
import { execa } from "execa";
import { ExitCode } from "../../../src/errors.ts";
import { run } from "../../../src/exec.ts";
import { writeLabConfig } from "../../../src/lab/machines/agent.ts";
import { orderCandidates } from "../../../src/agent/volume-rules.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { writeWorkspaceRecord } from "../../../src/agent/workspace-record.ts";
import { goldenPoolTags, POOL, startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites, childEnv, pollUntil } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-boot-converge", poolSize: 0 });
t.teardown(() => bl.close());

const CLI = fileURLToPath(new URL("../../../src/cli.ts", import.meta.url));

t.test(
  "a reused attachment whose claim tags were never written (killed after AttachVolume) gets them; stale release " +
    "and error tags go",
  async (t) => {
    const [volumeId] = await bl.createPool("stale-tags", 1);
    const host = await bl.addHost();
    // What a boot killed right after AttachVolume leaves: attached here, an earlier release's
    // expiry and an earlier instance's error still on the volume, no claimed-by.
    const ec2 = bl.lab.ec2Client();
    await ec2.send(
      new CreateTagsCommand({
        Resources: [volumeId!],
        Tags: [
          { Key: VolumeTag.releasedAt, Value: "2026-01-01T00:00:00.000Z" },
          { Key: VolumeTag.expiresAt, Value: "2026-01-02T00:00:00.000Z" },
          { Key: VolumeTag.lastError, Value: "i-0123456789abcdef0: an old failure" },
          { Key: VolumeTag.lastErrorAt, Value: "2026-01-01T00:00:00.000Z" },
        ],
      }),
    );
    await ec2.send(
      new AttachVolumeCommand({ VolumeId: volumeId!, InstanceId: host.instance.instanceId, Device: "/dev/sdf" }),
    );

    const booted = await bl.boot(host, { overrides: { pool: "stale-tags" } });
    t.equal(
      booted.report?.outcome,
      "ready",
      "ready on the attached volume",
      booted.report?.outcome === "ready" ? {} : { log: booted.log.join("\n") },
    );
    t.equal(booted.plan.selection.source, "attached");
    const tags = await bl.tags(volumeId!);
    t.equal(tags[VolumeTag.claimedBy], host.instance.instanceId, "claimed-by written by the rerun");
    t.ok(tags[VolumeTag.claimedAt], "claimed-at written");
    for (const key of [VolumeTag.releasedAt, VolumeTag.expiresAt, VolumeTag.lastError, VolumeTag.lastErrorAt]) {
      t.equal(tags[key], undefined, `${key} removed`);
    }

    // Right already: a second run writes no tag.
    const before = bl.calls.length;
    const again = await bl.boot(host, { overrides: { pool: "stale-tags" } });
    t.equal(again.report?.outcome, "ready");
    const mine = bl.calls.slice(before).map((c) => c.command);
    t.notOk(
      mine.includes("CreateTagsCommand") || mine.includes("DeleteTagsCommand"),
      "no tag call when the tags are right",
      { calls: mine },
    );
    // The pre-warm asks DescribeVolumeStatus of a volume from a snapshot not yet initialized: its own call.
    const claimPath = mine.filter((c) => c !== "DescribeVolumeStatusCommand");
    t.same(
      claimPath,
      ["DescribeInstancesCommand", "DescribeVolumesCommand"],
      "a reboot asks EC2 twice: the instance, its attached volume",
    );
    await host.dockerd?.stop();
  },
);

t.test(
  "a foreign volume first in the order is handed back quarantined and the next candidate is claimed; the next " +
    "boot does not try it",
  async (t) => {
    const pool = "bad-first";
    const [good] = await bl.createPool(pool, 1);
    const bad = await bl.createBlankVolume(goldenPoolTags(pool, bl.golden));
    await bl.withVolume(bad, (device) => run("mkfs.ext4", ["-q", "-L", "other", device]));

    // A host whose order puts the bad volume first.
    let host = await bl.addHost();
    for (let i = 0; i < 20 && orderCandidates(host.instance.instanceId, [good!, bad])[0] !== bad; i++)
      host = await bl.addHost();
    t.equal(orderCandidates(host.instance.instanceId, [good!, bad])[0], bad, "this host tries the bad volume first");

    const booted = await bl.boot(host, { overrides: { pool } });
    t.equal(
      booted.report?.outcome,
      "ready",
      "ready on the next candidate",
      booted.report?.outcome === "ready" ? {} : { result: booted.report, log: booted.log.join("\n") },
    );
    t.equal(booted.report?.volumeId, good, "on the good volume");
    // (The good one may take two calls: the bad one still holds /dev/sdf while it detaches, and
    // EC2 refuses a name in use, so the next name is tried.)
    t.same(
      [...new Set(bl.attachCalls(host.instance.instanceId))],
      [bad, good],
      "claimed the bad one, then the good one",
    );
    t.ok(await bl.waitAvailable(bad), "the bad volume is detached again");
    const tags = await bl.tags(bad);
    t.match(tags[VolumeTag.lastError], new RegExp(`^${host.instance.instanceId}: .*ext4`), "last-error says why");
    t.ok(Date.parse(tags[VolumeTag.lastErrorAt] ?? "") > Date.now() - 3600_000, "last-error-at is now");
    t.notOk(tags[VolumeTag.claimedBy], "no claim left on it");
    t.equal(
      (await bl.withVolume(bad, (device) => run("blkid", ["-p", "-o", "value", "-s", "LABEL", device]))).stdout.trim(),
      "other",
      "its filesystem untouched",
    );

    // Another host, whatever its order: the quarantined volume is no candidate.
    const other = await bl.addHost();
    const second = await bl.boot(other, { overrides: { pool, createFromSnapshot: false } });
    t.equal(second.report?.outcome, "degraded", "nothing else left in the pool");
    t.same(bl.attachCalls(other.instance.instanceId), [], "the quarantined volume was not tried");
    t.match(second.report?.reason, /no available volume in the pool/);

    // Quarantine off: it is a candidate again (and fails again, handed back).
    const third = await bl.addHost();
    const retried = await bl.boot(third, {
      overrides: { pool, createFromSnapshot: false, claim: { quarantineHours: 0 } },
    });
    t.equal(retried.report?.outcome, "degraded");
    t.same(bl.attachCalls(third.instance.instanceId), [bad], "with quarantine off it is tried");
    await host.dockerd?.stop();
  },
);

t.test(
  "SIGTERM while the boot waits for its device: the wait stops, the volume is handed back, the node degrades (exit 4)",
  async (t) => {
    const pool = "sigterm";
    const [volumeId] = await bl.createPool(pool, 1);
    const host = await bl.addHost();
    // The attachment never completes: the boot waits for its device until the signal.
    bl.lab.ec2.setFaults({ stuckAttach: [volumeId!] });
    t.teardown(() => bl.lab.ec2.setFaults({}));
    const config = await writeLabConfig(bl.lab, host, {
      pool,
      docker: { control: "none" },
      timeouts: { attachSeconds: 600, deviceSeconds: 600 },
    });
    const child = execa(process.execPath, [CLI, "boot", "--no-docker", "--json", "--config", config], {
      cwd: fileURLToPath(new URL("../../..", import.meta.url)),
      env: childEnv(),
      extendEnv: false,
      reject: false,
      stdin: "ignore",
      timeout: 240_000,
    });
    const attachedHere = async () =>
      (await bl.describe(volumeId!)).Attachments?.some(
        (a) => a.InstanceId === host.instance.instanceId && a.State !== "detached",
      ) ?? false;
    t.ok(await pollUntil(attachedHere), "the claim was made");
    child.kill("SIGTERM");
    const result = await child;
    t.equal(result.exitCode, ExitCode.degraded, "exit code 4", { stderr: String(result.stderr).slice(-2000) });
    const printed = JSON.parse(String(result.stdout)) as { result: { outcome: string; reason: string } };
    t.equal(printed.result.outcome, "degraded");
    t.match(printed.result.reason, /stopped by SIGTERM before/, "the reason names SIGTERM, the signal that came");
    t.match(String(result.stderr), /agent\.sigterm/, "the signal is logged");
    bl.lab.ec2.setFaults({});
    t.ok(await pollUntil(async () => !(await attachedHere())), "the volume was handed back (detached, never forced)");
    t.notOk((await bl.tags(volumeId!))[VolumeTag.claimedBy], "no claim tag left");
    t.notOk((await bl.tags(volumeId!))[VolumeTag.lastError], "not quarantined: the volume did nothing wrong");
    t.equal(bl.lab.ec2.snapshotState().volumes[volumeId!]?.forceDetachCount, 0, "never force-detached");
  },
);

t.test(
  "a volume just created that EC2 does not show yet (eventual consistency) is waited for, not taken as gone",
  async (t) => {
    // The lab's pool of the golden snapshot is empty here: the boot makes a volume from the snapshot.
    const host = await bl.addHost();
    // DescribeVolumes shows the new volume at once; AttachVolume does not yet.
    bl.lab.ec2.setFaults({ actions: { AttachVolume: { notFoundAfterCreateMs: 2500 } } });
    t.teardown(() => bl.lab.ec2.setFaults({}));
    const before = bl.calls.length;
    const created = await bl.boot(host, { overrides: { pool: POOL } });
    bl.lab.ec2.setFaults({});
    t.equal(created.plan.selection.source, "snapshot", "no pool volume: one is made from the snapshot");
    t.equal(
      created.report?.outcome,
      "ready",
      "ready on the new volume",
      created.report?.outcome === "ready" ? {} : { result: created.report, log: created.log.join("\n") },
    );
    t.ok(
      created.log.some((line) => /not visible to AttachVolume yet/.test(line)),
      "AttachVolume met NotFound and waited",
    );
    t.equal(bl.calls.slice(before).filter((c) => c.command === "CreateVolumeCommand").length, 1, "one CreateVolume");
    await host.dockerd?.stop();
  },
);

t.test(
  "the first phase's budget: a stuck attachment is undone at timeouts.bootSeconds, and no creation starts that " +
    "would not fit",
  async (t) => {
    const pool = "budget";
    const [volumeId] = await bl.createPool(pool, 1);
    const host = await bl.addHost();
    bl.lab.ec2.setFaults({ stuckAttach: [volumeId!] });
    t.teardown(() => bl.lab.ec2.setFaults({}));
    const overrides = {
      pool,
      docker: { control: "none" },
      timeouts: { bootSeconds: 6, attachSeconds: 600, deviceSeconds: 600 },
    };
    const run1 = await bl.cli(host, ["--no-docker", "--json"], overrides);
    bl.lab.ec2.setFaults({});
    t.equal(run1.exitCode, ExitCode.degraded, "degraded (exit 4), not late", { stderr: run1.stderr.slice(-2000) });
    const printed = JSON.parse(run1.stdout) as { result: { outcome: string; reason: string } };
    t.match(printed.result.reason, /boot budget of 6 s ran out/, "the reason names the budget");
    t.ok(await bl.waitAvailable(volumeId!), "the stuck claim was handed back");
    t.notOk(
      (await bl.tags(volumeId!))[VolumeTag.lastError],
      "not quarantined (the wait was cut, the volume did nothing wrong)",
    );

    // An empty pool of the golden snapshot with less budget left than a creation takes.
    const other = await bl.addHost();
    const volumesBefore = Object.keys(bl.lab.ec2.snapshotState().volumes).length;
    const run2 = await bl.cli(other, ["--no-docker", "--json"], {
      pool: POOL,
      docker: { control: "none" },
      timeouts: { bootSeconds: 5, createSeconds: 30 },
    });
    t.equal(run2.exitCode, ExitCode.degraded);
    const second = JSON.parse(run2.stdout) as { plan: { selection: { source: string } }; result: { reason: string } };
    t.equal(second.plan.selection.source, "snapshot");
    t.match(second.result.reason, /less than a volume from the snapshot takes/, "no CreateVolume started");
    t.equal(Object.keys(bl.lab.ec2.snapshotState().volumes).length, volumesBefore, "no volume was created");
  },
);

t.test(
  "a stopped warm buffer started again: the boot waits for osparc's one CreateTags (warm_buffer_machine=false " +
    "with the labels)",
  async (t) => {
    // osparc's activation (_try_start_warm_buffer_instances): StartInstances, then one CreateTags
    // carrying warm_buffer_machine=false and the labels tag together. A boot that runs before that
    // CreateTags sees `true` on an instance that booted before (its record of an earlier activation).
    const host = await bl.addHost({
      metadataTags: false,
      tags: { "io.simcore.autoscaling.warm_buffer_machine": "true" },
    });
    const stateDir = join(host.paths.hostRoot, "var/lib/ebs-cache-agent");
    await writeWorkspaceRecord(stateDir, {
      instanceId: host.instance.instanceId,
      launchTime: "2026-01-01T00:00:00.000Z",
      bootId: "an-earlier-boot",
      recordedAt: "2026-01-01T00:00:30.000Z",
    });
    const labels = JSON.stringify({ "user-id": "42", "project-id": "p-1", "node-id": "n-1" });
    const booting = bl.boot(host, { overrides: { pool: POOL, workspace: { waitForLabelsTagSeconds: 20 } } });
    await new Promise((resolve) => setTimeout(resolve, 2500));
    await bl.lab.ec2Client().send(
      new CreateTagsCommand({
        Resources: [host.instance.instanceId],
        Tags: [
          { Key: "io.simcore.autoscaling.warm_buffer_machine", Value: "false" },
          { Key: "io.simcore.autoscaling.ec2_instance.docker_node_labels", Value: labels },
        ],
      }),
    );
    const booted = await booting;
    t.ok(
      booted.log.some((line) => /waiting up to 20 s/.test(line)),
      "it waited",
      { log: booted.log.slice(0, 10).join("\n") },
    );
    t.ok(
      booted.log.some((line) => /the labels tag arrived/.test(line)),
      "the tag arrived",
    );
    t.equal(booted.plan.selection.source, "new-workspace", "the workspace ids were used: a workspace volume for them");
    t.equal(
      booted.report?.outcome,
      "ready",
      "ready",
      booted.report?.outcome === "ready" ? {} : { result: booted.report },
    );

    // Activated without a task (a hot-buffer refill): `false` and no labels tag. None will come: no wait.
    const refill = await bl.addHost({
      metadataTags: false,
      tags: { "io.simcore.autoscaling.warm_buffer_machine": "false" },
    });
    const refilled = await bl.boot(refill, { overrides: { pool: "nothing-here", createFromSnapshot: false } });
    t.notOk(
      refilled.log.some((line) => /waiting up to/.test(line)),
      "no wait on an activation that carries no labels",
    );

    // Not a warm buffer being activated: no wait.
    const plain = await bl.addHost({ metadataTags: false });
    const quick = await bl.boot(plain, { overrides: { pool: "nothing-here", createFromSnapshot: false } });
    t.notOk(
      quick.log.some((line) => /waiting up to/.test(line)),
      "no wait on an ordinary instance",
    );
    await host.dockerd?.stop();
    await refill.dockerd?.stop();
    await plain.dockerd?.stop();
  },
);
