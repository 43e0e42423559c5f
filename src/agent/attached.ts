/**
 * Which of the managed volumes attached to this instance is the agent's cache volume: a reboot,
 * a re-run after a crash, or the pre-warm command find it this way. One rule for all of them.
 */
import { VolumeKind, VolumeTag } from "../tags.ts";
import type { VolumeInfo } from "./ports.ts";

/**
 * The managed volume attached to `instanceId`, a workspace volume first (a node given a
 * workspace runs on it, whatever pool volume may also hang on the instance); undefined when
 * none is.
 */
export function attachedCacheVolume<V extends Pick<VolumeInfo, "tags" | "attachment">>(
  volumes: readonly V[],
  instanceId: string,
): V | undefined {
  const mine = volumes.filter((v) => v.attachment?.instanceId === instanceId);
  return mine.find((v) => v.tags[VolumeTag.kind] === VolumeKind.workspace) ?? mine[0];
}
