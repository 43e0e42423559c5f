/**
 * The disk image a `snapshot build` writes: a sparse file (EBS reads a block never written as
 * zeros, and the upload skips holes), attached as a loop device while the build mounts it, and
 * what a killed build leaves behind of it (mounts under its work folder, loop devices backed by
 * it). The build owns only the image it created: an existing file is never written over unless
 * the build's own marker in its work folder says a killed run of the build was making it.
 */
import { constants } from "node:fs";
import { open, readFile, rm, rmdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import { AgentError, ExitCode } from "../errors.ts";
import { run } from "../exec.ts";
import { describeDiskError } from "../disk-errors.ts";
import { FolderNotWritableError, makeFolderFor, writeFileAtomic } from "../fs-atomic.ts";
import type { Logger } from "../log.ts";
import { readMountTable, unmountPath } from "./mount.ts";

/** The marker naming the image a build is making: what lets a rerun after a kill replace it. */
const BUILDING_MARKER = "building";

/** The image cannot be made as asked; nothing was written. */
export class ImageFileError extends AgentError {
  constructor(message: string, remediation: string) {
    super(message, remediation, ExitCode.usage);
  }
}

/**
 * Makes `image` the build's: refuses a file that exists and is not a killed build's (the marker
 * of `workDir` names it), removes such a leftover, and writes the marker for this run.
 */
export async function claimImageFile(workDir: string, image: string, log?: Logger): Promise<void> {
  const path = resolve(image);
  const marker = join(workDir, BUILDING_MARKER);
  const named = await readFile(marker, "utf8").then(
    (text) => text.trim(),
    () => undefined,
  );
  const exists = await open(path, "r").then(
    async (handle) => (await handle.close(), true),
    () => false,
  );
  if (exists) {
    if (named !== path) {
      throw new ImageFileError(
        `${path} exists: the build writes a new image and never over a file it did not make`,
        "remove it, or give another --image (a previous generation goes in --parent-image)",
      );
    }
    log?.warning("snapshot.build-leftover", "removing the image a killed build left half made", { image: path });
    await rm(path, { force: true });
  }
  let made: string | undefined;
  try {
    made = await makeFolderFor(workDir, BUILDING_MARKER);
    await writeFileAtomic(marker, `${path}\n`);
  } catch (error) {
    // A full disk: the folder this claim made goes too, so the build leaves nothing behind.
    if (made !== undefined) await rm(made, { recursive: true, force: true }).catch(() => undefined);
    // The marker is the build's own file: the operator knows the image they asked for.
    if (error instanceof FolderNotWritableError) throw new BuildNotBegunError(workDir, path, error);
    throw error;
  }
}

/** The work folder took no write (full, read-only) as the build began: nothing was made. */
export class BuildNotBegunError extends AgentError {
  constructor(workDir: string, image: string, cause: FolderNotWritableError) {
    const code = (cause.cause as { code?: unknown } | undefined)?.code;
    super(
      `${describeDiskError(cause.kind)} on ${workDir}${typeof code === "string" ? ` (${code})` : ""}: the build of ` +
        `${image} could not begin, nothing was made`,
      cause.remediation,
      ExitCode.failure,
      { cause },
    );
  }
}

/**
 * Removes the image this build was making and its marker (the build owns it: it claimed it), and
 * the work folder when nothing else is left in it.
 */
export async function discardImageFile(workDir: string, image: string): Promise<void> {
  await rm(resolve(image), { force: true });
  await releaseImageFile(workDir);
  await rmdir(workDir).catch(() => undefined);
}

/** The build is done: its marker goes (the image is now a finished one, never replaced by a rerun). */
export async function releaseImageFile(workDir: string): Promise<void> {
  await rm(join(workDir, BUILDING_MARKER), { force: true });
}

/** A sparse file of `bytes`, all holes (the caller claimed the path). */
export async function createSparseImage(image: string, bytes: number): Promise<void> {
  const handle = await open(image, constants.O_CREAT | constants.O_EXCL | constants.O_WRONLY, 0o600);
  try {
    await handle.truncate(bytes);
  } finally {
    await handle.close();
  }
}

/**
 * A copy of the previous generation's image, its holes kept (and its extents shared where the
 * file system can: reflink), so only what the new generation changes is written.
 */
export async function copySparseImage(from: string, image: string, bytes: number, log?: Logger): Promise<void> {
  const parent = await open(from, "r").catch(() => undefined);
  if (!parent)
    throw new ImageFileError(`the parent image ${from} cannot be read`, "give the previous generation's image");
  const { size } = await parent.stat();
  await parent.close();
  if (bytes < size) {
    throw new ImageFileError(
      `the parent image ${from} holds ${size} bytes, more than the ${bytes} asked: an XFS file system cannot shrink`,
      "give a --size-gib of at least the parent's, or none (the parent's)",
    );
  }
  await run("cp", ["--sparse=always", "--reflink=auto", "--no-clobber", "--", from, image], {
    log,
    remediation: `check the free space beside ${image}`,
  });
  // Longer, when a larger size is asked: the file system grows into it once mounted.
  const handle = await open(image, "r+");
  try {
    await handle.truncate(bytes);
  } finally {
    await handle.close();
  }
}

/** Attaches `image` to a free loop device and returns it (`/dev/loopN`). */
export async function attachLoop(image: string, log?: Logger): Promise<string> {
  const { stdout } = await run("losetup", ["--find", "--show", "--", image], {
    log,
    remediation: "the build needs root and a free loop device (losetup -f)",
  });
  const device = stdout.trim();
  if (!/^\/dev\/loop\d+$/.test(device))
    throw new AgentError(`losetup printed ${JSON.stringify(device)}`, "see losetup");
  return device;
}

/** Detaches a loop device the build attached (its file system unmounted first). */
export async function detachLoop(device: string, log?: Logger): Promise<void> {
  await run("losetup", ["--detach", device], {
    log,
    remediation: `unmount ${device} first, then losetup -d ${device}`,
  });
}

/** The loop devices backed by `image`. */
export async function loopsOf(image: string, log?: Logger): Promise<string[]> {
  const { stdout } = await run("losetup", ["--associated", resolve(image), "--noheadings", "--output", "NAME"], {
    log,
    check: false,
  });
  return stdout
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => /^\/dev\/loop\d+$/.test(line));
}

/**
 * Undoes what a killed build left: the mounts under its work folder (deepest first) and the loop
 * devices backed by its image. The caller stops the build's dockerd first (it holds the mount).
 */
export async function cleanBuildLeftovers(workDir: string, image: string | undefined, log?: Logger): Promise<void> {
  const root = resolve(workDir);
  const mounts = (await readMountTable())
    .map((entry) => entry.target)
    .filter((target) => target.startsWith(`${root}/`))
    .sort((a, b) => b.length - a.length);
  for (const target of new Set(mounts)) {
    log?.warning("snapshot.build-leftover", "unmounting what a killed build left mounted", { mountPoint: target });
    await unmountPath(target, { log });
  }
  if (image === undefined) return;
  for (const device of await loopsOf(image, log)) {
    log?.warning("snapshot.build-leftover", "detaching the loop device a killed build left", { device, image });
    await detachLoop(device, log);
  }
}
