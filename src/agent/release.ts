/**
 * The release, observed and applied (the plan in between is src/agent/release-plan.ts). Each
 * step re-checks the world before it acts and is safe to repeat, so a release killed anywhere
 * and run again converges: a second release finds nothing held and does nothing; one after a
 * release killed between DetachVolume and the tags finds the volume `available` but still
 * `claimed-by` this instance and writes the tags.
 *
 * What a release never does: detach a volume whose filesystem is still mounted (a busy unmount
 * refuses the release of that volume: nothing detached, nothing tagged), force a detach, or
 * touch a volume that is not `ebs-cache:managed=true`.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { AgentError, describeError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { isUnderPrefix } from "../docker/labels.ts";
import { VolumeTag } from "../tags.ts";
import {
  isBelow,
  mountPointOf,
  releaseTags,
  type HeldVolume,
  type ReleaseObservation,
  type ReleasePlan,
  type ReleaseSettings,
  type ReleaseStep,
  type ShutdownObservation,
} from "./release-plan.ts";
import type { CloudVolumes, DaemonConfig, DockerService, HostStorage, Identity, VolumeInfo } from "./ports.ts";

/** The adapters a release uses (built in src/agent/wiring.ts). */
export interface ReleaseDeps {
  cloud: CloudVolumes;
  storage: Pick<HostStorage, "findDevice" | "mountPointOf" | "unmount">;
  /** The mount table and syncfs. */
  mounts: {
    /** Every mount of the device's filesystem, plus `mountPoint` when mounted. */
    list(device: string | undefined, mountPoint: string): Promise<string[]>;
    sync(mountPoint: string): Promise<void>;
  };
  daemonConfig: Pick<DaemonConfig, "dataRoot" | "setDataRoot"> & { engineLabels(): Promise<string[]> };
  /** undefined with `docker.control: none`. */
  docker: DockerService | undefined;
  /** Asked only while docker runs (or, without docker control, to learn whether it does). */
  engine: { info(): Promise<{ dockerRootDir: string }> };
  /** Removes the agent's readiness labels (src/agent/report.ts createLabelWithdrawer). */
  withdrawLabels(options: { node: boolean }): Promise<void>;
  log: Logger;
  now?: () => Date;
  /** Interval between DescribeVolumes while waiting for `available` (default 1000 ms). */
  pollMs?: number;
  /**
   * The spot interruption notice's action (src/aws/spot-notice.ts), undefined when there is
   * none; absent: not read.
   */
  spotInstanceAction?: () => Promise<string | undefined>;
  /** How long the release may wait for the instance's state and the spot notice (default 10 s). */
  shutdownQuestionMs?: number;
}

export interface ReleaseLimits {
  /** How long a detach may take to reach `available` (config timeouts.attachSeconds). */
  detachTimeoutMs: number;
}

/** A step the release will not take, for a reason a person must remove: nothing of it was done. */
export class ReleaseRefusedError extends AgentError {
  constructor(
    readonly step: string,
    message: string,
    remediation: string,
  ) {
    super(`${step}: ${message}`, remediation);
  }
}

export interface ReleaseResult {
  /** `released`: every planned step done; `refused` / `failed`: see `problems` (exit 1). */
  outcome: "released" | "nothing" | "disabled" | "refused" | "failed";
  reason?: string;
  /** Volumes detached (or found detached) and tagged released. */
  released: string[];
  /** Volumes unmounted and left attached over a stop, for the instance's next start. */
  kept: string[];
  problems: Array<{ step: string; volumeId?: string; kind: "refused" | "failed"; message: string; remediation: string }>;
  timeline: Array<{ step: string; volumeId?: string; ms: number; skipped?: boolean }>;
}

