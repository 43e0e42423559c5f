/**
 * How `snapshot upload` reads its image without a mount (src/host/pool-image.ts): xfs_db's map
 * of a file (recorded output of xfsprogs 6.1, parsed), the file read back from the image by that
 * map (the image set record, a file of several extents), and the image judged by the boot's own
 * checks.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { imageSetRecordText } from "../../src/agent/snapshot/image-set-record.ts";
import {
  IMAGE_SET_RECORD_PATH,
  inspectPoolImage,
  parseDirectoryEntries,
  parseXfsFileMap,
  readFileInImage,
} from "../../src/host/pool-image.ts";
import { DEFAULT_RECORD, makePoolImage } from "../fixtures/builders/pool-image.ts";

t.test("xfs_db's map of a file: geometry, size, mode, extents by allocation group", async (t) => {
  const recorded = [
    "blocksize = 4096",
    "agblocks = 65536",
    "core.size = 3000000",
    "core.mode = 0100644",
    "data offset 0 startblock 65560 (1/24) count 700 flag 0",
    "data offset 700 startblock 147466 (2/16394) count 33 flag 1",
  ].join("\n");
  t.same(parseXfsFileMap(recorded), {
    blockSize: 4096,
    agBlocks: 65536,
    size: 3000000,
    mode: 0o100644,
    extents: [
      { offset: 0, ag: 1, agBlock: 24, count: 700, unwritten: false },
      { offset: 700, ag: 2, agBlock: 16394, count: 33, unwritten: true },
    ],
  });
  const missing = "blocksize = 4096\nagblocks = 65536\n";
  t.equal(parseXfsFileMap(missing), undefined, "no such file: no core fields");
  t.throws(() => parseXfsFileMap("core.size = 3\n"), /no blocksize or agblocks/);
});

t.test("a directory's entries: a short-form one printed, a longer one listed", async (t) => {
  // `inode 524416`, `print core.format core.mode`, `print u3` of `.ebs-cache-agent/` on an image made
  // by mkfs.xfs 7.2 (Debian sid: parent pointers), as xfsprogs 6.1's xfs_db prints it; its `path`
  // and `ls /.ebs-cache-agent` crash or refuse on that image.
  const shortForm = [
    "core.format = 1 (local)",
    "core.mode = 040755",
    "u3.sfdir3.hdr.count = 2",
    "u3.sfdir3.hdr.i8count = 0",
    "u3.sfdir3.hdr.parent.i4 = 128",
    "u3.sfdir3.list[0].namelen = 14",
    "u3.sfdir3.list[0].offset = 0x60",
    'u3.sfdir3.list[0].name = "image-set.json"',
    "u3.sfdir3.list[0].inumber.i4 = 524417",
    "u3.sfdir3.list[0].filetype = 1",
    "u3.sfdir3.list[1].namelen = 10",
    "u3.sfdir3.list[1].offset = 0x78",
    'u3.sfdir3.list[1].name = "reads.json"',
    "u3.sfdir3.list[1].inumber.i4 = 524418",
    "u3.sfdir3.list[1].filetype = 1",
  ].join("\n");
  t.same(parseDirectoryEntries(shortForm), [
    { name: "image-set.json", inode: 524417 },
    { name: "reads.json", inode: 524418 },
  ]);
  const listed = [
    "8          131                directory      0x0000002e   1 . (good)",
    "10         128                directory      0x0000172e   2 .. (good)",
    "12         132                regular        0x3bd0f1b4   8 layer 01 (good)",
  ].join("\n");
  t.same(parseDirectoryEntries(listed), [{ name: "layer 01", inode: 132 }], "a name with a space, by its length");
});

t.test("a file read back from an unmounted image by its block map", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "pool-image-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const image = join(dir, "set.img");
  await makePoolImage(image);
  t.equal(await readFileInImage(image, IMAGE_SET_RECORD_PATH), imageSetRecordText(DEFAULT_RECORD));
  t.equal(await readFileInImage(image, "/.ebs-cache-agent/none.json"), undefined, "no such file");
  await t.rejects(readFileInImage(image, "/docker"), /holds \/docker, but not as a regular file/);
  t.equal(await readFileInImage(image, "/docker/layer/x"), undefined, "a path through a file");
  // A directory too long for its inode (a block of entries): listed by xfs_db's `ls` of the inode.
  const many = join(dir, "many.img");
  const files = Object.fromEntries(Array.from({ length: 120 }, (_, i) => [`f${i}`, { mib: 0 }]));
  await makePoolImage(many, { files: { ...files, layer: { mib: 1 } } });
  t.equal(await readFileInImage(many, "/docker/f99"), "", "an empty file, found in a block directory");
  t.equal(await readFileInImage(many, "/docker/none"), undefined);
  // A record of 40 KiB, several file system blocks: each read from where the map puts it.
  const long = {
    ...DEFAULT_RECORD,
    images: Array.from({ length: 600 }, () => `r.example/${randomBytes(24).toString("hex")}:1`),
  };
  const big = join(dir, "big.img");
  await makePoolImage(big, { record: long });
  t.equal(await readFileInImage(big, IMAGE_SET_RECORD_PATH), imageSetRecordText(long));
  const report = await inspectPoolImage(big);
  t.match(report, { bytes: 2 ** 30, fsBytes: 2 ** 30, imageSetRecord: imageSetRecordText(long) });
});
