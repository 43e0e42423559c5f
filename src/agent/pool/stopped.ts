/**
 * Volumes held by stopped instances. An osparc warm buffer sleeps with its pool volume attached
 * (its next start reuses it), and a stopped machine that leaked (osparc-simcore #7342, #7063)
 * holds its volume until someone terminates it: neither volume is stock a boot can claim, yet
 * both count toward the pool's caps and its bill. Pure: volumes and instances in, facts out.
 *
 * Since when: EC2 says it only in the instance's StateTransitionReason, `User initiated
 * (2026-01-02 03:04:05 GMT)` for a stop asked through the API (the autoscaler's), and in other
 * words for other causes (`Server.ScheduledStop`, no time). No time there: the stop's age is
 * unknown, and nothing that depends on it (the opt-in reclaim) acts.
 */
import type { InstanceInfo, VolumeInfo } from "../ports.ts";

const DAY_MS = 86_400_000;

/** When the stop was asked, from EC2's StateTransitionReason; undefined when it names no time. */
export function stoppedSince(stateTransitionReason: string | undefined): Date | undefined {
  const match = /\((\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) GMT\)/.exec(stateTransitionReason ?? "");
  if (!match) return undefined;
  const [, y, mo, d, h, mi, s] = match.map(Number) as [number, number, number, number, number, number, number];
  const at = new Date(Date.UTC(y, mo - 1, d, h, mi, s));
  return Number.isNaN(at.getTime()) ? undefined : at;
}

export interface HeldByStopped {
  volumeId: string;
  instanceId: string;
  /** ISO time the stop was asked; null when EC2 does not say. */
  stoppedSince: string | null;
  /** Days since then (null: unknown). */
  stoppedDays: number | null;
}

/** The volumes attached to an instance that is `stopped` (stopping ones are still on their way down). */
export function volumesHeldByStopped(
  volumes: readonly VolumeInfo[],
  instances: readonly InstanceInfo[],
  now: Date,
): HeldByStopped[] {
  const stopped = new Map(instances.filter((i) => i.state === "stopped").map((i) => [i.instanceId, i]));
  return volumes.flatMap((v) => {
    const instance = v.attachment ? stopped.get(v.attachment.instanceId) : undefined;
    if (!instance) return [];
    const since = stoppedSince(instance.stateTransitionReason);
    return [
      {
        volumeId: v.volumeId,
        instanceId: instance.instanceId,
        stoppedSince: since?.toISOString() ?? null,
        stoppedDays: since ? Math.max(0, (now.getTime() - since.getTime()) / DAY_MS) : null,
      },
    ];
  });
}

/** The instances the volumes are attached to (what to describe), each once. */
export function attachedInstanceIds(volumes: readonly VolumeInfo[]): string[] {
  return [...new Set(volumes.flatMap((v) => (v.attachment ? [v.attachment.instanceId] : [])))].sort();
}