/** Gathers what the planner needs: two filtered DescribeVolumes, the mount table, daemon.json, docker. */
export async function observeRelease(deps: ReleaseDeps, identity: Identity, settings: ReleaseSettings): Promise<ReleaseObservation> {
  const { cloud, log } = deps;
  const instanceId = identity.instanceId;
  const [attached, claimed] = await Promise.all([
    cloud.findVolumes({ tags: { [VolumeTag.managed]: "true" }, attachedTo: instanceId }),
    settings.enabled
      ? cloud.findVolumes({ tags: { [VolumeTag.managed]: "true", [VolumeTag.claimedBy]: instanceId }, status: ["available"] })
      : Promise.resolve([]),
  ]);
  const held: HeldVolume[] = [];
  for (const volume of attached) {
    const a = volume.attachment;
    if (!a || a.instanceId !== instanceId || a.state === "detached") continue;
    if (!settings.enabled) {
      held.push({ volume, mountPoints: [] });
      continue;
    }
    const device = await deps.storage.findDevice(volume.volumeId).catch((error: unknown) => {
      log.warning("release.observe", `could not find the volume's device: ${describeError(error)}`, { volume: volume.volumeId });
      return undefined;
    });
    const mountPoints = await deps.mounts.list(device, mountPointOf(settings.mountRoot, volume.volumeId));
    held.push({ volume, ...(device !== undefined ? { device } : {}), mountPoints });
  }
  const untagged = claimed.filter((v) => v.state === "available" && !v.attachment);
  // Asked only when it matters: a stop keeps held volumes attached; everything else is the same.
  const shutdown = settings.enabled && held.length > 0 ? await observeShutdown(deps, instanceId) : undefined;

  let daemonJson: ReleaseObservation["daemonJson"];
  try {
    const dataRoot = await deps.daemonConfig.dataRoot();
    const prefix = settings.labels.prefix;
    const agentLabels = (await deps.daemonConfig.engineLabels()).filter((entry) => isUnderPrefix(prefix, entry.split("=", 1)[0] ?? ""));
    daemonJson = { ok: true, dataRoot, agentLabels };
  } catch (error) {
    daemonJson = { ok: false, problem: describeError(error) };
  }

  return {
    identity,
    held,
    untagged,
    ...(shutdown ? { shutdown } : {}),
    daemonJson,
    docker: settings.enabled ? await observeDocker(deps) : { active: false },
  };
}

/**
 * Stop or terminate: the instance's state (one DescribeInstances) and the spot interruption
 * notice, asked together under one deadline. Either may fail: the planner then decides from the
 * other, and without either it releases fully.
 */
async function observeShutdown(deps: ReleaseDeps, instanceId: string): Promise<ShutdownObservation> {
  const timeoutMs = deps.shutdownQuestionMs ?? 10_000;
  const signal = AbortSignal.timeout(timeoutMs);
  const bounded = <T>(work: Promise<T>): Promise<T> =>
    Promise.race([
      work,
      new Promise<never>((_, reject) => {
        if (signal.aborted) reject(new Error(`no answer within ${timeoutMs} ms`));
        signal.addEventListener("abort", () => reject(new Error(`no answer within ${timeoutMs} ms`)), { once: true });
      }),
    ]);
  const [state, spot] = await Promise.allSettled([
    bounded(deps.cloud.describeInstance(instanceId, { signal })),
    deps.spotInstanceAction ? bounded(deps.spotInstanceAction()) : Promise.reject(new Error("no metadata service to ask")),
  ]);
  return {
    instanceState: state.status === "fulfilled" ? { ok: true, state: state.value.state } : { ok: false, problem: describeError(state.reason) },
    spotAction: spot.status === "fulfilled" ? { ok: true, action: spot.value } : { ok: false, problem: describeError(spot.reason) },
  };
}

async function observeDocker(deps: ReleaseDeps): Promise<ReleaseObservation["docker"]> {
  if (deps.docker) {
    if (!(await deps.docker.isActive())) return { active: false };
    const info = await deps.engine.info().catch(() => undefined);
    return { active: true, ...(info ? { dataRoot: info.dockerRootDir } : {}) };
  }
  // Without control of docker, it runs when its API answers.
  const info = await deps.engine.info().catch(() => undefined);
  return info ? { active: true, dataRoot: info.dockerRootDir } : { active: false };
}

