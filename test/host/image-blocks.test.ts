/**
 * The image scan (src/host/image-blocks.ts) reads what the image's data costs, not its size:
 * the data ranges come from SEEK_DATA/SEEK_HOLE (xfs_io's `seek`, parsed here from recorded
 * output), and only the 512 KiB blocks they touch are read. An empty 64 GiB pool image is
 * scanned by reading its file system's metadata alone, counted in blocks read (no timing); the
 * hashes are those of a full read of the same file.
 */
import { createHash } from "node:crypto";
import { mkdtemp, open, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { EBS_BLOCK_BYTES } from "../../src/agent/snapshot/plan.ts";
import { blockRuns, dataRanges, parseSeekRanges, scanImage } from "../../src/host/image-blocks.ts";
import { makePoolImage } from "../fixtures/builders/pool-image.ts";

/** `xfs_io -r -c "seek -a -r 0"` of a pool image of 1 GiB, as xfsprogs 6.1 prints it. */
const RECORDED = `Whence	Result
DATA	0
HOLE	131072
DATA	268435456
HOLE	268460032
DATA	1073610752
HOLE	1073741824
`;

t.test("xfs_io's seek output: the data ranges, each to the next hole or the end", async (t) => {
  t.same(parseSeekRanges(RECORDED, 2 ** 30), [
    { start: 0, end: 131072 },
    { start: 268435456, end: 268460032 },
    { start: 1073610752, end: 1073741824 },
  ]);
  t.same(parseSeekRanges("Whence\tResult\nDATA\tEOF\n", 4096), [], "no data at all");
  t.same(parseSeekRanges("Whence\tResult\nHOLE\t0\n", 4096), [], "all hole");
  t.same(parseSeekRanges("Whence\tResult\nDATA\t0\nHOLE\t4096\n", 4096), [{ start: 0, end: 4096 }], "all data");
  t.same(parseSeekRanges("Whence\tResult\nHOLE\t0\nDATA\t8192\n", 16384), [{ start: 8192, end: 16384 }], "to the end");
  t.throws(() => parseSeekRanges("DATA\t0\n", 10), /no `Whence Result` header/);
  t.throws(() => parseSeekRanges("Whence\tResult\nDATA\t9000\n", 4096), /past the end/);
  t.throws(() => parseSeekRanges("Whence\tResult\nDATA\t10\nHOLE\t5\n", 4096), /out of order/);
  t.throws(() => parseSeekRanges("Whence\tResult\nseek: Invalid argument\n", 4096), /unexpected line/);
});

t.test("the blocks the ranges touch, in runs: a block partly data is read whole", async (t) => {
  const B = EBS_BLOCK_BYTES;
  t.same(
    blockRuns(
      [
        { start: 0, end: 1 },
        { start: B - 1, end: B + 1 },
        { start: 5 * B, end: 7 * B },
      ],
      B,
    ),
    [
      [0, 1],
      [5, 6],
    ],
  );
});

t.test("an empty 64 GiB pool image: only its metadata read, the hashes of a full read", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "image-blocks-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const image = join(dir, "empty.img");
  await makePoolImage(image, { sizeGiB: 64, files: {} });
  const ranges = await dataRanges(image, 64 * 2 ** 30);
  const dataBlocks = blockRuns(ranges, EBS_BLOCK_BYTES).reduce((n, [a, b]) => n + b - a + 1, 0);
  let read = 0;
  const scan = await scanImage(image, EBS_BLOCK_BYTES, { onProgress: (blocks) => (read = blocks) });
  t.equal(read, dataBlocks, `the blocks its data ranges touch are read (${read}), no more`);
  t.ok(read < (64 * 2 ** 30) / EBS_BLOCK_BYTES / 100, `under 1 % of its ${(64 * 2 ** 30) / EBS_BLOCK_BYTES} blocks`);
  t.ok(scan.blocks.size > 0 && scan.blocks.size <= read, "the metadata's blocks hold data");
  // The blocks a full read finds holding data, read here one by one where the scan says.
  const file = await open(image, "r");
  t.teardown(() => file.close());
  const buffer = Buffer.alloc(EBS_BLOCK_BYTES);
  for (const [index, hash] of scan.blocks) {
    buffer.fill(0);
    await file.read(buffer, 0, EBS_BLOCK_BYTES, index * EBS_BLOCK_BYTES);
    t.equal(createHash("sha256").update(buffer).digest("base64"), hash, `block ${index}`);
  }
  // And none elsewhere: every block outside the ranges reads as zeros (sampled: 64 GiB is a lot to read).
  const zeros = Buffer.alloc(EBS_BLOCK_BYTES);
  for (let index = 0; index < (64 * 2 ** 30) / EBS_BLOCK_BYTES; index += 997) {
    if (scan.blocks.has(index)) continue;
    await file.read(buffer.fill(1), 0, EBS_BLOCK_BYTES, index * EBS_BLOCK_BYTES);
    if (!buffer.equals(zeros)) t.fail(`block ${index} holds data the scan did not find`);
  }
});
