/**
 * `snapshot build`: runs the steps build-plan.ts plans, in order, through the machine's tools
 * (deps, wired in src/cli/snapshot-build.ts). What a step acquires (the loop device, the mount,
 * the dockerd) is pushed on an undo stack: a failing step (or SIGTERM between steps) undoes the
 * stack in reverse, so a failed build leaves nothing mounted or attached. A build killed outright
 * leaves them: its rerun's first step (`clean-leftovers`) takes them down, then builds anew.
 */
import { dirname, resolve } from "node:path";
import { describeDiskError, diskErrorKind, type DiskErrorKind } from "../../disk-errors.ts";
import type { ImageStore } from "../../docker/engine.ts";
import { AgentError, ExitCode, describeError, stopSignalName } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import { progressReporter, type ProgressOutputs, type ProgressReporter } from "../../progress.ts";
import type { PullBytes } from "../../docker/pull-stream.ts";
import { buildPaths, describeStep, type BuildRequest, type BuildStep } from "./build-plan.ts";

/** The build's plan (build-plan.ts, pure): what `snapshot build` prints with --dry-run and then runs. */
export { buildPaths, describeStep, planBuild, type BuildRequest } from "./build-plan.ts";
import { imageSetRecordText } from "./image-set-record.ts";

/** The build's dockerd, as the steps use it. */
export interface BuildDocker {
  readonly engineVersion: string;
  readonly imageStore: ImageStore;
  /** `docker load -i tarball`; stopped (the CLI killed) when `signal` aborts. */
  load(tarball: string, signal?: AbortSignal): Promise<void>;
  /** Whether the image is in the store. */
  has(image: string): Promise<boolean>;
  /**
   * Pulls `image`, telling `onBytes` the pull's bytes where docker reports them; stopped (dockerd
   * cancels the pull) when `signal` aborts.
   */
  pull(image: string, signal?: AbortSignal, onBytes?: (bytes: PullBytes) => void): Promise<void>;
  /** Removes every image but `keep` (by id: their other tags go too); returns how many went. */
  removeAllBut(keep: readonly string[]): Promise<number>;
  /**
   * The files `image` reads at start, as layer files from the root of the volume mounted at
   * `volume` (src/host/record-reads.ts).
   */
  recordReads(image: string, volume: string, scratch: string): Promise<string[]>;
  stop(): Promise<void>;
}

/** What the build does to the machine: every side effect of a step. */
export interface VolumeBuildDeps {
  /** Stops a killed build's dockerd, unmounts under the work folder, detaches the image's loops. */
  cleanLeftovers(workDir: string, image: string | undefined): Promise<void>;
  /** Makes `image` the build's to write (refuses a file it did not make), marking it as in the making. */
  claimImageFile(workDir: string, image: string): Promise<void>;
  releaseImageFile(workDir: string): Promise<void>;
  /** Removes the half-made image and its marker (a full disk: the space it holds is what the build lacked). */
  discardImageFile(workDir: string, image: string): Promise<void>;
  createImage(image: string, bytes: number): Promise<void>;
  /** A copy of `from`, made `bytes` long (never shorter than `from`). */
  copyImage(from: string, image: string, bytes: number): Promise<void>;
  /** Grows the mounted file system to its device's size. */
  grow(mountPoint: string): Promise<void>;
  attachLoop(image: string): Promise<string>;
  detachLoop(device: string): Promise<void>;
  /** mkfs.xfs with the agent's label and options, on a device found blank. */
  format(device: string, label: string): Promise<void>;
  mount(device: string, mountPoint: string): Promise<void>;
  unmount(mountPoint: string): Promise<void>;
  /** Removes the volume's need list (the agent's folder on it). */
  clearNeedList(mountPoint: string): Promise<void>;
  writeNeedList(mountPoint: string, image: string, files: string[]): Promise<void>;
  startDockerd(root: string, dataRoot: string, imageStore: ImageStore): Promise<BuildDocker>;
  /**
   * Removes what must not travel between machines from the stopped dockerd's data-root (and, with
   * the containerd store, from containerd's root beside it).
   */
  stripMachineLocalState(dataRoot: string, imageStore: ImageStore): Promise<string[]>;
  /** Writes the image set record (its text: image-set-record.ts) onto the volume mounted at `mountPoint`. */
  writeImageSetRecord(mountPoint: string, text: string): Promise<void>;
  /** The agent's own identification of the device (throws when it would refuse it). */
  identify(device: string): Promise<void>;
  log: Logger;
  /** A clock in ms (default `performance.now`): the build's seconds and its progress's rate. */
  now?: () => number;
  signal?: AbortSignal;
  /** Where the progress line goes besides the log: a terminal's line, systemd's STATUS= (src/cli/common.ts). */
  progress?: Pick<ProgressOutputs, "terminal" | "status">;
}

/** What was built: what the upload's tags say (`snapshot upload --image-store … --engine-version …`). */
export interface VolumeBuildReport {
  image?: string;
  device?: string;
  parentImage?: string;
  images: string[];
  imageStore: ImageStore;
  engineVersion: string;
  /** Images whose reads at start are in the volume's need list. */
  needList: string[];
  /** Images removed because the set no longer names them (a copy of the previous generation). */
  removedImages: number;
  /** Paths of machine-local state removed from the data-root. */
  stripped: number;
  seconds: number;
}