/** Runs the plan. Never throws for a refusal or a failed step: the result says (exit 1). */
export async function applyReleasePlan(
  plan: ReleasePlan,
  deps: ReleaseDeps,
  settings: ReleaseSettings,
  limits: ReleaseLimits,
  options: { signal?: AbortSignal } = {},
): Promise<ReleaseResult> {
  const { log } = deps;
  const result: ReleaseResult = { outcome: "released", released: [], kept: [], problems: [], timeline: [] };
  for (const warning of plan.warnings) log.warning("release.plan", warning);
  if (plan.decision !== "release") {
    const outcome = plan.decision === "refused" ? "refused" : plan.decision;
    if (plan.decision === "refused") {
      log.error("release.refused", plan.reason ?? "refused", { remediation: plan.remediation });
      result.problems.push({ step: "plan", kind: "refused", message: plan.reason ?? "refused", remediation: plan.remediation ?? "" });
    } else {
      log.notice(`release.${plan.decision}`, plan.reason ?? plan.decision);
    }
    return { ...result, outcome, ...(plan.reason ? { reason: plan.reason } : {}) };
  }

  /** Volumes whose remaining steps are skipped (a step of theirs was refused or failed). */
  const stopped = new Set<string>();
  let hostSteps = true;
  for (const step of plan.steps) {
    const volumeId = "volumeId" in step ? step.volumeId : undefined;
    if ((volumeId !== undefined && stopped.has(volumeId)) || (volumeId !== undefined && !hostSteps)) {
      result.timeline.push({ step: step.step, volumeId, ms: 0, skipped: true });
      continue;
    }
    // SIGTERM: the step in flight was let finish (an unmount or a detach cut in half helps no
    // one); no further step starts. Every step re-checks the world, so the next release
    // (or gc, for a volume EC2 detaches at termination) takes it from here.
    if (options.signal?.aborted) {
      result.timeline.push({ step: step.step, ...(volumeId ? { volumeId } : {}), ms: 0, skipped: true });
      if (!result.problems.some((p) => p.step === "sigterm")) {
        const message = `stopped by SIGTERM before ${step.step}`;
        result.problems.push({ step: "sigterm", kind: "failed", message, remediation: "run ebs-cache-agent release again; it continues where this one stopped" });
        log.error("release.failed", message, { step: step.step, volume: volumeId });
      }
      continue;
    }
    const started = Date.now();
    try {
      await runStep(step, plan, deps, settings, limits, result);
      result.timeline.push({ step: step.step, ...(volumeId ? { volumeId } : {}), ms: Date.now() - started });
    } catch (error) {
      result.timeline.push({ step: step.step, ...(volumeId ? { volumeId } : {}), ms: Date.now() - started });
      const refused = error instanceof ReleaseRefusedError;
      const message = describeError(error);
      const remediation = (error as { remediation?: unknown }).remediation;
      const problem = {
        step: step.step,
        ...(volumeId ? { volumeId } : {}),
        kind: refused ? ("refused" as const) : ("failed" as const),
        message,
        remediation: typeof remediation === "string" ? remediation : "see the log lines above, then run release again",
      };
      result.problems.push(problem);
      log.error(refused ? "release.refused" : "release.failed", message, { step: step.step, volume: volumeId, remediation: problem.remediation });
      if (volumeId !== undefined) stopped.add(volumeId);
      // Docker that did not stop may still write to the volume: no volume step may follow.
      if (step.step === "stop-docker") hostSteps = false;
    }
  }
  if (result.problems.length > 0) {
    result.outcome = result.problems.some((p) => p.kind === "refused") ? "refused" : "failed";
    result.reason = result.problems.map((p) => p.message).join("; ");
  } else {
    log.notice("release.done", result.kept.length > 0 ? "released; kept attached over the stop" : "released", {
      volumes: result.released.join(",") || undefined,
      kept: result.kept.join(",") || undefined,
    });
  }
  return result;
}

