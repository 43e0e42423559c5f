/**
 * `ebs-cache-agent snapshot build`: the image set built into a sparse XFS image (the pool
 * volume's file system), on any Linux machine with root and docker installed, with no instance:
 * the plan (src/agent/snapshot/build-plan.ts) run by src/agent/snapshot/build.ts through the
 * machine's tools wired here. The lab's golden build (src/lab/volumes/golden.ts) runs the same
 * steps through the same wiring, on its builder volume.
 */
import { AGENT_SUBDIR } from "../layout.ts";
import { join, resolve } from "node:path";
import { Command, InvalidArgumentError, Option } from "commander";
import {
  buildPaths,
  describeStep,
  planBuild,
  runVolumeBuild,
  type BuildDocker,
  type BuildRequest,
  type VolumeBuildDeps,
} from "../agent/snapshot/build.ts";
import { startBuildDockerd, stopLeftoverBuildDockerd } from "../docker/build-dockerd.ts";
import { buildContainerdPaths } from "../docker/build-containerd.ts";
import { stripBuiltVolume } from "../docker/built-volume-strip.ts";
import type { ImageStore } from "../docker/engine.ts";
import { pullThroughApi, PullStreamError } from "../docker/pull-stream.ts";
import { ExitCode } from "../errors.ts";
import { run } from "../exec.ts";
import { writeFileAtomic } from "../fs-atomic.ts";
import { dropDeviceCache, formatDevice, growFilesystem } from "../host/filesystem.ts";
import { identifyCacheVolume } from "../host/identify.ts";
import {
  attachLoop,
  claimImageFile,
  cleanBuildLeftovers,
  copySparseImage,
  createSparseImage,
  detachLoop,
  discardImageFile,
  releaseImageFile,
} from "../host/image-file.ts";
import { mountDevice, settleFilesystem, unmountPath } from "../host/mount.ts";
import { recordImageReads, writeImageReads, type ContainerdCli } from "../host/record-reads.ts";
import { writeImageSetRecord } from "../host/pool-image.ts";
import { removeBeneath } from "../host/volume-paths.ts";
import { createLogger, type Logger } from "../log.ts";
import { READ_LIST_FILE } from "../read-list.ts";
import { progressOutputs, stopSignal } from "./common.ts";

/** ctr on the build's own containerd (the containerd store), in the namespace its dockerd uses (`moby`). */
function buildContainerdCli(dockerdRoot: string, log: Logger): ContainerdCli {
  const address = buildContainerdPaths(dockerdRoot).socket;
  return {
    ctr: (args, options) => run("ctr", ["--address", address, "--namespace", "moby", ...args], { log, ...options }),
  };
}

/** The build's dockerd with the image steps the build takes. */
async function startDocker(root: string, dataRoot: string, imageStore: ImageStore, log: Logger): Promise<BuildDocker> {
  const d = await startBuildDockerd({ root, dataRoot, imageStore, log });
  // Large images take long to unpack: these bound a hung daemon, not a slow disk.
  const long = { timeoutMs: 60 * 60_000 };
  // A stop (SIGTERM, SIGINT) kills the CLI: dockerd cancels the pull, and the build undoes.
  const stoppable = (signal: AbortSignal | undefined) => ({ ...long, signal });
  const idOf = async (image: string) => {
    const found = await d.docker(["image", "inspect", "--format", "{{.Id}}", image], { check: false });
    return found.exitCode === 0 ? found.stdout.trim() : undefined;
  };
  return {
    engineVersion: d.engineVersion,
    imageStore: d.imageStore,
    load: async (tarball, signal) => void (await d.docker(["load", "--quiet", "--input", tarball], stoppable(signal))),
    has: async (image) => (await idOf(image)) !== undefined,
    async pull(image, signal, onBytes) {
      try {
        await pullThroughApi(d.socket, image, { ...(signal ? { signal } : {}), ...(onBytes ? { onBytes } : {}) });
      } catch (error) {
        if (!(error instanceof PullStreamError)) throw error;
        // The API pull sent no credentials: the CLI reads the machine's (a private registry), or says why not.
        log.info("snapshot.pull", `pulling through the docker CLI, without bytes shown: ${error.message}`, { image });
        await d.docker(["pull", "--quiet", image], stoppable(signal));
      }
    },
    async removeAllBut(keep) {
      const kept = new Set(await Promise.all(keep.map(idOf)));
      const all = new Set((await d.docker(["image", "ls", "--quiet", "--no-trunc"])).stdout.split(/\s+/));
      const gone = [...all].filter((id) => id !== "" && !kept.has(id));
      for (const id of gone) await d.docker(["image", "rm", "--force", id]);
      return gone.length;
    },
    recordReads: (image, volume, scratch) =>
      recordImageReads(d, {
        image,
        volume,
        workDir: scratch,
        log,
        ...(imageStore === "containerd" ? { containerd: buildContainerdCli(root, log) } : {}),
      }),
    stop: () => d.stop(),
  };
}

