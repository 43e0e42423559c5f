// Probing, formatting, mounting and growing against real loop devices from the lab's backend,
// plus the parsers replayed on recorded tool output.
import t from "tap";
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { mkdir, open, readFile, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { run } from "../../src/exec.ts";
import { allocatedRanges, mergeRanges, parseFreesp, parseXfsInfo, usedRanges } from "../../src/host/extents.ts";
import {
  contentsFromBlkid,
  dropDeviceCache,
  parseBlkidExport,
  parseWipefsJson,
  xfsDataBytes,
} from "../../src/host/filesystem.ts";
import { foundPhrase, judgeLayout, judgeSignature, parseXfsDb, parseXfsSuperblock } from "../../src/host/identify.ts";
import { mountDevice, parseMountInfo, settleFilesystem, syncFilesystem } from "../../src/host/mount.ts";
import {
  ForeignVolumeError,
  FormatRefusedError,
  MountConflictError,
  ProbeError,
  createHostStorage,
} from "../../src/host/storage.ts";
import { DATA_ROOT_SUBDIR, FS_LABEL } from "../../src/layout.ts";
import { createHostRoot, volumeImagePath } from "../../src/lab/reaper/labdir.ts";
import { openLabRoot } from "../../src/lab/reaper/labroot.ts";
import { createLoopVolumeBackend } from "../../src/lab/volumes/loopdev.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { assertLabPrerequisites } from "../fixtures/lab/lab-prereq.ts";
import { loopInstance } from "../fixtures/lab/loop-instance.ts";

await assertLabPrerequisites();

const log = createMemoryLogger();
const lab = await openLabRoot({ name: "test-host-fs", log });
t.teardown(() => lab.close());
const backend = createLoopVolumeBackend({ root: lab.root, deviceDelayMs: 0, log });
t.teardown(() => backend.close());
const instanceId = "i-0hostfs1";
const inst = loopInstance(instanceId, await createHostRoot(lab.root, instanceId));
const storage = createHostStorage({ log });

type Teardown = { teardown(fn: () => unknown): void };

function newId(prefix: "vol" | "snap"): string {
  return `${prefix}-${randomBytes(9).toString("hex").slice(0, 17)}`;
}

/** A new volume attached as a loop device; detached at the end of the test. */
async function volume(t: Teardown, sizeGiB = 1, fromSnapshot?: string): Promise<{ volumeId: string; device: string }> {
  const volumeId = newId("vol");
  await backend.createVolume(volumeId, sizeGiB, fromSnapshot);
  await backend.attach(volumeId, inst);
  t.teardown(() => backend.detach(volumeId, inst));
  return { volumeId, device: await backend.deviceReady(volumeId) };
}

/** A mount point under the lab root, unmounted at the end of the test if still mounted. */
function mountPoint(t: Teardown, name: string): string {
  const path = join(lab.root, "mnt", `${name}-${randomBytes(3).toString("hex")}`);
  t.teardown(() => storage.unmount(path));
  return path;
}

async function dfBytes(path: string): Promise<number> {
  const { stdout } = await run("df", ["-B1", "--output=size", path]);
  return Number(stdout.trim().split("\n").at(-1));
}

/** A mount by the test itself (storage.mount refuses what is not the agent's filesystem). */
async function plainMount(device: string, mp: string, options = "noatime"): Promise<void> {
  await mkdir(mp, { recursive: true });
  await run("mount", ["-o", options, device, mp]);
}

/** A DOS (MBR) partition table with one Linux partition, as fdisk would write it. */
async function writeDosPartitionTable(device: string): Promise<void> {
  const mbr = Buffer.alloc(512);
  mbr.writeUInt32LE(0x1234abcd, 440); // Disk signature (blkid's PTUUID).
  mbr.writeUInt8(0x83, 446 + 4); // Partition 1: type Linux,
  mbr.writeUInt32LE(2048, 446 + 8); // starting at sector 2048,
  mbr.writeUInt32LE(204800, 446 + 12); // 100 MiB long.
  mbr.writeUInt16LE(0xaa55, 510);
  const handle = await open(device, "r+");
  try {
    await handle.write(mbr, 0, 512, 0);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

t.test("parsers on recorded blkid, wipefs and mountinfo output", async (t) => {
  const blkid = (text: string) => contentsFromBlkid(parseBlkidExport(text));
  t.same(blkid("DEVNAME=/dev/nvme1n1\nLABEL=ebs\\ cache\nUUID=c7c4\nBLOCK_SIZE=512\nTYPE=xfs\nUSAGE=filesystem\n"), {
    kind: "filesystem",
    type: "xfs",
    label: "ebs cache",
    uuid: "c7c4",
  });
  t.same(blkid("DEVNAME=/dev/sdb\nUUID=Jp4Yj2-x\nVERSION=LVM2 001\nTYPE=LVM2_member\nUSAGE=raid\n"), {
    kind: "other",
    signature: "LVM2_member",
  });
  t.same(blkid("DEVNAME=/dev/sdc\nUUID=9f1e\nLABEL=host:0\nUUID_SUB=77aa\nTYPE=linux_raid_member\nUSAGE=raid\n"), {
    kind: "other",
    signature: "linux_raid_member",
  });
  t.same(blkid("DEVNAME=/dev/sdd\nVERSION=2\nUUID=4c2e\nTYPE=crypto_LUKS\nUSAGE=crypto\n"), {
    kind: "other",
    signature: "crypto_LUKS",
  });
  t.same(blkid("DEVNAME=/dev/sde\nUUID=11\nTYPE=swap\nUSAGE=other\n"), { kind: "other", signature: "swap" });
  t.same(blkid("DEVNAME=/dev/sdf\nPTUUID=0b9e\nPTTYPE=gpt\n"), { kind: "other", signature: "gpt partition table" });
  t.same(
    blkid("DEVNAME=/dev/sdg\nTYPE=ext4\n"),
    { kind: "filesystem", type: "ext4" },
    "no USAGE: known filesystem types",
  );
  t.same(
    blkid("DEVNAME=/dev/sdh\nTYPE=zfs_member\n"),
    { kind: "other", signature: "zfs_member" },
    "no USAGE: anything else is other",
  );

  t.same(parseWipefsJson(""), []);
  t.same(parseWipefsJson('{\n   "signatures": [\n\n   ]\n}'), []);
  t.same(
    parseWipefsJson('{"signatures": [{"device":"loop0","offset":"0x1fe","type":"dos","uuid":null,"label":null}]}'),
    ["dos"],
  );
  t.throws(() => parseWipefsJson("wipefs: garbage"));

  const [entry] = parseMountInfo(
    "36 25 7:3 / /var/lib/ebs\\040cache rw,noatime shared:1 - xfs /dev/loop3 rw,attr2,inode64\n" + "bad line\n",
  );
  t.same(entry, {
    mountId: 36,
    parentId: 25,
    majorMinor: "7:3",
    root: "/",
    target: "/var/lib/ebs cache",
    options: "rw,noatime",
    fsType: "xfs",
    source: "/dev/loop3",
  });
});

t.test("probe tells blank, xfs, ext4, a partition table and unknown data apart", async (t) => {
  const blank = await volume(t);
  t.same(await storage.probe(blank.device), { kind: "blank" });

  const xfs = await volume(t);
  await run("mkfs.xfs", ["-q", "-L", "probe-xfs", xfs.device]);
  t.match(await storage.probe(xfs.device), { kind: "filesystem", type: "xfs", label: "probe-xfs", uuid: /\S/ });

  const ext4 = await volume(t);
  await run("mkfs.ext4", ["-q", "-L", "probe-ext4", ext4.device]);
  t.match(await storage.probe(ext4.device), { kind: "filesystem", type: "ext4", label: "probe-ext4" });

  const partitioned = await volume(t);
  await writeDosPartitionTable(partitioned.device);
  t.same(await storage.probe(partitioned.device), { kind: "other", signature: "dos partition table" });

  const junk = await volume(t);
  const handle = await open(junk.device, "r+");
  await handle.write(randomBytes(4096).fill(1, 0, 1), 0, 4096, 8192); // Not zeros, no known magic.
  await handle.close();
  t.match(
    await storage.probe(junk.device),
    { kind: "other", signature: /unrecognized data/ },
    "data without a signature is not blank",
  );
});

t.test("a probe that cannot read the device throws instead of saying blank", async (t) => {
  // blkid -p answers exit 2 ("nothing found") for a device it cannot open: the probe must not.
  t.type(await storage.probe("/dev/ebscachenosuchdevice").catch((e: unknown) => e), ProbeError);
  t.type(await storage.probe("/dev/null").catch((e: unknown) => e), ProbeError, "a character device");
  t.type(
    await storage.format("/dev/ebscachenosuchdevice", FS_LABEL).catch((e: unknown) => e),
    ProbeError,
    "format probes first",
  );
});

t.test("format refuses a device with a signature and its data stays readable", async (t) => {
  const { device } = await volume(t);
  await run("mkfs.ext4", ["-q", "-L", "precious", device]);
  const mp = mountPoint(t, "precious");
  await plainMount(device, mp);
  await writeFile(join(mp, "data.txt"), "keep me");
  await storage.unmount(mp);

  const error = await storage.format(device, FS_LABEL).catch((e: unknown) => e);
  t.type(error, FormatRefusedError);
  t.match((error as Error).message, /not blank \(ext4 filesystem labelled "precious"\)/);
  t.match(await storage.probe(device), { kind: "filesystem", type: "ext4", label: "precious" });
  await plainMount(device, mp, "ro");
  t.equal(await readFile(join(mp, "data.txt"), "utf8"), "keep me", "the data is still there");
  await storage.unmount(mp);

  const partitioned = await volume(t);
  await writeDosPartitionTable(partitioned.device);
  t.type(
    await storage.format(partitioned.device, FS_LABEL).catch((e: unknown) => e),
    FormatRefusedError,
    "a partition table too",
  );
  t.same(await storage.probe(partitioned.device), { kind: "other", signature: "dos partition table" });
});

t.test("format makes XFS with ftype=1 and the label on a blank device", async (t) => {
  const { device } = await volume(t);
  await storage.format(device, FS_LABEL);
  t.match(await storage.probe(device), { kind: "filesystem", type: "xfs", label: FS_LABEL });
  const mp = mountPoint(t, "fresh");
  await storage.mount(device, mp);
  const info = (await run("xfs_info", [mp])).stdout;
  t.match(info, /ftype=1/, "overlay2 needs ftype=1");
  t.match(info, /crc=1/);
  t.type(
    await storage.format(device, FS_LABEL).catch((e: unknown) => e),
    FormatRefusedError,
    "a second format is refused",
  );
  await t.rejects(storage.format(device, "label with spaces"), /invalid filesystem label/);
});

t.test("mount and unmount are idempotent and report the mount point", async (t) => {
  const { device } = await volume(t);
  await storage.format(device, FS_LABEL);
  const mp = mountPoint(t, "idem");
  t.equal(await storage.mountPointOf(device), undefined);
  await storage.mount(device, mp);
  await storage.mount(device, mp); // Already there: nothing to do.
  t.equal(await storage.mountPointOf(device), mp);
  t.match(await storage.probe(device), { kind: "filesystem", type: "xfs" }, "a mounted device can be probed");
  const { stdout } = await run("findmnt", ["-n", "-o", "SOURCE,OPTIONS", mp]);
  t.equal(stdout.split("\n").length, 1, "mounted once");
  t.match(stdout, new RegExp(`^${device}\\s+\\S*noatime`));
  await storage.unmount(mp);
  await storage.unmount(mp); // Not mounted: nothing to do.
  await storage.unmount(join(lab.root, "mnt", "never-made")); // Not even a folder.
  t.equal(await storage.mountPointOf(device), undefined);
  t.equal((await run("findmnt", [mp], { check: false })).exitCode, 1, "findmnt sees nothing at the mount point");
  t.equal(
    await storage.mountPointOf("/dev/ebscachenosuchdevice"),
    undefined,
    "a device that is not there is mounted nowhere",
  );
});

t.test("mount refuses a mount point where something else is mounted", async (t) => {
  const { device } = await volume(t);
  await storage.format(device, FS_LABEL);
  const mp = mountPoint(t, "foreign");
  await mkdir(mp, { recursive: true });
  await run("mount", ["-t", "tmpfs", "-o", "size=1m", "foreign", mp]);
  const error = await storage.mount(device, mp).catch((e: unknown) => e);
  t.type(error, MountConflictError);
  t.match((error as Error).message, /foreign \(tmpfs\) is mounted there/);
  t.equal(await storage.mountPointOf(device), undefined, "the device was not mounted");
  await storage.unmount(mp);

  const other = await volume(t);
  await storage.format(other.device, FS_LABEL);
  await storage.mount(other.device, mp);
  t.type(
    await storage.mount(device, mp).catch((e: unknown) => e),
    MountConflictError,
    "another volume's filesystem too",
  );
  t.equal(await storage.mountPointOf(other.device), mp);
  await storage.unmount(mp);
  await t.rejects(storage.mount(device, "relative/path"), /invalid mount point/);
  await t.rejects(storage.mount(device, `${lab.root}/mnt/../../x`), /invalid mount point/, "no .. in a mount point");
});

t.test("two volumes restored from one snapshot (the same XFS UUID) mount side by side", async (t) => {
  const source = await volume(t);
  await storage.format(source.device, FS_LABEL);
  const snapshotId = newId("snap");
  await backend.createSnapshot(snapshotId, source.volumeId);
  t.teardown(() => backend.deleteSnapshot(snapshotId));
  const first = await volume(t, 1, snapshotId);
  const second = await volume(t, 1, snapshotId);
  const uuid = async (device: string) =>
    (await run("blkid", ["-p", "-o", "value", "-s", "UUID", device])).stdout.trim();
  t.equal(await uuid(first.device), await uuid(second.device), "both carry the snapshot's UUID");
  const a = mountPoint(t, "clone-a");
  const b = mountPoint(t, "clone-b");
  await storage.mount(first.device, a);
  await storage.mount(second.device, b);
  t.equal(await storage.mountPointOf(first.device), a);
  t.equal(await storage.mountPointOf(second.device), b, "XFS's duplicate-UUID check does not stop the second");
  await storage.unmount(b);
  await storage.unmount(a);
});

t.test(
  "a read-only mount (the acceptance run's): ro and norecovery, a write refused, not a byte changed",
  async (t) => {
    const { device } = await volume(t);
    await storage.format(device, FS_LABEL);
    const digest = async () => (await run("sha256sum", [device])).stdout.split(" ")[0];
    const before = await digest();
    const mp = mountPoint(t, "read-only");
    await mountDevice(device, mp, { readOnly: true, fsType: "xfs" });
    const { stdout } = await run("findmnt", ["-n", "-o", "OPTIONS", mp]);
    t.match(stdout, /^ro,.*norecovery/, "ro, and no log replay");
    await t.rejects(writeFile(join(mp, "x"), "x"), { code: "EROFS" }, "a write is refused");
    await storage.unmount(mp);
    t.equal(await digest(), before, "the device is byte for byte as it was");
  },
);

t.test("grow: a volume made larger than its filesystem grows once", async (t) => {
  const source = await volume(t);
  await storage.format(source.device, FS_LABEL);
  const mp = mountPoint(t, "grow");
  await storage.mount(source.device, mp);
  await writeFile(join(mp, "image-layer"), "layer");
  t.equal(await storage.grow(mp), false, "a fresh filesystem fills its device");
  await storage.unmount(mp);
  const snapshotId = newId("snap");
  await backend.createSnapshot(snapshotId, source.volumeId);
  t.teardown(() => backend.deleteSnapshot(snapshotId));

  // A volume restored from the snapshot into a larger size, as EC2 allows.
  const bigger = await volume(t, 2, snapshotId);
  await storage.mount(bigger.device, mp);
  const before = await dfBytes(mp);
  t.equal(await storage.grow(mp), true, "grown to the larger volume");
  const after = await dfBytes(mp);
  t.ok(after > before * 1.5, `df size went from ${before} to ${after}`);
  t.equal(await storage.grow(mp), false, "a second grow has nothing to do");
  t.equal(await dfBytes(mp), after);

  // The volume grows while mounted (ModifyVolume): the device is resized in place.
  await truncate(volumeImagePath(lab.root, bigger.volumeId), 3 * 1024 ** 3);
  await run("losetup", ["-c", bigger.device]);
  t.equal(await storage.grow(mp), true, "grown online to the resized device");
  t.ok((await dfBytes(mp)) > after, "df size increased again");
  t.equal(await storage.grow(mp), false);
  t.equal(await readFile(join(mp, "image-layer"), "utf8"), "layer", "the data survived");
  await storage.unmount(mp);
  await t.rejects(storage.grow(mp), /nothing is mounted/);
});

t.test("the primary XFS superblock read by the agent: label and data size; anything else is none", async (t) => {
  const sb = Buffer.alloc(4096);
  sb.write("XFSB", 0, "latin1");
  sb.writeUInt32BE(4096, 4);
  sb.writeBigUInt64BE(262144n, 8);
  sb.write(FS_LABEL, 108, "latin1");
  t.same(parseXfsSuperblock(sb), { label: FS_LABEL, dataBytes: 1024 ** 3 });
  const full = Buffer.from(sb);
  full.write("abcdefghijkl", 108, "latin1");
  t.equal(parseXfsSuperblock(full)?.label, "abcdefghijkl", "a 12-byte label has no terminating zero");
  t.equal(parseXfsSuperblock(Buffer.alloc(4096)), undefined, "zeros");
  const ext = Buffer.from(sb);
  ext.write("EXT4", 0, "latin1");
  t.equal(parseXfsSuperblock(ext), undefined, "no XFS magic");
  t.equal(parseXfsSuperblock(sb.subarray(0, 100)), undefined, "too short");
});

t.test("identification, pure: xfs_db output parsed, signatures and layouts judged", async (t) => {
  // Recorded from xfs_db 6.1.0 (`xfs_db -r -c version -c 'ls /'`).
  const recorded = [
    "versionnum [0xb4b5+0x18a] = " +
      "V5,NLINK,DIRV2,ATTR,ALIGN,LOGV2,EXTFLG,MOREBITS,ATTR2,LAZYSBCOUNT," +
      "PROJID32BIT,CRC,FTYPE,FINOBT,SPARSE_INODES,REFLINK,INOBTCNT,BIGTIME",
    "/:",
    "8          128                directory      0x0000002e   1 . (good)",
    "10         128                directory      0x0000172e   2 .. (good)",
    "12         131                directory      0xfc7af1d4   6 docker (good)",
    "15         132                regular        0x0cda756f   6 a file (good)",
    "20         134                directory      0xe81d077d  16 .ebs-cache-agent (good)",
    "",
  ].join("\n");
  t.same(parseXfsDb(recorded), {
    ftype: true,
    rootEntries: [
      { type: "directory", name: "." },
      { type: "directory", name: ".." },
      { type: "directory", name: "docker" },
      { type: "regular", name: "a file" },
      { type: "directory", name: ".ebs-cache-agent" },
    ],
  });
  t.equal(parseXfsDb("versionnum [0xb4a4+0x8] = V4,NLINK,DIRV2\n/:\n").ftype, false, "a V4 filesystem without ftype");
  t.throws(() => parseXfsDb("/:\n"), /no versionnum/);
  t.throws(() => parseXfsDb("versionnum [0x1] = V5,FTYPE\n/:\ngarbage\n"), /unexpected xfs_db directory line/);
  t.throws(() => parseXfsDb("versionnum [0x1] = V5,FTYPE\n"), /no listing/);

  const ours = { kind: "filesystem", type: "xfs", label: FS_LABEL } as const;
  t.same(judgeSignature(ours, false), { verdict: "inspect" });
  t.same(judgeSignature({ kind: "blank" }, true), { verdict: "blank" });
  t.match(judgeSignature({ kind: "blank" }, false), { verdict: "foreign", found: /blank.*did not create/ });
  t.match(judgeSignature({ kind: "filesystem", type: "xfs", label: "data" }, true), {
    verdict: "foreign",
    found: 'an xfs filesystem labelled "data"',
  });
  t.match(judgeSignature({ kind: "filesystem", type: "xfs" }, true), {
    verdict: "foreign",
    found: "an xfs filesystem without a label",
  });
  t.match(
    judgeSignature({ kind: "filesystem", type: "ext4", label: FS_LABEL }, true),
    { verdict: "foreign", found: /ext4/ },
    "the label alone is not enough",
  );
  t.equal(foundPhrase({ kind: "other", signature: "LVM2_member" }), "an LVM physical volume (LVM2_member)");
  t.equal(foundPhrase({ kind: "other", signature: "gpt partition table" }), "a gpt partition table");

  const dir = (name: string, type = "directory") => ({ name, type });
  const dots = [dir("."), dir("..")];
  t.same(judgeLayout({ ftype: true, rootEntries: [...dots, dir(DATA_ROOT_SUBDIR)] }, false), {
    verdict: "cache",
    fresh: false,
  });
  t.same(judgeLayout({ ftype: true, rootEntries: [...dots, dir(DATA_ROOT_SUBDIR), dir("extra", "regular")] }, false), {
    verdict: "cache",
    fresh: false,
  });
  t.same(
    judgeLayout({ ftype: true, rootEntries: [...dots] }, true),
    { verdict: "cache", fresh: true },
    "agent-created, never used",
  );
  t.same(judgeLayout({ ftype: true, rootEntries: [...dots, dir(".ebs-cache-agent")] }, true), {
    verdict: "cache",
    fresh: true,
  });
  t.match(judgeLayout({ ftype: true, rootEntries: [...dots] }, false), {
    verdict: "foreign",
    found: /without the docker\/ data-root folder \(its root holds nothing else\)/,
  });
  t.match(
    judgeLayout({ ftype: true, rootEntries: [...dots, dir("home")] }, true),
    { verdict: "foreign", found: /its root holds home/ },
    "agent-created but holding someone's folder",
  );
  t.match(judgeLayout({ ftype: true, rootEntries: [...dots, dir(DATA_ROOT_SUBDIR, "regular")] }, true), {
    verdict: "foreign",
    found: /docker is a regular, not a directory/,
  });
  t.match(judgeLayout({ ftype: false, rootEntries: [...dots, dir(DATA_ROOT_SUBDIR)] }, false), {
    verdict: "foreign",
    found: /without ftype=1/,
  });
});

t.test(
  "identify: the agent's own filesystem passes, anything else is refused with ForeignVolumeError; mount and grow " +
    "refuse foreign labels",
  async (t) => {
    const blank = await volume(t);
    t.same(
      await storage.identify({ volumeId: blank.volumeId, createdByAgent: true }, blank.device),
      { kind: "blank" },
      "blank and created by the agent: to be formatted",
    );
    const notOurs = await storage
      .identify({ volumeId: blank.volumeId, createdByAgent: false }, blank.device)
      .catch((e: unknown) => e);
    t.type(notOurs, ForeignVolumeError, "blank, created by someone else");
    t.match(
      (notOurs as ForeignVolumeError).message,
      new RegExp(`^${blank.volumeId} \\(${blank.device}\\) holds no filesystem \\(blank\\)`),
    );
    t.match((notOurs as ForeignVolumeError).remediation, /remove its ebs-cache:managed tag/);

    await storage.format(blank.device, FS_LABEL);
    const fresh = await storage.identify({ volumeId: blank.volumeId, createdByAgent: true }, blank.device);
    t.same(
      { ...fresh, dataBytes: undefined },
      { kind: "cache", fresh: true, dataBytes: undefined },
      "formatted by the agent, no data-root yet",
    );
    t.type(
      await storage
        .identify({ volumeId: blank.volumeId, createdByAgent: false }, blank.device)
        .catch((e: unknown) => e),
      ForeignVolumeError,
      "the same without the created-by tag: no data-root, not provably ours",
    );
    const mp = mountPoint(t, "ours");
    await storage.mount(blank.device, mp);
    await mkdir(join(mp, DATA_ROOT_SUBDIR));
    const filesystemBytes = await xfsDataBytes(mp);
    await storage.unmount(mp);
    t.same(
      await storage.identify({ volumeId: blank.volumeId, createdByAgent: false }, blank.device),
      { kind: "cache", fresh: false, dataBytes: filesystemBytes },
      "with its data-root: ours",
    );
    t.equal(
      filesystemBytes,
      1024 ** 3,
      "the superblock's data size is xfs_info's, the whole 1 GiB device (what grow compares with the volume's size)",
    );
    t.equal((fresh as { dataBytes?: number }).dataBytes, filesystemBytes);

    const foreign = await volume(t);
    await run("mkfs.xfs", ["-q", "-L", "data", foreign.device]);
    const error = await storage
      .identify({ volumeId: foreign.volumeId, createdByAgent: true }, foreign.device)
      .catch((e: unknown) => e);
    t.type(error, ForeignVolumeError);
    t.match(error, { volumeId: foreign.volumeId, device: foreign.device, found: 'an xfs filesystem labelled "data"' });
    const fmp = mountPoint(t, "foreign");
    t.type(
      await storage.mount(foreign.device, fmp).catch((e: unknown) => e),
      ForeignVolumeError,
      "mount refuses a foreign label by itself",
    );
    t.equal(await storage.mountPointOf(foreign.device), undefined, "and mounted nothing");
    await plainMount(foreign.device, fmp);
    t.type(await storage.grow(fmp).catch((e: unknown) => e), ForeignVolumeError, "grow refuses a foreign label");
    await storage.unmount(fmp);

    t.type(
      await storage
        .identify({ volumeId: "vol-0", createdByAgent: true }, "/dev/ebscachenosuchdevice")
        .catch((e: unknown) => e),
      ForeignVolumeError,
      "a probe failure is not ours either",
    );
  },
);

/** The commands this process spawns while `body` runs (node's child_process diagnostics channel). */
async function spawnedDuring(body: () => Promise<unknown>): Promise<string[]> {
  const names: string[] = [];
  const listener = (message: unknown) => {
    const child = (message as { process: ChildProcess }).process;
    child.once("spawn", () => names.push(child.spawnfile ?? "?"));
  };
  subscribe("child_process", listener);
  try {
    await body();
  } finally {
    unsubscribe("child_process", listener);
  }
  return names;
}

t.test(
  "mount right after identification takes its probe while the device is unchanged, and probes again otherwise",
  async (t) => {
    const { volumeId, device } = await volume(t);
    await storage.format(device, FS_LABEL);
    const owner = { volumeId, createdByAgent: true };
    t.match(await storage.identify(owner, device), { kind: "cache", fresh: true });
    const mp = mountPoint(t, "identified");
    const spawned = await spawnedDuring(() => storage.mount(device, mp));
    t.equal(await storage.mountPointOf(device), mp, "mounted");
    t.same(spawned, ["mount"], "no blkid or wipefs again: only mount itself");
    await storage.unmount(mp);

    // Changed since its identification (another label): probed in full, and refused.
    t.match(await storage.identify(owner, device), { kind: "cache" });
    await run("xfs_admin", ["-L", "other", device]);
    const refusal = { error: undefined as unknown };
    const again = await spawnedDuring(
      async () => (refusal.error = await storage.mount(device, mp).catch((e: unknown) => e)),
    );
    t.type(refusal.error, ForeignVolumeError, "the new label is seen");
    t.ok(again.includes("blkid") && again.includes("wipefs"), "by a full probe");
    t.equal(await storage.mountPointOf(device), undefined, "and nothing was mounted");

    // Another device than the one identified: probed in full (and mounted, being the agent's).
    await run("xfs_admin", ["-L", FS_LABEL, device]);
    const other = await volume(t);
    await storage.format(other.device, FS_LABEL);
    t.match(await storage.identify({ volumeId: other.volumeId, createdByAgent: true }, other.device), {
      kind: "cache",
    });
    const probed = await spawnedDuring(() => storage.mount(device, mp));
    t.ok(probed.includes("blkid"), "the identification of another device does not stand for this one");
    t.equal(await storage.mountPointOf(device), mp);
  },
);

t.test(
  "the allocated ranges come from one xfs_spaceman: the same as xfs_info's geometry and freesp apart",
  async (t) => {
    const { device } = await volume(t);
    await storage.format(device, FS_LABEL);
    const mp = mountPoint(t, "extents");
    await storage.mount(device, mp);
    await writeFile(join(mp, "data"), randomBytes(3 * 1024 * 1024));
    await run("sync", ["-f", mp]);
    let ranges: Awaited<ReturnType<typeof usedRanges>> = [];
    const spawned = await spawnedDuring(async () => (ranges = await usedRanges(mp)));
    t.same(
      spawned,
      ["xfs_spaceman"],
      "one process (xfs_info alone is a shell script running findmnt and xfs_spaceman)",
    );
    const geometry = parseXfsInfo((await run("xfs_info", [mp])).stdout);
    const free = parseFreesp((await run("xfs_spaceman", ["-c", "freesp -d", mp])).stdout);
    t.same(ranges, mergeRanges(allocatedRanges(geometry, free)), "the ranges xfs_info and freesp give apart");
    t.ok(ranges.reduce((sum, r) => sum + r.end - r.start, 0) >= 3 * 1024 * 1024, "the file's data is in them");
  },
);

/** A process in a copy of this mount namespace (as `unshare --mount`, a container or nspawn makes), until killed. */
async function namespaceCopy(t: Teardown): Promise<void> {
  const holder = ["--mount", "--fork", "--kill-child", "--", "sh", "-c", "echo copied; exec sleep 600"];
  const child = spawn("unshare", holder, {
    stdio: ["ignore", "pipe", "inherit"],
  });
  t.teardown(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout.once("data", () => {
      child.stdout.destroy(); // Read: the pipe must not keep this process alive.
      resolve();
    });
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`unshare exited with ${code} before copying the namespace`)));
  });
}

t.test(
  "a filesystem still live in another mount namespace: identified after its unmount only when settled first",
  async (t) => {
    const { volumeId, device } = await volume(t);
    await storage.format(device, FS_LABEL);
    const mp = mountPoint(t, "settle");
    await storage.mount(device, mp);
    await mkdir(join(mp, DATA_ROOT_SUBDIR));
    await namespaceCopy(t);
    const built = { volumeId, createdByAgent: false };

    await syncFilesystem(mp, { log });
    await storage.unmount(mp);
    t.type(
      await storage.identify(built, device).catch((e: unknown) => e),
      ForeignVolumeError,
      "synced only: the root on the device lacks the data-root (the kernel's behaviour this guards against)",
    );

    await storage.mount(device, mp); // The same live filesystem again.
    await settleFilesystem(mp, { log });
    await storage.unmount(mp);
    await dropDeviceCache(device, { log }); // The refused identification read the old root into the cache.
    t.match(await storage.identify(built, device), { kind: "cache", fresh: false }, "settled: the data-root is there");
  },
);
