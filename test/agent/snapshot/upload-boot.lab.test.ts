/**
 * The uploaded snapshot serves a pool end to end, in the lab: the golden build's disk image is
 * uploaded through `ebs-cache-agent snapshot upload` (the bundle, as a process) to the EBS direct
 * emulator; the snapshot holds exactly the image's bytes; the pool keeper stocks a zone from it
 * (the newest generation); a boot claims one of those volumes and docker runs the golden images
 * from it.
 */
import { DescribeVolumesCommand } from "@aws-sdk/client-ec2";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { runKeeper } from "../../../src/agent/keeper/run.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { run } from "../../../src/exec.ts";
import { snapshotImagePath } from "../../../src/lab/reaper/labdir.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { agentBundle } from "../../fixtures/agent-process.ts";
import { GOLDEN_IMAGES, IMAGE_SET, POOL, startBootLab } from "../../fixtures/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab-prereq.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-snapshot-upload" });
t.teardown(() => bl.close());

t.test("a pool from an uploaded snapshot: keeper, boot, docker", async (t) => {
  const golden = bl.golden!;
  const image = snapshotImagePath(bl.lab.root, golden.snapshotId);
  const dir = await mkdtemp(join(tmpdir(), "snapshot-upload-boot-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const later = new Date(Date.parse(golden.builtAt!) + 60_000).toISOString().replace(/\.\d{3}Z$/, "Z");
  const bundle = await agentBundle();
  const upload = await run(
    process.execPath,
    [
      bundle,
      "snapshot",
      "upload",
      "--image",
      image,
      "--manifest",
      join(dir, "gen.json"),
      "--pool",
      POOL,
      "--image-set",
      IMAGE_SET,
      "--images",
      golden.images.join(","),
      "--image-store",
      golden.built.store,
      "--engine-version",
      golden.built.engineVersion,
      "--built-at",
      later,
      "--region",
      bl.lab.region,
      "--endpoint",
      bl.lab.ec2.endpoint,
      "--json",
    ],
    {
      check: false,
      timeoutMs: 300_000,
      env: { AWS_ACCESS_KEY_ID: "lab", AWS_SECRET_ACCESS_KEY: "lab", AWS_EC2_METADATA_DISABLED: "true" },
    },
  );
  t.equal(upload.exitCode, 0, "snapshot upload exits 0", { stderr: upload.stderr.slice(-2000) });
  const report = JSON.parse(upload.stdout) as {
    snapshotId: string;
    put: number;
    imageBlocks: number;
    bytesPut: number;
  };
  t.equal(report.put, report.imageBlocks, "every block holding data is put, nothing else");
  const uploaded = snapshotImagePath(bl.lab.root, report.snapshotId);
  const same = await run("cmp", [image, uploaded], { check: false });
  t.equal(same.exitCode, 0, "the uploaded snapshot's image is the golden image, byte for byte");
  t.comment(`uploaded ${(report.bytesPut / 2 ** 20).toFixed(1)} MiB for an image of ${golden.sizeGiB} GiB`);

  const zone = `${bl.lab.region}a`;
  const log = createMemoryLogger();
  const kept = await runKeeper(
    { cloud: createCloudVolumes({ client: bl.lab.ec2Client(), pollMs: 50 }), log },
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
  t.equal(
    kept.plan.snapshotId,
    report.snapshotId,
    "the keeper stocks from the uploaded snapshot (the newest generation)",
  );
  const pool = await bl.ec2.send(
    new DescribeVolumesCommand({ Filters: [{ Name: `tag:${VolumeTag.pool}`, Values: [POOL] }] }),
  );
  const made = (pool.Volumes ?? []).filter((v) => v.SnapshotId === report.snapshotId);
  t.equal(made.length, 1, "one pool volume made from it");

  const host = await bl.addHost();
  const booted = await bl.boot(host, { overrides: { pool: POOL } });
  t.equal(booted.report?.outcome, "ready", "the boot is ready", { log: booted.log.slice(-30).join("\n") });
  t.equal(booted.report?.volumeId, made[0]?.VolumeId, "it claimed the volume of the uploaded snapshot");
  for (const { tag } of GOLDEN_IMAGES) {
    const listed = await host.dockerd!.docker(["image", "inspect", "--format", "{{.Id}}", tag]);
    t.match(listed.stdout.trim(), /^sha256:/, `${tag} is in docker from the volume`);
  }
});
