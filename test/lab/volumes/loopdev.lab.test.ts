import t from "tap";
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { lstat, mkdir, readFile, readlink, realpath, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { run } from "../../../src/exec.ts";
import { createHostRoot, volumeImagePath, snapshotImagePath } from "../../../src/lab/reaper/labdir.ts";
import { openLabRoot } from "../../../src/lab/reaper/labroot.ts";
import { createLoopVolumeBackend, type LoopVolumeBackend } from "../../../src/lab/volumes/loopdev.ts";
import { byIdDir, ebsByIdName, sysfsRoot, type LabInstance } from "../../../src/lab/types.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";
import { loopInstance } from "../../fixtures/lab/loop-instance.ts";

await assertLabPrerequisites();

const log = createMemoryLogger();
const lab = await openLabRoot({ name: "test-loopdev", log });
t.teardown(async () => {
  await lab.close();
});

let instanceCount = 0;
async function instance(): Promise<LabInstance> {
  const instanceId = `i-0loopdev${++instanceCount}`;
  return loopInstance(instanceId, await createHostRoot(lab.root, instanceId));
}

/** Loop devices backed by `image`, as losetup lists them. */
async function loopsOf(image: string): Promise<string> {
  return (await run("losetup", ["-j", image])).stdout.trim();
}

function serialPath(inst: LabInstance, device: string): string {
  return join(sysfsRoot(inst.hostRoot), "class", "block", device.replace("/dev/", ""), "device", "serial");
}

async function exists(path: string): Promise<boolean> {
  return lstat(path).then(
    () => true,
    () => false,
  );
}

async function mountAt(device: string, name: string): Promise<string> {
  const target = join(lab.root, "mnt", name);
  await mkdir(target, { recursive: true });
  await run("mount", [device, target]);
  return target;
}

function newBackend(deviceDelayMs = 20): LoopVolumeBackend {
  const backend = createLoopVolumeBackend({ root: lab.root, deviceDelayMs, log });
  t.teardown(() => backend.close());
  return backend;
}

t.test("attach shows a loop device with by-id link and serial; detach removes them", async (t) => {
  const backend = newBackend();
  const volumeId = "vol-0123456789abcdef0";
  const image = volumeImagePath(lab.root, volumeId);
  await backend.createVolume(volumeId, 1);
  const info = await stat(image);
  t.equal(info.size, 1024 ** 3, "apparent size is the volume size");
  t.ok(info.blocks * 512 < 1024 * 1024, "a new volume allocates (almost) nothing");

  const inst = await instance();
  await backend.attach(volumeId, inst);
  const device = await backend.deviceReady(volumeId);
  t.match(device, /^\/dev\/loop\d+$/);
  t.match(await loopsOf(image), device, "losetup -j lists the device for the image");

  const link = join(byIdDir(inst.hostRoot), ebsByIdName(volumeId));
  t.equal(await readlink(link), device, "by-id link points at the loop device");
  t.equal(await realpath(link), device);
  const serial = await readFile(serialPath(inst, device), "utf8");
  t.equal(serial, "vol0123456789abcdef0\n", "serial is the id without dash, 20 characters");
  t.equal(serial.trim(), volumeId.replace("-", ""));
  t.same(
    backend.attachments().map((a) => [a.volumeId, a.device]),
    [[volumeId, device]],
  );

  await run("mkfs.xfs", ["-q", link]);
  const target = await mountAt(link, "first");
  await writeFile(join(target, "file"), "hello");
  t.equal(await readFile(join(target, "file"), "utf8"), "hello");
  await run("umount", [target]);

  await backend.detach(volumeId, inst);
  t.notOk(await exists(link), "link removed");
  t.notOk(
    await exists(join(sysfsRoot(inst.hostRoot), "class", "block", device.replace("/dev/", ""))),
    "sysfs entry removed",
  );
  t.equal(await loopsOf(image), "", "loop device detached");
  t.same(backend.attachments(), []);
  await backend.detach(volumeId, inst); // Repeating a detach is harmless.
  await backend.deleteVolume(volumeId);
  t.notOk(await exists(image), "image removed");
});

t.test("snapshot of a mounted volume restores the data into a larger, still sparse volume", async (t) => {
  const backend = newBackend();
  const inst = await instance();
  const source = "vol-0aaaaaaaaaaaaaaa1";
  await backend.createVolume(source, 1);
  await backend.attach(source, inst);
  const device = await backend.deviceReady(source);
  await run("mkfs.xfs", ["-q", device]);
  const target = await mountAt(device, "source");
  const payload = randomBytes(4 * 1024 * 1024);
  await writeFile(join(target, "payload"), payload);

  // Taken while mounted: the backend must flush what the kernel still holds.
  await backend.createSnapshot("snap-0bbbbbbbbbbbbbbb1", source);
  await run("umount", [target]);
  await backend.detach(source, inst);

  const copy = "vol-0ccccccccccccccc1";
  await backend.createVolume(copy, 2, "snap-0bbbbbbbbbbbbbbb1");
  const image = await stat(volumeImagePath(lab.root, copy));
  t.equal(image.size, 2 * 1024 ** 3, "extended to the requested size");
  t.ok(image.blocks * 512 < image.size / 8, `sparse: ${image.blocks * 512} bytes allocated of ${image.size}`);
  const snapshot = await stat(snapshotImagePath(lab.root, "snap-0bbbbbbbbbbbbbbb1"));
  t.ok(snapshot.blocks * 512 < snapshot.size / 4, "the snapshot image is sparse too");

  await backend.attach(copy, inst);
  const copyDevice = await backend.deviceReady(copy);
  const copyTarget = await mountAt(copyDevice, "copy");
  const read = await readFile(join(copyTarget, "payload"));
  t.equal(createHash("sha256").update(read).digest("hex"), createHash("sha256").update(payload).digest("hex"));
  await run("umount", [copyTarget]);
  await backend.detach(copy, inst);
  await backend.deleteVolume(copy);
  await backend.deleteVolume(source);
  await backend.deleteSnapshot("snap-0bbbbbbbbbbbbbbb1");
});

t.test("the device appears only after the delay; a detach before then cancels it", async (t) => {
  const backend = newBackend(10 * 60_000); // Far longer than the test: the device must not appear.
  const inst = await instance();
  const volumeId = "vol-0ddddddddddddddd1";
  const image = volumeImagePath(lab.root, volumeId);
  await backend.createVolume(volumeId, 1);
  await backend.attach(volumeId, inst);
  const ready = backend.deviceReady(volumeId);
  t.notOk(await exists(join(byIdDir(inst.hostRoot), ebsByIdName(volumeId))), "no link yet");
  t.equal(await loopsOf(image), "", "no loop device yet");
  await backend.detach(volumeId, inst);
  await t.rejects(ready, /detached before its device appeared/);
  await backend.settled();
  t.equal(await loopsOf(image), "", "still no loop device");

  backend.deviceDelayMs = 0;
  await backend.attach(volumeId, inst);
  const device = await backend.deviceReady(volumeId);
  t.match(await loopsOf(image), device);
  await backend.detach(volumeId, inst);
  t.equal(await loopsOf(image), "");
});

t.test("refuses what EC2 would refuse", async (t) => {
  const backend = newBackend(0);
  const first = await instance();
  const second = await instance();
  const volumeId = "vol-0eeeeeeeeeeeeeee1";
  await backend.createVolume(volumeId, 2);
  await t.rejects(backend.createVolume(volumeId, 1), /EEXIST/, "an id is never reused");
  await t.rejects(backend.createVolume("vol-../../etc", 1), /invalid vol id/, "ids are not paths");
  await t.rejects(backend.createVolume("vol-0fffffffffffffff1", 0), /invalid volume size/);
  await t.rejects(backend.attach("vol-0404040404040404", first), /ENOENT/, "no such volume");
  await backend.createSnapshot("snap-0eeeeeeeeeeeeeee1", volumeId);
  await t.rejects(
    backend.createVolume("vol-0fffffffffffffff2", 1, "snap-0eeeeeeeeeeeeeee1"),
    /smaller than snapshot/,
    "a volume is never smaller than its snapshot",
  );
  await backend.attach(volumeId, first);
  await backend.attach(volumeId, first); // Repeated attach to the same instance is harmless.
  await t.rejects(backend.attach(volumeId, second), /already attached to i-0loopdev/);
  await t.rejects(backend.deleteVolume(volumeId), /is attached/);
  await t.rejects(backend.detach(volumeId, second), /not i-0loopdev/);
  await backend.deviceReady(volumeId);
  await backend.detach(volumeId, first);
  await backend.deleteVolume(volumeId);
  await backend.deleteSnapshot("snap-0eeeeeeeeeeeeeee1");
});

t.test("a forced detach of a mounted volume hides the device; the loop goes with the last unmount", async (t) => {
  const backend = newBackend(0);
  const inst = await instance();
  const volumeId = "vol-0abcabcabcabcabc1";
  const image = volumeImagePath(lab.root, volumeId);
  await backend.createVolume(volumeId, 1);
  await backend.attach(volumeId, inst);
  const device = await backend.deviceReady(volumeId);
  await run("mkfs.xfs", ["-q", device]);
  const target = await mountAt(device, "forced");
  await backend.detach(volumeId, inst);
  t.notOk(await exists(join(byIdDir(inst.hostRoot), ebsByIdName(volumeId))), "link removed at once");
  await run("umount", [target]);
  t.ok(
    await pollUntil(async () => (await loopsOf(image)) === ""),
    "the kernel frees the loop device once nothing holds it",
  );
});

t.test(
  "a snapshot after umount and detach waits while another mount namespace still holds the filesystem",
  async (t) => {
    // `umount` only removes this namespace's mount: a process that unshared its mounts before
    // (a systemd-nspawn container, runc, unshare) keeps the filesystem live, the kernel keeps
    // the loop device for it (`losetup -d` just marks it) and XFS has not yet written its log and
    // metadata home. A copy of the image taken then lacks what was written last (a golden volume
    // came up as an empty XFS labelled ebs-cache in a full-suite run).
    const backend = createLoopVolumeBackend({ root: lab.root, deviceDelayMs: 0, releaseTimeoutMs: 20_000, log });
    t.teardown(() => backend.close());
    const inst = await instance();
    const source = "vol-0dddddddddddddd01";
    const image = volumeImagePath(lab.root, source);
    await backend.createVolume(source, 1);
    await backend.attach(source, inst);
    const device = await backend.deviceReady(source);
    await run("mkfs.xfs", ["-q", "-L", "held", device]);
    const target = await mountAt(device, "held");
    await mkdir(join(target, "docker", "layer"), { recursive: true });
    const payload = randomBytes(1024 * 1024);
    await writeFile(join(target, "docker", "layer", "payload"), payload);

    // The holder keeps its copy until the test lets it go (its stdin closed): what is checked is the
    // order (the snapshot ends only after the holder let go), never how long anything took.
    const holder = spawn("unshare", ["--mount", "--propagation", "private", "sh", "-c", "read -r _"], {
      stdio: ["pipe", "ignore", "ignore"],
    });
    let holderGone = false;
    const exited = new Promise<void>((resolve) =>
      holder.once("exit", () => {
        holderGone = true;
        resolve();
      }),
    );
    t.teardown(() => {
      holder.stdin?.end();
      return exited;
    });
    t.ok(
      await pollUntil(
        async () => (await readFile(`/proc/${holder.pid}/mountinfo`, "utf8").catch(() => "")).includes(target),
        5_000,
        10,
      ),
      "the other namespace holds a copy of the mount",
    );
    await run("umount", [target]);
    await backend.detach(source, inst);
    t.not(await loopsOf(image), "", "the kernel still serves the image: the filesystem is live in the other namespace");

    let snapshotDone = false;
    const snapshot = backend.createSnapshot("snap-0eeeeeeeeeeeeee01", source).then(() => {
      snapshotDone = true;
      return holderGone;
    });
    const waiting = (line: string) => line.includes("waiting for the kernel to release") && line.includes(source);
    t.ok(
      await pollUntil(async () => snapshotDone || log.lines.some(waiting), 20_000, 10),
      "the snapshot waits for the kernel to let go of the device (it says so)",
    );
    t.notOk(snapshotDone, "and has not ended while the other namespace holds the filesystem");
    holder.stdin?.end();
    t.ok(await snapshot, "the snapshot ended after the other namespace let go of the filesystem");
    t.equal(await loopsOf(image), "", "no loop device serves the image any more");

    // What the agent's identification reads (xfs_db, no log replay), then the data through a mount.
    const copy = "vol-0fffffffffffff001";
    await backend.createVolume(copy, 1, "snap-0eeeeeeeeeeeeee01");
    const root = await run("xfs_db", ["-r", "-c", "ls /", volumeImagePath(lab.root, copy)]);
    t.match(root.stdout, /\bdocker\b/, "the snapshot's filesystem holds docker/ on disk, without replaying a log");
    await backend.attach(copy, inst);
    const copyTarget = await mountAt(await backend.deviceReady(copy), "held-copy");
    const read = await readFile(join(copyTarget, "docker", "layer", "payload"));
    t.equal(
      createHash("sha256").update(read).digest("hex"),
      createHash("sha256").update(payload).digest("hex"),
      "the payload is complete",
    );
    await run("umount", [copyTarget]);
    await backend.detach(copy, inst);
    await backend.deleteVolume(copy);
    await backend.deleteVolume(source);
    await backend.deleteSnapshot("snap-0eeeeeeeeeeeeee01");
  },
);