/** The build's side effects, on this machine. */
export function volumeBuildDeps(log: Logger, signal?: AbortSignal): VolumeBuildDeps {
  return {
    async cleanLeftovers(workDir, image) {
      await stopLeftoverBuildDockerd(buildPaths(workDir).dockerdRoot, log);
      await cleanBuildLeftovers(workDir, image, log);
    },
    claimImageFile: (workDir, image) => claimImageFile(workDir, image, log),
    releaseImageFile,
    discardImageFile,
    createImage: createSparseImage,
    copyImage: (from, image, bytes) => copySparseImage(from, image, bytes, log),
    grow: async (mountPoint) => void (await growFilesystem(mountPoint, { log })),
    attachLoop: (image) => attachLoop(image, log),
    detachLoop: (device) => detachLoop(device, log),
    format: (device, label) => formatDevice(device, label, { log }),
    mount: (device, mountPoint) => mountDevice(device, mountPoint, { log, fsType: "xfs" }),
    async unmount(mountPoint) {
      // In place, not just in the log: identify (xfs_db) and the image's copy read the device raw.
      await settleFilesystem(mountPoint, { log });
      await unmountPath(mountPoint, { log });
    },
    clearNeedList: async (mountPoint) => void (await removeBeneath(mountPoint, join(AGENT_SUBDIR, READ_LIST_FILE))),
    writeNeedList: (mountPoint, image, files) => writeImageReads(mountPoint, image, files, log),
    startDockerd: (root, dataRoot, imageStore) => startDocker(root, dataRoot, imageStore, log),
    stripMachineLocalState: (dataRoot, imageStore) => stripBuiltVolume(dataRoot, imageStore, log),
    writeImageSetRecord,
    async identify(device) {
      await dropDeviceCache(device, { log });
      const identity = await identifyCacheVolume({ volumeId: "the built image", createdByAgent: false }, device, {
        log,
      });
      if (identity.kind !== "cache") throw new Error(`the built file system on ${device} is ${identity.kind}`);
    },
    log,
    signal,
  };
}

function repeatable(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

function sizeGiB(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1)
    throw new InvalidArgumentError(`expected whole GiB (at least 1), got ${value}`);
  return n;
}

interface BuildOptions {
  image: string;
  sizeGib?: number;
  parentImage?: string;
  images: string;
  load?: string[];
  pull: boolean;
  imageStore: ImageStore;
  recordReads: boolean;
  workDir?: string;
  summary?: string;
  dryRun?: boolean;
  json?: boolean;
}

