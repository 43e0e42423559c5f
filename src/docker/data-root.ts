/**
 * Makes a data-root that came from another machine safe to hand to this machine's dockerd:
 * removes the state that must not travel (see layout.ts MACHINE_LOCAL_STATE), keeps the images.
 *
 * What goes, for both kinds of volume:
 * - `swarm/`: the node's swarm identity (key, certificates, raft state): two machines with the
 *   same one would fight over one node;
 * - `engine-id` (docker 23+): the engine's own id, regenerated when missing;
 * - `containers/*`: containers of the machine that used the volume last (dockerd would restore
 *   them as exited containers, with networks that no longer exist);
 * - for overlay2, the read-write and init layers of those containers
 *   (`image/overlay2/layerdb/mounts/<id>` names them by `mount-id`/`init-id`, and
 *   `overlay2/l/<link>` points at them). Left behind they are not harmless: nothing ever removes
 *   them (no container owns them, `docker system prune` does not see them) and each one holds a
 *   reference on its image's layers, so `docker rmi` would never free those layers' space on the
 *   volume. Other drivers keep them (and a warning says so): their layouts differ;
 * - `network/files/local-kv.db`: the local networks' state (endpoints of those containers).
 * Pool volumes also lose `volumes/*` (named volumes): a pool volume goes from user to user, and one
 * user's data must not reach the next. Workspace volumes keep `volumes/`: that is the user's data.
 *
 * Nothing is followed out of the data-root: a symlink to remove is unlinked (its target is never
 * touched), a folder reached through a symlink is skipped with a warning, and nothing may be
 * mounted below the data-root (a running dockerd's layers, a bind mount), or it is refused.
 */
