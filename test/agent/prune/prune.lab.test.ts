/**
 * The prune against the real thing: the lab's EC2 emulator (the volume's tags, the pool's
 * snapshot), a private dockerd whose data-root is on a small filesystem (128 MiB ext4 on a loop
 * device: mkfs.xfs refuses below 300 MiB, and the prune does not care which filesystem it is),
 * images made with `docker import`. Above the threshold, the prune removes the image outside the
 * current generation and keeps the one a stopped container uses and the current one; the fill
 * drops below the threshold, and the figures reach the textfiles.
 */
import t from "tap";
import { mkdir, open, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CreateSnapshotCommand, CreateVolumeCommand, DescribeSnapshotsCommand } from "@aws-sdk/client-ec2";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { execa } from "execa";
import { fileURLToPath } from "node:url";
import { runPrune, type PruneReport } from "../../../src/agent/prune/run.ts";
import { writeLabConfig } from "../../../src/lab/machines/agent.ts";
import { writeBootRecord } from "../../../src/status/records.ts";
import type { PruneDeps } from "../../../src/agent/prune/run.ts";
import { createDockerEngine } from "../../../src/docker/engine.ts";
import { run } from "../../../src/exec.ts";
import { readFilesystemFill } from "../../../src/host/fill.ts";
import { buildImage } from "../../../src/lab/docker/images.ts";
import { startLab } from "../../../src/lab/lab.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { createOutcomeRecorder, hostFacts } from "../../../src/status/recorder.ts";
import { VolumeTag } from "../../../src/tags.ts";
import {
  assertDockerPrerequisites,
  assertLabPrerequisites,
  childEnv,
  onPath,
  pollUntil,
} from "../../fixtures/lab/lab-prereq.ts";
import { parsePromText, sampleOf } from "../../fixtures/oracles/prom-text.ts";

await assertLabPrerequisites();
assertDockerPrerequisites("test/agent/prune/prune.lab.test.ts");
if (!(await onPath("mkfs.ext4"))) throw new Error("mkfs.ext4 not found: install e2fsprogs (scripts/setup.sh lists it)");

const MiB = 2 ** 20;
const CLI = fileURLToPath(new URL("../../../src/cli.ts", import.meta.url));
const POOL = "prune-pool";
const settings = { thresholdPercent: 80, targetPercent: 60 };

const lab = await startLab({ name: "test-prune" });
let loopDevice: string | undefined;
let mountPoint: string | undefined;
t.teardown(async () => {
  for (const host of lab.hosts) await host.dockerd?.stop().catch(() => undefined);
  if (mountPoint) await run("umount", [mountPoint], { check: false });
  if (loopDevice) await run("losetup", ["--detach", loopDevice], { check: false });
  await lab.close();
});

