/**
 * The foreign-volume corpus: volumes that are not the agent's cache filesystem, claimed through
 * the real boot path (EC2 emulator, loop devices, private dockerd). For each kind the volume's
 * whole backing file hashes the same before and after the boot (not one byte written: no
 * mount, no log replay, no grow, no format), the boot refuses it naming what it found, and the
 * volume ends detached (never forced) and available. A new kind is one line of CORPUS.
 *
 * Cheap to run: each corpus volume is made on a loop device of the test's own over its image (no
 * EC2 attachment), and several kinds share a boot: the boot claims each of its pool's volumes in
 * turn (claim.maxVolumes 10), refuses it, hands it back quarantined, and degrades at the end.
 *
 * Besides, the agent's own filesystem with a dirty log IS mounted and its log replayed.
 *
 * The images are made with the real tools (mkfs.*, sfdisk, pvcreate, cryptsetup, mkswap); none
 * activates anything on the host (a PV without a volume group, a LUKS header never opened).
 * The md RAID superblocks are written by the test in mdadm's v1 format (the md driver may not
 * be loaded where tests run, and `mdadm --create` would assemble an array on the host): `mdadm
 * --examine` must accept each one, so the corpus holds what mdadm itself would have written.
 */
import t from "tap";
import { randomBytes, randomUUID } from "node:crypto";
import { access, constants, mkdir, open, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ExitCode } from "../../../src/errors.ts";
import { run } from "../../../src/exec.ts";
import { DATA_ROOT_SUBDIR, FS_LABEL } from "../../../src/layout.ts";
import { volumeImagePath } from "../../../src/lab/reaper/labdir.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import { VolumeTag } from "../../../src/tags.ts";
import {
  goldenPoolTags,
  mountsUnder,
  startBootLab,
  withMounted,
  closeLabLeavingNothing,
} from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";
import { withImageDevice } from "../../fixtures/lab/volume-image.ts";

await assertLabPrerequisites();

/** The tools the corpus is made with, and the Debian package of each (scripts/setup.sh installs them). */
const TOOLS: Record<string, string> = {
  "mkfs.ext4": "e2fsprogs",
  "mkfs.btrfs": "btrfs-progs",
  "mkfs.vfat": "dosfstools",
  mkswap: "util-linux",
  sfdisk: "fdisk",
  pvcreate: "lvm2",
  cryptsetup: "cryptsetup-bin",
  mdadm: "mdadm",
  xfs_db: "xfsprogs",
  xfs_io: "xfsprogs",
  xfs_repair: "xfsprogs",
  python3: "python3",
};

async function onPath(tool: string): Promise<boolean> {
  for (const dir of (process.env.PATH ?? "").split(":").concat(["/usr/sbin", "/sbin"])) {
    if (
      await access(join(dir, tool), constants.X_OK).then(
        () => true,
        () => false,
      )
    )
      return true;
  }
  return false;
}
const missing = [];
for (const [tool, pkg] of Object.entries(TOOLS))
  if (!(await onPath(tool))) missing.push(`${tool} (Debian package ${pkg})`);
if (missing.length > 0)
  throw new Error(`the foreign-volume corpus cannot be made: missing ${missing.join(", ")}; run scripts/setup.sh`);

const bl = await startBootLab({ name: "test-boot-foreign" });
t.teardown(() => bl.close());

/** What a corpus maker gets: a loop device on the volume's image, and a scratch folder. */
interface Workbench {
  device: string;
  scratch: string;
}

/** One kind of volume that is not the agent's. */
interface Kind {
  name: string;
  /** What the refusal must name. */
  found: RegExp;
  /** Tagged created-by=agent (the agent would format it, were it blank). */
  createdByAgent?: boolean;
  make(bench: Workbench): Promise<void>;
}

/** An XFS made by mkfs.xfs from a proto file (no mount): root entries given as `name type`. */
async function xfsWith(
  bench: Workbench,
  options: { label?: string; entries: string[]; v4?: boolean; sizeMiB?: number },
): Promise<void> {
  const proto = join(bench.scratch, `proto-${randomBytes(3).toString("hex")}`);
  const lines = options.entries.map((entry) =>
    entry.endsWith("/") ? `${entry.slice(0, -1)} d--755 0 0\n$` : `${entry} ---644 0 0 /dev/null`,
  );
  await writeFile(proto, ["ignored", "0 0", "d--755 0 0", ...lines, "$", ""].join("\n"));
  const features = options.v4 ? ["-m", "crc=0", "-n", "ftype=0"] : ["-m", "crc=1", "-n", "ftype=1"];
  const size = options.sizeMiB ? ["-d", `size=${options.sizeMiB}m`] : [];
  await run("mkfs.xfs", [
    "-q",
    ...(options.label ? ["-L", options.label] : []),
    ...features,
    ...size,
    "-p",
    proto,
    bench.device,
  ]);
}

