/**
 * The lab end to end: a golden snapshot holding a docker data-root with a locally built image,
 * pool volumes made from it, and one of them attached to another host where a private dockerd
 * runs the image straight from the volume (no pull, no load). Then the lab closes and leaves
 * no loop device, mount or folder behind. A build kept for the test run is reused byte for byte.
 */
import t from "tap";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  AttachVolumeCommand,
  DescribeSnapshotsCommand,
  DescribeVolumesCommand,
  DetachVolumeCommand,
} from "@aws-sdk/client-ec2";
import { run } from "../../../src/exec.ts";
import { readReadList } from "../../../src/host/need-reads.ts";
import { DATA_ROOT_SUBDIR } from "../../../src/layout.ts";
import { buildGoldenSnapshot, createPoolVolumes } from "../../../src/lab/volumes/golden.ts";
import { goldenBuildKey } from "../../../src/lab/volumes/golden-reuse.ts";
import { snapshotImagePath } from "../../../src/lab/reaper/labdir.ts";
import { startLab } from "../../../src/lab/lab.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

t.test("golden snapshot, pool, and an image run from a pool volume", async (t) => {
  const log = createMemoryLogger();
  const lab = await startLab({ name: "test-golden", log });
  let closed = false;
  t.teardown(async () => {
    if (!closed) await lab.close();
  });
  const ec2 = lab.ec2Client();

  const golden = await buildGoldenSnapshot(lab, {
    pool: "p1",
    imageSet: "set-1",
    images: [{ tag: "lab/app:1" }, { tag: "lab/tool:2", payloadBytes: 4 << 20 }],
    log,
  });
  const snapshots = await ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [golden.snapshotId] }));
  const snapTags = Object.fromEntries((snapshots.Snapshots?.[0]?.Tags ?? []).map((tag) => [tag.Key, tag.Value]));
  t.equal(snapshots.Snapshots?.[0]?.State, "completed");
  t.equal(snapTags[VolumeTag.pool], "p1");
  t.equal(snapTags[VolumeTag.images], "lab/app:1,lab/tool:2");
  t.equal(snapTags[VolumeTag.imageStore], "graphdriver", "the snapshot records the builder's image store");
  t.match(snapTags[VolumeTag.engineVersion], /^\d+\.\d+\.\d+/, "and its engine version");
  t.same(golden.built, { store: "graphdriver", engineVersion: snapTags[VolumeTag.engineVersion] });

  const ids = await createPoolVolumes(lab, golden, { pool: "p1", imageSet: "set-1", count: 2 });
  const pool = await ec2.send(
    new DescribeVolumesCommand({
      Filters: [
        { Name: `tag:${VolumeTag.pool}`, Values: ["p1"] },
        { Name: "availability-zone", Values: [`${lab.region}a`] },
        { Name: "status", Values: ["available"] },
      ],
    }),
  );
  t.same(
    pool.Volumes?.map((v) => v.VolumeId).sort(),
    [...ids].sort(),
    "both pool volumes are found by tag, zone and status",
  );
  t.ok(pool.Volumes?.every((v) => v.SnapshotId === golden.snapshotId));
  t.ok(
    pool.Volumes?.every((v) => v.Tags?.some((tag) => tag.Key === VolumeTag.imageStore && tag.Value === "graphdriver")),
    "the pool volumes carry the image store too",
  );

  // Another host attaches a pool volume and runs docker on it.
  const host = await lab.addHost();
  const volumeId = ids[0]!;
  await ec2.send(
    new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: host.instance.instanceId, Device: "/dev/sdf" }),
  );
  t.ok(
    await pollUntil(async () => {
      const found = await ec2.send(new DescribeVolumesCommand({ VolumeIds: [volumeId] }));
      return found.Volumes?.[0]?.Attachments?.[0]?.State === "attached";
    }),
    "attachment reaches attached",
  );
  const device = await lab.backend.deviceReady(volumeId);
  const mountPoint = join(host.paths.mountRoot, volumeId);
  await run("mkdir", ["-p", mountPoint]);
  await run("mount", [device, mountPoint]);
  const dataRoot = join(mountPoint, DATA_ROOT_SUBDIR);
  t.notOk(existsSync(join(dataRoot, "swarm")), "no swarm state travels in the snapshot");
  t.ok((await readdir(dataRoot)).includes("image"), "the volume holds a docker data-root");
  const reads = await readReadList(mountPoint);
  t.same(
    reads?.images.map((entry) => [entry.image, entry.files[0]?.replace(/^docker\/overlay2\/[^/]+\/diff\//, "")]),
    [
      ["lab/app:1", "bin/busybox"],
      ["lab/tool:2", "bin/busybox"],
    ],
    "the golden build recorded what each image reads at start (its shell) in the need list",
  );

  await writeFile(host.paths.daemonJson, JSON.stringify({ "data-root": dataRoot }));
  const dockerd = await host.startDocker();
  t.equal((await dockerd.info()).DockerRootDir, dataRoot);
  const images = (await dockerd.docker(["image", "ls", "--format", "{{.Repository}}:{{.Tag}}"])).stdout
    .split("\n")
    .sort();
  t.same(images, ["lab/app:1", "lab/tool:2"], "the golden images are there without a pull or load");
  const ran = await dockerd.docker([
    "run",
    "--rm",
    "--network",
    "none",
    "lab/tool:2",
    "sh",
    "-c",
    "ls /payload | wc -l",
  ]);
  t.ok(Number(ran.stdout.trim()) >= 1, "a golden image runs and carries its payload");
  await dockerd.stop();
  await run("umount", [mountPoint]);
  await ec2.send(new DetachVolumeCommand({ VolumeId: volumeId }));

  const root = lab.root;
  await lab.close();
  closed = true;
  t.notOk(existsSync(root), "the lab root is gone");
  t.notOk((await run("losetup", ["-a"])).stdout.includes(root), "no loop device of the lab is left");
  t.notOk((await run("findmnt", ["-rn", "-o", "TARGET"])).stdout.includes(root), "no mount of the lab is left");
});

t.test(
  "a golden build kept for the run (golden-reuse.ts) is reused: the same bytes and report, the pool's own tags",
  async (t) => {
    const log = createMemoryLogger();
    const lab = await startLab({ name: "test-golden-reuse", log });
    t.teardown(() => lab.close());
    const reuseFolder = await mkdtemp(join(tmpdir(), "golden-reuse-"));
    t.teardown(() => rm(reuseFolder, { recursive: true, force: true }));
    const images = [{ tag: "lab/app:1", payloadBytes: 1 << 20 }];
    const reused = () => log.lines.filter((line) => line.includes("lab.golden-reused")).length;

    const first = await buildGoldenSnapshot(lab, { pool: "p1", imageSet: "set-1", images, reuseFolder, log });
    t.equal(reused(), 0, "the first build is built");
    const key = goldenBuildKey({ images });
    t.same((await readdir(reuseFolder)).sort(), [`${key}.img`, `${key}.json`], "and kept: its bytes and its report");

    const second = await buildGoldenSnapshot(lab, { pool: "p2", imageSet: "set-2", images, reuseFolder, log });
    t.equal(reused(), 1, "the second, of the same inputs, is reused");
    t.not(second.snapshotId, first.snapshotId, "a snapshot of its own");
    t.same(second.built, first.built, "with the first build's store and engine");
    const image = (snapshotId: string) => snapshotImagePath(lab.backend.root, snapshotId);
    const cmp = await run("cmp", [image(first.snapshotId), image(second.snapshotId)], { check: false });
    t.equal(cmp.exitCode, 0, "its snapshot holds the first build's bytes");
    const snapshots = await lab.ec2Client().send(new DescribeSnapshotsCommand({ SnapshotIds: [second.snapshotId] }));
    const tags = Object.fromEntries((snapshots.Snapshots?.[0]?.Tags ?? []).map((tag) => [tag.Key, tag.Value]));
    t.equal(tags[VolumeTag.pool], "p2", "tagged for its own pool");
    t.equal(tags[VolumeTag.imageSet], "set-2", "and image set");
  },
);
