// The agent's device discovery against real loop devices from the lab's backend: waiting by
// inotify, verifying the NVMe serial, refusing stale, malicious and traversing links.
import t from "tap";
import { randomBytes } from "node:crypto";
import { lstat, mkdir, rm, stat, symlink, unlink, writeFile } from "node:fs/promises";
import { basename, join } from "node:path";
import { watch } from "chokidar";
import { run } from "../../src/exec.ts";
import { closeWatcher } from "../../src/host/device.ts";
import {
  DeviceIdentityError,
  DevicePathError,
  DeviceTimeoutError,
  InvalidVolumeIdError,
  createHostStorage,
} from "../../src/host/storage.ts";
import { createHostRoot } from "../../src/lab/reaper/labdir.ts";
import { openLabRoot } from "../../src/lab/reaper/labroot.ts";
import { createLoopVolumeBackend, ebsNvmeSerial } from "../../src/lab/volumes/loopdev.ts";
import { byIdDir, ebsByIdName, sysfsRoot, type LabInstance } from "../../src/lab/types.ts";
import { createLogger } from "../../src/log.ts";
import type { HostStorage } from "../../src/agent/ports.ts";
import { assertLabPrerequisites } from "../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

/** Log lines, and a way to wait for one: the tests sequence on what the agent reports, not on time. */
const lines: string[] = [];
const waiters: { pattern: RegExp; resolve: (line: string) => void }[] = [];
const log = createLogger((line) => {
  lines.push(line);
  for (const waiter of [...waiters]) {
    if (waiter.pattern.test(line)) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve(line);
    }
  }
}, "debug");
function logged(pattern: RegExp): Promise<string> {
  const seen = lines.find((line) => pattern.test(line));
  if (seen) return Promise.resolve(seen);
  return new Promise((resolve) => waiters.push({ pattern, resolve }));
}

const lab = await openLabRoot({ name: "test-host-device", log });
t.teardown(() => lab.close());
const backend = createLoopVolumeBackend({ root: lab.root, deviceDelayMs: 0, log });
t.teardown(() => backend.close());

let hosts = 0;
async function host(): Promise<{ inst: LabInstance; storage: HostStorage; byId: string; sysfs: string }> {
  const instanceId = `i-0hostdev${++hosts}`;
  const hostRoot = await createHostRoot(lab.root, instanceId);
  const inst = {
    instanceId,
    region: "eu-west-3",
    availabilityZone: "eu-west-3a",
    tags: {},
    metadataTags: true,
    hostRoot,
  };
  const byId = byIdDir(hostRoot);
  const sysfs = sysfsRoot(hostRoot);
  return { inst, storage: createHostStorage({ byIdDir: byId, sysfsRoot: sysfs, log }), byId, sysfs };
}

/** A fresh volume id of EC2's current shape. */
function newVolumeId(): string {
  return `vol-${randomBytes(9).toString("hex").slice(0, 17)}`;
}

/** Creates and attaches a volume on `inst`, waits for its loop device; detached again at the end. */
async function attached(
  t: { teardown(fn: () => unknown): void },
  inst: LabInstance,
  volumeId = newVolumeId(),
): Promise<{ volumeId: string; device: string }> {
  await backend.createVolume(volumeId, 1);
  await backend.attach(volumeId, inst);
  t.teardown(() => backend.detach(volumeId, inst));
  return { volumeId, device: await backend.deviceReady(volumeId) };
}

async function exists(path: string): Promise<boolean> {
  return lstat(path).then(
    () => true,
    () => false,
  );
}

