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
 * Nothing is followed out of the data-root (every path through src/host/volume-paths.ts): a
 * symlink to remove is unlinked (its target is never touched), a folder on the way that is a
 * symlink or anything but a folder refuses the volume (VolumePathError; the boot checked the
 * whole layout before, src/host/volume-layout.ts), and nothing may be mounted below the
 * data-root (a running dockerd's layers, a bind mount), or it is refused.
 */
import { isAbsolute, join, normalize } from "node:path";
import { AgentError, describeError } from "../errors.ts";
import { canonicalPath, readMountTable } from "../host/mount.ts";
import { entryKind, listBeneath, readFileBeneath, removeBeneath, VolumePathError } from "../host/volume-paths.ts";
import type { Logger } from "../log.ts";
import { VolumeKind } from "../tags.ts";

/** The data-root cannot be prepared (not a data-root, in use, unreadable): docker has not seen it. */
export class DataRootError extends AgentError {
  readonly dataRoot: string;

  constructor(dataRoot: string, message: string, remediation: string, options?: { cause?: unknown }) {
    super(message, remediation, undefined, options);
    this.dataRoot = dataRoot;
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
  /** Paths left alone on purpose (an unknown driver layout), with why. */
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
  const drivers = (await entryKind(join(root, "image"))) === "folder" ? await imageDrivers(root) : [];
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
      ? "check that the volume is mounted and holds a docker data-root with containerd's root beside it " +
        "(containerd/io.containerd.metadata.v1.bolt)"
      : "check that the volume is mounted and holds a docker data-root (an image/ folder)";
  if (!isAbsolute(root) || root === "/") {
    throw new DataRootError(
      root,
      `refusing to prepare ${JSON.stringify(root)}: not an absolute folder below /`,
      remediation,
    );
  }
  const kind = await entryKind(root);
  if (kind !== "folder") {
    throw new DataRootError(
      root,
      `data-root ${root} is ${kind === "missing" ? "missing" : `a ${kind}, not a folder`}`,
      remediation,
    );
  }
  if (store === "containerd") {
    if ((await entryKind(join(root, CONTAINERD_METADATA))) !== "folder") {
      throw new DataRootError(
        root,
        `${root} does not look like a containerd-store data-root: no ` +
          `${normalize(join(root, CONTAINERD_METADATA))} beside it`,
        remediation,
      );
    }
    return;
  }
  if ((await entryKind(join(root, "image"))) !== "folder") {
    throw new DataRootError(
      root,
      `${root} does not look like a docker data-root: it has no image/ folder`,
      remediation,
    );
  }
}

async function assertNothingMountedUnder(root: string): Promise<void> {
  // mountinfo names real paths: compare with the data-root's real path too (a symlink above it,
  // on the host's side of the mount).
  const roots = [...new Set([root, await canonicalPath(root)])];
  const below = (await readMountTable())
    .map((entry) => entry.target)
    .filter((mountPoint) => roots.some((dir) => mountPoint.startsWith(`${dir}/`)));
  if (below.length > 0) {
    throw new DataRootError(
      root,
      `${below.length} mount(s) below ${root} (${below.slice(0, 3).join(", ")}): docker seems to be running on it`,
      "stop docker (systemctl stop docker) and unmount what is left below the data-root, then run again",
    );
  }
}

async function imageDrivers(root: string): Promise<string[]> {
  const entries = await listBeneath(root, "image");
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

/**
 * Removal inside one folder, never through a symlink: every folder on the way is checked with lstat (volume-paths.ts).
 */
class ScopedTree {
  private readonly root: string;
  private readonly report: PreparedDataRoot;
  private readonly log: Logger | undefined;

  constructor(root: string, report: PreparedDataRoot, log: Logger | undefined) {
    this.root = root;
    this.report = report;
    this.log = log;
  }

  /** Removes `relative` (a folder recursively; a symlink as a link). */
  async remove(relative: string): Promise<void> {
    let removed;
    try {
      removed = await removeBeneath(this.root, relative);
    } catch (error) {
      throw this.failure(relative, "remove", error);
    }
    if (!removed) return;
    this.report.removed.push(relative);
    this.log?.debug("docker.data-root-removed", `removed ${relative}`, { dataRoot: this.root });
  }

  /** Removes everything inside the folder `relative`, keeping the folder. */
  async removeChildren(relative: string): Promise<void> {
    for (const name of await this.children(relative)) await this.remove(join(relative, name));
  }

  /** Names inside the folder `relative`, none when it is missing. */
  async children(relative: string): Promise<string[]> {
    try {
      return (await listBeneath(this.root, relative)).map((entry) => entry.name);
    } catch (error) {
      throw this.failure(relative, "list", error);
    }
  }

  /** The trimmed text of a small regular file, or undefined when it is missing. */
  async readSmallFile(relative: string): Promise<string | undefined> {
    try {
      return await readFileBeneath(this.root, relative, 256);
    } catch (error) {
      throw this.failure(relative, "read", error);
    }
  }

  skip(relative: string, why: string): void {
    this.report.skipped.push(`${relative}: ${why}`);
    this.log?.warning("docker.data-root-skipped", `left ${relative} alone: ${why}`, { dataRoot: this.root });
  }

  /**
   * A link or an odd file on the way is the volume's content refused as it is (VolumePathError); anything else, a
   * DataRootError.
   */
  private failure(relative: string, action: string, cause: unknown): AgentError {
    if (cause instanceof VolumePathError) return cause;
    return new DataRootError(
      this.root,
      `could not ${action} ${join(this.root, relative)}: ${describeError(cause)}`,
      "check the volume's filesystem (xfs_repair -n on the unmounted device) and run again",
      { cause },
    );
  }
}
