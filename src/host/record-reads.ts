/**
 * The golden build's record of what each image reads when it starts (the need list,
 * src/agent/prewarm/need.ts): the image's layers, as the builder's dockerd stores them on the
 * volume (overlay2's in the data-root; with the containerd image store, containerd's overlayfs
 * snapshots in containerd's root: image-layers.ts), are mounted read-only under a scratch upper
 * layer; the image's entrypoint/cmd runs chrooted into that view for a bounded time, with no
 * network and its own pid and mount namespaces, under `strace -f`; each file it opened or
 * executed is mapped to the layer file overlay served it from, as a path from the volume's root. Parsing, ordering and
 * the layers' places are pure (src/host/read-trace.ts, src/host/image-layers.ts). Needs root,
 * strace and util-linux's unshare; with the containerd store, containerd's `ctr`.
 */
import { randomUUID } from "node:crypto";
import { lstat, mkdir, mkdtemp, readFile, readlink, rm } from "node:fs/promises";
import { join, posix, relative, resolve } from "node:path";
import { AgentError } from "../errors.ts";
import { run, type RunOptions, type RunResult } from "../exec.ts";
import { writeFileAtomic } from "../fs-atomic.ts";
import type { Logger } from "../log.ts";
import { READ_LIST_FILE, ReadListError } from "../read-list.ts";
import { AGENT_SUBDIR, CONTAINERD_ROOT_SUBDIR, DATA_ROOT_SUBDIR } from "../layout.ts";
import { chainId, layerPaths, OVERLAYFS_SNAPSHOTTER, servedFile, snapshotLayerDirs } from "./image-layers.ts";
import { firstReads, needListText, parseTrace } from "./read-trace.ts";
import { readReadList } from "./need-reads.ts";
import { mkdirBeneath } from "./volume-paths.ts";

/** How long an image's start is watched by default: long enough for an entrypoint to load its program. */
export const DEFAULT_RECORD_SECONDS = 10;
/** Device nodes a starting program commonly opens; made in the scratch layer (the image has none). */
const DEVICES: Array<[string, number, number]> = [
  ["null", 1, 3],
  ["zero", 1, 5],
  ["random", 1, 8],
  ["urandom", 1, 9],
];
const MAX_LINK_HOPS = 40;
/** The scratch layer's tmpfs: what the run writes in its seconds (a write past it fails, the reads go on). */
const SCRATCH_BYTES = 256 * 1024 * 1024;

/** The docker CLI of the builder's dockerd. */
export interface DockerCli {
  docker(args: readonly string[], options?: RunOptions): Promise<RunResult>;
}

/**
 * `ctr` on the containerd the builder's dockerd keeps its images in (its address and dockerd's
 * namespace, `moby`, given), for the containerd image store.
 */
export interface ContainerdCli {
  ctr(args: readonly string[], options?: RunOptions): Promise<RunResult>;
}

interface ImageInspect {
  GraphDriver?: { Name?: string; Data?: { LowerDir?: string; UpperDir?: string } | null };
  RootFS?: { Layers?: string[] };
  Config?: { Entrypoint?: string[] | null; Cmd?: string[] | null; Env?: string[] | null; WorkingDir?: string };
}

/** An image's layers on the volume: the store's layer folder, and the layers below it, top-most first. */
interface ImageLayers {
  /** Absolute: the overlay's lowerdir entries are given relative to it (a page holds many layers). */
  base: string;
  /** Paths from the volume's root, top-most first. */
  layers: string[];
}

/**
 * Runs `image` (pulled or imported into the builder's dockerd, whose data-root is `<volume>/docker`
 * and, with the containerd store, whose containerd's root is `<volume>/containerd`) for at most
 * `seconds` and returns the files it read, as paths from the volume's root, first read first.
 * `workDir`: where the scratch layer and the trace go (removed afterwards), not on an overlay.
 * `containerd`: how to reach that containerd (the containerd store only).
 */