t.test("a device that appears later is seen by the watcher and verified", async (t) => {
  const { inst, storage } = await host();
  const volumeId = newVolumeId();
  await backend.createVolume(volumeId, 1);
  const waiting = storage.waitForDevice(volumeId, 60_000);
  await logged(new RegExp(`watching for the device volumeId=${volumeId}`));
  backend.deviceDelayMs = 300;
  try {
    await backend.attach(volumeId, inst);
  } finally {
    backend.deviceDelayMs = 0;
  }
  t.teardown(() => backend.detach(volumeId, inst));
  const device = await waiting;
  t.equal(device, await backend.deviceReady(volumeId), "the loop device the backend made");
  const checks = lines.filter((line) => line.includes("device check") && line.includes(volumeId));
  t.match(checks[0], /trigger=ready state=absent/, "the first look, once the watch was ready, found nothing");
  const verifying = checks.find((line) => line.includes("state=verified"));
  t.match(verifying, /trigger="(raw|add|change) /, "a filesystem event, not a timer, led to the device");
  t.equal(await storage.findDevice(volumeId), device, "findDevice agrees");
});

t.test("a device that is already there is found at once", async (t) => {
  const { inst, storage } = await host();
  const { volumeId, device } = await attached(t, inst);
  t.equal(await storage.waitForDevice(volumeId, 60_000), device);
  t.equal(await storage.findDevice(volumeId), device);
});

t.test("a device that never appears times out with a typed error", async (t) => {
  const { storage } = await host();
  const volumeId = newVolumeId();
  const error = await storage.waitForDevice(volumeId, 300).catch((e: unknown) => e);
  t.type(error, DeviceTimeoutError);
  t.match((error as DeviceTimeoutError).message, volumeId);
  t.match((error as DeviceTimeoutError).remediation, /attached.*udev/);
  t.equal(await storage.findDevice(volumeId), undefined, "findDevice: no device, no error");
});

t.test("a missing by-id folder is watched from above and not created by the agent", async (t) => {
  const { inst, storage, byId } = await host();
  await rm(join(inst.hostRoot, "dev", "disk"), { recursive: true });
  const volumeId = newVolumeId();
  await backend.createVolume(volumeId, 1);
  const waiting = storage.waitForDevice(volumeId, 60_000);
  await logged(new RegExp(`watching for the device volumeId=${volumeId}`));
  t.notOk(await exists(byId), "the agent created nothing on the host");
  await backend.attach(volumeId, inst); // The backend makes dev/disk/by-id, as udev would.
  t.teardown(() => backend.detach(volumeId, inst));
  t.equal(await waiting, await backend.deviceReady(volumeId));
});

t.test("a serial that is not the volume's is refused, naming device, serial and volume", async (t) => {
  const { inst, storage, sysfs } = await host();
  const { volumeId, device } = await attached(t, inst);
  const wrong = newVolumeId();
  await writeFile(join(sysfs, "class", "block", basename(device), "device", "serial"), `${ebsNvmeSerial(wrong)}\n`);
  const error = await storage.findDevice(volumeId).catch((e: unknown) => e);
  t.type(error, DeviceIdentityError);
  const message = (error as DeviceIdentityError).message;
  t.match(message, device, "names the device");
  t.match(message, wrong.replace("-", ""), "names the serial found");
  t.match(message, volumeId, "names the volume expected");
  t.equal((error as DeviceIdentityError).serial, wrong.replace("-", ""));
  const waited = await storage.waitForDevice(volumeId, 300).catch((e: unknown) => e);
  t.type(waited, DeviceIdentityError, "waiting ends in the identity error, not a timeout");
});

t.test("a link naming one volume but leading to another volume's device is refused", async (t) => {
  const { inst, storage, byId } = await host();
  const other = await attached(t, inst);
  const volumeId = newVolumeId();
  await symlink(other.device, join(byId, ebsByIdName(volumeId)));
  const error = await storage.findDevice(volumeId).catch((e: unknown) => e);
  t.type(error, DeviceIdentityError);
  t.match(
    (error as Error).message,
    new RegExp(`device ${other.device} is not volume ${volumeId}.*${other.volumeId.replace("-", "")}`),
  );
});

t.test("a stale link replaced by the right one: the wait ends on the right device", async (t) => {
  const { inst, storage, byId } = await host();
  const other = await attached(t, inst);
  const volumeId = newVolumeId();
  await backend.createVolume(volumeId, 1);
  await symlink(other.device, join(byId, ebsByIdName(volumeId))); // Stale: another volume's device.
  const waiting = storage.waitForDevice(volumeId, 60_000);
  await logged(new RegExp(`refusing the device the link leads to.*volumeId=${volumeId}`));
  await backend.attach(volumeId, inst); // Replaces the link, as udev does.
  t.teardown(() => backend.detach(volumeId, inst));
  const device = await waiting;
  t.equal(device, await backend.deviceReady(volumeId));
  t.not(device, other.device);
});

t.test("malicious argument and directory traversal: links leading outside /dev are refused", async (t) => {
  const { inst: elsewhere } = await host();
  const foreign = await attached(t, elsewhere); // A block device with no serial in this host's sysfs.
  const { storage, byId } = await host();
  const outside = join(lab.root, "x");
  await writeFile(outside, "not a device");
  const cases: [string, string][] = [
    ["a file outside /dev", outside],
    ["directory traversal (relative)", "../".repeat(40) + "etc/passwd"],
    ["directory traversal through /dev", "/dev/../etc/passwd"],
    ["a device that is not a block device", "/dev/null"],
    ["a folder under /dev", "/dev/shm"],
    ["a block device without a serial", foreign.device],
  ];
  for (const [name, target] of cases) {
    const volumeId = newVolumeId();
    await symlink(target, join(byId, ebsByIdName(volumeId)));
    const error = await storage.findDevice(volumeId).catch((e: unknown) => e);
    t.type(error, DeviceIdentityError, name);
    t.match((error as Error).message, volumeId, `${name}: names the volume`);
  }
  const volumeId = newVolumeId();
  await symlink("/dev/../etc/passwd", join(byId, ebsByIdName(volumeId)));
  t.type(
    await storage.waitForDevice(volumeId, 300).catch((e: unknown) => e),
    DeviceIdentityError,
    "waiting refuses it too",
  );

  for (const bad of [
    "vol-../../etc",
    "vol-0123456789abcdef0/../x",
    "../vol-0123456789abcdef0",
    "vol-0123456789ABCDEF0",
    "",
  ]) {
    t.type(
      await storage.findDevice(bad).catch((e: unknown) => e),
      InvalidVolumeIdError,
      `volume id ${JSON.stringify(bad)}`,
    );
    t.type(await storage.waitForDevice(bad, 300).catch((e: unknown) => e), InvalidVolumeIdError);
  }
  for (const bad of [
    "/dev/../etc/passwd",
    "-f",
    "/dev/loop0 --help",
    "/dev/loop0/../sda",
    "/dev/disk/by-id/x",
    "/tmp/x",
    "dev/loop0",
    "/dev/loop0\n",
  ]) {
    t.type(await storage.probe(bad).catch((e: unknown) => e), DevicePathError, `probe ${JSON.stringify(bad)}`);
    t.type(
      await storage.format(bad, "ebs-cache").catch((e: unknown) => e),
      DevicePathError,
      `format ${JSON.stringify(bad)}`,
    );
    t.type(
      await storage.mount(bad, join(lab.root, "mnt", "bad")).catch((e: unknown) => e),
      DevicePathError,
      `mount ${JSON.stringify(bad)}`,
    );
    t.type(
      await storage.mountPointOf(bad).catch((e: unknown) => e),
      DevicePathError,
      `mountPointOf ${JSON.stringify(bad)}`,
    );
  }
});

t.test("a link that comes before its device node: the wait ends when the node appears", async (t) => {
  // The device node is a second node for a real loop device (attached on another host folder),
  // so its name is ours to choose and it can appear after the link.
  const { inst: elsewhere } = await host();
  const { volumeId, device: loop } = await attached(t, elsewhere);
  const { storage, byId, sysfs } = await host();
  const node = `/dev/ebscachetest${randomBytes(4).toString("hex")}`;
  t.teardown(() => unlink(node).catch(() => undefined));
  await mkdir(join(sysfs, "class", "block", basename(node), "device"), { recursive: true });
  await writeFile(join(sysfs, "class", "block", basename(node), "device", "serial"), `${ebsNvmeSerial(volumeId)}\n`);
  await symlink(node, join(byId, ebsByIdName(volumeId)));
  const waiting = storage.waitForDevice(volumeId, 60_000);
  await logged(new RegExp(`target does not exist yet; watching for it volumeId=${volumeId}`));
  const { rdev } = await stat(loop);
  await run("mknod", [node, "b", String(Math.floor(rdev / 256) & 0xfff), String(rdev & 0xff)]);
  t.equal(await waiting, node);
});

t.test(
  "closing the device watch clears chokidar's pending re-read throttle (it kept a finished boot's process alive)",
  async (t) => {
    const dir = join(lab.root, `watch-${randomBytes(4).toString("hex")}`);
    await mkdir(dir);
    const opened = async () => {
      const watcher = watch(dir, { persistent: false, ignoreInitial: true });
      await new Promise<void>((ready) => watcher.once("ready", ready));
      // A re-read in flight at close: its throttle is set and only the read's end would clear it.
      const throttle = watcher._throttle("readdir", dir, 1000);
      if (!throttle) throw new Error("chokidar did not throttle");
      return { watcher, timer: (throttle as unknown as { timeoutObject: NodeJS.Timeout }).timeoutObject };
    };
    const plain = await opened();
    await plain.watcher.close();
    t.ok(
      plain.timer.hasRef() && !(plain.timer as unknown as { _destroyed: boolean })._destroyed,
      "chokidar's own close() leaves the 1 s timer running (why closeWatcher exists)",
    );
    clearTimeout(plain.timer);
    const ours = await opened();
    await closeWatcher(ours.watcher);
    t.ok((ours.timer as unknown as { _destroyed: boolean })._destroyed, "closeWatcher clears it");
  },
);
