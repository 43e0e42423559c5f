/**
 * What a cache volume holds. The filesystem is labelled so an operator can tell a cache volume
 * from any other disk (`lsblk -f`), and Docker's data-root sits in a subfolder so the volume's
 * root can also carry the agent's own marker files without Docker seeing them.
 */
export const FS_LABEL = "ebs-cache";
export const DATA_ROOT_SUBDIR = "docker";
/** containerd's root on the volume with the containerd image store (src/docker/containerd-store.ts). */
export const CONTAINERD_ROOT_SUBDIR = "containerd";
/** State that must not travel between machines: removed from a pool volume before docker sees it. */
export const MACHINE_LOCAL_STATE = ["swarm", "containers", "network"] as const;