export async function recordImageReads(
  docker: DockerCli,
  options: {
    image: string;
    volume: string;
    workDir: string;
    seconds?: number;
    log?: Logger;
    containerd?: ContainerdCli;
  },
): Promise<string[]> {
  const { image, log } = options;
  const volume = resolve(options.volume);
  const seconds = options.seconds ?? DEFAULT_RECORD_SECONDS;
  const inspected = (await docker.docker(["image", "inspect", "--format", "{{json .}}", image], { log })).stdout;
  const inspect = JSON.parse(inspected) as ImageInspect;
  const config = inspect.Config;
  const command = [...(config?.Entrypoint ?? []), ...(config?.Cmd ?? [])];
  if (command.length === 0) throw new AgentError(`${image} has neither entrypoint nor cmd`, "give the image a CMD");
  const driver = (await docker.docker(["info", "--format", "{{.Driver}}"], { log })).stdout.trim();
  const { base, layers } =
    driver === "overlay2"
      ? overlay2Layers(image, volume, inspect)
      : await snapshotLayers(image, volume, driver, inspect, options.containerd, log);

  await mkdir(options.workDir, { recursive: true });
  const temp = await mkdtemp(join(options.workDir, "record-reads-"));
  const merged = join(temp, "merged");
  const scratch = join(temp, "scratch");
  let scratchMounted = false;
  try {
    await mkdir(merged);
    await mkdir(scratch);
    // The scratch layer on a tmpfs of its own: overlay refuses an upperdir on an overlay (a work
    // folder in a container's or a machine's root file system).
    await run("mount", ["-t", "tmpfs", "-o", `size=${SCRATCH_BYTES},mode=0700`, "tmpfs", scratch], { log });
    scratchMounted = true;
    for (const dir of ["upper", "work"]) await mkdir(join(scratch, dir));
    const lower = layers.map((layer) => relative(base, join(volume, layer))).join(":");
    await run(
      "mount",
      [
        "-t",
        "overlay",
        "overlay",
        "-o",
        `lowerdir=${lower},upperdir=${join(scratch, "upper")},workdir=${join(scratch, "work")}`,
        merged,
      ],
      { cwd: base, log },
    );
    try {
      await mkdir(join(merged, "dev"), { recursive: true });
      await mkdir(join(merged, "proc"), { recursive: true });
      for (const [name, major, minor] of DEVICES) {
        await run("mknod", [join(merged, "dev", name), "c", String(major), String(minor)], { check: false, log });
      }
      const trace = join(temp, "trace.log");
      // The image's own environment only (env -i); timeout kills unshare, whose --kill-child
      // ends the pid namespace and so every process the image started.
      await run(
        "strace",
        [
          ...["-f", "-y", "-qq", "-e", "trace=open,openat,openat2,execve,chroot", "-e", "status=successful"],
          ...["-o", trace, "--", "/usr/bin/env", "-i", ...(config?.Env ?? [])],
          ...["/usr/bin/timeout", "-s", "KILL", String(seconds), "/usr/bin/unshare"],
          ...["--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", `--root=${merged}`],
          ...[`--wd=${config?.WorkingDir || "/"}`, "--", ...command],
        ],
        { check: false, timeoutMs: (seconds + 60) * 1000, log, remediation: "install strace" },
      );
      const touched = parseTrace(await readFile(trace, "utf8"), merged);
      const resolved: Array<{ path: string }> = [];
      for (const entry of touched) {
        const path = entry.kind === "exec" ? await resolveInRoot(merged, entry.path) : entry.path;
        if (path !== undefined) resolved.push({ path });
      }
      const owners = new Map<string, string | undefined>();
      for (const { path } of resolved) {
        if (!owners.has(path)) owners.set(path, await layerFileOf(volume, layers, path));
      }
      const files = firstReads(resolved, (path) => owners.get(path));
      log?.info("prewarm.record-reads", "recorded the files an image reads at start", {
        image,
        store: driver === "overlay2" ? "graphdriver" : "containerd",
        files: files.length,
        seconds,
      });
      return files;
    } finally {
      await run("umount", [merged], { log });
    }
  } finally {
    if (scratchMounted) await run("umount", [scratch], { log });
    await rm(temp, { recursive: true, force: true });
  }
}

/** The graphdriver store's layers: `docker image inspect`'s GraphDriver, overlay2's `diff` folders in the data-root. */
function overlay2Layers(image: string, volume: string, inspect: ImageInspect): ImageLayers {
  const data = inspect.GraphDriver?.Data;
  if (inspect.GraphDriver?.Name !== "overlay2" || !data?.UpperDir) {
    throw new AgentError(
      `${image}: docker inspect names no overlay2 layers (driver ${inspect.GraphDriver?.Name ?? "unknown"})`,
      "record the reads with dockerd's overlay2 storage driver or the containerd image store (overlayfs)",
    );
  }
  const root = posix.join(DATA_ROOT_SUBDIR, "overlay2");
  const dirs = [data.UpperDir, ...(data.LowerDir ? data.LowerDir.split(":") : [])];
  return { base: join(volume, root), layers: checkedLayers(image, volume, root, "diff", dirs) };
}

/**
 * The containerd store's layers: the snapshots of the image's top snapshot (its chain id), as a
 * read-only view of it mounts them (image-layers.ts), the view removed at once (the image's
 * snapshots it names stay: the image holds them).
 */
