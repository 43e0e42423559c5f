/**
 * The lab's volume backend: each volume is a sparse file, each snapshot a sparse copy, and
 * attaching a volume sets it up as a loop device that shows up on the instance the way udev
 * shows an EBS volume on Nitro: `<hostRoot>/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol…`
 * pointing at the device, and `<hostRoot>/sys/class/block/loopN/device/serial` holding the
 * NVMe serial (the volume id without its dash, space-padded to 20 characters).
 *
 * Timing: attach() returns once the attachment is recorded; the device appears in the background
 * `deviceDelayMs` later, as on a real host where the device shows up some time after EC2 says
 * `attached`. deviceReady(volumeId) and settled() let a test wait for that work.
 */
import { randomBytes } from "node:crypto";
import { link, mkdir, open, readdir, rename, rm, stat, symlink, truncate, unlink, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { describeError } from "../../errors.ts";
import { run } from "../../exec.ts";
import type { Logger } from "../../log.ts";
import { listLoopDevices, listMounts } from "../reaper/devices.ts";
import { assertLabId, snapshotImagePath, volumeImagePath } from "../reaper/labdir.ts";
import { removeDeviceEntries, writeAttachmentRecords, type AttachmentRecord } from "./loopstate.ts";
import { byIdDir, ebsByIdName, sysfsRoot, type LabInstance, type VolumeBackend } from "../types.ts";

const GiB = 1024 ** 3;

/** Options for createLoopVolumeBackend. */
export interface LoopVolumeBackendOptions {
  /** The lab root (see labdir.ts); images live in its volumes/ and snapshots/ folders. */
  root: string;
  /** How long after attach() the device appears (default 0: on the next turn of the event loop). */
  deviceDelayMs?: number;
  /** A layer between images and loop devices (the lab's cold snapshots, cold.ts); none by default. */
  layer?: VolumeImageLayer;
  /**
   * How long a snapshot of a detached volume waits for the kernel to let go of a loop device
   * still serving its image (see createSnapshot) before it copies anyway (default 30 s).
   */
  releaseTimeoutMs?: number;
  log?: Logger;
}

/**
 * Something between a volume's image and its loop device: told when images come and go, it
 * names the file the loop device opens (cold.ts serves snapshot-made volumes through FUSE).
 */
export interface VolumeImageLayer {
  /** After the volume's image is in place (`fromSnapshotId` set when made from a snapshot). */
  volumeCreated(volumeId: string, image: string, fromSnapshotId: string | undefined): Promise<void>;
  /** After the volume's image is removed. */
  volumeDeleted(volumeId: string): Promise<void>;
  /** The file the volume's loop device is set up on: `image` unless the layer serves it. */
  backingFile(volumeId: string, image: string): string;
  /** What the layer has fetched of a volume it serves (see VolumeBackend.initializationProgress). */
  initializationProgress?(volumeId: string): { done: number; total: number } | undefined;
}

/** The loop-device VolumeBackend, plus what tests and the lab need to follow its background work. */
export interface LoopVolumeBackend extends VolumeBackend {
  readonly root: string;
  /** Delay before an attached volume's device appears; may be changed at any time (fault injection). */
  deviceDelayMs: number;
  /** Resolves with `/dev/loopN` once the volume's device is present; rejects if it never will be. */
  deviceReady(volumeId: string): Promise<string>;
  /** Waits until no device work is pending (attachments still in their delay included). */
  settled(): Promise<void>;
  /** The attachments whose device is present. */
  attachments(): AttachmentRecord[];
  /**
   * Cancels pending device work and waits for running work; later calls are refused. Devices
   * stay attached: reaping the lab root (cleanup.ts) removes them.
   */
  close(): Promise<void>;
}

interface Attachment {
  volumeId: string;
  instanceId: string;
  hostRoot: string;
  /** Set once the device is present. */
  record?: AttachmentRecord;
  /** Pending while the device delay runs; cleared when the work starts. */
  timer?: NodeJS.Timeout;
  /** Settles (never rejects) when the device work is over, whatever its outcome. */
  work: Promise<void>;
  ready: Promise<string>;
  cancel(reason: string): void;
}

/** The serial as EBS NVMe devices report it: `vol0123…`, space-padded to 20 characters. */
export function ebsNvmeSerial(volumeId: string): string {
  return volumeId.replace("-", "").padEnd(20, " ");
}

/** Creates the loop-device backend for the lab rooted at `options.root`. */
export function createLoopVolumeBackend(options: LoopVolumeBackendOptions): LoopVolumeBackend {
  const { root, log } = options;
  const attached = new Map<string, Attachment>();
  let closed = false;
  let stateWrites: Promise<void> = Promise.resolve();

  const assertOpen = () => {
    if (closed) throw new Error("the loop volume backend is closed");
  };
  const records = () => [...attached.values()].flatMap((a) => (a.record ? [a.record] : []));
  /** Writes are chained so an older snapshot of the records never lands after a newer one. */
  const persist = () => {
    stateWrites = stateWrites
      .then(() => writeAttachmentRecords(root, records()))
      .catch((error: unknown) => {
        log?.warning("lab.loop", "could not write the attachment record", { error: describeError(error) });
      });
    return stateWrites;
  };

  const backend: LoopVolumeBackend = {
    root,
    deviceDelayMs: options.deviceDelayMs ?? 0,

    async createVolume(volumeId, sizeGiB, fromSnapshotId) {
      assertOpen();
      const image = volumeImagePath(root, volumeId);
      if (!Number.isInteger(sizeGiB) || sizeGiB <= 0) throw new Error(`invalid volume size ${sizeGiB} GiB`);
      const size = sizeGiB * GiB;
      await placeNewFile(image, async (temp) => {
        if (fromSnapshotId === undefined) {
          await writeFile(temp, "", { flag: "wx" });
        } else {
          const snapshot = snapshotImagePath(root, fromSnapshotId);
          const snapshotSize = (await stat(snapshot)).size;
          if (snapshotSize > size) {
            throw new Error(`volume ${volumeId} (${sizeGiB} GiB) is smaller than snapshot ${fromSnapshotId}`);
          }
          await sparseCopy(snapshot, temp, log);
        }
        await truncate(temp, size); // Extends without allocating: the image stays sparse.
      });
      await options.layer?.volumeCreated(volumeId, image, fromSnapshotId);
      log?.info("lab.loop", "volume created", { volumeId, sizeGiB, snapshot: fromSnapshotId });
    },

    async deleteVolume(volumeId) {
      assertOpen();
      const image = volumeImagePath(root, volumeId);
      if (attached.has(volumeId)) throw new Error(`volume ${volumeId} is attached: detach it first`);
      await rm(image, { force: true });
      await options.layer?.volumeDeleted(volumeId);
      log?.info("lab.loop", "volume deleted", { volumeId });
    },

    async createSnapshot(snapshotId, volumeId) {
      assertOpen();
      const image = volumeImagePath(root, volumeId);
      const target = snapshotImagePath(root, snapshotId);
      const attachment = attached.get(volumeId);
      if (attachment && !attachment.timer) await attachment.work;
      const device = attached.get(volumeId)?.record?.device;
      // Detached as far as the lab knows, the kernel may still serve the image: `umount` only
      // removes this mount namespace's mount, and while another namespace holds a copy of it
      // (any process that unshared its mounts meanwhile, anywhere on the host: a systemd-nspawn
      // container of another test run, runc, unshare) the filesystem stays live, its last writes (XFS log and
      // metadata) not yet in the image, and `losetup -d` only marks the device to go with it.
      // A copy taken then is an older state of the volume; a real EBS snapshot of a detached
      // volume holds everything written before the detach. So wait for the kernel to let go.
      const lingering = device ? [] : await waitForRelease(volumeId);
      // Write what the kernel still holds for the device (and a filesystem mounted on it) to the
      // image; a real snapshot is crash-consistent, this one at least sees every completed write.
      for (const flushed of device ? [device] : lingering) await run("blockdev", ["--flushbufs", flushed], { log });
      await placeNewFile(target, (temp) => sparseCopy(image, temp, log));
      log?.info("lab.loop", "snapshot created", {
        snapshotId,
        volumeId,
        flushed: device ?? (lingering.join(",") || undefined),
      });
    },

    // The EBS direct APIs write a snapshot's image in place, block by block, while it is pending
    // (no volume has been made from it yet: the emulator refuses CreateVolume until completed).
    blockSnapshots: {
      async start(snapshotId, sizeGiB, parentSnapshotId) {
        assertOpen();
        await placeNewFile(snapshotImagePath(root, snapshotId), async (temp) => {
          if (parentSnapshotId === undefined) await writeFile(temp, "", { flag: "wx" });
          else await sparseCopy(snapshotImagePath(root, parentSnapshotId), temp, log);
          await truncate(temp, sizeGiB * GiB);
        });
      },
      async put(snapshotId, index, data) {
        assertOpen();
        const file = await open(snapshotImagePath(root, snapshotId), "r+");
        try {
          await file.write(data, 0, data.length, index * data.length);
        } finally {
          await file.close();
        }
      },
      async read(snapshotId, index, blockSize) {
        const file = await open(snapshotImagePath(root, snapshotId), "r");
        try {
          const buffer = Buffer.alloc(blockSize);
          await file.read(buffer, 0, blockSize, index * blockSize);
          return buffer;
        } finally {
          await file.close();
        }
      },
      async blocks(snapshotId, blockSize) {
        const file = await open(snapshotImagePath(root, snapshotId), "r");
        try {
          const { size } = await file.stat();
          const buffer = Buffer.alloc(blockSize);
          const zeros = Buffer.alloc(blockSize);
          const indices: number[] = [];
          for (let index = 0; index * blockSize < size; index += 1) {
            buffer.fill(0);
            await file.read(buffer, 0, blockSize, index * blockSize);
            if (!buffer.equals(zeros)) indices.push(index);
          }
          return indices;
        } finally {
          await file.close();
        }
      },
    },

    async deleteSnapshot(snapshotId) {
      assertOpen();
      await rm(snapshotImagePath(root, snapshotId), { force: true });
      log?.info("lab.loop", "snapshot deleted", { snapshotId });
    },

    async attach(volumeId, instance) {
      assertOpen();
      const image = volumeImagePath(root, volumeId);
      const existing = attached.get(volumeId);
      if (existing) {
        if (existing.instanceId === instance.instanceId) return; // Repeated: already on its way.
        throw new Error(`volume ${volumeId} is already attached to ${existing.instanceId}`);
      }
      await stat(image); // ENOENT: no such volume.
      const attachment = scheduleDevice(volumeId, backingFileOf(volumeId), instance);
      attached.set(volumeId, attachment);
      log?.info("lab.loop", "attach accepted", {
        volumeId,
        instance: instance.instanceId,
        delayMs: backend.deviceDelayMs,
      });
    },

    async detach(volumeId, instance) {
      assertOpen();
      assertLabId(volumeId, "vol");
      const attachment = attached.get(volumeId);
      if (!attachment) {
        log?.debug("lab.loop", "detach: not attached", { volumeId }); // Idempotent, like NotFound on detach.
        return;
      }
      if (attachment.instanceId !== instance.instanceId) {
        throw new Error(`volume ${volumeId} is attached to ${attachment.instanceId}, not ${instance.instanceId}`);
      }
      attachment.cancel("detached before its device appeared");
      await attachment.work;
      if (attachment.record) await tearDownDevice(attachment.record, backingFileOf(volumeId), log);
      attached.delete(volumeId);
      await persist();
      log?.info("lab.loop", "detached", { volumeId, instance: instance.instanceId, device: attachment.record?.device });
    },

    async inUse(volumeId) {
      const device = attached.get(volumeId)?.record?.device;
      if (device === undefined) return false;
      // Mounted here, or held by another block device (dm, md, a partition table's parts).
      if ((await listMounts()).some((mount) => mount.source === device)) return true;
      const holders = await readdir(join("/sys/block", basename(device), "holders")).catch(() => []);
      return holders.length > 0;
    },

    initializationProgress(volumeId) {
      return options.layer?.initializationProgress?.(volumeId);
    },

    deviceReady(volumeId) {
      const attachment = attached.get(volumeId);
      return attachment ? attachment.ready : Promise.reject(new Error(`volume ${volumeId} is not attached`));
    },

    async settled() {
      await Promise.all([...attached.values()].map((a) => a.work));
      await stateWrites;
    },

    attachments: records,

    async close() {
      closed = true;
      for (const attachment of attached.values()) attachment.cancel("the backend was closed");
      await Promise.all([...attached.values()].map((a) => a.work));
      await stateWrites;
    },
  };

  /** The file a volume's loop device is set up on (its image, unless a layer serves it). */
  function backingFileOf(volumeId: string): string {
    const image = volumeImagePath(root, volumeId);
    return options.layer ? options.layer.backingFile(volumeId, image) : image;
  }

  /**
   * Waits until no loop device serves the volume's image (or the layer's file for it): a device
   * the lab detached lingers while a filesystem on it is still mounted somewhere (the kernel
   * frees it with the last unmount, after the filesystem wrote everything back). Returns the
   * devices still there after `releaseTimeoutMs` (a filesystem really left mounted: the snapshot
   * is then crash-consistent, as one of an in-use EBS volume).
   */
  async function waitForRelease(volumeId: string): Promise<string[]> {
    const files = new Set([volumeImagePath(root, volumeId), backingFileOf(volumeId)]);
    const deadline = Date.now() + (options.releaseTimeoutMs ?? 30_000);
    let logged = false;
    for (;;) {
      const lingering = (await listLoopDevices())
        .filter((loop) => files.has(loop.backingFile))
        .map((loop) => loop.device);
      if (lingering.length === 0) return [];
      if (Date.now() >= deadline) {
        log?.warning("lab.loop", "a detached volume's device is still in use: the snapshot is only crash-consistent", {
          volumeId,
          devices: lingering.join(","),
        });
        return lingering;
      }
      if (!logged) {
        log?.info("lab.loop", "waiting for the kernel to release the detached volume's device before the snapshot", {
          volumeId,
          devices: lingering.join(","),
        });
        logged = true;
      }
      await sleep(100);
    }
  }

  /** Starts the delayed device work for a new attachment. */
  function scheduleDevice(volumeId: string, image: string, instance: LabInstance): Attachment {
    let resolveReady!: (device: string) => void;
    let rejectReady!: (error: Error) => void;
    const ready = new Promise<string>((resolve, reject) => {
      resolveReady = resolve;
      rejectReady = reject;
    });
    ready.catch(() => undefined); // Nobody may be waiting: a failure is logged, not unhandled.
    let finish!: () => void;
    const work = new Promise<void>((resolve) => (finish = resolve));
    const attachment: Attachment = {
      volumeId,
      instanceId: instance.instanceId,
      hostRoot: instance.hostRoot,
      work,
      ready,
      cancel(reason) {
        if (!attachment.timer) return; // Already running or done: detach waits for it instead.
        clearTimeout(attachment.timer);
        attachment.timer = undefined;
        rejectReady(new Error(`device of ${volumeId}: ${reason}`));
        finish();
      },
    };
    attachment.timer = setTimeout(() => {
      attachment.timer = undefined;
      // A file a layer serves is read with direct I/O: the loop device then passes its requests
      // on concurrently (as an NVMe device does), where buffered it reads them one at a time.
      setUpDevice(volumeId, image, instance, image !== volumeImagePath(root, volumeId), log)
        .then(async (record) => {
          attachment.record = record;
          await persist();
          log?.info("lab.loop", "device appeared", { volumeId, device: record.device, link: record.link });
          resolveReady(record.device);
        })
        .catch((error: unknown) => {
          log?.error("lab.loop", "device did not appear", { volumeId, error: describeError(error) });
          rejectReady(error instanceof Error ? error : new Error(String(error)));
        })
        .finally(finish);
    }, backend.deviceDelayMs);
    return attachment;
  }

  return backend;
}

/** An EBS volume's read-ahead on a Nitro instance, in 512-byte sectors (`blockdev --getra`): 128 KiB. */
export const EBS_READ_AHEAD_SECTORS = 256;

/** Sets up the loop device, then the sysfs entry, then (last, atomically) the by-id link. */
async function setUpDevice(
  volumeId: string,
  image: string,
  instance: LabInstance,
  directIo: boolean,
  log?: Logger,
): Promise<AttachmentRecord> {
  const { stdout } = await run("losetup", ["--find", "--show", `--direct-io=${directIo ? "on" : "off"}`, image], {
    log,
    remediation: "check that loop devices are available (modprobe loop) and that this runs as root",
  });
  const device = stdout.trim();
  if (!/^\/dev\/loop\d+$/.test(device))
    throw new Error(`losetup printed an unexpected device: ${JSON.stringify(device)}`);
  // Read ahead as an EBS NVMe device does (the kernel's default, 128 KiB), not as a loop device over the cold layer's
  // file is set up (2560 KiB here): a service's buffered reads of a cold volume then fetch what they would on EC2.
  await run("blockdev", ["--setra", String(EBS_READ_AHEAD_SECTORS), device], { log });
  const record: AttachmentRecord = {
    volumeId,
    instanceId: instance.instanceId,
    hostRoot: instance.hostRoot,
    device,
    link: join(byIdDir(instance.hostRoot), ebsByIdName(volumeId)),
    sysfsDir: join(sysfsRoot(instance.hostRoot), "class", "block", basename(device)),
  };
  try {
    await writeSysfsEntry(record.sysfsDir, ebsNvmeSerial(volumeId));
    await mkdir(dirname(record.link), { recursive: true });
    const tempLink = join(dirname(record.link), `.${basename(record.link)}.${tempSuffix()}`);
    await symlink(device, tempLink);
    await rename(tempLink, record.link); // A watcher sees no link, then the whole link.
    return record;
  } catch (error) {
    await tearDownDevice(record, image, log).catch(() => undefined);
    throw error;
  }
}

/** `<sysfsDir>/device/serial`, built aside and renamed in so it is complete once visible. */
async function writeSysfsEntry(sysfsDir: string, serial: string): Promise<void> {
  const parent = dirname(sysfsDir);
  await mkdir(parent, { recursive: true });
  const temp = join(parent, `.${basename(sysfsDir)}.${tempSuffix()}`);
  await mkdir(join(temp, "device"), { recursive: true });
  await writeFile(join(temp, "device", "serial"), `${serial}\n`); // sysfs attributes end in a newline.
  await rm(sysfsDir, { recursive: true, force: true }); // A stale entry of an earlier loopN.
  await rename(temp, sysfsDir);
}

/**
 * Removes link and sysfs entry first (the device vanishes from the instance's view), then the
 * loop device. If a filesystem on it is still mounted, the kernel defers freeing the loop device
 * until the last unmount: that is what a forced detach looks like.
 */
async function tearDownDevice(record: AttachmentRecord, image: string, log?: Logger): Promise<void> {
  await removeDeviceEntries(record);
  const result = await run("losetup", ["-d", record.device], { log, check: false });
  if (result.exitCode === 0) return;
  // Failing is fine if the device is already gone or now serves another file.
  const stillOurs = (await listLoopDevices(log)).some(
    (loop) => loop.device === record.device && loop.backingFile === image,
  );
  if (stillOurs) throw new Error(`losetup -d ${record.device} failed: ${result.stderr}`);
}

/** Copies an image keeping holes (and sharing blocks where the filesystem supports reflinks). */
async function sparseCopy(from: string, to: string, log?: Logger): Promise<void> {
  await run("cp", ["--sparse=always", "--reflink=auto", "--", from, to], { log });
}

/**
 * Makes `path` through a temp file and links it into place, failing if `path` exists: a volume
 * or snapshot image is never half-made under its real name, and never overwritten.
 */
async function placeNewFile(path: string, make: (temp: string) => Promise<void>): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const temp = join(dirname(path), `.${basename(path)}.${tempSuffix()}`);
  try {
    await make(temp);
    await link(temp, path); // EEXIST if the id is already taken.
  } finally {
    await unlink(temp).catch(() => undefined);
  }
}

function tempSuffix(): string {
  return `${process.pid}-${randomBytes(4).toString("hex")}.tmp`;
}
