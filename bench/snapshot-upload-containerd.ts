/**
 * The containerd store's part of bench/snapshot-upload.ts: `snapshot build --image-store
 * containerd` run in an engine machine (docker 28, src/lab/machines/nspawn-docker.ts, the agent's
 * units held back), a full generation and an incremental one (`--parent-image`, one image added),
 * each image then uploaded by the caller. The image set's bytes are taken two ways, both reported:
 *   disk     what the store holds for the set on the image: the allocated bytes (`du -B1`) of
 *            containerd's content store (each layer's blob) plus its overlayfs snapshots (each
 *            layer unpacked); for the added image, the growth of both between the generations
 *   content  the images' content as a registry pull transfers it: each blob of the content store
 *            gzipped (`gzip -1`; the lab's `docker save` layers are plain tars of incompressible
 *            payload, so this is about their size), the added image's: the blobs new in gen2
 */
import { mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { writeImageArchive } from "../src/lab/docker/images.ts";
import { dockerOnlyMachine } from "../src/lab/machines/nspawn-docker.ts";
import { buildBundle, type Machine } from "../src/lab/machines/nspawn.ts";
import { CACHE_BASE, ENGINES, cachedRootfs } from "../src/lab/machines/nspawn-rootfs.ts";

const MiB = 2 ** 20;
/** In the builder machine. */
const WORK = "/var/tmp/bench";
const LOOK = "/mnt/look";
const CONTAINERD = `${LOOK}/containerd`;
const CONTENT = `${CONTAINERD}/io.containerd.content.v1.content`;
const SNAPSHOTS = `${CONTAINERD}/io.containerd.snapshotter.v1.overlayfs`;

/** A generation's image as the caller uploads it. */
export interface Generation {
  /** The image file, seen from the host. */
  image: string;
  /** The image set built into it, and the engine that built it (what the upload's tags name). */
  images: string[];
  engineVersion: string;
  buildSeconds: number;
  /** Allocated bytes of the content store and of the snapshots. */
  contentDiskBytes: number;
  snapshotDiskBytes: number;
  /** Blob digest → gzipped bytes. */
  blobsGzipped: Record<string, number>;
  /** Bytes the XFS file system uses in all (`df`). */
  fsUsedBytes: number;
}

export interface ContainerdRun {
  engineVersion: string;
  gen1: Generation;
  gen2: Generation;
}

/**
 * Builds gen1 (`images` images of `imageMiB` each) and gen2 (gen1 + one image of `addedMiB`,
 * `--parent-image`), hands each image to `upload` while the machine still holds it, then
 * destroys the machine.
 */
export async function buildContainerdGenerations(
  options: { images: number; imageMiB: number; addedMiB: number; say: (line: string) => void },
  upload: (generation: 1 | 2, built: Generation) => Promise<void>,
): Promise<ContainerdRun> {
  const rootfs = await cachedRootfs(ENGINES["28"], options.say);
  const work = await mkdtemp(join(CACHE_BASE, "bench-upload-"));
  let machine: Machine | undefined;
  try {
    const bundle = await buildBundle(work);
    const m = await dockerOnlyMachine({
      rootfs: rootfs.dir,
      bundle,
      store: "containerd",
      onBooted: (booted) => (machine = booted),
    });
    const sh = async (script: string, timeoutMs = 600_000) => {
      const out = await m.exec(["sh", "-c", script], timeoutMs);
      if (out.exitCode !== 0) throw new Error(`${script}: exit ${out.exitCode}\n${out.stderr.slice(-3000)}`);
      return out.stdout;
    };
    const tags = Array.from({ length: options.images + 1 }, (_, i) => `bench/img${i}:1`);
    for (const [i, tag] of tags.entries()) {
      const mib = i < options.images ? options.imageMiB : options.addedMiB;
      await writeImageArchive(join(m.dir, WORK, `img${i}.tar`), {
        tag,
        payloadBytes: mib * MiB,
        payloadFileBytes: 8 * MiB,
        workDir: join(work, "archive"),
      });
    }
    const setMiB = options.images * options.imageMiB + options.addedMiB;
    const sizeGiB = Math.max(1, Math.ceil((setMiB * 3) / 1024) + 1);
    let engineVersion = "";
    const build = async (generation: 1 | 2): Promise<Generation> => {
      const image = `${WORK}/gen${generation}.img`;
      const set = generation === 1 ? tags.slice(0, -1) : tags;
      const loaded = generation === 1 ? set.map((_, i) => i) : [options.images];
      const loads = loaded.map((i) => `--load ${WORK}/img${i}.tar`);
      const report = JSON.parse(
        await sh(
          `ebs-cache-agent snapshot build --image ${image} --size-gib ${sizeGiB} --images ${set.join(",")} ` +
            `${loads.join(" ")} --no-pull --image-store containerd --work-dir ${WORK}/w${generation} --json` +
            (generation === 2 ? ` --parent-image ${WORK}/gen1.img` : ""),
        ),
      ) as { seconds: number; engineVersion: string };
      const look = await sh(
        `mkdir -p ${LOOK} && mount -o ro,nouuid,loop ${image} ${LOOK} && ` +
          `du -s -B1 ${CONTENT} ${SNAPSHOTS} | cut -f1; df -B1 --output=used ${LOOK} | tail -1; ` +
          `for f in ${CONTENT}/blobs/sha256/*; do echo "$(basename $f) $(gzip -1 -c $f | wc -c)"; done; ` +
          `umount ${LOOK}`,
      );
      const [content, snapshots, used, ...blobs] = look.trim().split("\n");
      engineVersion = report.engineVersion;
      return {
        image: join(m.dir, image),
        images: set,
        engineVersion: report.engineVersion,
        buildSeconds: report.seconds,
        contentDiskBytes: Number(content),
        snapshotDiskBytes: Number(snapshots),
        fsUsedBytes: Number(used),
        blobsGzipped: Object.fromEntries(blobs.map((line) => line.split(" ")).map(([d, n]) => [d, Number(n)])),
      };
    };
    const gen1 = await build(1);
    await upload(1, gen1);
    const gen2 = await build(2);
    await upload(2, gen2);
    return { engineVersion, gen1, gen2 };
  } finally {
    await (machine as Machine | undefined)?.destroy();
    await rm(work, { recursive: true, force: true });
  }
}

/** Gzipped bytes of the blobs `gen` holds and `parent` (if any) does not. */
export function gzippedBytes(gen: Generation, parent?: Generation): number {
  return Object.entries(gen.blobsGzipped)
    .filter(([digest]) => parent?.blobsGzipped[digest] === undefined)
    .reduce((sum, [, bytes]) => sum + bytes, 0);
}

export function diskBytes(gen: Generation, parent?: Generation): number {
  const own = gen.contentDiskBytes + gen.snapshotDiskBytes;
  return parent ? own - parent.contentDiskBytes - parent.snapshotDiskBytes : own;
}