t.test(
  "above the threshold, a pool volume loses the image outside the generation; the in-use and current ones stay",
  async (t) => {
    const ec2 = lab.ec2Client();
    const poolTags = {
      [VolumeTag.managed]: "true",
      [VolumeTag.kind]: "pool",
      [VolumeTag.pool]: POOL,
      [VolumeTag.imageSet]: "set",
    };
    const tagList = (tags: Record<string, string>) => Object.entries(tags).map(([Key, Value]) => ({ Key, Value }));
    // The volume's own list still names the old image: the snapshot's (the current generation) must win.
    const created = await ec2.send(
      new CreateVolumeCommand({
        AvailabilityZone: `${lab.region}a`,
        Size: 1,
        VolumeType: "gp3",
        TagSpecifications: [
          {
            ResourceType: "volume",
            Tags: tagList({
              ...poolTags,
              [VolumeTag.images]: "lab/app:1,lab/old:1",
              [VolumeTag.builtAt]: "2026-11-01T00:00:00Z",
            }),
          },
        ],
      }),
    );
    const volumeId = created.VolumeId!;
    await pollUntil(
      async () => (await createCloudVolumes({ client: ec2 }).describeVolume(volumeId))?.state === "available",
    );
    const snapshot = await ec2.send(
      new CreateSnapshotCommand({
        VolumeId: volumeId,
        TagSpecifications: [
          {
            ResourceType: "snapshot",
            Tags: tagList({
              ...poolTags,
              [VolumeTag.images]: "lab/app:1",
              [VolumeTag.builtAt]: "2026-12-01T00:00:00Z",
            }),
          },
        ],
      }),
    );
    const completed = await pollUntil(
      async () =>
        (await ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [snapshot.SnapshotId!] }))).Snapshots?.[0]
          ?.State === "completed",
    );
    t.ok(completed, "the pool's snapshot completed");

    // The cache filesystem: small, so that a few MiB of images fill it.
    const host = await lab.addHost();
    const image = join(lab.root, "small.img");
    await (await open(image, "w")).close();
    await run("truncate", ["--size", String(128 * MiB), image]);
    loopDevice = (await run("losetup", ["--find", "--show", image])).stdout.trim();
    await run("mkfs.ext4", ["-q", "-F", "-m", "0", loopDevice]);
    mountPoint = join(host.paths.mountRoot, volumeId);
    await mkdir(mountPoint, { recursive: true });
    await run("mount", [loopDevice, mountPoint]);
    const dataRoot = join(mountPoint, "docker");
    const daemon = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
    await writeFile(host.paths.daemonJson, JSON.stringify({ ...daemon, "data-root": dataRoot }, null, 2) + "\n");
    const dockerd = await host.startDocker();

    const workDir = join(lab.root, "build");
    const current = await buildImage(dockerd, { tag: "lab/app:1", workDir, payloadBytes: 2 * MiB });
    const old = await buildImage(dockerd, { tag: "lab/old:1", workDir, payloadBytes: 40 * MiB });
    const used = await buildImage(dockerd, { tag: "lab/used:1", workDir, payloadBytes: 8 * MiB });
    await dockerd.docker(["create", "--name", "stopped", "lab/used:1"]);
    // Fill the rest up to ~90 % with a file docker does not own.
    const before = (await readFilesystemFill(mountPoint))!;
    const fillerBytes = Math.floor(0.9 * (before.usedBytes + before.availableBytes) - before.usedBytes);
    t.ok(fillerBytes > 0, "the images left room for the filler");
    await run("fallocate", ["--length", String(fillerBytes), join(mountPoint, "filler")]);
    const full = (await readFilesystemFill(mountPoint))!;
    t.ok(
      full.usedRatio > settings.thresholdPercent / 100,
      `filled above the threshold (${(full.usedRatio * 100).toFixed(1)} %)`,
    );
    t.ok(full.inodes > 0 && full.freeInodes > 0 && full.freeInodes < full.inodes, "statfs reports inodes");

    const log = createMemoryLogger("debug");
    const textfileDir = join(lab.root, "prom");
    const recorder = createOutcomeRecorder({
      stateDir: join(lab.root, "state"),
      textfileDir,
      log,
      // No sysfs tree there: the lab host has no instance-store disk.
      facts: hostFacts(join(lab.root, "sys")),
    });
    const deps: PruneDeps = {
      lastBoot: async () => ({ outcome: "ready", volumeId, mountPoint: mountPoint!, dataRoot }),
      cloud: createCloudVolumes({ client: ec2 }),
      fill: readFilesystemFill,
      docker: createDockerEngine({ host: dockerd.host, log }),
      log,
    };
    const ids = async () => (await deps.docker.imageEntries()).map((i) => i.id).sort();

    const dry = await runPrune(deps, { settings, imageSet: "set", dryRun: true, recorder });
    t.equal(dry.plan.verdict, "prune", dry.plan.reason);
    t.equal(dry.plan.currentSource, "snapshot", "the current list is the pool snapshot's");
    t.same(
      dry.plan.removals.map((d) => d.id),
      [old],
      "the dry run would remove only the old image",
    );
    t.same(await ids(), [current, old, used].sort(), "a dry run changes nothing");

    const outcome = await runPrune(deps, { settings, imageSet: "set", dryRun: false, recorder });
    const removed = outcome.removals.map((r) => [r.id, r.done]);
    t.same(
      removed,
      [[old, "removed"]],
      "only the old image was removed",
      JSON.stringify(removed) === JSON.stringify([[old, "removed"]]) ? {} : { log: log.lines.join("\n") },
    );
    t.same(await ids(), [current, used].sort(), "the current image and the one the stopped container uses stay");
    t.ok(
      (await dockerd.docker(["container", "inspect", "stopped"])).stdout.includes(used),
      "the stopped container still has its image",
    );
    const after = (await readFilesystemFill(mountPoint))!;
    t.ok(
      after.usedBytes < full.usedBytes - 30 * MiB,
      `the fill dropped: ${(full.usedRatio * 100).toFixed(1)} % -> ${(after.usedRatio * 100).toFixed(1)} %`,
    );
    t.ok(after.usedRatio < settings.thresholdPercent / 100, "below the threshold again");
    t.equal(outcome.usedRatioAfter, after.usedRatio, "the outcome measured the fill again");

    const prune = parsePromText(await readFile(join(textfileDir, "ebs_cache_agent_prune.prom"), "utf8"));
    t.equal(sampleOf(prune, "ebs_cache_agent_prune_removed_images_total")?.value, 1, "the dry run counted nothing");
    t.ok(
      (sampleOf(prune, "ebs_cache_agent_prune_removed_bytes_total")?.value ?? 0) >= 40 * MiB,
      "the payload's bytes counted",
    );
    const fill = parsePromText(await readFile(join(textfileDir, "ebs_cache_agent_fill.prom"), "utf8"));
    t.equal(
      sampleOf(fill, "ebs_cache_agent_cache_filesystem_used_bytes", { mountpoint: mountPoint })?.value,
      after.usedBytes,
      "the fill file shows the fill after the prune",
    );
    t.equal(
      sampleOf(fill, "ebs_cache_agent_cache_filesystem_used_bytes")?.labels.device,
      loopDevice,
      "labelled with the device",
    );

    // Below the threshold now: a second run removes nothing.
    const again = await runPrune(deps, { settings, imageSet: "set", dryRun: false, recorder });
    t.equal(again.plan.verdict, "below-threshold", "a second run finds nothing to do");

    // The command as a host runs it: the volume from the boot's record, EC2 and docker from the config.
    const config = await writeLabConfig(lab, host, {
      imageSet: "set",
      prune: { thresholdPercent: 40, targetPercent: 20 },
    });
    await writeBootRecord(join(host.paths.hostRoot, "var/lib/ebs-cache-agent"), {
      version: 1,
      instanceId: host.instance.instanceId,
      finishedAt: new Date().toISOString(),
      result: { outcome: "ready", source: "pool", volumeId, device: loopDevice, mountPoint, dataRoot, timeline: [] },
    });
    const cli = await execa(process.execPath, [CLI, "prune", "--dry-run", "--json", "--config", config], {
      env: childEnv(),
      extendEnv: false,
      reject: false,
      stdin: "ignore",
      timeout: 120_000,
    });
    t.equal(cli.exitCode, 0, "prune --dry-run exits 0", cli.exitCode === 0 ? {} : { stderr: String(cli.stderr) });
    const printed = JSON.parse(String(cli.stdout)) as PruneReport;
    t.equal(printed.plan.volumeId, volumeId, "the volume the boot recorded");
    t.equal(printed.plan.currentSource, "snapshot", "EC2 asked through the config's endpoint");
    t.equal(
      printed.plan.verdict,
      "nothing-to-remove",
      "above this config's 40 %, but every image left is current or in use",
    );
    t.same(
      printed.plan.images.map((d) => d.verdict).sort(),
      ["current", "in-use"],
      "the two images left, each kept for its reason",
    );

    // The run a boot starts (`prune --after-boot`): its figures, exit 0 whatever happens, nothing when turned off.
    const afterBoot = (overrides: Record<string, unknown>) =>
      writeLabConfig(lab, host, { imageSet: "set", ...overrides }).then((path) =>
        execa(process.execPath, [CLI, "prune", "--after-boot", "--config", path], {
          env: childEnv(),
          extendEnv: false,
          reject: false,
          stdin: "ignore",
          timeout: 120_000,
        }),
      );
    const hostTextfiles = join(host.paths.hostRoot, "var/lib/prometheus/node-exporter");
    const ran = await afterBoot({});
    t.equal(ran.exitCode, 0, "--after-boot exits 0");
    t.match(String(ran.stderr), /prune\.plan: below-threshold/, "its verdict in the journal");
    const figures = parsePromText(await readFile(join(hostTextfiles, "ebs_cache_agent_prune.prom"), "utf8"));
    t.equal(
      sampleOf(figures, "ebs_cache_agent_prune_info")?.labels.verdict,
      "below-threshold",
      "its figures in the host's textfile folder",
    );
    const broken = await afterBoot({ paths: { dockerHost: `unix://${join(lab.root, "no-such.sock")}` } });
    t.equal(broken.exitCode, 0, "a failing prune after the boot still exits 0");
    t.match(
      String(broken.stderr),
      /prune\.failed: the prune after the boot failed: .*readiness is unchanged/,
      "and says so as a warning",
    );
    const off = await afterBoot({ prune: { afterBoot: false } });
    t.equal(off.exitCode, 0, "turned off: exit 0");
    t.notMatch(String(off.stderr), /prune\./, "prune.afterBoot false: nothing runs");
    await rm(join(mountPoint, "filler"));
  },
);