import { constants } from "node:fs";
import { lstat, open, readdir, readFile, realpath, rm } from "node:fs/promises";
import { isAbsolute, join, normalize, sep } from "node:path";
import { AgentError, describeError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { VolumeKind } from "../tags.ts";

/** The data-root cannot be prepared (not a data-root, in use, unreadable): docker has not seen it. */
export class DataRootError extends AgentError {
  constructor(
    readonly dataRoot: string,
    message: string,
    remediation: string,
    options?: { cause?: unknown },
  ) {
    super(message, remediation, undefined, options);
  }
}

export interface PrepareDataRootOptions {
  kind: VolumeKind;
  /**
   * The store the images are in (default graphdriver). With `containerd` the data-root has no
   * `image/` folder (the images are in containerd's root beside it, containerd-store.ts): it is
   * recognised by containerd's metadata folder on the volume instead.
   */
  imageStore?: "graphdriver" | "containerd";
  log?: Logger;
}

/** What prepareDataRoot found and did. */
export interface PreparedDataRoot {
  dataRoot: string;
  kind: VolumeKind;
  /** Graph drivers with an image store in the data-root (`image/<driver>/`), e.g. ["overlay2"]. */
  drivers: string[];
  /** Paths removed, relative to the data-root. */
  removed: string[];
  /** Paths left alone on purpose (reached through a symlink, unknown driver layout), with why. */
  skipped: string[];
}

const LAYER_ID = /^[0-9a-f]{64}(?:-init)?$/;
/** overlay2's short link names (`overlay2/l/<26 base32 characters>`). */
const OVERLAY_LINK = /^[A-Z0-9]{26}$/;
const DRIVER_NAME = /^[a-z0-9][a-z0-9-]*$/;

/** Removes machine-local state from `dataRoot` (see the module comment) before dockerd opens it. */
export async function prepareDataRoot(dataRoot: string, options: PrepareDataRootOptions): Promise<PreparedDataRoot> {
  const root = normalize(dataRoot).replace(/\/+$/, "") || "/";
  await assertDataRoot(root, options.imageStore ?? "graphdriver");
  await assertNothingMountedUnder(root);
  const { log, kind } = options;
  const drivers = (await kindOf(join(root, "image"))) === "directory" ? await imageDrivers(root) : [];
  const report: PreparedDataRoot = { dataRoot: root, kind, drivers, removed: [], skipped: [] };
  const tree = new ScopedTree(root, report, log);

  await tree.remove("swarm");
  await tree.remove("engine-id");
  for (const driver of report.drivers) await removeContainerLayers(tree, driver);
  await tree.removeChildren("containers");
  await tree.remove(join("network", "files", "local-kv.db"));
  if (kind === VolumeKind.pool) await tree.removeChildren("volumes");

  log?.info("docker.data-root-prepared", `removed machine-local state from the ${kind} volume's data-root`, {
    dataRoot: root,
    removed: report.removed.length,
    skipped: report.skipped.length,
    drivers: report.drivers.join(","),
  });
  return report;
}

/** containerd's metadata, in its root beside the data-root: what marks a containerd-store volume's data-root. */
const CONTAINERD_METADATA = join("..", "containerd", "io.containerd.metadata.v1.bolt");

async function assertDataRoot(root: string, store: "graphdriver" | "containerd"): Promise<void> {
  const remediation =
    store === "containerd"
      ? "check that the volume is mounted and holds a docker data-root with containerd's root beside it (containerd/io.containerd.metadata.v1.bolt)"
      : "check that the volume is mounted and holds a docker data-root (an image/ folder)";
  if (!isAbsolute(root) || root === "/") {
    throw new DataRootError(root, `refusing to prepare ${JSON.stringify(root)}: not an absolute folder below /`, remediation);
  }
  const kind = await kindOf(root);
  if (kind !== "directory") {
    throw new DataRootError(root, `data-root ${root} is ${kind === "missing" ? "missing" : `a ${kind}, not a folder`}`, remediation);
  }
  if (store === "containerd") {
    if ((await kindOf(join(root, CONTAINERD_METADATA))) !== "directory") {
      throw new DataRootError(root, `${root} does not look like a containerd-store data-root: no ${normalize(join(root, CONTAINERD_METADATA))} beside it`, remediation);
    }
    return;
  }
  if ((await kindOf(join(root, "image"))) !== "directory") {
    throw new DataRootError(root, `${root} does not look like a docker data-root: it has no image/ folder`, remediation);
  }
}

async function assertNothingMountedUnder(root: string): Promise<void> {
  // mountinfo names real paths: compare with the data-root's real path too (a symlink above it).
  const roots = [...new Set([root, await realpath(root)])];
  const below = (await mountPoints()).filter((mountPoint) => roots.some((dir) => mountPoint.startsWith(`${dir}/`)));
  if (below.length > 0) {
    throw new DataRootError(
      root,
      `${below.length} mount(s) below ${root} (${below.slice(0, 3).join(", ")}): docker seems to be running on it`,
      "stop docker (systemctl stop docker) and unmount what is left below the data-root, then run again",
    );
  }
}

/** Mount points of this mount namespace, unescaped (`\040` is a space in /proc/self/mountinfo). */
async function mountPoints(): Promise<string[]> {
  const text = await readFile("/proc/self/mountinfo", "utf8");
  return text
    .split("\n")
    .map((line) => line.split(" ")[4])
    .filter((field): field is string => field !== undefined)
    .map((field) => field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8))));
}

async function imageDrivers(root: string): Promise<string[]> {
  const entries = await readdir(join(root, "image"), { withFileTypes: true });
  return entries
    .filter((entry) => entry.isDirectory() && DRIVER_NAME.test(entry.name))
    .map((entry) => entry.name)
    .sort();
}

/**
 * The rw and init layers of containers, for overlay2: the ids come from layerdb/mounts, each
 * checked to be a layer id before it names a folder.
 */
async function removeContainerLayers(tree: ScopedTree, driver: string): Promise<void> {
  const mounts = join("image", driver, "layerdb", "mounts");
  const containers = await tree.children(mounts);
  if (containers.length === 0) return;
  if (driver !== "overlay2") {
    tree.skip(mounts, `the layers of removed containers stay: the ${driver} layout is not one the agent cleans`);
    return;
  }
  for (const container of containers) {
    for (const idFile of ["mount-id", "init-id"]) {
      const id = await tree.readSmallFile(join(mounts, container, idFile));
      if (id === undefined || !LAYER_ID.test(id)) continue;
      const link = await tree.readSmallFile(join(driver, id, "link"));
      if (link !== undefined && OVERLAY_LINK.test(link)) await tree.remove(join(driver, "l", link));
      await tree.remove(join(driver, id));
    }
    await tree.remove(join(mounts, container));
  }
}

