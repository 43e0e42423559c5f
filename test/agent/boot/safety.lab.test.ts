/**
 * What the boot must never do, and how it backs out: a pool volume holding a foreign
 * filesystem, or blank but not created by the agent, is never formatted (the boot degrades and
 * gives the volume back, unforced, its data intact); an unparsable daemon.json is never touched
 * and no volume is claimed for nothing; docker failing on the new data-root rolls back to the
 * previous daemon.json and docker comes back up on its old root.
 */
import t, { type Test } from "tap";
import { open, readFile, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { ExitCode } from "../../../src/errors.ts";
import { run } from "../../../src/exec.ts";
import { DATA_ROOT_SUBDIR } from "../../../src/layout.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import { VolumeTag } from "../../../src/tags.ts";
import {
  goldenPoolTags,
  labelRecord,
  LABEL_PREFIX,
  mountsUnder,
  POOL,
  startBootLab,
  withMounted,
  type InProcessBoot,
  closeLabLeavingNothing,
} from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-boot-safety", poolSize: 1 });
t.teardown(() => bl.close());

function assertOutcome(t: Test, booted: InProcessBoot, outcome: string, message: string): void {
  t.equal(
    booted.report?.outcome,
    outcome,
    message,
    booted.report?.outcome === outcome ? {} : { result: booted.report, log: booted.log.join("\n") },
  );
}

/** The claim was given back: detached (not forced), untagged, with the reason. */
async function assertGivenBack(t: Test, volumeId: string, host: LabHost): Promise<void> {
  t.ok(await bl.waitAvailable(volumeId), "the volume is detached again (available)");
  const record = bl.lab.ec2.snapshotState().volumes[volumeId];
  t.equal(record?.forceDetachCount, 0, "never force-detached");
  const tags = await bl.tags(volumeId);
  t.notOk(tags[VolumeTag.claimedBy], "claimed-by removed");
  t.match(
    tags[VolumeTag.lastError],
    new RegExp(`^${host.instance.instanceId}: `),
    "last-error names the instance and the reason",
  );
  t.same(await mountsUnder(host.paths.mountRoot), [], "nothing left mounted on the host");
}

/** Degraded means docker is up on the host's default data-root. */
async function assertDockerOnDefaultRoot(t: Test, host: LabHost, message: string): Promise<void> {
  const info = await host.dockerd!.info();
  t.equal(info.DockerRootDir, host.paths.defaultDataRoot, message);
  t.equal(labelRecord(info.Labels)[`${LABEL_PREFIX}.state`], "degraded", "label state=degraded");
}

t.test(
  "a pool volume with a foreign filesystem (ext4 holding a file) is never formatted: boot degrades, the volume " +
    "goes back unforced, the file reads back intact",
  async (t) => {
    const volumeId = await bl.createBlankVolume(goldenPoolTags("foreign", bl.golden));
    const text = `someone's data ${Date.now()}\n`;
    await bl.withVolume(volumeId, async (device, helper) => {
      await run("mkfs.ext4", ["-q", "-L", "precious", device]);
      await withMounted(
        device,
        join(helper.paths.mountRoot, "prepare"),
        (mnt) => writeFile(join(mnt, "precious.txt"), text),
        { readOnly: false },
      );
    });

    const host = await bl.addHost();
    const booted = await bl.boot(host, { overrides: { pool: "foreign" } });
    assertOutcome(t, booted, "degraded", "outcome degraded");
    t.equal(booted.exitCode, ExitCode.degraded, "exit code 4");
    t.match(
      booted.report?.reason,
      /holds an ext4 filesystem labelled "precious", not the agent's cache filesystem.*left untouched/,
      "the reason names the foreign filesystem",
    );
    t.same(bl.attachCalls(host.instance.instanceId), [volumeId], "it was claimed once (AttachVolume is the lock)");
    t.notOk(
      booted.log.some((line) => /formatting|mkfs/.test(line)),
      "no format was attempted",
    );
    await assertGivenBack(t, volumeId, host);
    await assertDockerOnDefaultRoot(t, host, "docker up on its default data-root");

    // Read it back from another host: the filesystem and the file are as they were.
    const back = await bl.withVolume(volumeId, async (device, helper) => {
      const type = (await run("blkid", ["-p", "-o", "value", "-s", "TYPE", device])).stdout.trim();
      const label = (await run("blkid", ["-p", "-o", "value", "-s", "LABEL", device])).stdout.trim();
      const content = await withMounted(device, join(helper.paths.mountRoot, "readback"), (mnt) =>
        readFile(join(mnt, "precious.txt"), "utf8"),
      );
      return { type, label, content };
    });
    t.same(back, { type: "ext4", label: "precious", content: text }, "ext4, its label and the file intact");
  },
);

t.test(
  "a blank pool volume the agent did not create is never formatted: boot degrades, the volume stays blank",
  async (t) => {
    const volumeId = await bl.createBlankVolume(goldenPoolTags("blank", bl.golden));
    t.notOk((await bl.tags(volumeId))[VolumeTag.createdBy], "not tagged as created by the agent");
    const host = await bl.addHost();
    const booted = await bl.boot(host, { overrides: { pool: "blank" } });
    assertOutcome(t, booted, "degraded", "outcome degraded");
    t.equal(booted.exitCode, ExitCode.degraded, "exit code 4");
    t.match(
      booted.report?.reason,
      /holds no filesystem \(blank\), on a volume the agent did not create.*left untouched/,
      "the reason says the volume is blank and was left alone",
    );
    t.same(bl.attachCalls(host.instance.instanceId), [volumeId], "it was claimed once");
    t.notOk(
      booted.log.some((line) => /formatting|mkfs/.test(line)),
      "no format was attempted",
    );
    await assertGivenBack(t, volumeId, host);
    await assertDockerOnDefaultRoot(t, host, "docker up on its default data-root");

    const back = await bl.withVolume(volumeId, async (device) => {
      const blkid = await run("blkid", ["-p", device], { check: false });
      const wipefs = await run("wipefs", ["-n", device]);
      const handle = await open(device, "r");
      const head = Buffer.alloc(1024 * 1024);
      try {
        await handle.read(head, 0, head.length, 0);
      } finally {
        await handle.close();
      }
      return {
        blkidExit: blkid.exitCode,
        blkidOut: blkid.stdout.trim(),
        wipefs: wipefs.stdout.trim(),
        zeros: head.equals(Buffer.alloc(head.length)),
      };
    });
    t.same(
      back,
      { blkidExit: 2, blkidOut: "", wipefs: "", zeros: true },
      "blkid -p finds nothing, wipefs finds nothing, the first MiB reads zeros",
    );
  },
);

t.test(
  "an unparsable daemon.json is left byte-for-byte unchanged: no volume claimed, outcome degraded with the " +
    "reason, the running docker keeps running",
  async (t) => {
    const host = await bl.addHost();
    // Docker runs (started with a good file); then the file is broken, as a bad edit would do.
    const dockerd = await host.startDocker();
    const pid = dockerd.pid;
    const broken = '{ "data-root": "/var/lib/docker", "log-driver": "json-file",, }\n';
    await writeFile(host.paths.daemonJson, broken);
    const requests = bl.emulatorAttachRequests();

    const booted = await bl.boot(host, { overrides: { pool: POOL } });
    assertOutcome(t, booted, "degraded", "outcome degraded");
    t.equal(booted.exitCode, ExitCode.degraded, "exit code 4");
    t.match(
      booted.report?.reason,
      /daemon\.json is not valid JSON.*left it unchanged/,
      "the reason says daemon.json does not parse",
    );
    t.ok(
      booted.log.some((line) => line.startsWith("<3>boot.failed:") && line.includes("not valid JSON")),
      "an error line in the log says why",
    );
    t.equal(await readFile(host.paths.daemonJson, "utf8"), broken, "daemon.json byte-for-byte unchanged");
    t.notOk(existsSync(`${host.paths.daemonJson}.ebs-cache-agent.bak`), "not even a backup was needed");
    t.equal(bl.emulatorAttachRequests(), requests, "no AttachVolume: no volume is claimed for nothing");
    t.same(bl.attachCalls(host.instance.instanceId), []);
    const pool = await bl.describe(bl.poolVolumes[0]!);
    t.equal(pool.State, "available", "the pool volume is still available");
    t.notOk((await bl.tags(bl.poolVolumes[0]!))[VolumeTag.lastError], "and not blamed with a last-error tag");
    t.same(await mountsUnder(host.paths.mountRoot), [], "nothing mounted");
    t.equal(dockerd.pid, pid, "docker was not restarted (it would refuse the file)");
    t.equal(
      (await dockerd.info()).DockerRootDir,
      host.paths.defaultDataRoot,
      "docker still up on its root: the node stays usable",
    );
  },
);

t.test(
  "docker failing on the new data-root (a pool volume with corrupt image metadata): daemon.json rolled back, " +
    "docker up again on its old root, volume given back",
  async (t) => {
    // A damaged pool volume: dockerd refuses a data-root whose repositories.json does not parse
    // ("Couldn't create reference store repository"), which the agent cannot see before docker does.
    const [volumeId] = await bl.createPool("corrupt", 1);
    await bl.withVolume(volumeId!, (device, helper) =>
      withMounted(
        device,
        join(helper.paths.mountRoot, "corrupt"),
        (mnt) => writeFile(join(mnt, DATA_ROOT_SUBDIR, "image/overlay2/repositories.json"), "{corrupt"),
        { readOnly: false },
      ),
    );

    const host = await bl.addHost();
    const dockerd = await host.startDocker();
    t.equal((await dockerd.info()).DockerRootDir, host.paths.defaultDataRoot, "before: docker on its default root");
    const original = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;

    const booted = await bl.boot(host, { overrides: { pool: "corrupt" } });
    assertOutcome(t, booted, "degraded", "outcome degraded");
    t.equal(booted.exitCode, ExitCode.degraded, "exit code 4");
    t.equal(booted.report?.timeline.at(-1)?.step, "start-docker", "the failing step is start-docker");
    t.match(booted.report?.reason, /reference store/, "the reason carries dockerd's complaint");
    t.ok(
      booted.log.some((line) => line.includes("docker.daemon-json-restored: ")),
      "daemon.json restored from its backup",
    );

    const after = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
    const { labels, ...rest } = after;
    t.same(rest, original, "daemon.json is the old one again (data-root and every other key)");
    t.equal(
      labelRecord((labels as string[] | undefined) ?? [])[`${LABEL_PREFIX}.state`],
      "degraded",
      "plus the agent's degraded label",
    );
    t.ok(await dockerd.isActive(), "docker is up");
    await assertDockerOnDefaultRoot(t, host, "docker back on its old data-root");
    await assertGivenBack(t, volumeId!, host);
  },
);

t.test(
  "the lab closes and leaves no loop device, mount or dockerd behind; no volume was ever force-detached",
  async (t) => {
    await closeLabLeavingNothing(t, bl, { noForceDetachEvent: true });
  },
);
