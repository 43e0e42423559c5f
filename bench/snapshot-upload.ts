/**
 * Snapshot upload benchmark: what `snapshot upload` sends for a full build and for an
 * incremental generation, against what the image set holds.
 *
 * For each size: an XFS image (label ebs-cache, ftype=1, sparse, 4 × the size) holding a
 * `docker/` tree of incompressible files of that size in all (as layers would be), unmounted;
 * uploaded in full to the lab's EBS direct emulator (memory backend, over HTTP, the real SDK).
 * Then the next generation: a copy of that image, mounted, one more "image" of `--added-mib`
 * written into it, unmounted, uploaded with the first as parent. Reported:
 *   full ratio         bytes put ÷ bytes of the image set          (goal ≤ 1.05)
 *   incremental ratio  bytes put ÷ bytes of the added image         (goal ≤ 1.2)
 *   s/GiB              wall time of the upload per GiB put (loopback: the machine's cost, not S3's)
 * A new generation built on a copy of the previous image (as here) keeps the old blocks where
 * they were; one built by a fresh mkfs lays everything out anew and uploads about all of it.
 *
 *   sudo npx tsx bench/snapshot-upload.ts [--sizes 256,1024] [--added-mib 128]
 *
 * With `--image-store containerd`: the images are made by `snapshot build --image-store containerd`
 * in a docker 28 engine machine instead (bench/snapshot-upload-containerd.ts): `--images` images of
 * `--image-mib` each, then one of `--added-mib` added with `--parent-image`; each ratio is given
 * against the store's bytes on disk (content blobs + unpacked snapshots) and against the images'
 * content (what a pull transfers).
 *
 *   sudo npx tsx bench/snapshot-upload.ts --image-store containerd [--images 2 --image-mib 24 --added-mib 24]
 */
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { cpus, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { buildContainerdGenerations, diskBytes, gzippedBytes } from "./snapshot-upload-containerd.ts";
import { IMAGE_PER_SET, parseSizes } from "./snapshot-upload-sizes.ts";
import { runSnapshotUpload } from "../src/agent/snapshot/run.ts";
import { imageSetRecordText, type ImageSetRecord } from "../src/agent/snapshot/image-set-record.ts";
import { generationTags } from "../src/agent/snapshot/tags.ts";
import { ebsClient, snapshotBlockReader, snapshotBlockWriter } from "../src/aws/ebs.ts";
import { builderEc2Client, uploadedSnapshots } from "../src/aws/uploaded-snapshots.ts";
import { run } from "../src/exec.ts";
import { readImageBlock, scanImage, sha256, zeroBlockHash } from "../src/host/image-blocks.ts";
import { inspectPoolImage } from "../src/host/pool-image.ts";
import { readManifestJson, writeManifestJson } from "../src/host/snapshot-manifest.ts";
import { startEc2Emulator } from "../src/lab/ec2/index.ts";
import { MemoryVolumeBackend } from "../src/lab/ec2/memory-backend.ts";
import { createLogger } from "../src/log.ts";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const MiB = 2 ** 20;

const { values } = parseArgs({
  options: {
    sizes: { type: "string", default: "256,1024" },
    "added-mib": { type: "string" },
    "image-store": { type: "string", default: "graphdriver" },
    images: { type: "string", default: "2" },
    "image-mib": { type: "string", default: "24" },
    out: { type: "string", default: join(REPO, "bench", "results") },
  },
});
const sizes = parseSizes(values.sizes);
if (process.getuid?.() !== 0) throw new Error("run as root: the images are made with mkfs.xfs and mount");

/** Writes `mib` of incompressible files under `dir`, in files of up to 64 MiB. */
async function fill(dir: string, mib: number, name: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  for (let left = mib, n = 0; left > 0; n += 1) {
    const size = Math.min(64, left);
    await writeFile(join(dir, `${name}-${n}`), randomBytes(size * MiB));
    left -= size;
  }
}

/** A pool generation's tags for the image set `set` (the upload checks them against the image's record). */
function benchTags(set: ImageSetRecord): Record<string, string> {
  const tags = generationTags({
    pool: "bench",
    imageSet: "bench",
    ...set,
    builtAt: "2026-12-01T10:00:00Z",
    operatorTags: {},
  });
  if (!("tags" in tags)) throw new Error(tags.problems.join("; "));
  return tags.tags;
}

/** The image set record `snapshot build` leaves on an image, for an image the bench made itself. */
async function writeRecord(mnt: string, set: ImageSetRecord): Promise<void> {
  await mkdir(join(mnt, ".ebs-cache-agent"), { recursive: true });
  await writeFile(join(mnt, ".ebs-cache-agent", "image-set.json"), imageSetRecordText(set));
}

async function withMounted(image: string, work: (dir: string) => Promise<void>): Promise<void> {
  const mnt = await mkdtemp(join(tmpdir(), "bench-snapshot-mnt-"));
  await run("mount", ["-o", "loop", image, mnt]);
  try {
    await work(mnt);
  } finally {
    await run("umount", [mnt]);
    await rm(mnt, { recursive: true, force: true });
  }
}

const backend = new MemoryVolumeBackend();
const emulator = await startEc2Emulator({ backend });
const client = ebsClient({
  region: "us-east-1",
  endpoint: emulator.endpoint,
  credentials: { accessKeyId: "b", secretAccessKey: "b" },
});
const ec2 = builderEc2Client({
  region: "us-east-1",
  endpoint: emulator.endpoint,
  credentials: { accessKeyId: "b", secretAccessKey: "b" },
});
const quiet = createLogger(() => undefined);
const deps = {
  writer: snapshotBlockWriter(client),
  reader: snapshotBlockReader(client),
  snapshots: uploadedSnapshots(ec2),
  inspectImage: (image: string) => inspectPoolImage(image),
  scanImage: (image: string, blockSize: number) => scanImage(image, blockSize),
  readBlock: readImageBlock,
  readManifestJson,
  writeManifestJson,
  sha256,
  zeroBlockHash,
  log: quiet,
};
/** What every upload of the bench sets beside its image and manifests. */
const BENCH_SET = { images: ["bench/set:1"], imageStore: "graphdriver" as const, engineVersion: "bench" };
const UPLOAD = {
  tags: benchTags(BENCH_SET),
  description: "bench",
  encrypted: false,
  concurrency: 16,
  timeoutMinutes: 60,
};
const rows: Record<string, number | string>[] = [];
const containerd = values["image-store"] === "containerd";
if (!containerd && values["image-store"] !== "graphdriver") throw new Error("--image-store: graphdriver or containerd");
const added = Number(values["added-mib"] ?? (containerd ? 24 : 128));
const work = await mkdtemp(join(tmpdir(), "bench-snapshot-"));
try {
  if (containerd) rows.push(await containerdRow());
  for (const size of containerd ? [] : sizes) {
    const gen1 = join(work, `gen1-${size}.img`);
    const gen2 = join(work, `gen2-${size}.img`);
    await run("truncate", ["-s", `${size * IMAGE_PER_SET}M`, gen1]);
    await run("mkfs.xfs", ["-q", "-L", "ebs-cache", "-n", "ftype=1", gen1]);
    await withMounted(gen1, async (mnt) => {
      await fill(join(mnt, "docker", "overlay2", "layers"), size, "layer");
      await writeRecord(mnt, BENCH_SET);
    });
    const settings = (manifest: string, parent?: string) => ({
      image: manifest.includes("gen1") ? gen1 : gen2,
      manifest: join(work, manifest),
      ...(parent ? { parentManifest: join(work, parent) } : {}),
      ...UPLOAD,
    });
    const full = await runSnapshotUpload(deps, settings(`gen1-${size}.json`));
    await run("cp", ["--sparse=always", gen1, gen2]);
    await withMounted(gen2, (mnt) => fill(join(mnt, "docker", "overlay2", "added"), added, "added"));
    const incremental = await runSnapshotUpload(deps, settings(`gen2-${size}.json`, `gen1-${size}.json`));
    const row = {
      sizeMiB: size,
      fullPutMiB: full.bytesPut / MiB,
      fullRatio: full.bytesPut / (size * MiB),
      fullSecondsPerGiB: full.seconds / (full.bytesPut / 1024 ** 3),
      addedMiB: added,
      incrementalPutMiB: incremental.bytesPut / MiB,
      incrementalRatio: incremental.bytesPut / (added * MiB),
      incrementalSecondsPerGiB: incremental.seconds / (incremental.bytesPut / 1024 ** 3),
    };
    rows.push(row);
    process.stdout.write(
      `${size} MiB set: full ${row.fullPutMiB.toFixed(1)} MiB put, ratio ${row.fullRatio.toFixed(3)}, ` +
        `${row.fullSecondsPerGiB.toFixed(1)} s/GiB; ` +
        `+${added} MiB image: ${row.incrementalPutMiB.toFixed(1)} MiB put, ratio ${row.incrementalRatio.toFixed(3)}, ` +
        `${row.incrementalSecondsPerGiB.toFixed(1)} s/GiB\n`,
    );
    await rm(gen1);
    await rm(gen2);
    backend.snapshotBlocks.clear();
  }
} finally {
  client.destroy();
  ec2.destroy();
  await emulator.close();
  await rm(work, { recursive: true, force: true });
}
/**
 * The containerd store: gen1 and gen2 built in an engine machine, each uploaded as built (gen2 with
 * gen1's manifest as parent), the ratios against both measures of the set's bytes.
 */
async function containerdRow(): Promise<Record<string, number | string>> {
  const put: { bytes: number; seconds: number }[] = [];
  const images = Number(values.images);
  const imageMiB = Number(values["image-mib"]);
  const built = await buildContainerdGenerations(
    { images, imageMiB, addedMiB: added, say: (line) => process.stdout.write(`${line}\n`) },
    async (generation, gen) => {
      const started = performance.now();
      const result = await runSnapshotUpload(deps, {
        image: gen.image,
        manifest: join(work, `gen${generation}.json`),
        ...(generation === 2 ? { parentManifest: join(work, "gen1.json") } : {}),
        ...UPLOAD,
        tags: benchTags({ images: gen.images, imageStore: "containerd", engineVersion: gen.engineVersion }),
      });
      put.push({ bytes: result.bytesPut, seconds: (performance.now() - started) / 1000 });
    },
  );
  const [full, incremental] = put as [(typeof put)[0], (typeof put)[0]];
  const { gen1, gen2 } = built;
  const row = {
    engineVersion: built.engineVersion,
    images,
    imageMiB,
    addedMiB: added,
    fullPutMiB: full.bytes / MiB,
    fullDiskMiB: diskBytes(gen1) / MiB,
    fullContentMiB: gzippedBytes(gen1) / MiB,
    fullRatioDisk: full.bytes / diskBytes(gen1),
    fullRatioContent: full.bytes / gzippedBytes(gen1),
    fullSecondsPerGiB: full.seconds / (full.bytes / 1024 ** 3),
    fullContentStoreDiskMiB: gen1.contentDiskBytes / MiB,
    fullSnapshotsDiskMiB: gen1.snapshotDiskBytes / MiB,
    fullFsUsedMiB: gen1.fsUsedBytes / MiB,
    fullBuildSeconds: gen1.buildSeconds,
    incrementalPutMiB: incremental.bytes / MiB,
    addedDiskMiB: diskBytes(gen2, gen1) / MiB,
    addedContentMiB: gzippedBytes(gen2, gen1) / MiB,
    incrementalRatioDisk: incremental.bytes / diskBytes(gen2, gen1),
    incrementalRatioContent: incremental.bytes / gzippedBytes(gen2, gen1),
    incrementalSecondsPerGiB: incremental.seconds / (incremental.bytes / 1024 ** 3),
    incrementalFsUsedGrowthMiB: (gen2.fsUsedBytes - gen1.fsUsedBytes) / MiB,
    incrementalBuildSeconds: gen2.buildSeconds,
  };
  process.stdout.write(`${JSON.stringify(row, null, 1)}\n`);
  return row;
}

const stamp = new Date().toISOString().replace(/:/g, "-").replace(/\..*/, "");
await mkdir(values.out, { recursive: true });
const file = join(values.out, `snapshot-upload-${stamp}.json`);
const store = values["image-store"];
const summary = { cpus: cpus().length, imageStore: store, addedMiB: added, rows };
await writeFile(file, JSON.stringify(summary, null, 1) + "\n");
process.stdout.write(`written ${file}\n`);