/** Leaves the XFS on the device with a dirty log: metadata changed, logged, never written in place. */
async function dirtyLog(bench: Workbench): Promise<void> {
  const mnt = join(bench.scratch, "dirty");
  await mkdir(mnt, { recursive: true });
  await run("mount", ["-o", "nouuid", bench.device, mnt]);
  try {
    await mkdir(join(mnt, "only-in-the-log"));
    await run("sync", ["-f", mnt]);
    await run("xfs_io", ["-x", "-c", "shutdown -f", mnt]);
  } finally {
    await run("umount", [mnt]);
  }
  const check = await run("xfs_repair", ["-n", bench.device], { check: false });
  if (!/valuable metadata changes in a log/.test(check.stdout + check.stderr))
    throw new Error("the corpus volume's log is not dirty");
}

/** Writes bytes at an offset of the device. */
async function writeAt(device: string, offset: number, bytes: Buffer): Promise<void> {
  const handle = await open(device, "r+");
  try {
    await handle.write(bytes, 0, bytes.length, offset);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * An md RAID1 member superblock in mdadm's v1 layout (struct mdp_superblock_1): version 1.2 at
 * 4 KiB from the start, or 1.0 near the end (the data then starts at sector 0, so a filesystem
 * on the member shows on the raw device too). Checked with `mdadm --examine`.
 */
async function mdSuperblock(device: string, version: "1.0" | "1.2"): Promise<void> {
  const sectors = Number((await run("blockdev", ["--getsz", device])).stdout.trim());
  const superOffset = version === "1.2" ? 8 : (sectors - 16) & ~7;
  const dataOffset = version === "1.2" ? 2048 : 0;
  const dataSize = version === "1.2" ? sectors - dataOffset : superOffset;
  const maxDev = 2;
  const sb = Buffer.alloc(256 + maxDev * 2);
  sb.writeUInt32LE(0xa92b4efc, 0); // magic
  sb.writeUInt32LE(1, 4); // major_version
  Buffer.from(randomUUID().replaceAll("-", ""), "hex").copy(sb, 16); // set_uuid
  sb.write("corpus-host:corpus", 32, "latin1"); // set_name
  const now = BigInt(Math.floor(Date.now() / 1000));
  sb.writeBigUInt64LE(now, 64); // ctime
  sb.writeUInt32LE(1, 72); // level: raid1
  sb.writeBigUInt64LE(BigInt(dataSize), 80); // size
  sb.writeUInt32LE(2, 92); // raid_disks
  sb.writeBigUInt64LE(BigInt(dataOffset), 128);
  sb.writeBigUInt64LE(BigInt(dataSize), 136);
  sb.writeBigUInt64LE(BigInt(superOffset), 144);
  Buffer.from(randomUUID().replaceAll("-", ""), "hex").copy(sb, 168); // device_uuid
  sb.writeBigUInt64LE(now, 192); // utime
  sb.writeBigUInt64LE(1n, 200); // events
  sb.writeBigUInt64LE(0xffffffffffffffffn, 208); // resync_offset: in sync
  sb.writeUInt32LE(maxDev, 220);
  sb.writeUInt16LE(0, 256); // this device: role 0
  sb.writeUInt16LE(0xfffe, 258); // the other: missing
  let sum = 0n;
  for (let i = 0; i < sb.length; i += 4) sum += BigInt(sb.readUInt32LE(i));
  sb.writeUInt32LE(Number(((sum & 0xffffffffn) + (sum >> 32n)) & 0xffffffffn), 216); // sb_csum
  await writeAt(device, superOffset * 512, sb);
  const examined = await run("mdadm", ["--examine", device], { check: false });
  if (!/Version : 1\.[02][\s\S]*Checksum : \S+ - correct/.test(examined.stdout))
    throw new Error(`mdadm --examine does not accept the superblock: ${examined.stdout}${examined.stderr}`);
}

const CORPUS: Kind[] = [
  {
    name: "ext4 holding a file",
    found: /an ext4 filesystem labelled \\?"precious/,
    make: async (b) => {
      await run("mkfs.ext4", ["-q", "-L", "precious", b.device]);
      await withMounted(
        b.device,
        join(b.scratch, "ext4"),
        (mnt) => writeFile(join(mnt, "precious.txt"), "someone's data\n"),
        { readOnly: false },
      );
    },
  },
  {
    name: "btrfs",
    found: /a btrfs filesystem labelled \\?"data/,
    make: (b) => run("mkfs.btrfs", ["-q", "-L", "data", b.device]).then(() => undefined),
  },
  {
    name: "vfat",
    found: /a vfat filesystem labelled \\?"DATA/,
    make: (b) => run("mkfs.vfat", ["-n", "DATA", b.device]).then(() => undefined),
  },
  {
    name: "swap",
    found: /swap space \(swap\)/,
    make: (b) => run("mkswap", ["-L", "swap", b.device]).then(() => undefined),
  },
  {
    name: "XFS with a foreign label holding docker/",
    found: /an xfs filesystem labelled \\?"data/,
    make: (b) => xfsWith(b, { label: "data", entries: [`${DATA_ROOT_SUBDIR}/`] }),
  },
  {
    name: "XFS with a foreign label holding docker/, smaller than its volume (grow would apply)",
    found: /an xfs filesystem labelled \\?"data/,
    make: (b) => xfsWith(b, { label: "data", entries: [`${DATA_ROOT_SUBDIR}/`], sizeMiB: 512 }),
  },
  {
    name: "XFS without a label holding docker/",
    found: /an xfs filesystem without a label/,
    make: (b) => xfsWith(b, { entries: [`${DATA_ROOT_SUBDIR}/`] }),
  },
  {
    name: "XFS with the agent's label but no docker/",
    found: /without the docker\/ data-root folder \(its root holds home\)/,
    make: (b) => xfsWith(b, { label: FS_LABEL, entries: ["home/"] }),
  },
  {
    name: "XFS with the agent's label, created by the agent, holding someone's folder",
    createdByAgent: true,
    found: /without the docker\/ data-root folder \(its root holds home\)/,
    make: (b) => xfsWith(b, { label: FS_LABEL, entries: ["home/"] }),
  },
  {
    name: "XFS with the agent's label whose docker is a file",
    found: /docker is a regular, not a directory/,
    make: (b) => xfsWith(b, { label: FS_LABEL, entries: [DATA_ROOT_SUBDIR] }),
  },
  {
    name: "XFS V4 with the agent's label and docker/ but no ftype",
    found: /without ftype=1/,
    make: (b) => xfsWith(b, { label: FS_LABEL, entries: [`${DATA_ROOT_SUBDIR}/`], v4: true }),
  },
  {
    name: "XFS with a foreign label and a dirty log",
    found: /an xfs filesystem labelled \\?"data/,
    make: async (b) => {
      await xfsWith(b, { label: "data", entries: [`${DATA_ROOT_SUBDIR}/`] });
      await dirtyLog(b);
    },
  },
  {
    name: "XFS with the agent's label, no docker/, and a dirty log",
    found: /without the docker\/ data-root folder/,
    make: async (b) => {
      await xfsWith(b, { label: FS_LABEL, entries: ["home/"] });
      await dirtyLog(b);
    },
  },
  {
    name: "XFS of the agent's layout with a garbled superblock",
    found: /unrecognized data/,
    make: async (b) => {
      await xfsWith(b, { label: FS_LABEL, entries: [`${DATA_ROOT_SUBDIR}/`] });
      await writeAt(b.device, 120, Buffer.from("garbage-garbage-garbage"));
    },
  },
  {
    name: "GPT partition table",
    found: /a gpt partition table/,
    make: (b) =>
      run("sfdisk", ["-q", b.device], { input: "label: gpt\nsize=100MiB, type=linux\n" }).then(() => undefined),
  },
  {
    name: "MBR partition table",
    found: /a dos partition table/,
    make: (b) => run("sfdisk", ["-q", b.device], { input: "label: dos\nsize=100MiB, type=83\n" }).then(() => undefined),
  },
  // --devices: lvm sees (and records) this device only; a PV without a volume group activates nothing.
  {
    name: "LVM physical volume",
    found: /an LVM physical volume/,
    make: (b) => run("pvcreate", ["-q", "--devices", b.device, b.device]).then(() => undefined),
  },
  {
    name: "LUKS container",
    found: /a LUKS encrypted container/,
    make: async (b) => {
      const key = join(b.scratch, "luks.key");
      await writeFile(key, randomBytes(32));
      // pbkdf2 with few iterations: the header is what matters here, not the key's strength.
      await run("cryptsetup", [
        "luksFormat",
        "--batch-mode",
        "--type",
        "luks2",
        "--pbkdf",
        "pbkdf2",
        "--pbkdf-force-iterations",
        "1000",
        "--key-file",
        key,
        b.device,
      ]);
    },
  },
  { name: "md RAID1 member (metadata 1.2)", found: /an md RAID member/, make: (b) => mdSuperblock(b.device, "1.2") },
  {
    name: "md RAID1 member (metadata 1.0) over the agent's own filesystem",
    found: /an md RAID member/,
    make: async (b) => {
      await xfsWith(b, { label: FS_LABEL, entries: [`${DATA_ROOT_SUBDIR}/`] });
      await mdSuperblock(b.device, "1.0");
    },
  },
  {
    name: "data without a signature",
    found: /unrecognized data/,
    make: (b) => writeAt(b.device, 8192, randomBytes(4096)),
  },
  {
    name: "blank, not created by the agent",
    found: /no filesystem \(blank\), on a volume the agent did not create/,
    make: async () => undefined,
  },
];

/**
 * A sha256 of the whole file's content, computed cheaply: only the file's data extents are read
 * (SEEK_DATA / SEEK_HOLE: a sparse 1 GiB image is mostly holes), and in them zero blocks are
 * skipped; every other block is hashed with its offset, and so is the size. Two files digest
 * alike exactly when their bytes are identical (a hole reads as zeros, as a block of zeros does).
 */
const DIGEST = `
import hashlib, os, sys
B = 64 * 1024
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
h = hashlib.sha256()
at = 0
while at < size:
    try:
        data = os.lseek(fd, at, os.SEEK_DATA)
    except OSError:
        break
    hole = os.lseek(fd, data, os.SEEK_HOLE)
    at = max(at, data - data % B)
    while at < hole:
        chunk = os.pread(fd, B, at)
        if not chunk:
            break
        if chunk.count(0) != len(chunk):
            h.update(f"{at}:{len(chunk)}:".encode())
            h.update(chunk)
        at += B
h.update(f"size:{size}".encode())
print(h.hexdigest())
`;
async function contentDigest(path: string): Promise<string> {
  return (await run("python3", ["-c", DIGEST, path])).stdout.trim();
}

t.test("the content digest tells files apart by any byte, holes included", async (t) => {
  const file = join(bl.lab.root, "digest-check.img");
  await writeFile(file, "");
  const handle = await open(file, "r+");
  try {
    await handle.truncate(3 * 1024 * 1024);
    const empty = await contentDigest(file);
    await handle.write(Buffer.from([1]), 0, 1, 2 * 1024 * 1024 + 7);
    const one = await contentDigest(file);
    t.not(one, empty, "one byte in a hole changes it");
    await handle.write(Buffer.from([0]), 0, 1, 2 * 1024 * 1024 + 7);
    t.equal(await contentDigest(file), empty, "the same bytes digest alike");
    await handle.truncate(3 * 1024 * 1024 + 1);
    t.not(await contentDigest(file), empty, "so does the size");
  } finally {
    await handle.close();
  }
});

/** Corpus volumes per boot: within claim.maxVolumes' ceiling (10), so one boot claims each of them in turn. */
const PER_BOOT = 8;
const batches: Array<Array<{ kind: Kind; index: number }>> = [];
for (const [index, kind] of CORPUS.entries()) {
  if (index % PER_BOOT === 0) batches.push([]);
  batches.at(-1)!.push({ kind, index });
}

/**
 * One host boots every batch in turn: each boot refuses its volumes one by one, degrades and leaves docker on its
 * default root.
 */
let host: LabHost | undefined;

for (const [batchIndex, batch] of batches.entries()) {
  t.test(
    `foreign, boot ${batchIndex + 1}/${batches.length}: ${batch.map(({ kind }) => kind.name).join("; ")}: each ` +
      `refused and left byte-for-byte unchanged`,
    async (t) => {
      const pool = `corpus-${batchIndex}`;
      const started = Date.now();
      const made: Array<{ kind: Kind; volumeId: string; image: string; before: string }> = [];
      for (const { kind, index } of batch) {
        const tags = {
          ...goldenPoolTags(pool, bl.golden),
          ...(kind.createdByAgent ? { [VolumeTag.createdBy]: "agent" } : {}),
        };
        const volumeId = await bl.createBlankVolume(tags);
        const scratch = join(bl.lab.root, "corpus", String(index));
        await mkdir(scratch, { recursive: true });
        await withImageDevice(bl.lab.root, volumeId, (device) => kind.make({ device, scratch }));
        const image = volumeImagePath(bl.lab.root, volumeId);
        made.push({ kind, volumeId, image, before: await contentDigest(image) });
      }
      const madeAt = Date.now();

      host ??= await bl.addHost();
      const booted = await bl.boot(host, { overrides: { pool, claim: { maxVolumes: 10 } } });
      const bootMs = Date.now() - madeAt;
      const log = booted.log.join("\n");
      t.equal(
        booted.report?.outcome,
        "degraded",
        "the boot degrades",
        booted.report?.outcome === "degraded" ? {} : { result: booted.report, log },
      );
      t.equal(booted.exitCode, ExitCode.degraded, "exit code 4");
      t.match(
        booted.report?.reason ?? "",
        /not the agent's cache filesystem|candidate/,
        "the degraded reason says why",
      );
      t.notOk(/formatting|mkfs|xfs_growfs|host\.mount: mounted/.test(log), "no format, no mount, no grow");
      t.same(await mountsUnder(host.paths.mountRoot), [], "nothing mounted on the host");

      for (const { kind, volumeId, image, before } of made) {
        const name = kind.name;
        const refusal = booted.log.filter(
          (line) => /^<4>host\.identify: not the agent's cache filesystem/.test(line) && line.includes(volumeId),
        );
        t.equal(refusal.length, 1, `${name}: the refusal is logged`, { log });
        t.match(refusal.join("\n"), kind.found, `${name}: naming what was found`);
        // One claim: AttachVolume accepted once. (A call refused because the device name is
        // still held by the volume handed back before is retried on the next name.)
        const claims = booted.log.filter(
          (line) => line.includes("ec2.claim: AttachVolume accepted: claimed") && line.includes(volumeId),
        );
        t.equal(claims.length, 1, `${name}: claimed once`, { claims });
        t.ok(await bl.waitAvailable(volumeId), `${name}: detached again (available)`);
        t.equal(bl.lab.ec2.snapshotState().volumes[volumeId]?.forceDetachCount, 0, `${name}: never force-detached`);
        const after = await bl.tags(volumeId);
        t.notOk(after[VolumeTag.claimedBy], `${name}: claimed-by removed`);
        t.match(after[VolumeTag.lastError] ?? "", kind.found, `${name}: tagged with last-error, naming what was found`);
        t.equal(
          await contentDigest(image),
          before,
          `${name}: the whole backing file hashes the same (sha256 of its content)`,
        );
      }
      t.comment(
        `made in ${madeAt - started} ms, booted in ${bootMs} ms, checked in ${Date.now() - madeAt - bootMs} ms`,
      );
    },
  );
}

t.test(
  "ours: a pool volume of the agent's layout with a dirty log is mounted, its log replayed, and docker is ready on it",
  async (t) => {
    const [volumeId] = await bl.createPool("dirty-ours", 1);
    const scratch = join(bl.lab.root, "corpus", "dirty-ours");
    await mkdir(scratch, { recursive: true });
    await withImageDevice(bl.lab.root, volumeId!, (device) => dirtyLog({ device, scratch }));
    const ours = await bl.addHost();
    const booted = await bl.boot(ours, { overrides: { pool: "dirty-ours" } });
    t.equal(
      booted.report?.outcome,
      "ready",
      "ready on the volume",
      booted.report?.outcome === "ready" ? {} : { result: booted.report, log: booted.log.join("\n") },
    );
    t.equal(booted.report?.volumeId, volumeId);
    const mountPoint = booted.report!.mountPoint!;
    await t.resolves(
      access(join(mountPoint, "only-in-the-log")),
      "the folder that existed only in the log is there: the log was replayed at the mount",
    );
    t.equal((await ours.dockerd!.info()).DockerRootDir, join(mountPoint, DATA_ROOT_SUBDIR), "docker on the volume");
  },
);

t.test(
  "the lab closes and leaves no loop device, mount or dockerd behind; no volume was ever force-detached",
  async (t) => {
    await closeLabLeavingNothing(t, bl);
  },
);