async function snapshotLayers(
  image: string,
  volume: string,
  snapshotter: string,
  inspect: ImageInspect,
  containerd: ContainerdCli | undefined,
  log: Logger | undefined,
): Promise<ImageLayers> {
  if (snapshotter !== "overlayfs") {
    throw new AgentError(
      `${image}: dockerd stores images with ${JSON.stringify(snapshotter)}: its reads cannot be recorded`,
      "record the reads with dockerd's overlay2 storage driver or the containerd image store's overlayfs snapshotter",
    );
  }
  if (containerd === undefined) {
    throw new AgentError(
      `${image}: dockerd keeps its images in containerd, and no containerd address was given`,
      "give the address of the containerd dockerd uses (record-reads --containerd-address)",
    );
  }
  const top = chainId(inspect.RootFS?.Layers ?? []);
  if (top === undefined) throw new AgentError(`${image} has no layers`, "record the reads of an image with files");
  const key = `ebs-cache-record-reads-${randomUUID()}`;
  const snapshots = ["snapshots", "--snapshotter", snapshotter];
  const view = await containerd.ctr([...snapshots, "view", "--mounts", key, top], {
    log,
    remediation: "install containerd's ctr; check that the image is unpacked (docker image ls lists it)",
  });
  await removeView(containerd, [...snapshots, "rm", key], log);
  const root = posix.join(CONTAINERD_ROOT_SUBDIR, OVERLAYFS_SNAPSHOTTER, "snapshots");
  let dirs: string[];
  try {
    dirs = snapshotLayerDirs(view.stdout);
  } catch (error) {
    throw new AgentError(`${image}: ${(error as Error).message}`, "report this: ctr's output changed");
  }
  return { base: join(volume, root), layers: checkedLayers(image, volume, root, "fs", dirs) };
}

/**
 * Removes the view `ctr snapshots view` made. ctr makes it under no lease, so containerd's
 * garbage collector may have removed it already (any deletion in the namespace schedules a
 * collection): "not found" is the state wanted. The mounts it printed stay true, as the image's
 * own snapshots they name are held by the image.
 */
export async function removeView(
  containerd: ContainerdCli,
  args: readonly string[],
  log: Logger | undefined,
): Promise<void> {
  const removed = await containerd.ctr(args, { log, check: false });
  if (removed.exitCode === 0 || /\bnot found\b/.test(removed.stderr)) return;
  throw new AgentError(
    `ctr ${args.join(" ")} exited ${removed.exitCode}: ${removed.stderr.trim()}`,
    "remove the snapshot with the same ctr command once containerd answers; it holds no data of its own",
  );
}

function checkedLayers(image: string, volume: string, root: string, leaf: string, dirs: readonly string[]): string[] {
  try {
    return layerPaths(volume, root, leaf, dirs);
  } catch (error) {
    throw new AgentError(
      `${image}: ${(error as Error).message}`,
      "run the recording against the dockerd (and containerd) whose roots are on the volume given",
    );
  }
}

/** The layer file overlay serves `path` from (image-layers.ts servedFile), looked up in the layers. */
async function layerFileOf(volume: string, layers: readonly string[], path: string): Promise<string | undefined> {
  const kinds: Array<"file" | "other" | "missing"> = [];
  for (const layer of layers) {
    const stats = await lstat(join(volume, layer, path)).catch(() => undefined);
    kinds.push(stats === undefined ? "missing" : stats.isFile() ? "file" : "other");
    if (stats !== undefined) break;
  }
  return servedFile(layers, path, kinds);
}

/** `path` (root-relative) with its links resolved as the chrooted run saw them; undefined past 40 hops or outside. */
async function resolveInRoot(root: string, path: string): Promise<string | undefined> {
  let pending = path.split("/").filter((part) => part !== "" && part !== ".");
  const done: string[] = [];
  for (let hops = 0; pending.length > 0;) {
    const part = pending.shift()!;
    if (part === "..") {
      done.pop();
      continue;
    }
    const here = join(root, ...done, part);
    const stats = await lstat(here).catch(() => undefined);
    if (stats === undefined) return undefined;
    if (!stats.isSymbolicLink()) {
      done.push(part);
      continue;
    }
    if (++hops > MAX_LINK_HOPS) return undefined;
    const target = await readlink(here);
    if (target.startsWith("/")) done.length = 0;
    pending = [...target.split("/").filter((p) => p !== "" && p !== "."), ...pending];
  }
  return done.join("/");
}

/**
 * Stores `files` as `image`'s entry of the need list on the volume mounted at `mountPoint`
 * (`.ebs-cache-agent/reads.json`), keeping the other images' entries; a list that does not
 * validate is replaced. Files the boot would refuse are left out (a warning); a list the boot
 * would refuse whole is not written (read-trace.ts needListText throws).
 */
export async function writeImageReads(mountPoint: string, image: string, files: string[], log?: Logger): Promise<void> {
  let list;
  try {
    list = await readReadList(mountPoint);
  } catch (error) {
    if (!(error instanceof ReadListError)) throw error;
    log?.warning("prewarm.need-list-replaced", "the volume's need list does not validate: replacing it", {
      error: error.message,
    });
  }
  const { text, dropped } = needListText(list, image, files);
  if (dropped > 0)
    log?.warning("prewarm.need-list-dropped", "files the boot would refuse are left out of the need list", {
      image,
      dropped,
    });
  const folder = await mkdirBeneath(mountPoint, AGENT_SUBDIR);
  await writeFileAtomic(join(folder, READ_LIST_FILE), text);
}
