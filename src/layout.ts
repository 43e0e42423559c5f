import { join } from "node:path";

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
/** The agent's own folder on the volume (beside the data-root, out of docker's sight). */
export const AGENT_SUBDIR = ".ebs-cache-agent";
/** Growing is skipped when the device exceeds the filesystem by this much or less (EBS grows in GiB). */
export const GROW_MARGIN_BYTES = 16 * 1024 * 1024;

/** The mount point the agent gives a volume. */
export function mountPointOf(mountRoot: string, volumeId: string): string {
  return `${mountRoot.replace(/\/+$/, "")}/${volumeId}`;
}

/** containerd's root on a volume mounted at `mountPoint`. */
export function containerdRootOnVolume(mountPoint: string): string {
  return join(mountPoint, CONTAINERD_ROOT_SUBDIR);
}
