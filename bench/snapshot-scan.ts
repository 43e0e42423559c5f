/**
 * The snapshot upload's image scan, before and after it seeks data (SEEK_DATA/SEEK_HOLE through
 * xfs_io): side by side on the same images, each scan run `--runs` times, alternating, the
 * median reported. An empty pool image of `--empty-gib` (mkfs.xfs on a sparse file: what a
 * fresh 64 GiB pool volume holds before its images) and a full image of `--full-gib` (every
 * block data). The old scan, which read every block, holes included, is kept here as it was
 * (src/host/image-blocks.ts before issue 32), to measure the new one against.
 *
 *   npx tsx bench/snapshot-scan.ts [--empty-gib 64] [--full-gib 1] [--runs 3]
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, mkdtemp, open, rm, writeFile } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { EBS_BLOCK_BYTES } from "../src/agent/snapshot/plan.ts";
import { run } from "../src/exec.ts";
import { scanImage } from "../src/host/image-blocks.ts";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { values } = parseArgs({
  options: {
    "empty-gib": { type: "string", default: "64" },
    "full-gib": { type: "string", default: "1" },
    runs: { type: "string", default: "3" },
    out: { type: "string", default: join(REPO, "bench", "results") },
  },
});
const runs = Number(values.runs);

/** The scan as it was (src/host/image-blocks.ts before issue 32, verbatim): every block read, holes included. */
async function fullReadScan(path: string, blockSize: number): Promise<{ bytes: number; blocks: Map<number, string> }> {
  const file = await open(path, "r");
  try {
    const { size } = await file.stat();
    const buffer = Buffer.alloc(blockSize);
    const blocks = new Map<number, string>();
    for (let index = 0; index * blockSize < size; index += 1) {
      buffer.fill(0);
      await readFully(file, buffer, index * blockSize);
      if (!isZero(buffer)) blocks.set(index, createHash("sha256").update(buffer).digest("base64"));
    }
    return { bytes: size, blocks };
  } finally {
    await file.close();
  }
}

async function readFully(file: Awaited<ReturnType<typeof open>>, buffer: Buffer, position: number): Promise<void> {
  let offset = 0;
  while (offset < buffer.length) {
    const { bytesRead } = await file.read(buffer, offset, buffer.length - offset, position + offset);
    if (bytesRead === 0) return;
    offset += bytesRead;
  }
}

const ZEROS = Buffer.alloc(64 * 1024);

function isZero(buffer: Buffer): boolean {
  for (let offset = 0; offset < buffer.length; offset += ZEROS.length) {
    const end = Math.min(buffer.length, offset + ZEROS.length);
    if (!buffer.subarray(offset, end).equals(ZEROS.subarray(0, end - offset))) return false;
  }
  return true;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Both scans of `image`, alternating; the same blocks found, or the bench fails. */
async function compare(name: string, image: string) {
  const seconds = { before: [] as number[], after: [] as number[] };
  let blocksRead = 0;
  let found = 0;
  for (let i = 0; i < runs; i += 1) {
    let started = performance.now();
    const before = await fullReadScan(image, EBS_BLOCK_BYTES);
    seconds.before.push((performance.now() - started) / 1000);
    started = performance.now();
    const after = await scanImage(image, EBS_BLOCK_BYTES, { onProgress: (read) => (blocksRead = read) });
    seconds.after.push((performance.now() - started) / 1000);
    const same =
      before.blocks.size === after.blocks.size && [...before.blocks].every(([k, v]) => after.blocks.get(k) === v);
    if (!same) throw new Error(`${name}: the scans found other blocks`);
    found = after.blocks.size;
  }
  const row = {
    image: name,
    blocksHoldingData: found,
    afterBytesRead: blocksRead * EBS_BLOCK_BYTES,
    beforeSeconds: median(seconds.before),
    afterSeconds: median(seconds.after),
    secondsRatio: median(seconds.after) / median(seconds.before),
    allSeconds: seconds,
  };
  return row;
}

const work = await mkdtemp(join(tmpdir(), "bench-scan-"));
const rows = [];
try {
  const empty = join(work, "empty.img");
  const emptyGiB = Number(values["empty-gib"]);
  await run("truncate", ["-s", `${emptyGiB}G`, empty]);
  await run("mkfs.xfs", ["-q", "-K", "-L", "ebs-cache", "-m", "crc=1", "-n", "ftype=1", empty]);
  const full = join(work, "full.img");
  const fullGiB = Number(values["full-gib"]);
  const handle = await open(full, "w");
  for (let written = 0; written < fullGiB * 1024; written += 64)
    await handle.write(randomBytes(64 * 2 ** 20), 0, 64 * 2 ** 20);
  await handle.close();
  for (const [name, image, gib] of [
    [`empty ${emptyGiB} GiB pool image`, empty, emptyGiB],
    [`full ${fullGiB} GiB image`, full, fullGiB],
  ] as const) {
    const row = { ...(await compare(name, image)), bytes: gib * 2 ** 30, beforeBytesRead: gib * 2 ** 30 };
    rows.push(row);
    process.stdout.write(
      `${name}: ${row.blocksHoldingData} blocks hold data; before ${row.beforeSeconds.toFixed(2)} s ` +
        `(${(row.beforeBytesRead / 2 ** 20).toFixed(0)} MiB read), after ${row.afterSeconds.toFixed(2)} s ` +
        `(${(row.afterBytesRead / 2 ** 20).toFixed(1)} MiB read): after ÷ before ${row.secondsRatio.toFixed(3)}\n`,
    );
  }
} finally {
  await rm(work, { recursive: true, force: true });
}
const stamp = new Date().toISOString().replace(/:/g, "-").replace(/\..*/, "");
await mkdir(values.out, { recursive: true });
const file = join(values.out, `snapshot-scan-${stamp}.json`);
await writeFile(file, JSON.stringify({ cpus: cpus().length, loadavg: loadavg(), runs, rows }, null, 1) + "\n");
process.stdout.write(`written ${file}\n`);
