/**
 * The golden build's record of what each image reads when it starts (the need list,
 * src/agent/prewarm/need.ts): the image's layers, as dockerd's overlay2 stores them in the
 * builder's data-root, are mounted read-only under a scratch upper layer; the image's
 * entrypoint/cmd runs chrooted into that view for a bounded time, with no network and its own
 * pid and mount namespaces, under `strace -f`; each file it opened or executed is mapped to the
 * layer file overlay served it from, as a path from the volume's root. Parsing and ordering are
 * pure (src/host/read-trace.ts). Needs root, strace and util-linux's unshare; the overlay2 store
 * only (not containerd's).
 */
import { lstat, mkdir, mkdtemp, readFile, readlink, rm } from "node:fs/promises";
import { join, posix, relative, resolve } from "node:path";
import { AgentError } from "../errors.ts";
import { run, type RunOptions, type RunResult } from "../exec.ts";
import { writeFileAtomic } from "../fs-atomic.ts";
import type { Logger } from "../log.ts";
import { DATA_ROOT_SUBDIR } from "../layout.ts";
import { READ_LIST_FILE, ReadListError, readListText } from "../read-list.ts";
import { firstReads, parseTrace, withImageReads } from "./read-trace.ts";
import { readReadList } from "./need-reads.ts";
import { AGENT_SUBDIR } from "./volume-layout.ts";
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

/** The docker CLI of the builder's dockerd. */
export interface DockerCli {
  docker(args: readonly string[], options?: RunOptions): Promise<RunResult>;
}

interface ImageInspect {
  GraphDriver?: { Name?: string; Data?: { LowerDir?: string; UpperDir?: string } };
  Config?: { Entrypoint?: string[] | null; Cmd?: string[] | null; Env?: string[] | null; WorkingDir?: string };
}

/**
 * Runs `image` (pulled or imported into the dockerd whose data-root is `<volume>/docker`) for at
 * most `seconds` and returns the files it read, as layer files from the volume's root, first read
 * first.
 * `workDir`: where the scratch layer and the trace go (removed afterwards), not on an overlay.
 */
export async function recordImageReads(
  docker: DockerCli,
  options: { image: string; volume: string; workDir: string; seconds?: number; log?: Logger },
): Promise<string[]> {
  const { image, log } = options;
  const volume = resolve(options.volume);
  const dataRoot = join(volume, DATA_ROOT_SUBDIR);
  const seconds = options.seconds ?? DEFAULT_RECORD_SECONDS;
  const inspected = (await docker.docker(["image", "inspect", "--format", "{{json .}}", image], { log })).stdout;
  const { GraphDriver: driver, Config: config } = JSON.parse(inspected) as ImageInspect;
  if (driver?.Name !== "overlay2" || !driver.Data?.UpperDir) {
    throw new AgentError(
      `${image}: stored by ${driver?.Name ?? "an unknown driver"}, not overlay2: its reads cannot be recorded`,
      "record the reads with dockerd's overlay2 storage driver (not the containerd image store)",
    );
  }
  const layerRoot = join(dataRoot, "overlay2");
  const layers = [driver.Data.UpperDir, ...(driver.Data.LowerDir ? driver.Data.LowerDir.split(":") : [])];
  for (const layer of layers) {
    if (relative(layerRoot, layer).startsWith("..")) {
      throw new AgentError(`${image}: layer ${layer} is not under ${layerRoot}`, "pass the dockerd's own data-root");
    }
  }
  const command = [...(config?.Entrypoint ?? []), ...(config?.Cmd ?? [])];
  if (command.length === 0) throw new AgentError(`${image} has neither entrypoint nor cmd`, "give the image a CMD");

  await mkdir(options.workDir, { recursive: true });
  const temp = await mkdtemp(join(options.workDir, "record-reads-"));
  const merged = join(temp, "merged");
  try {
    for (const dir of ["upper", "work", "merged"]) await mkdir(join(temp, dir));
    // Paths relative to overlay2/, as dockerd mounts them: many layers stay within a page of options.
    const lower = layers.map((layer) => relative(layerRoot, layer)).join(":");
    await run(
      "mount",
      [
        "-t",
        "overlay",
        "overlay",
        "-o",
        `lowerdir=${lower},upperdir=${join(temp, "upper")},workdir=${join(temp, "work")}`,
        merged,
      ],
      { cwd: layerRoot, log },
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
        if (!owners.has(path)) owners.set(path, await layerFileOf(layers, volume, path));
      }
      const files = firstReads(resolved, (path) => owners.get(path));
      log?.info("prewarm.record-reads", "recorded the files an image reads at start", {
        image,
        files: files.length,
        seconds,
      });
      return files;
    } finally {
      await run("umount", [merged], { log });
    }
  } finally {
    await rm(temp, { recursive: true, force: true });
  }
}

/**
 * The layer file overlay serves `path` from: the topmost layer holding it as a regular file, as a
 * path from the volume's root.
 */
async function layerFileOf(layers: readonly string[], volume: string, path: string): Promise<string | undefined> {
  for (const layer of layers) {
    const stats = await lstat(join(layer, path)).catch(() => undefined);
    if (stats === undefined) continue;
    return stats.isFile() ? posix.join(relative(volume, layer), path) : undefined;
  }
  return undefined;
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
 * validate is replaced.
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
  const folder = await mkdirBeneath(mountPoint, AGENT_SUBDIR);
  await writeFileAtomic(join(folder, READ_LIST_FILE), readListText(withImageReads(list, image, files)));
}
