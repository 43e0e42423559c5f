/**
 * The EC2 emulator over the lab's real devices (root, loop devices, FUSE): a detach of a
 * mounted volume waits in `busy` with its device still there until the filesystem is
 * unmounted; default initialization progress in DescribeVolumeStatus is what the cold layer
 * has fetched, chunk for chunk.
 */
import t from "tap";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { DescribeVolumeStatusCommand, DetachVolumeCommand, type EC2Client } from "@aws-sdk/client-ec2";
import { run } from "../../../src/exec.ts";
import { startLab, type Lab } from "../../../src/lab/lab.ts";
import { byIdDir, ebsByIdName } from "../../../src/lab/types.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";
import { attach, createVolume, makeDataSnapshot, mountXfs } from "../../fixtures/lab/prewarm-lab.ts";
import { describeVolume, poll } from "./helpers.ts";

await assertLabPrerequisites();

// Progress is counted in chunks, not timed: 1 MiB chunks and a short first-read delay keep
// reading the whole 1 GiB volume quick.
const COLD = { firstReadDelayMs: 1, chunkBytes: 1024 * 1024 };
const lab: Lab = await startLab({ name: "test-emu-devices", coldSnapshots: COLD, log: createMemoryLogger("info") });
t.teardown(() => lab.close());
const ec2: EC2Client = lab.ec2Client();
const host = await lab.addHost();
const zone = host.instance.availabilityZone;

t.test("detaching a mounted volume: busy until unmounted, the device stays", async (t) => {
  const volumeId = await createVolume(ec2, zone, { sizeGiB: 1 });
  const device = await attach(lab, ec2, volumeId, host);
  await run("mkfs.xfs", ["-q", device]);
  const mountPoint = await mountXfs(device, host, "busy");
  let mounted = true;
  t.teardown(async () => {
    if (mounted) await run("umount", [mountPoint], { check: false });
  });

  const answer = await ec2.send(new DetachVolumeCommand({ VolumeId: volumeId, InstanceId: host.instance.instanceId }));
  t.equal(answer.State, "detaching");
  const busy = await poll(
    () => describeVolume(ec2, volumeId),
    (v) => v.Attachments?.[0]?.State === "busy",
  );
  t.equal(busy.State, "in-use");
  // Well past the detach delay and several rechecks: still busy, the device still there and mounted.
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  t.equal((await describeVolume(ec2, volumeId)).Attachments?.[0]?.State, "busy");
  t.ok(existsSync(join(byIdDir(host.paths.hostRoot), ebsByIdName(volumeId))), "the by-id link is still there");
  t.ok(
    lab.backend.attachments().some((a) => a.volumeId === volumeId),
    "the loop device is still attached",
  );
  await run("touch", [join(mountPoint, "still-writable")]);

  await run("umount", [mountPoint]);
  mounted = false;
  const free = await poll(
    () => describeVolume(ec2, volumeId),
    (v) => v.State === "available",
  );
  t.same(free.Attachments, []);
  t.notOk(existsSync(join(byIdDir(host.paths.hostRoot), ebsByIdName(volumeId))), "the device is gone");
  t.equal(lab.ec2.snapshotState().volumes[volumeId]?.forceDetachCount, 0);
  t.ok(lab.ec2.snapshotState().events.some((e) => e.kind === "detach-busy" && e.volumeId === volumeId));
});

t.test("default initialization progress follows the chunks the cold layer has fetched", async (t) => {
  const snapshotId = await makeDataSnapshot(lab, ec2, { sizeGiB: 1, dataMiB: 8, files: 2 });
  const volumeId = await createVolume(ec2, zone, { snapshotId });
  const device = await attach(lab, ec2, volumeId, host);
  const cold = lab.cold!;
  const reported = async () => {
    const out = await ec2.send(new DescribeVolumeStatusCommand({ VolumeIds: [volumeId] }));
    const item = out.VolumeStatuses?.[0];
    return {
      type: item?.InitializationStatusDetails?.InitializationType,
      progress: item?.InitializationStatusDetails?.Progress,
      state: item?.VolumeStatus?.Details?.find((d) => d.Name === "initialization-state")?.Status,
    };
  };
  const expected = async () => {
    const s = await cold.volumeStatus(volumeId);
    return Math.floor(((s?.warmChunks ?? 0) * 100) / (s?.chunks ?? 1));
  };

  const start = await reported();
  t.match(start, { type: "default", state: "initializing" });
  t.equal(start.progress, await expected(), "as fetched");
  t.ok((start.progress ?? 100) < 10, `cold at first (${start.progress} %)`);

  // Half of the 1 GiB device read once (direct I/O: no readahead past it).
  await run("dd", [`if=${device}`, "of=/dev/null", "bs=1M", "count=512", "iflag=direct", "status=none"]);
  const half = await reported();
  t.equal(half.progress, await expected(), "as fetched");
  t.ok(half.progress !== undefined && half.progress >= 50 && half.progress <= 55, `about half (${half.progress} %)`);
  t.equal(half.state, "initializing");

  await run("dd", [`if=${device}`, "of=/dev/null", "bs=1M", "iflag=direct", "status=none"]);
  t.match(await reported(), { type: "default", progress: 100, state: "completed" }, "every chunk fetched");
});
