/**
 * The clean-up of earlier acceptance runs, carried out (plan.ts planCleanup decides): a volume a
 * killed run left attached here is detached (never forced, and never while mounted) and deleted,
 * an available one deleted. Each step describes the volume afresh first: a rerun after a kill in
 * the middle finds it detached, or gone, and goes on.
 */
import { describeError } from "../../errors.ts";
import type { CloudVolumes } from "../ports.ts";
import { ACCEPTANCE_TAG, planCleanup, type CleanupStep } from "./plan.ts";

export interface CleanupDeps {
  cloud: Pick<CloudVolumes, "findVolumes" | "describeVolume" | "detachVolume" | "waitForAttachment" | "deleteVolume">;
  instanceId: string;
  /** Whether the volume's device is mounted on this host (a mounted volume is never detached). */
  mounted(volumeId: string): Promise<boolean>;
  /** How long a detach may take (ms). */
  detachTimeoutMs: number;
}

/** What became of each step. */
export interface CleanupOutcome {
  step: CleanupStep;
  done: "detached" | "deleted" | "gone" | "left" | "failed";
  detail?: string;
}

/** Finds every volume tagged ebs-cache:acceptance and cleans up what planCleanup says. */
export async function cleanUpEarlierRuns(deps: CleanupDeps): Promise<CleanupOutcome[]> {
  const volumes = await deps.cloud.findVolumes({ tags: { [ACCEPTANCE_TAG]: "*" } });
  const outcomes: CleanupOutcome[] = [];
  const refused = new Set<string>();
  for (const step of planCleanup(volumes, deps.instanceId)) {
    if (refused.has(step.volumeId)) continue;
    try {
      outcomes.push(await carryOut(deps, step));
    } catch (error) {
      refused.add(step.volumeId);
      outcomes.push({ step, done: "failed", detail: describeError(error) });
    }
    if (outcomes.at(-1)?.done === "left") refused.add(step.volumeId);
  }
  return outcomes;
}

async function carryOut(deps: CleanupDeps, step: CleanupStep): Promise<CleanupOutcome> {
  if (step.kind === "leave") return { step, done: "left", detail: step.reason };
  const volume = await deps.cloud.describeVolume(step.volumeId);
  if (volume === undefined) return { step, done: "gone" };
  if (step.kind === "detach") {
    if (volume.attachment?.instanceId !== deps.instanceId) return { step, done: "detached", detail: "already" };
    if (await deps.mounted(step.volumeId))
      return { step, done: "left", detail: "mounted on this host: unmount it, then run again" };
    await deps.cloud.detachVolume(step.volumeId, deps.instanceId);
    await deps.cloud.waitForAttachment(step.volumeId, deps.instanceId, "detached", deps.detachTimeoutMs);
    return { step, done: "detached" };
  }
  if (volume.attachment) return { step, done: "left", detail: `attached to ${volume.attachment.instanceId}` };
  return { step, done: (await deps.cloud.deleteVolume(step.volumeId)) === "deleted" ? "deleted" : "gone" };
}
