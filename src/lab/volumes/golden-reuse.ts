/**
 * A golden build kept for the rest of one test run: most lab files start from the same golden
 * snapshot (the same images, size and need list), and the build (XFS made, a private dockerd
 * loading the images, their reads recorded) is the longest part of their set-up. The first file
 * to build it keeps the built volume's bytes and what the build reported in a folder the run
 * owns (`npm test` makes one per run and removes it: nothing outlives the run, so a change to the
 * build is always built); the others copy those bytes over their own blank builder volume's
 * image and go on as after a build: the same EC2 calls, the same snapshot, tagged alike.
 *
 * Keyed by everything that shapes the bytes (the images, the size, the need list, the volume's
 * encryption), not by what only tags them (pool, image set, time). Two files building the same
 * key at once both build; the last to finish replaces the other's copy, whole (a rename).
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { run } from "../../exec.ts";
import type { Logger } from "../../log.ts";
import type { ImageStore } from "../../docker/engine.ts";

/** What a golden build reported: the image store and the engine it built with. */
export interface GoldenBuilt {
  store: ImageStore;
  engineVersion: string;
}

/** The inputs of a golden build that shape its bytes (src/lab/volumes/golden.ts GoldenOptions). */
export interface GoldenBuildInputs {
  images: readonly { tag: string; payloadBytes?: number; payloadFileBytes?: number; cmd?: string[] }[];
  sizeGiB?: number;
  recordReads?: boolean;
  volume?: { encrypted?: boolean; kmsKeyId?: string };
}

/** A kept build: its volume's bytes (sparse) and the store and engine it was built with. */
export interface GoldenReuse {
  /**
   * Writes a kept build over `image` (a blank volume's image, not attached); its report, or
   * undefined when none is kept.
   */
  restore(image: string): Promise<GoldenBuilt | undefined>;
  /** Keeps the build whose bytes are the snapshot image `image`. */
  keep(image: string, built: GoldenBuilt): Promise<void>;
}

/** The key of a build: the inputs that shape its bytes. */
export function goldenBuildKey(options: GoldenBuildInputs): string {
  const inputs = {
    images: options.images,
    sizeGiB: options.sizeGiB ?? 2,
    recordReads: options.recordReads ?? true,
    encrypted: options.volume?.encrypted ?? false,
    kmsKeyId: options.volume?.kmsKeyId ?? null,
  };
  return createHash("sha256").update(JSON.stringify(inputs)).digest("hex").slice(0, 16);
}

/** Builds kept in `folder` (made when missing) for the build `options` describes. */
export function goldenReuse(folder: string, options: GoldenBuildInputs, log?: Logger): GoldenReuse {
  const key = goldenBuildKey(options);
  const image = join(folder, `${key}.img`);
  const report = join(folder, `${key}.json`);
  return {
    async restore(volumeImage) {
      let built: GoldenBuilt;
      try {
        built = JSON.parse(await readFile(report, "utf8")) as GoldenBuilt;
        // The image is renamed into place last: with it there, the report beside it is its own.
        await run("cp", ["--sparse=always", "--reflink=auto", "--", image, volumeImage], { log });
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
        // cp names a missing image in its message, not in a code: a build still being kept.
        if (/No such file/.test(String((error as Error).message))) return undefined;
        throw error;
      }
      log?.info("lab.golden-reused", "golden build reused from this run", { key, image: volumeImage });
      return built;
    },
    async keep(snapshotImage, built) {
      const temp = `${image}.${randomBytes(4).toString("hex")}`;
      try {
        await mkdir(folder, { recursive: true });
        await writeFile(report, JSON.stringify(built));
        await run("cp", ["--sparse=always", "--reflink=auto", "--", snapshotImage, temp], { log });
        await rename(temp, image);
      } finally {
        await rm(temp, { force: true });
      }
    },
  };
}
