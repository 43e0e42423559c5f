// Detaching a lab's loop device only while the file listed for it still backs it, on a real loop device.
import t from "tap";
import { mkdtemp, rename, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { run } from "../../../src/exec.ts";
import { currentLoop, detachLoop, listLoopDevices, sameBacking } from "../../../src/lab/reaper/devices.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

t.test("a loop device is detached only while the file listed for it still backs it", async (t) => {
  const log = createMemoryLogger();
  const dir = await mkdtemp(join(tmpdir(), "ebs-lab-devices-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const mine = join(dir, "mine.img");
  await run("truncate", ["-s", "16M", mine]);
  const device = (await run("losetup", ["--find", "--show", mine])).stdout.trim();
  const listed = (await listLoopDevices()).find((loop) => loop.device === device);
  t.teardown(async () => {
    const now = await currentLoop(device);
    if (listed?.backingId && now?.backingId === listed.backingId)
      await run("losetup", ["-d", device], { check: false });
  });
  t.match(listed, { device, backingFile: mine, backingId: /^\d+:\d+\/\d+$/ }, "listed with its file's identity");

  // Listed for another file (the number was freed and taken since): left alone.
  t.equal(await detachLoop({ device, backingFile: join(dir, "other.img") }, log), "not ours", "another path");
  t.equal(await detachLoop({ ...listed!, backingId: "0:0/1" }, log), "not ours", "another inode at the same path");
  t.match(await currentLoop(device), { backingFile: mine }, "still set up");

  // The same file under another path (a cold volume's FUSE mount unmounted first): still ours.
  await rename(mine, join(dir, "moved.img"));
  t.equal(await detachLoop(listed!, log), "detached", "the same inode");
  // The number is free now, and another lab file may set it up at once for a file of its own.
  t.not((await currentLoop(device))?.backingId, listed!.backingId, "gone: the device holds this file no more");
  t.equal(await detachLoop(listed!, log), "not ours", "a device no longer set up is not detached again");
});

t.test(
  "the same backing file, pure: identity first; a path seen from an unmounted mount's root is its tail",
  async (t) => {
    const listed = { device: "/dev/loop1", backingFile: "/var/tmp/lab-a/cold/mnt/vol-1.img" };
    t.ok(sameBacking(listed, { ...listed }), "the same path");
    t.ok(sameBacking(listed, { device: "/dev/loop1", backingFile: "/vol-1.img" }), "its FUSE mount unmounted since");
    t.notOk(
      sameBacking(listed, { device: "/dev/loop1", backingFile: "/var/tmp/lab-b/volumes/vol-2.img" }),
      "another lab's file",
    );
    t.notOk(
      sameBacking(listed, { device: "/dev/loop1", backingFile: "/vol-2.img" }),
      "another file on an unmounted mount",
    );
    t.notOk(sameBacking(listed, undefined), "nothing set up");
    t.notOk(
      sameBacking({ ...listed, backingId: "0:41/2" }, { ...listed, backingId: "0:41/3" }),
      "the same path, another inode",
    );
    t.ok(
      sameBacking(
        { ...listed, backingId: "0:41/2" },
        { device: "/dev/loop1", backingFile: "/elsewhere.img", backingId: "0:41/2" },
      ),
      "the same inode, renamed",
    );
  },
);
