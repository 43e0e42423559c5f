/**
 * The block device nodes an engine machine gets at boot (src/lab/machines/nspawn.ts): the list its
 * harness unit hands to systemd-tmpfiles, applied here by the host's systemd-tmpfiles under a
 * folder of the test's own (`--root`), never the host's /dev. Needs root (mknod of a block device).
 */
import t from "tap";
import { mkdir, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { run } from "../../../src/exec.ts";
import { deviceNodesList, deviceNodesUnit } from "../../../src/lab/machines/nspawn.ts";

if (process.getuid?.() !== 0) throw new Error("nspawn-devices.lab.test.ts needs root (it makes block device nodes)");

const root = await mkdtemp(join(tmpdir(), "nspawn-devices-"));
t.teardown(() => rm(root, { recursive: true, force: true }));

const devices = [
  { name: "loop7", major: 7, minor: 7 },
  { name: "loop300", major: 7, minor: 300 << 4 },
  { name: "nvme1n1", major: 259, minor: 1 },
];

t.test("systemd-tmpfiles makes each listed node: a block device of its numbers, mode 0660", async (t) => {
  const list = join(root, "block-devices.conf");
  await writeFile(list, deviceNodesList(devices));
  await mkdir(join(root, "dev"));
  // A node already there is kept (not made again), its mode set to the list's.
  await run("mknod", ["-m", "0600", join(root, "dev/loop7"), "b", "7", "7"]);
  const existing = await stat(join(root, "dev/loop7"));
  const applied = await run("systemd-tmpfiles", [`--root=${root}`, "--create", list], { check: false });
  t.equal(applied.exitCode, 0, `systemd-tmpfiles applied the list${applied.exitCode ? `: ${applied.stderr}` : ""}`);
  for (const device of devices) {
    const node = await stat(join(root, "dev", device.name));
    t.ok(node.isBlockDevice(), `${device.name} is a block device`);
    // The rdev of Linux's new_encode_dev: minor's low byte, then major, then the minor's high bits.
    const major = (node.rdev >> 8) & 0xfff;
    const minor = (node.rdev & 0xff) | ((node.rdev >> 12) & 0xfff00);
    t.same([major, minor], [device.major, device.minor], `${device.name} is ${device.major}:${device.minor}`);
    t.equal(node.mode & 0o777, 0o660, `${device.name}'s mode`);
  }
  t.equal((await stat(join(root, "dev/loop7"))).ino, existing.ino, "the node that was there is the same node");
  const again = await run("systemd-tmpfiles", [`--root=${root}`, "--create", list], { check: false });
  t.equal(again.exitCode, 0, "a second run (a reboot) succeeds, the nodes being there");
});

t.test("the unit applies that list before sysinit.target and the agent", async (t) => {
  const unit = deviceNodesUnit();
  t.match(unit, /^ExecStart=\/usr\/bin\/systemd-tmpfiles --create \/\S+\.conf$/m, "systemd-tmpfiles, one process");
  t.match(unit, /^Before=ebs-cache-agent\.service sysinit\.target$/m);
  t.match(unit, /^DefaultDependencies=no$/m);
});
