/**
 * What a cache volume may hold where the agent or docker will look, checked before either
 * touches it. dockerd follows symlinks in its data-root: a `docker/swarm` linked to a host
 * folder would have it write its swarm state there, a container's folder linked elsewhere its
 * logs, a named volume's `_data` its users' files. So, on every boot before docker starts, the
 * paths below are walked with lstat (readdir's d_type, never following a link): anything but a
 * folder where a folder is expected (a symlink, dangling or looping ones included, a FIFO, a
 * socket, a device node), or anything but a regular file where a file is, refuses the volume
 * (VolumePathError), which the boot quarantines. Missing paths are fine: docker creates them.
 *
 * The depth is what the agent walks (the cleanup's `containers/`, `layerdb/mounts/`,
 * `overlay2/<layer>/`) and where dockerd keeps state it writes or resolves without a lookup
 * through its own records (the store folders, overlay2's `l/` links). Below that, a layer's
 * `diff/` is image content: symlinks there are ordinary files of the image, and docker only
 * ever mounts them inside a container.
 */
import { AGENT_SUBDIR, CONTAINERD_ROOT_SUBDIR, DATA_ROOT_SUBDIR } from "../layout.ts";
import { kindOf, type EntryKind, listBeneath, readLinkBeneath, VolumePathError } from "./volume-paths.ts";

/**
 * What a path must be. Named children have their own rule; `each` is the rule of the others (none: not looked into).
 */
type Rule =
  | { kind: "folder"; children?: Record<string, Rule>; each?: Rule }
  | { kind: "file" }
  /** A symlink whose target (as written, never followed) matches. */
  | { kind: "link"; target: RegExp }
  /** A folder or a regular file; a folder's entries are plain too, `depth` levels down. */
  | { kind: "plain"; depth: number }
  /**
   * A block device node: `backingFsBlockDev`, which overlay2 and the local volume driver unlink
   * and make again at each start, to set XFS project quotas through.
   */
  | { kind: "block device" };

const folder = (children?: Record<string, Rule>, each?: Rule): Rule => ({
  kind: "folder",
  ...(children ? { children } : {}),
  ...(each ? { each } : {}),
});
const file: Rule = { kind: "file" };
const BACKING_FS_DEVICE = { backingFsBlockDev: { kind: "block device" } } as const;
const plain = (depth: number): Rule => ({ kind: "plain", depth });

/** Folders dockerd makes at the top of its data-root (moby daemon.NewDaemon and the stores it opens). */
export const DATA_ROOT_FOLDERS = [
  "builder",
  "buildkit",
  "containerd",
  "containers",
  "image",
  "network",
  "overlay2",
  "plugins",
  "rootfs",
  "runtimes",
  "swarm",
  "tmp",
  "trust",
  "volumes",
] as const;

/** overlay2's short links: `l/<26 characters>` -> `../<layer id>/diff`. */
const OVERLAY_LINK_TARGET = /^\.\.\/[0-9a-f]{64}(?:-init)?\/diff$/;

/** The image store of a graph driver: `image/<driver>/`. */
const IMAGE_DRIVER = folder(
  {
    "repositories.json": file,
    layerdb: folder(
      {
        mounts: folder(undefined, folder(undefined, file)),
        sha256: folder(undefined, folder(undefined, file)),
        tmp: plain(1),
      },
      plain(1),
    ),
    imagedb: plain(4),
    distribution: plain(4),
  },
  plain(1),
);

const DATA_ROOT: Rule = folder(
  {
    ...Object.fromEntries(DATA_ROOT_FOLDERS.map((name) => [name, folder(undefined, plain(1))])),
    "engine-id": file,
    image: folder(undefined, IMAGE_DRIVER),
    // Each layer's folder holds diff/, work/, merged/ and the files link, lower, committed.
    overlay2: folder(
      { l: folder(undefined, { kind: "link", target: OVERLAY_LINK_TARGET }), ...BACKING_FS_DEVICE },
      folder(undefined, plain(0)),
    ),
    containers: folder(undefined, folder(undefined, plain(2))),
    network: folder({ files: folder({ "local-kv.db": file }, plain(1)) }, plain(1)),
    volumes: folder({ "metadata.db": file, ...BACKING_FS_DEVICE }, folder({ _data: folder() }, plain(0))),
    swarm: folder(undefined, plain(2)),
  },
  plain(1),
);

/** containerd's root on the volume (containerd-store.ts), for the containerd image store. */
const CONTAINERD_ROOT: Rule = folder(
  {
    "io.containerd.metadata.v1.bolt": folder({ "meta.db": file }, plain(0)),
    "io.containerd.content.v1.content": folder(
      { blobs: folder(undefined, folder(undefined, file)), ingest: folder(undefined, plain(1)) },
      plain(1),
    ),
    "io.containerd.snapshotter.v1.overlayfs": folder(
      { "metadata.db": file, snapshots: folder(undefined, folder(undefined, plain(0))) },
      plain(1),
    ),
  },
  plain(1),
);

/** The volume's root: the data-root, containerd's root beside it, the agent's folder. Other entries are nobody's. */
const VOLUME_ROOT: Rule = folder({
  [DATA_ROOT_SUBDIR]: DATA_ROOT,
  [CONTAINERD_ROOT_SUBDIR]: CONTAINERD_ROOT,
  [AGENT_SUBDIR]: folder({ "prepared-for": file }, plain(0)),
});

/**
 * Walks the volume mounted at `mountPoint` against the layout above; throws VolumePathError
 * naming the first path that breaks it. Reads only (lstat, readdir, readlink).
 */
export async function checkVolumeLayout(mountPoint: string): Promise<void> {
  await walk(mountPoint, "", VOLUME_ROOT);
}

/** Checks the entries of the folder `relative` (already known to be a folder, reached through folders only). */
async function walk(root: string, relative: string, rule: Rule): Promise<void> {
  if (rule.kind !== "folder" && !(rule.kind === "plain" && rule.depth > 0)) return;
  const children = rule.kind === "folder" ? rule.children : undefined;
  const each = rule.kind === "folder" ? rule.each : plain(rule.depth - 1);
  if (!children && !each) return;
  for (const entry of await listBeneath(root, relative)) {
    const childRule = children?.[entry.name] ?? each;
    if (!childRule) continue;
    const path = relative === "" ? entry.name : `${relative}/${entry.name}`;
    const kind = kindOf(entry);
    await checkEntry(root, path, kind, childRule);
    if (kind === "folder") await walk(root, path, childRule);
  }
}

async function checkEntry(root: string, path: string, kind: EntryKind, rule: Rule): Promise<void> {
  switch (rule.kind) {
    case "folder":
      if (kind !== "folder") throw new VolumePathError(root, path, kind, "a folder");
      return;
    case "file":
      if (kind !== "file") throw new VolumePathError(root, path, kind, "a regular file");
      return;
    case "plain":
      if (kind !== "folder" && kind !== "file")
        throw new VolumePathError(root, path, kind, "a folder or a regular file");
      return;
    case "block device":
      if (kind !== "block device") throw new VolumePathError(root, path, kind, "a block device node");
      return;
    case "link":
      if (kind !== "symlink" || !rule.target.test(await readLinkBeneath(root, path)))
        throw new VolumePathError(root, path, kind, `a symlink to ${rule.target.source}`);
      return;
  }
}
