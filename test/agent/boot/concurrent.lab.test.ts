/**
 * A boot storm: 10 real `ebs-cache-agent boot` processes start at once against one EC2 emulator
 * whose pool holds 5 volumes (and creating from the snapshot is off). AttachVolume is the lock:
 * 5 agents end prepared (volume mounted, daemon.json switched) on 5 distinct volumes, 5 degrade, no volume is attached
 * twice, every volume
 * is accounted for, and nothing is force-detached. The agents run with `docker.control: none`
 * (docker left to systemd ordering), so the docker steps are skipped: this test is about claiming.
 */
import t from "tap";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { BootPlan } from "../../../src/agent/boot/plan.ts";
import { ExitCode } from "../../../src/errors.ts";
import { run } from "../../../src/exec.ts";
import { DATA_ROOT_SUBDIR } from "../../../src/layout.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { findmnt, mountsUnder, POOL, startBootLab, type CliBoot } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";
import type { BootReport } from "../../../src/agent/outcomes.ts";

await assertLabPrerequisites();

const AGENTS = 10;
const POOL_SIZE = 5;
const bl = await startBootLab({ name: "test-boot-storm", poolSize: POOL_SIZE });
t.teardown(() => bl.close());

interface Booted {
  host: LabHost;
  run: CliBoot;
  json: { instanceId: string; plan: BootPlan; result: BootReport | null } | undefined;
}

t.test(
  `${AGENTS} agents boot at once as CLI processes on ${POOL_SIZE} pool volumes (docker.control none: docker ` +
    `steps skipped): ${POOL_SIZE} prepared on distinct volumes, ${AGENTS - POOL_SIZE} degraded, no volume attached ` +
    `twice`,
  async (t) => {
    const hosts = await Promise.all(
      Array.from({ length: AGENTS }, (_, i) => bl.addHost({ tags: { Name: `storm-${i}` } })),
    );
    const acceptedBefore = bl.emulatorAttachAccepted();
    const overrides = { pool: POOL, createFromSnapshot: false, docker: { control: "none" } };

    const booted: Booted[] = await Promise.all(
      hosts.map(async (host) => {
        const run = await bl.cli(host, ["--json"], overrides);
        let json: Booted["json"];
        try {
          json = JSON.parse(run.stdout) as Booted["json"];
        } catch {
          json = undefined;
        }
        return { host, run, json };
      }),
    );
    for (const { host, run, json } of booted) {
      t.ok(
        json?.result,
        `${host.instance.instanceId}: the CLI printed its plan and result`,
        json?.result ? {} : { exitCode: run.exitCode, stdout: run.stdout, stderr: run.stderr },
      );
    }

    const ready = booted.filter((b) => b.json?.result?.outcome === "prepared");
    const degraded = booted.filter((b) => b.json?.result?.outcome === "degraded");
    t.equal(
      ready.length,
      POOL_SIZE,
      `${POOL_SIZE} agents prepared their volume (docker steps are left to the second phase)`,
      { outcomes: booted.map((b) => [b.host.instance.instanceId, b.json?.result?.outcome, b.json?.result?.reason]) },
    );
    t.equal(degraded.length, AGENTS - POOL_SIZE, `${AGENTS - POOL_SIZE} agents degraded`);
    t.ok(
      ready.every((b) => b.run.exitCode === 0),
      "ready agents exit 0",
    );
    t.ok(
      degraded.every((b) => b.run.exitCode === ExitCode.degraded),
      "degraded agents exit 4",
      { exitCodes: degraded.map((b) => b.run.exitCode) },
    );
    t.ok(
      degraded.every((b) =>
        /every pool candidate was taken|no available volume in the pool/.test(b.json?.result?.reason ?? ""),
      ),
      "each degraded agent says the pool was used up",
      { reasons: degraded.map((b) => b.json?.result?.reason) },
    );

    const claimed = ready.map((b) => b.json!.result!.volumeId!);
    t.equal(new Set(claimed).size, POOL_SIZE, "the ready agents hold distinct volumes");
    t.same([...claimed].sort(), [...bl.poolVolumes].sort(), "together they hold the whole pool");
    t.equal(
      bl.emulatorAttachAccepted() - acceptedBefore,
      POOL_SIZE,
      `the emulator accepted exactly ${POOL_SIZE} AttachVolume calls: no volume attached twice`,
    );

    // Every pool volume is attached to exactly the instance that reports it, and tagged so.
    for (const volumeId of bl.poolVolumes) {
      const holder = ready.find((b) => b.json!.result!.volumeId === volumeId)!.host;
      const volume = await bl.describe(volumeId);
      t.same(
        (volume.Attachments ?? []).map((a) => [a.InstanceId, a.State]),
        [[holder.instance.instanceId, "attached"]],
        `${volumeId}: attached to one instance, the one reporting it`,
      );
      t.equal(
        (await bl.tags(volumeId))[VolumeTag.claimedBy],
        holder.instance.instanceId,
        `${volumeId}: claimed-by matches`,
      );
    }
    for (const { host } of degraded) {
      t.same(
        bl.lab.backend.attachments().filter((a) => a.instanceId === host.instance.instanceId),
        [],
        `${host.instance.instanceId} (degraded) holds no volume`,
      );
    }

    // What the agents left on their hosts: mounts and daemon.json.
    for (const { host, json } of ready) {
      const volumeId = json!.result!.volumeId!;
      const mountPoint = join(host.paths.mountRoot, volumeId);
      t.equal(
        (await findmnt(mountPoint))?.fsType,
        "xfs",
        `${host.instance.instanceId}: its volume is mounted at <mountRoot>/${volumeId}`,
      );
      const daemon = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
      t.equal(
        daemon["data-root"],
        join(mountPoint, DATA_ROOT_SUBDIR),
        `${host.instance.instanceId}: daemon.json points docker at it`,
      );
    }
    for (const { host } of degraded) {
      t.same(await mountsUnder(host.paths.mountRoot), [], `${host.instance.instanceId}: nothing mounted`);
      const daemon = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
      t.equal(
        daemon["data-root"],
        host.paths.defaultDataRoot,
        `${host.instance.instanceId}: daemon.json keeps the default data-root`,
      );
    }
    t.ok(
      hosts.every((host) => host.dockerd === undefined),
      "no dockerd was started (docker.control none)",
    );

    const state = bl.lab.ec2.snapshotState();
    t.same(
      Object.values(state.volumes)
        .filter((v) => v.forceDetachCount > 0)
        .map((v) => v.volumeId),
      [],
      "no force-detach",
    );
    t.same(
      state.events.filter((e) => e.kind === "force-detach"),
      [],
      "no force-detach event",
    );

    // The agents' mounts come off before the lab closes.
    for (const { host } of ready) {
      for (const target of await mountsUnder(host.paths.mountRoot)) await run("umount", [target]);
      t.same(await mountsUnder(host.paths.mountRoot), [], `${host.instance.instanceId}: unmounted`);
    }
  },
);

t.test(
  "the lab closes (after unmounting the agents' mounts) and leaves no loop device, mount or dockerd behind",
  async (t) => {
    const left = await bl.close();
    t.same(left, { rootExists: false, loopDevices: [], mounts: [], dockerds: [] });
  },
);
