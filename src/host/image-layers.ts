/**
 * Where an image's files are on the golden volume, as pure decisions: the layer folders a
 * container's root file system is an overlay of, top-most first, as paths from the volume's root,
 * and the one of them that serves a path the container read (src/host/record-reads.ts records
 * with them).
 *
 * - The graphdriver store (overlay2): `docker image inspect`'s GraphDriver names the layers'
 *   `diff` folders in the data-root (UpperDir, then LowerDir top-most first).
 * - The containerd store: the layers are containerd's snapshots in its root. dockerd prepares a
 *   container's snapshot (key: the container's id) on `<id>-init` (the files dockerd writes:
 *   /etc/hosts…), itself on the image's top snapshot, whose key is the chain id of the image's
 *   diff ids (moby daemon/containerd/image_snapshot.go); the overlayfs snapshotter mounts it with
 *   `upperdir=snapshots/<n>/fs` and `lowerdir=` its parents' `snapshots/<m>/fs`, top-most first
 *   (containerd plugins/snapshots/overlay/overlay.go). A read-only view of the image's top
 *   snapshot (`ctr snapshots view --mounts`) gives exactly the image's layers: an overlay
 *   `lowerdir=`, or, for an image of one layer, a bind mount of its `fs`.
 */
import { createHash } from "node:crypto";
import { posix } from "node:path";

/** containerd's overlayfs snapshotter's folder in containerd's root, and its snapshots' folder in that. */
export const OVERLAYFS_SNAPSHOTTER = "io.containerd.snapshotter.v1.overlayfs";

/** The chain id of an image's top layer from its diff ids (OCI image-spec identity.ChainID). */
export function chainId(diffIds: readonly string[]): string | undefined {
  let chain: string | undefined;
  for (const diffId of diffIds) {
    chain = chain === undefined ? diffId : `sha256:${createHash("sha256").update(`${chain} ${diffId}`).digest("hex")}`;
  }
  return chain;
}

/** One mount of containerd's answer, as ctr prints it (Go's field names, or the API's lower-case ones). */
interface SnapshotMount {
  Type?: unknown;
  type?: unknown;
  Source?: unknown;
  source?: unknown;
  Options?: unknown;
  options?: unknown;
}

/**
 * The layer folders of a snapshot's mounts (`ctr snapshots view|prepare --mounts`: a JSON array),
 * top-most first: an overlay's upperdir (an active snapshot's own), then its lowerdir entries; a
 * bind mount's source. Throws on anything else (one mount of another kind, several, none).
 */
export function snapshotLayerDirs(mountsJson: string): string[] {
  let mounts: unknown;
  try {
    mounts = JSON.parse(mountsJson);
  } catch {
    throw new Error(`containerd's mounts are not JSON: ${mountsJson.slice(0, 200)}`);
  }
  if (!Array.isArray(mounts) || mounts.length !== 1)
    throw new Error(`containerd's mounts are not one mount: ${mountsJson.slice(0, 200)}`);
  const mount = mounts[0] as SnapshotMount;
  const type = mount.Type ?? mount.type;
  const source = mount.Source ?? mount.source;
  const options = mount.Options ?? mount.options ?? [];
  if (!Array.isArray(options) || !options.every((option) => typeof option === "string"))
    throw new Error(`containerd's mount options are not strings: ${mountsJson.slice(0, 200)}`);
  const option = (name: string) => (options as string[]).find((o) => o.startsWith(`${name}=`))?.slice(name.length + 1);
  if (type === "bind" && typeof source === "string" && source.startsWith("/")) return [source];
  if (type === "overlay") {
    const lower = option("lowerdir");
    if (lower === undefined || lower === "") throw new Error(`containerd's overlay mount has no lowerdir`);
    const upper = option("upperdir");
    return [...(upper !== undefined ? [upper] : []), ...lower.split(":")];
  }
  throw new Error(`containerd's mount is a ${JSON.stringify(type)} mount, not an overlay or a bind`);
}

/**
 * The layer folders `dirs` (absolute, as the store names them) as paths from the volume's root
 * `volume`, each checked to be a layer folder of the store: `<root>/<id>/<leaf>` with `root` the
 * store's layer folder below the volume (`docker/overlay2`, leaf `diff`;
 * `containerd/io.containerd.snapshotter.v1.overlayfs/snapshots`, leaf `fs`). Throws naming the
 * first that is not.
 */
export function layerPaths(volume: string, root: string, leaf: string, dirs: readonly string[]): string[] {
  const base = posix.join(volume, root);
  return dirs.map((dir) => {
    const normal = posix.normalize(dir);
    const rest = normal.startsWith(`${base}/`) ? normal.slice(base.length + 1).split("/") : [];
    if (rest.length !== 2 || rest[1] !== leaf || rest[0] === ".." || rest[0] === ".")
      throw new Error(`the layer ${dir} is not a layer folder of ${base} (<id>/${leaf})`);
    return posix.join(root, ...rest);
  });
}

/**
 * The layer file overlay serves `path` (from the container's root) from, as a path from the
 * volume's root: the top-most layer in which it exists, when it is a regular file there;
 * undefined when it is something else there (a whiteout, a folder, a link) or in no layer.
 * `kinds[i]`: what `layers[i]/path` is, looked up top-most first until one exists (the list may
 * stop there).
 */
export function servedFile(
  layers: readonly string[],
  path: string,
  kinds: ReadonlyArray<"file" | "other" | "missing">,
): string | undefined {
  for (const [index, layer] of layers.entries()) {
    const kind = kinds[index];
    if (kind === undefined) return undefined;
    if (kind === "missing") continue;
    return kind === "file" ? posix.join(layer, path) : undefined;
  }
  return undefined;
}