async function runStep(
  step: ReleaseStep,
  plan: ReleasePlan,
  deps: ReleaseDeps,
  settings: ReleaseSettings,
  limits: ReleaseLimits,
  result: ReleaseResult,
): Promise<void> {
  const { cloud, log } = deps;
  const instanceId = plan.instanceId;
  switch (step.step) {
    case "withdraw-labels":
      await deps.withdrawLabels({ node: step.node && (await dockerActive(deps)) });
      return;

    case "reset-data-root": {
      const current = await deps.daemonConfig.dataRoot();
      if (!isBelow(settings.mountRoot, current)) return;
      await deps.daemonConfig.setDataRoot(step.to);
      log.notice("release.data-root", "daemon.json data-root reset to docker's default", { from: current, to: step.to ?? "(default)" });
      return;
    }

    case "stop-docker": {
      if (!(await dockerActive(deps))) return;
      if (!deps.docker) {
        throw new ReleaseRefusedError(step.step, "docker runs on the cache volume and the agent does not control it (docker.control none)", "stop docker, then run release again");
      }
      log.notice("release.docker", "stopping docker: it still runs on the cache volume", { dataRoot: step.dataRoot });
      await deps.docker.stop();
      if (await deps.docker.isActive()) throw new AgentError("docker is still active after it was stopped", "systemctl status docker; stop it, then run release again");
      return;
    }

    case "sync":
      for (const mountPoint of step.mountPoints) {
        await deps.mounts.sync(mountPoint).catch((error: unknown) => {
          // The unmount writes everything back too; a failed syncfs is worth a line, not a refusal.
          log.warning("release.sync", `sync of ${mountPoint} failed: ${describeError(error)}`, { volume: step.volumeId });
        });
      }
      return;

    case "unmount": {
      const ours = mountPointOf(settings.mountRoot, step.volumeId);
      const now = await deps.mounts.list(step.device, ours);
      for (const mountPoint of [...new Set([...now, ...step.mountPoints])].sort((a, b) => b.length - a.length)) {
        try {
          await deps.storage.unmount(mountPoint);
        } catch (error) {
          throw new ReleaseRefusedError(
            step.step,
            `${mountPoint} could not be unmounted (${describeError(error)}); ${step.volumeId} stays attached and untagged: a mounted volume is never detached`,
            `find what still uses it (fuser -vm ${mountPoint}; lsof +f -- ${mountPoint}), stop it, then run release again`,
          );
        }
      }
      log.info("release.unmount", "unmounted", { volume: step.volumeId });
      return;
    }

    case "detach": {
      // Re-checked right before the call: never detach a volume whose filesystem is mounted.
      const mounted = await deps.mounts.list(step.device, step.mountPoint);
      const viaDevice = step.device ? await deps.storage.mountPointOf(step.device).catch(() => "unknown") : undefined;
      if (mounted.length > 0 || viaDevice) {
        throw new ReleaseRefusedError(
          step.step,
          `${step.volumeId} is still mounted (${[...mounted, ...(viaDevice ? [viaDevice] : [])].join(", ")}): not detaching it`,
          "unmount it, then run release again",
        );
      }
      const volume = await cloud.describeVolume(step.volumeId);
      const a = volume?.attachment;
      if (!volume || !a || a.instanceId !== instanceId || a.state === "detaching" || a.state === "detached") {
        log.info("release.detach", "not attached here any more: nothing to detach", { volume: step.volumeId });
        return;
      }
      await cloud.detachVolume(step.volumeId, instanceId);
      return;
    }

    case "wait-detached": {
      await cloud.waitForAttachment(step.volumeId, instanceId, "detached", limits.detachTimeoutMs);
      const volume = await waitAvailable(deps, step.volumeId, instanceId, limits.detachTimeoutMs);
      log.notice("release.detached", "volume detached", { volume: step.volumeId, state: volume?.state ?? "gone" });
      return;
    }

    case "keep-attached": {
      // Before anything is left attached: is it really unmounted? (The unmount step refuses
      // rather than leave a mount, so this only guards against a mount made since.)
      const mounted = await deps.mounts.list(undefined, mountPointOf(settings.mountRoot, step.volumeId));
      if (mounted.length > 0) {
        throw new ReleaseRefusedError(step.step, `${step.volumeId} is mounted again (${mounted.join(", ")})`, "unmount it, then run release again");
      }
      if (step.removeTags.length > 0) await cloud.untagVolume(step.volumeId, step.removeTags);
      result.kept.push(step.volumeId);
      log.notice("release.kept", "volume unmounted and left attached for the instance's next start (a stop): no expiry", { volume: step.volumeId });
      return;
    }

    case "tag-released": {
      const volume = await cloud.describeVolume(step.volumeId);
      if (!volume) {
        log.warning("release.tag", "the volume no longer exists: nothing to tag", { volume: step.volumeId });
        return;
      }
      const a = volume.attachment;
      if (a && a.instanceId === instanceId && a.state !== "detached") {
        throw new AgentError(`${step.volumeId} is still ${a.state} to this instance: not tagging it released`, "run release again");
      }
      if (a && a.instanceId !== instanceId) {
        // Claimed by another instance since our detach: its tags are its own now.
        await cloud.untagVolume(step.volumeId, { [VolumeTag.claimedBy]: instanceId });
        log.notice("release.tag", "already claimed by another instance: release tags left to it", { volume: step.volumeId, by: a.instanceId });
        result.released.push(step.volumeId);
        return;
      }
      const releasedAt = step.releasedAt !== undefined ? new Date(step.releasedAt) : (deps.now?.() ?? new Date());
      const claimedAt = volume.tags[VolumeTag.claimedAt];
      const tags = releaseTags({ instanceId, kind: step.kind, keep: step.keep, ttlHours: step.ttlHours, releasedAt, ...(claimedAt !== undefined ? { claimedAt } : {}) });
      if (step.keep && !(VolumeTag.keep in tags.set)) {
        log.info("release.tag", "keep applies to workspace volumes only: this pool volume gets an expiry", { volume: step.volumeId });
      }
      await cloud.tagVolume(step.volumeId, tags.set);
      await cloud.untagVolume(step.volumeId, tags.removeKeys);
      // Last: while claimed-by names this instance, a later release knows the tags may be missing.
      await cloud.untagVolume(step.volumeId, tags.remove);
      result.released.push(step.volumeId);
      log.notice("release.tagged", "volume released", {
        volume: step.volumeId,
        releasedAt: tags.set[VolumeTag.releasedAt],
        expiresAt: tags.set[VolumeTag.expiresAt],
        keep: tags.set[VolumeTag.keep],
      });
      return;
    }
  }
}

async function dockerActive(deps: ReleaseDeps): Promise<boolean> {
  if (deps.docker) return deps.docker.isActive();
  return deps.engine.info().then(
    () => true,
    () => false,
  );
}

/** Polls until the volume is `available` with no attachment of this instance (or gone, or another's). */
async function waitAvailable(deps: ReleaseDeps, volumeId: string, instanceId: string, timeoutMs: number): Promise<VolumeInfo | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const volume = await deps.cloud.describeVolume(volumeId);
    const a = volume?.attachment;
    if (!volume || volume.state === "available" || (a && a.instanceId !== instanceId)) return volume;
    if (Date.now() >= deadline) {
      throw new AgentError(`${volumeId} is still '${volume.state}' after its detach`, `check it (aws ec2 describe-volumes --volume-ids ${volumeId}), then run release again`);
    }
    await sleep(deps.pollMs ?? 1000);
  }
}