/** `snapshot build`. */
export function snapshotBuildCommand(): Command {
  return new Command("build")
    .description(
      "build the image set into a sparse XFS image as a pool volume holds it (label ebs-cache, ftype=1, docker/ at " +
        "its root, the need list; with the containerd store containerd/ beside it), with a private dockerd (and " +
        "for the containerd store a private containerd) that loads --load tarballs and pulls the rest; " +
        "machine-local state stripped; then `snapshot upload` it. Needs root, docker (dockerd), xfsprogs, " +
        "util-linux and strace (the need list); the containerd store docker 24 or later and containerd (with its " +
        "ctr: the need list). Never " +
        "touches the machine's docker or containerd, /etc/docker, /etc/containerd or any disk but the image",
    )
    .requiredOption("--image <path>", "the image file to write (must not exist; a killed build's own is replaced)")
    .option(
      "--size-gib <n>",
      "the file system's size (the snapshot's); with --parent-image at least the parent's (default)",
      sizeGiB,
    )
    .option(
      "--parent-image <path>",
      "the previous generation's image: copied and updated rather than formatted anew, so its unchanged blocks stay " +
        "and `snapshot upload --parent` puts only what changed",
    )
    .requiredOption("--images <refs>", "the image set, comma-separated: every one is in the image, nothing else")
    .option("--load <tarball>", "a `docker save` tarball to load first (repeatable)", repeatable)
    .option("--no-pull", "pull nothing: every image must be in a tarball (offline builds)")
    .addOption(
      new Option(
        "--image-store <store>",
        "the image store the hosts run (containerd: their daemon.json sets features.containerd-snapshotter; " +
          "the need list then names files of containerd's snapshots in containerd/)",
      )
        .choices(["graphdriver", "containerd"])
        .default("graphdriver"),
    )
    .option("--no-record-reads", "leave the need list out (the pre-warm then reads the volume in device order)")
    .option(
      "--work-dir <dir>",
      "the build's own folder: mount point, the sockets, configs and logs of its dockerd and containerd " +
        "(default <image>.build)",
    )
    .option("--summary <path>", "also write the report (JSON) there")
    .option("--dry-run", "print the steps and change nothing")
    .option("--json", "print the report as JSON")
    .addHelpText(
      "after",
      "\nA killed build leaves its mount, loop device, dockerd or containerd: run the same command again, " +
        "it takes them down first." +
        "\nExit codes: 0 built, 1 a step failed (what it set up was undone), 2 usage (nothing done).",
    )
    .action(async (opts: BuildOptions) => {
      const log = createLogger();
      const image = resolve(opts.image);
      const parentImage = opts.parentImage ? resolve(opts.parentImage) : undefined;
      let size = opts.sizeGib;
      if (size === undefined && parentImage) {
        const { stat } = await import("node:fs/promises");
        size = Math.ceil((await stat(parentImage)).size / 1024 ** 3);
      }
      if (size === undefined) {
        process.stderr.write("error: give --size-gib (or --parent-image, whose size is kept)\n");
        process.exitCode = ExitCode.usage;
        return;
      }
      const request: BuildRequest = {
        target: { image, sizeGiB: size, ...(parentImage ? { parentImage } : {}) },
        workDir: resolve(opts.workDir ?? `${image}.build`),
        images: opts.images.split(",").filter((s) => s !== ""),
        load: (opts.load ?? []).map((tarball) => resolve(tarball)),
        pull: opts.pull,
        imageStore: opts.imageStore,
        recordReads: opts.recordReads,
      };
      const planned = planBuild(request);
      if ("problems" in planned) {
        process.stderr.write(`error: ${planned.problems.join("; ")}\n`);
        process.exitCode = ExitCode.usage;
        return;
      }
      if (opts.dryRun) {
        process.stdout.write(planned.steps.map((step) => describeStep(step) + "\n").join(""));
        return;
      }
      const report = await runVolumeBuild(
        { ...volumeBuildDeps(log, stopSignal(log)), progress: progressOutputs(log) },
        request,
        planned.steps,
      );
      const json = JSON.stringify({ ...report, sizeGiB: size }, null, 2) + "\n";
      if (opts.summary) await writeFileAtomic(resolve(opts.summary), json);
      process.stdout.write(
        opts.json
          ? json
          : `${image}: ${report.images.length} images (${report.imageStore}, docker ${report.engineVersion}), ` +
              `need list of ${report.needList.length}, ${report.stripped} machine-local paths stripped, ` +
              `${report.seconds} s\n`,
      );
    });
}
