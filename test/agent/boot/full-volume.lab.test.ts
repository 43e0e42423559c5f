/**
 * A full disk is not a broken volume: a workspace or pool volume whose XFS has no room left (a
 * file fills it) fails prepare-data-root with ENOSPC; it is handed back without `last-error`. The
 * user's workspace is never replaced by a fresh one (the node degrades, the workspace released for
 * its user, who gets it back once it has room); a full pool volume stays in the pool and the boot
 * takes another one.
 */
import t from "tap";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { CreateVolumeCommand } from "@aws-sdk/client-ec2";
import { workspaceIdTags } from "../../../src/agent/workspace-ids.ts";
import { run } from "../../../src/exec.ts";
import { VolumeTag } from "../../../src/tags.ts";
import {
  closeLabLeavingNothing,
  mountsUnder,
  POOL,
  startBootLab,
  withMounted,
  type BootLab,
} from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";
import { assertOutcome, ISO_TIME, releaseHost, volumeEnd, workspaceTags } from "../../fixtures/lab/lifecycle-lab.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-boot-full", poolSize: 2 });
t.teardown(() => bl.close());
const overrides = { pool: POOL, prewarm: { strategy: "off" as const } };

/** Fills the volume's filesystem with a file (fallocate, then the last blocks written), as a user's pulls would. */
async function fill(bl: BootLab, volumeId: string): Promise<void> {
  await bl.withVolume(volumeId, (device, helper) =>
    withMounted(
      device,
      join(helper.paths.hostRoot, "fill"),
      async (dir) => {
        const free = Number((await run("df", ["--output=avail", "-B1", dir])).stdout.split("\n")[1]);
        await run("fallocate", ["-l", String(free - 1024 ** 2), join(dir, "ballast")]);
        await run("dd", ["if=/dev/zero", `of=${join(dir, "ballast-tail")}`, "bs=4k"], { check: false });
        const left = Number((await run("df", ["--output=avail", "-B1", dir])).stdout.split("\n")[1]);
        if (left > 1024 ** 2) throw new Error(`${volumeId} still has ${left} bytes free`);
      },
      { readOnly: false },
    ),
  );
}

t.test(
  "a full workspace volume: not quarantined, no fresh workspace for the user; the node degrades, the workspace " +
    "released for its user, who gets it back once it has room",
  async (t) => {
    const ids = { "user-id": "u-full" };
    const created = await bl.ec2.send(
      new CreateVolumeCommand({
        AvailabilityZone: `${bl.lab.region}a`,
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
    const volumeId = created.VolumeId!;
    await pollUntil(async () => (await bl.describe(volumeId)).State === "available");
    await fill(bl, volumeId);
    const createsBefore = bl.calls.filter((c) => c.command === "CreateVolumeCommand").length;

    const host = await bl.addHost({ tags: workspaceTags({ userId: ids["user-id"] }) });
    const booted = await bl.boot(host, { overrides });
    assertOutcome(t, booted, "degraded", "the node degrades");
    t.match(booted.report?.reason, new RegExp(`${volumeId}: its filesystem is full`), "the reason says it is full");
    t.same(bl.attachCalls(host.instance.instanceId), [volumeId], "the user's own workspace only: no other volume");
    t.equal(
      bl.calls.filter((c) => c.command === "CreateVolumeCommand").length,
      createsBefore,
      "no fresh volume made for the user",
    );
    const end = await volumeEnd(bl, volumeId);
    t.equal(end.state, "available", "handed back");
    t.notOk(end.tags[VolumeTag.lastError], "no last-error: not quarantined");
    t.equal(end.tags[VolumeTag.userId], "u-full", "its ids intact");
    t.notOk(end.tags[VolumeTag.claimedBy], "no claim left");
    t.match(end.tags[VolumeTag.releasedAt], ISO_TIME, "released, as a release would");
    t.match(end.tags[VolumeTag.expiresAt], ISO_TIME, "with an expiry: not left to live for ever");
    t.same(await mountsUnder(host.paths.mountRoot), [], "nothing left mounted");
    t.equal((await host.dockerd!.info()).DockerRootDir, host.paths.defaultDataRoot, "docker on its own data-root");
    await host.dockerd!.stop();
    assertOutcome(t, await releaseHost(bl, host), "nothing", "the release has nothing to do");

    // Someone frees space on it: the same user's next machine gets its workspace back.
    await bl.withVolume(volumeId, (device, helper) =>
      withMounted(device, join(helper.paths.hostRoot, "free"), (dir) => rm(join(dir, "ballast")), {
        readOnly: false,
      }),
    );
    const next = await bl.addHost({ tags: workspaceTags({ userId: ids["user-id"] }) });
    const again = await bl.boot(next, { overrides });
    assertOutcome(t, again, "ready", "the user's next machine is ready");
    t.equal(again.report?.volumeId, volumeId, "on the same workspace volume");
    await next.dockerd!.stop();
    assertOutcome(t, await releaseHost(bl, next), "released", "released");
  },
);

t.test("full pool volumes: not quarantined, left in the pool; the boot takes another volume", async (t) => {
  for (const volumeId of bl.poolVolumes) await fill(bl, volumeId);
  const host = await bl.addHost();
  const booted = await bl.boot(host, { overrides });
  assertOutcome(t, booted, "ready", "the node is ready");
  t.notOk(bl.poolVolumes.includes(booted.report!.volumeId!), "on a volume that is not full");
  t.same(
    [...bl.attachCalls(host.instance.instanceId)].slice(0, 2).sort(),
    [...bl.poolVolumes].sort(),
    "both full ones were tried",
  );
  t.ok(
    booted.log.some((line) =>
      /boot\.volume-full: .*its filesystem is full.*handed back to the pool, not quarantined/.test(line),
    ),
    "one line each says why",
  );
  for (const volumeId of bl.poolVolumes) {
    const end = await volumeEnd(bl, volumeId);
    t.equal(end.state, "available", `${volumeId} handed back`);
    t.notOk(end.tags[VolumeTag.lastError], `${volumeId}: no last-error`);
    t.equal(end.tags[VolumeTag.kind], "pool", `${volumeId} stays in the pool`);
  }
  await host.dockerd!.stop();
  assertOutcome(t, await releaseHost(bl, host), "released", "released");
});

t.test("the lab closes and leaves no loop device, mount or dockerd behind; nothing was force-detached", async (t) => {
  await closeLabLeavingNothing(t, bl, { noneAttached: true });
});