/** The build could not finish; what it had set up was undone. */
export class VolumeBuildError extends AgentError {}

/** A build under way: what its steps have acquired so far, and what the report says. */
interface BuildRun {
  deps: VolumeBuildDeps;
  request: BuildRequest;
  mountPoint: string;
  /** What a failing step undoes, in reverse. */
  undo: Array<{ what: string; run: () => Promise<void> }>;
  device: string | undefined;
  docker: BuildDocker | undefined;
  report: Omit<VolumeBuildReport, "seconds">;
  /** The progress line: step k of n and its name, and a pull's bytes. */
  progress: ProgressReporter;
  /** This run created (or copied) the image file. */
  imageMade: boolean;
}

/** Runs the planned steps; returns the report, or throws after undoing what was set up. */
export async function runVolumeBuild(
  deps: VolumeBuildDeps,
  request: BuildRequest,
  steps: readonly BuildStep[],
): Promise<VolumeBuildReport> {
  const { log } = deps;
  const now = deps.now ?? (() => performance.now());
  const started = now();
  const run: BuildRun = {
    deps,
    request,
    mountPoint: buildPaths(request.workDir).mountPoint,
    undo: [],
    device: "device" in request.target ? request.target.device : undefined,
    docker: undefined,
    report: {
      ...("image" in request.target ? { image: request.target.image } : { device: request.target.device }),
      ...("image" in request.target && request.target.parentImage ? { parentImage: request.target.parentImage } : {}),
      images: [...request.images],
      imageStore: request.imageStore,
      engineVersion: "",
      needList: [],
      removedImages: 0,
      stripped: 0,
    },
    progress: progressReporter({ log, event: "snapshot.progress", now, ...deps.progress }),
    imageMade: false,
  };

  let current: BuildStep | undefined;
  try {
    for (const [index, step] of steps.entries()) {
      if (deps.signal?.aborted)
        throw new VolumeBuildError(`stopped by ${stopSignalName(deps.signal)}`, "run the build again");
      current = step;
      log.info("snapshot.build-step", describeStep(step));
      // Each step's start is told (a new step is always a line): its own progress, if any, follows.
      run.progress.update({ step: stepFigures(steps, index) });
      await runStep(run, step, stepFigures(steps, index));
    }
    // The end is always told (and the terminal's line cleared).
    if (steps.length > 0) run.progress.update({ step: stepFigures(steps, steps.length - 1) }, true);
  } catch (caught) {
    // A step the signal cut short (a pull, a load) failed because of the stop, not by itself.
    const error =
      deps.signal?.aborted && !(caught instanceof VolumeBuildError)
        ? new VolumeBuildError(
            `stopped by ${stopSignalName(deps.signal)} during ${current?.step ?? "the build"}`,
            "run the build again",
            ExitCode.failure,
            {
              cause: caught,
            },
          )
        : caught;
    await undoAll(run);
    const kind = diskErrorKind(caught);
    if (kind === undefined) throw error;
    const image = "image" in request.target ? request.target.image : undefined;
    const discard = kind === "no-space" && run.imageMade && image !== undefined;
    if (discard) await discardHalfMadeImage(run, image);
    throw diskFullError(request, current?.step ?? "the build", kind, caught, discard);
  }
  if ("image" in request.target) await deps.releaseImageFile(request.workDir);
  const built: VolumeBuildReport = { ...run.report, seconds: Math.round((now() - started) / 1000) };
  log.notice("snapshot.built", "the image set is built into the volume's file system", {
    images: built.images.join(","),
    store: built.imageStore,
    engine: built.engineVersion,
    seconds: built.seconds,
  });
  return built;
}

/**
 * A full (or read-only) disk stopped the build: not the agent's bug. The image's own file system
 * (`--size-gib`) or the folder that holds the image may be the full one: the line names both.
 */
function diskFullError(
  request: BuildRequest,
  step: string,
  kind: DiskErrorKind,
  cause: unknown,
  discarded: boolean,
): VolumeBuildError {
  const folder = "image" in request.target ? dirname(resolve(request.target.image)) : request.workDir;
  const removed = discarded ? "; the half-made image is removed" : "";
  return new VolumeBuildError(
    `${describeDiskError(kind)} during ${step}: ${describeError(cause)}${removed}`,
    kind === "no-space"
      ? `free space on the filesystem of ${folder} (df -h ${folder}), or give a larger --size-gib when the ` +
          "image set outgrew the image, and run the build again"
      : `remount the filesystem of ${folder} read-write, or give an --image on a writable one, and run the build again`,
    ExitCode.failure,
    { cause },
  );
}

/** The image a full disk stopped, removed with its marker: a rerun would replace it, and it holds the space. */
async function discardHalfMadeImage(run: BuildRun, image: string): Promise<void> {
  try {
    await run.deps.discardImageFile(run.request.workDir, image);
  } catch (error) {
    run.deps.log.error("snapshot.build-undo-failed", "could not remove the half-made image", {
      image,
      error: describeError(error),
    });
  }
}

