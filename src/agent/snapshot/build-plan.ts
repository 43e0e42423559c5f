/**
 * The steps of `snapshot build`, pure: the image set built into the pool volume's file system
 * (an XFS image file, or a block device the lab attached), as the pool volume holds it. The
 * steps are serializable (`--dry-run` prints them) and run in order by build.ts; a step that
 * acquires something (a loop device, a mount, a dockerd) is undone by the runner when a later
 * step fails, in reverse order.
 *
 * A new generation built on the previous one (`parentImage`) copies that image instead of
 * formatting a new one: the blocks of the layers both generations hold stay where they were,
 * so the incremental upload (plan.ts) puts only what changed. A fresh mkfs would place the
 * same files elsewhere, and every block would differ.
 *
 * The containerd image store: the images are in containerd's root (`containerd/` beside
 * `docker/`, where a boot on such a host puts containerd's root), so the build's dockerd runs with
 * a private containerd whose root is there (src/docker/build-containerd.ts). The need list then
 * names files of containerd's snapshots there (version 2 of its format, src/read-list.ts).
 */
import { validateImageRef } from "../../inputs.ts";
import { DATA_ROOT_SUBDIR, FS_LABEL } from "../../layout.ts";

/** What to build, as the command line or the lab asks it. */
export interface BuildRequest {
  /**
   * Where the file system goes: an image file (created, or copied from `parentImage`, then
   * loop-attached), or a block device somebody else attached and owns (the lab's builder volume).
   */
  target: { image: string; sizeGiB: number; parentImage?: string } | { device: string };
  /** The build's own folder: the mount point, the private dockerd's socket, exec-root and log. */
  workDir: string;
  /** The image set: every one of them is in the volume at the end, and nothing else. */
  images: readonly string[];
  /** `docker save` tarballs loaded first; the images they do not hold are pulled. */
  load: readonly string[];
  /** Pull what the tarballs do not hold (false: such an image is an error; offline builds). */
  pull: boolean;
  imageStore: "graphdriver" | "containerd";
  /** Record what each image reads at start (the volume's need list). */
  recordReads: boolean;
}

export type BuildStep =
  | { step: "clean-leftovers"; workDir: string; image?: string }
  | { step: "create-image"; image: string; bytes: number }
  | { step: "copy-image"; from: string; image: string; bytes: number }
  | { step: "attach-loop"; image: string }
  | { step: "format"; label: string }
  | { step: "mount"; mountPoint: string }
  | { step: "grow"; mountPoint: string }
  | { step: "clear-need-list" }
  | { step: "start-dockerd"; root: string; dataRoot: string; imageStore: BuildRequest["imageStore"] }
  | { step: "load"; tarball: string }
  | { step: "ensure-image"; image: string; pull: boolean }
  | { step: "remove-other-images"; keep: string[] }
  | { step: "record-reads"; image: string }
  | { step: "stop-dockerd" }
  | { step: "strip-machine-local-state"; dataRoot: string; imageStore: BuildRequest["imageStore"] }
  | { step: "record-image-set"; images: string[]; imageStore: BuildRequest["imageStore"] }
  | { step: "unmount"; mountPoint: string }
  | { step: "identify" }
  | { step: "detach-loop" };

/** Where the build's own things live under its work folder (short names: unix sockets hold 107 bytes). */
export function buildPaths(workDir: string): { mountPoint: string; dockerdRoot: string; dataRoot: string } {
  const mountPoint = `${workDir}/mnt`;
  return { mountPoint, dockerdRoot: `${workDir}/d`, dataRoot: `${mountPoint}/${DATA_ROOT_SUBDIR}` };
}

const GiB = 1024 ** 3;
/** mkfs.xfs needs 300 MiB at least; a pool volume of less than a GiB holds no image set. */
export const MIN_SIZE_GIB = 1;
/** EBS's largest volume (gp3, io2): a snapshot of more cannot be made a volume. */
const MAX_SIZE_GIB = 16384;

/** The steps, or the problems with the request (then nothing is done). */
export function planBuild(request: BuildRequest): { steps: BuildStep[] } | { problems: string[] } {
  const problems: string[] = [];
  const { target } = request;
  if (request.images.length === 0) problems.push("no images: the image set names at least one");
  for (const image of request.images) {
    const checked = validateImageRef(image);
    if (!checked.ok) problems.push(checked.problem);
  }
  if (new Set(request.images).size !== request.images.length) problems.push("an image is named twice");
  if (!request.workDir.startsWith("/")) problems.push(`the work folder ${request.workDir} is not an absolute path`);
  if ("image" in target) {
    if (!Number.isInteger(target.sizeGiB) || target.sizeGiB < MIN_SIZE_GIB || target.sizeGiB > MAX_SIZE_GIB)
      problems.push(`the size is ${target.sizeGiB} GiB: a whole number from ${MIN_SIZE_GIB} to ${MAX_SIZE_GIB}`);
    if (target.parentImage === target.image) problems.push("the parent image is the image being built");
  }
  if (problems.length > 0) return { problems };

  const { mountPoint, dockerdRoot, dataRoot } = buildPaths(request.workDir);
  const fromParent = "image" in target && target.parentImage !== undefined;
  const steps: BuildStep[] = [];
  if ("image" in target) {
    steps.push({ step: "clean-leftovers", workDir: request.workDir, image: target.image });
    steps.push(
      target.parentImage !== undefined
        ? { step: "copy-image", from: target.parentImage, image: target.image, bytes: target.sizeGiB * GiB }
        : { step: "create-image", image: target.image, bytes: target.sizeGiB * GiB },
    );
    steps.push({ step: "attach-loop", image: target.image });
  } else {
    steps.push({ step: "clean-leftovers", workDir: request.workDir });
  }
  if (!fromParent) steps.push({ step: "format", label: FS_LABEL });
  steps.push({ step: "mount", mountPoint });
  // A larger size than the previous generation's: the copy's file system grows into it.
  if (fromParent) steps.push({ step: "grow", mountPoint });
  // The previous generation's list names images that may be gone, and files that moved.
  if (fromParent) steps.push({ step: "clear-need-list" });
  steps.push({ step: "start-dockerd", root: dockerdRoot, dataRoot, imageStore: request.imageStore });
  for (const tarball of request.load) steps.push({ step: "load", tarball });
  for (const image of request.images) steps.push({ step: "ensure-image", image, pull: request.pull });
  steps.push({ step: "remove-other-images", keep: [...request.images] });
  if (request.recordReads) for (const image of request.images) steps.push({ step: "record-reads", image });
  steps.push({ step: "stop-dockerd" });
  steps.push({ step: "strip-machine-local-state", dataRoot, imageStore: request.imageStore });
  // Last before the unmount: what `snapshot upload` checks its tags against (a copy's is the parent's until now).
  steps.push({ step: "record-image-set", images: [...request.images], imageStore: request.imageStore });
  steps.push({ step: "unmount", mountPoint });
  steps.push({ step: "identify" });
  if ("image" in target) steps.push({ step: "detach-loop" });
  return { steps };
}

/** One line per step, for `--dry-run` and the log. */
export function describeStep(step: BuildStep): string {
  const { step: name, ...rest } = step;
  const details = Object.entries(rest)
    .map(([key, value]) => `${key}=${Array.isArray(value) ? value.join(",") : String(value)}`)
    .join(" ");
  return details ? `${name} ${details}` : name;
}
