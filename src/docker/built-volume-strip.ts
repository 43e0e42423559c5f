/**
 * What a freshly built pool volume loses before it is snapshotted, whoever built it: `snapshot
 * build` (its image, its private dockerd) and Packer's pool-volume flow (its builder instance,
 * which runs `snapshot strip`). One list, so a volume from either carries none of its builder's
 * machine-local state: what the boot's own cleanup removes (data-root.ts prepareDataRoot, a pool
 * volume), what dockerd keeps only for itself (build-dockerd.ts BUILD_LOCAL_STATE) and, with the
 * containerd store, containerd's own (containerd-store.ts CONTAINERD_MACHINE_LOCAL_STATE).
 * dockerd and containerd must be stopped: nothing may be mounted below the data-root.
 */
import { containerdRootOnVolume } from "../layout.ts";
import { dirname, join } from "node:path";
import { removeBeneath } from "../host/volume-paths.ts";
import type { Logger } from "../log.ts";
import { VolumeKind } from "../tags.ts";
import { BUILD_LOCAL_STATE, BUILD_LOCAL_STATE_GRAPHDRIVER } from "./build-dockerd.ts";
import { CONTAINERD_MACHINE_LOCAL_STATE } from "./containerd-store.ts";
import { prepareDataRoot } from "./data-root.ts";
import type { ImageStore } from "./engine.ts";

/**
 * Strips the built data-root (and, with the containerd store, containerd's root beside it);
 * returns what went, relative to the data-root (containerd's as `../containerd/<name>`).
 */
export async function stripBuiltVolume(dataRoot: string, imageStore: ImageStore, log?: Logger): Promise<string[]> {
  const prepared = await prepareDataRoot(dataRoot, { kind: VolumeKind.pool, imageStore, log });
  const removed = [...prepared.removed];
  const ownState =
    imageStore === "graphdriver" ? [...BUILD_LOCAL_STATE, ...BUILD_LOCAL_STATE_GRAPHDRIVER] : BUILD_LOCAL_STATE;
  for (const name of ownState) if (await removeBeneath(prepared.dataRoot, name)) removed.push(name);
  if (imageStore === "containerd") {
    const containerdRoot = containerdRootOnVolume(dirname(prepared.dataRoot));
    for (const name of CONTAINERD_MACHINE_LOCAL_STATE)
      if (await removeBeneath(containerdRoot, name)) removed.push(join("..", "containerd", name));
  }
  log?.info("docker.built-volume-stripped", "the built volume's machine-local state removed", {
    dataRoot: prepared.dataRoot,
    imageStore,
    removed: removed.join(",") || "(none)",
  });
  return removed;
}