/** Undoes what the steps set up, last first; an undo that fails is logged, and the others still run. */
async function undoAll(run: BuildRun): Promise<void> {
  for (const entry of run.undo.reverse()) {
    try {
      await entry.run();
    } catch (undoError) {
      run.deps.log.error("snapshot.build-undo-failed", `could not undo the ${entry.what}`, {
        error: describeError(undoError),
      });
    }
  }
}

function needDevice(run: BuildRun): string {
  if (run.device === undefined) throw new AgentError("no device: the plan attaches one first", "report this bug");
  return run.device;
}

function needDocker(run: BuildRun): BuildDocker {
  if (run.docker === undefined) throw new AgentError("no dockerd: the plan starts one first", "report this bug");
  return run.docker;
}

/** Drops the undo entry of what a step just took down itself. */
function done(run: BuildRun, what: string): void {
  const at = run.undo.findLastIndex((entry) => entry.what === what);
  if (at >= 0) run.undo.splice(at, 1);
}

/** Step k of n, named by what it does (`ensure-image lab/a:1`). */
function stepFigures(steps: readonly BuildStep[], index: number) {
  const step = steps[index]!;
  const name = step.step === "ensure-image" ? `${step.step} ${step.image}` : step.step;
  return { index: index + 1, count: steps.length, name };
}

/** One step's side effects, and what it acquired pushed on the undo stack. */
async function runStep(run: BuildRun, step: BuildStep, figures: ReturnType<typeof stepFigures>): Promise<void> {
  const { deps, undo, report, mountPoint } = run;
  switch (step.step) {
    case "clean-leftovers":
      await deps.cleanLeftovers(step.workDir, step.image);
      if (step.image !== undefined) await deps.claimImageFile(step.workDir, step.image);
      return;
    case "create-image":
      run.imageMade = true;
      return deps.createImage(step.image, step.bytes);
    case "copy-image":
      run.imageMade = true;
      return deps.copyImage(step.from, step.image, step.bytes);
    case "attach-loop": {
      const attached = await deps.attachLoop(step.image);
      run.device = attached;
      undo.push({ what: "loop", run: () => deps.detachLoop(attached) });
      return;
    }
    case "format":
      return deps.format(needDevice(run), step.label);
    case "mount":
      await deps.mount(needDevice(run), step.mountPoint);
      undo.push({ what: "mount", run: () => deps.unmount(step.mountPoint) });
      return;
    case "grow":
      return deps.grow(step.mountPoint);
    case "clear-need-list":
      return deps.clearNeedList(mountPoint);
    case "start-dockerd": {
      const started = await deps.startDockerd(step.root, step.dataRoot, step.imageStore);
      run.docker = started;
      report.engineVersion = started.engineVersion;
      undo.push({ what: "dockerd", run: () => started.stop() });
      return;
    }
    case "load":
      return needDocker(run).load(step.tarball, deps.signal);
    case "ensure-image":
      return ensureImage(run, step, figures);
    case "remove-other-images":
      report.removedImages = await needDocker(run).removeAllBut(step.keep);
      return;
    case "record-reads": {
      const files = await needDocker(run).recordReads(step.image, mountPoint, run.request.workDir);
      await deps.writeNeedList(mountPoint, step.image, files);
      report.needList.push(step.image);
      return;
    }
    case "stop-dockerd":
      await needDocker(run).stop();
      done(run, "dockerd");
      run.docker = undefined;
      return;
    case "strip-machine-local-state":
      report.stripped = (await deps.stripMachineLocalState(step.dataRoot, step.imageStore)).length;
      return;
    case "record-image-set":
      return deps.writeImageSetRecord(
        mountPoint,
        imageSetRecordText({ images: step.images, imageStore: step.imageStore, engineVersion: report.engineVersion }),
      );
    case "unmount":
      await deps.unmount(step.mountPoint);
      done(run, "mount");
      return;
    case "identify":
      return deps.identify(needDevice(run));
    case "detach-loop":
      await deps.detachLoop(needDevice(run));
      done(run, "loop");
      return;
  }
}

/** The image in the store: already there, or pulled when pulling is on. */
async function ensureImage(
  run: BuildRun,
  step: Extract<BuildStep, { step: "ensure-image" }>,
  figures: ReturnType<typeof stepFigures>,
): Promise<void> {
  const d = needDocker(run);
  if (await d.has(step.image)) return;
  if (!step.pull) {
    throw new VolumeBuildError(
      `${step.image} is in none of the tarballs, and pulling is off`,
      "give the tarball that holds it (--load), or let the build pull it (without --no-pull)",
    );
  }
  let last: PullBytes | undefined;
  await d.pull(step.image, run.deps.signal, (bytes) => {
    last = bytes;
    run.progress.update({ step: figures, bytes });
  });
  // The pull's end, always in the log: a paced line may have left it out.
  if (last) run.progress.update({ step: figures, bytes: { done: last.total, total: last.total } }, true);
}
