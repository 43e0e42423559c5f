/**
 * A pool's snapshot made with no instance serves the pool end to end, in the lab:
 * `ebs-cache-agent snapshot build` (the bundle, as a process) builds the image set from
 * `docker save` tarballs into a sparse XFS image (a first run killed mid-build, its rerun
 * cleaning up after it); `snapshot upload` puts it to the EBS direct emulator; a second
 * generation is built on a copy of the first, one of its images pulled from the lab's registry,
 * and uploaded with `--parent`, putting only what changed; the pool keeper stocks a zone from
 * the newest generation; a boot claims one of those volumes and docker runs the images from it.
 */
import { DescribeVolumesCommand } from "@aws-sdk/client-ec2";
import { execa } from "execa";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { runKeeper } from "../../../src/agent/keeper/run.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { run } from "../../../src/exec.ts";
import { writeImageArchive } from "../../../src/lab/docker/images.ts";
import { startLabRegistry } from "../../../src/lab/docker/registry.ts";
import { pushImageArchive } from "../../../src/lab/docker/registry-push.ts";
import { snapshotImagePath } from "../../../src/lab/reaper/labdir.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { agentBundle } from "../../fixtures/lab/agent-process.ts";
import { GOLDEN_IMAGES, IMAGE_SET, POOL, startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-snapshot-upload", golden: false });
t.teardown(() => bl.close());

const EXTRA = { tag: "lab/extra:1", payloadBytes: 1024 * 1024 };

interface BuildReport {
  images: string[];
  imageStore: "graphdriver" | "containerd";
  engineVersion: string;
  needList: string[];
  removedImages: number;
  stripped: number;
}

interface UploadReport {
  snapshotId: string;
  parentSnapshotId?: string;
  volumeSizeGiB: number;
  put: number;
  unchanged: number;
  imageBlocks: number;
  bytesPut: number;
}

t.test("build, upload, a second generation, keeper, boot, docker", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "snapshot-build-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const bundle = await agentBundle();
  // The build role's credentials: the emulator decides each call by its policy.
  const builder = bl.lab.credentials("builder");
  const env = {
    PATH: process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin",
    // The docker client of the build reads (and may create) its config there, not in ~/.docker.
    DOCKER_CONFIG: join(dir, "docker-config"),
    AWS_ACCESS_KEY_ID: builder.accessKeyId,
    AWS_SECRET_ACCESS_KEY: builder.secretAccessKey,
    AWS_EC2_METADATA_DISABLED: "true",
  };
  const agent = (args: string[]) =>
    run(process.execPath, [bundle, "snapshot", ...args], { check: false, timeoutMs: 300_000, env });

  const tarballs: string[] = [];
  for (const image of [...GOLDEN_IMAGES, EXTRA]) {
    const archive = join(dir, `${image.tag.replace(/[/:]/g, "_")}.tar`);
    await writeImageArchive(archive, { ...image, workDir: join(dir, "work") });
    tarballs.push(archive);
  }
  const gen1Images = GOLDEN_IMAGES.map((image) => image.tag);
  const gen1 = join(dir, "gen1.img");
  const build1 = [
    ...["build", "--image", gen1, "--size-gib", "1", "--images", gen1Images.join(",")],
    ...tarballs.slice(0, 2).flatMap((tarball) => ["--load", tarball]),
    ...["--no-pull", "--json", "--work-dir", join(dir, "w1")],
  ];

  // A build killed outright once its dockerd runs: the image is mounted and attached, dockerd up.
  const killed = execa(process.execPath, [bundle, "snapshot", ...build1], {
    env,
    extendEnv: false,
    reject: false,
    stdin: "ignore",
  });
  let seen = "";
  const loading = new Promise<void>((resolve) => {
    killed.stderr.on("data", (chunk: Buffer) => {
      seen += chunk.toString("utf8");
      if (/snapshot\.build-step: load /.test(seen)) resolve();
    });
    void killed.then(() => resolve());
  });
  await loading;
  killed.kill("SIGKILL");
  await killed;
  t.match(seen, /snapshot\.build-step: load /, "the first build got as far as loading");
  const leftover = await run("losetup", ["--associated", gen1, "--noheadings", "--output", "NAME"]);
  t.not(leftover.stdout.trim(), "", "the killed build left its loop device");

  const built1 = await agent(build1);
  t.equal(built1.exitCode, 0, "the rerun builds", { stderr: built1.stderr.slice(-3000) });
  const report1 = JSON.parse(built1.stdout) as BuildReport;
  t.same(report1.images, gen1Images);
  t.same(report1.needList, gen1Images, "each image's reads at start are in the need list");
  t.equal(report1.imageStore, "graphdriver");
  t.ok(report1.stripped > 0, "machine-local state was stripped");
  t.equal(
    (await run("losetup", ["--associated", gen1, "--noheadings", "--output", "NAME"])).stdout.trim(),
    "",
    "no loop device of the image is left",
  );
  const mounts = await readFile("/proc/self/mountinfo", "utf8");
  t.notOk(mounts.includes(dir), "nothing of the build is mounted");
  const pidFile = await stat(join(dir, "w1", "d", "dockerd.pid")).catch(() => undefined);
  t.notOk(pidFile, "the build's dockerd is gone (its pidfile with it)");
  const blkid = await run("blkid", ["-p", "-o", "export", gen1]);
  t.match(blkid.stdout, /LABEL=ebs-cache/, "the image is an XFS labelled ebs-cache");
  t.ok((await stat(gen1)).blocks * 512 < 1024 ** 3, "the image is sparse");

  const upload = async (image: string, manifest: string, images: string[], report: BuildReport, more: string[]) => {
    const uploaded = await agent([
      ...["upload", "--image", image, "--manifest", manifest, "--pool", POOL, "--image-set", IMAGE_SET],
      ...["--images", images.join(","), "--image-store", report.imageStore, "--engine-version", report.engineVersion],
      ...["--region", bl.lab.region, "--endpoint", bl.lab.ec2.endpoint, "--ec2-endpoint", bl.lab.ec2.endpoint],
      ...["--json", ...more],
    ]);
    t.equal(uploaded.exitCode, 0, "snapshot upload exits 0", { stderr: uploaded.stderr.slice(-2000) });
    return JSON.parse(uploaded.stdout) as UploadReport;
  };
  const up1 = await upload(gen1, join(dir, "gen1.json"), gen1Images, report1, ["--built-at", "2026-12-01T10:00:00Z"]);
  t.equal(up1.put, up1.imageBlocks, "every block holding data is put, nothing else");
  const same = await run("cmp", [gen1, snapshotImagePath(bl.lab.root, up1.snapshotId)], { check: false });
  t.equal(same.exitCode, 0, "the uploaded snapshot is the built image, byte for byte");

  // The next generation: the set without lab/tool:1, with lab/extra:1 pulled from a registry
  // (on the machine's loopback, where the build's dockerd runs), built on a copy of the first
  // grown by a GiB.
  const registry = await startLabRegistry({
    labRoot: bl.lab.root,
    dir: join(dir, "registry"),
    netns: `/proc/${process.pid}/ns/net`,
  });
  t.teardown(() => registry.stop());
  const [extraRepository, extraTag] = EXTRA.tag.split(":") as [string, string];
  const pushed = await pushImageArchive(registry.address, tarballs[2]!, extraRepository, extraTag, dir);
  const extra = `${registry.address}/${EXTRA.tag}`;
  const gen2Images = [gen1Images[0]!, extra];
  const gen2 = join(dir, "gen2.img");
  const built2 = await agent([
    ...["build", "--image", gen2, "--parent-image", gen1, "--size-gib", "2", "--images", gen2Images.join(",")],
    ...tarballs.slice(0, 2).flatMap((tarball) => ["--load", tarball]),
    "--json",
  ]);
  t.equal(built2.exitCode, 0, "the second generation builds", { stderr: built2.stderr.slice(-3000) });
  const report2 = JSON.parse(built2.stdout) as BuildReport;
  t.equal(report2.removedImages, 1, "the image the set no longer names is removed");
  t.same(report2.needList, gen2Images);
  t.equal((await stat(gen2)).size, 2 * 1024 ** 3, "the copy is the size asked");
  const up2 = await upload(gen2, join(dir, "gen2.json"), gen2Images, report2, [
    ...["--parent", join(dir, "gen1.json"), "--built-at", "2026-12-02T10:00:00Z"],
  ]);
  t.equal(up2.parentSnapshotId, up1.snapshotId, "the second generation's parent is the first");
  t.equal(up2.volumeSizeGiB, 2, "the snapshot is the grown size");
  // lab/app:1's 2 MiB payload, in both generations, spans at least three whole 512 KiB blocks:
  // on a copy of the first generation's file system they stay where they were.
  t.ok(up2.unchanged >= 3, `the layer both generations hold is not put again (${up2.unchanged} unchanged)`);
  t.ok(up2.put < up2.imageBlocks, `only what changed is put (${up2.put} of ${up2.imageBlocks})`);
  t.comment(
    `generation 1 put ${(up1.bytesPut / 2 ** 20).toFixed(1)} MiB; generation 2 ` +
      `${(up2.bytesPut / 2 ** 20).toFixed(1)} MiB (${up2.put} blocks, ${up2.unchanged} unchanged)`,
  );

  const zone = `${bl.lab.region}a`;
  const kept = await runKeeper(
    {
      cloud: createCloudVolumes({ client: bl.lab.ec2Client(bl.lab.credentials("keeper")), pollMs: 50 }),
      log: createMemoryLogger(),
    },
    {
      pool: POOL,
      imageSet: null,
      volumeType: "gp3",
      zones: [zone],
      minAvailable: 1,
      maxAvailable: 1,
      maxVolumes: 4,
      maxGiB: 20,
      initializationRateMiBps: 100,
      quarantineHours: 6,
    },
    { dryRun: false },
  );
  t.equal(kept.plan.snapshotId, up2.snapshotId, "the keeper stocks from the newest generation");
  const pool = await bl.ec2.send(
    new DescribeVolumesCommand({ Filters: [{ Name: `tag:${VolumeTag.pool}`, Values: [POOL] }] }),
  );
  const made = (pool.Volumes ?? []).filter((v) => v.SnapshotId === up2.snapshotId);
  t.equal(made.length, 1, "one pool volume made from it");

  const host = await bl.addHost();
  const booted = await bl.boot(host, { overrides: { pool: POOL } });
  t.equal(booted.report?.outcome, "ready", "the boot is ready", { log: booted.log.slice(-30).join("\n") });
  t.equal(booted.report?.volumeId, made[0]?.VolumeId, "it claimed the volume of the uploaded snapshot");
  const listed = await host.dockerd!.docker(["image", "ls", "--format", "{{.Repository}}:{{.Tag}}"]);
  t.same(listed.stdout.trim().split("\n").sort(), [...gen2Images].sort(), "docker has the set, nothing else");
  const digests = await host.dockerd!.docker(["image", "inspect", "--format", "{{json .RepoDigests}}", extra]);
  t.same(
    JSON.parse(digests.stdout),
    [`${registry.address}/${extraRepository}@${pushed}`],
    "the pulled image is in the built store, by the digest the registry served",
  );
  const ran = await host.dockerd!.docker(["run", "--rm", "--network", "none", extra, "ls", "/payload"]);
  t.match(ran.stdout, /blob-000\.bin/, "an image of the volume runs, the pulled one");
});