type EntryKind = "directory" | "file" | "symlink" | "other" | "missing";

async function kindOf(path: string): Promise<EntryKind> {
  try {
    const info = await lstat(path);
    if (info.isSymbolicLink()) return "symlink";
    if (info.isDirectory()) return "directory";
    return info.isFile() ? "file" : "other";
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return "missing";
    throw error;
  }
}

/** Removal inside one folder, never through a symlink: every folder on the way is checked with lstat. */
class ScopedTree {
  constructor(
    private readonly root: string,
    private readonly report: PreparedDataRoot,
    private readonly log: Logger | undefined,
  ) {}

  /** Removes `relative` (a folder recursively; a symlink as a link). */
  async remove(relative: string): Promise<void> {
    const path = await this.reach(relative);
    if (path === undefined || (await kindOf(path)) === "missing") return;
    try {
      // rm does not follow symlinks inside the folder either: it lstat()s and unlinks them.
      await rm(path, { recursive: true, force: true });
    } catch (error) {
      throw this.failure(relative, "remove", error);
    }
    this.report.removed.push(relative);
    this.log?.debug("docker.data-root-removed", `removed ${relative}`, { dataRoot: this.root });
  }

  /** Removes everything inside the folder `relative`, keeping the folder. */
  async removeChildren(relative: string): Promise<void> {
    for (const name of await this.children(relative)) await this.remove(join(relative, name));
  }

  /** Names inside the folder `relative`, or none when it is missing or reached through a symlink. */
  async children(relative: string): Promise<string[]> {
    const path = await this.reach(relative);
    if (path === undefined) return [];
    const kind = await kindOf(path);
    if (kind === "missing") return [];
    if (kind !== "directory") {
      this.skip(relative, `a ${kind}, not a folder`);
      return [];
    }
    try {
      return (await readdir(path)).sort();
    } catch (error) {
      throw this.failure(relative, "list", error);
    }
  }

  /** The trimmed text of a small regular file (not through a symlink), or undefined. */
  async readSmallFile(relative: string): Promise<string | undefined> {
    const path = await this.reach(relative);
    if (path === undefined) return undefined;
    let handle;
    try {
      handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    } catch {
      return undefined;
    }
    try {
      const buffer = Buffer.alloc(256);
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
      return buffer.subarray(0, bytesRead).toString("utf8").trim();
    } finally {
      await handle.close();
    }
  }

  skip(relative: string, why: string): void {
    this.report.skipped.push(`${relative}: ${why}`);
    this.log?.warning("docker.data-root-skipped", `left ${relative} alone: ${why}`, { dataRoot: this.root });
  }

  /**
   * The absolute path of `relative` when every folder above it is a real folder inside the root;
   * undefined (with a warning) when one is a symlink or not a folder; missing folders are fine.
   */
  private async reach(relative: string): Promise<string | undefined> {
    const parts = normalize(relative).split(sep);
    if (parts.some((part) => part === ".." || part === "" || part === ".")) {
      throw new DataRootError(this.root, `refusing the path ${relative} inside the data-root`, "report this bug");
    }
    let path = this.root;
    for (const [index, part] of parts.entries()) {
      if (index === parts.length - 1) return join(path, part);
      path = join(path, part);
      const kind = await kindOf(path);
      if (kind === "missing") return join(this.root, relative);
      if (kind !== "directory") {
        this.skip(relative, `${parts.slice(0, index + 1).join("/")} is a ${kind}, not a folder`);
        return undefined;
      }
    }
    return path;
  }

  private failure(relative: string, action: string, cause: unknown): DataRootError {
    return new DataRootError(
      this.root,
      `could not ${action} ${join(this.root, relative)}: ${describeError(cause)}`,
      "check the volume's filesystem (xfs_repair -n on the unmounted device) and run again",
      { cause },
    );
  }
}
