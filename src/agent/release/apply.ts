/**
 * The release plan, carried out: one small handler per step (STEP_HANDLERS). Each step re-checks
 * the world before it acts and is safe to repeat, so a release killed anywhere and run again
 * converges: a second release finds nothing held and does nothing; one after a release killed
 * between DetachVolume and the tags finds the volume `available` but still `claimed-by` this
 * instance and writes the tags.
 *
 * What a release never does: detach a volume whose filesystem is still mounted (a busy unmount
 * refuses the release of that volume: nothing detached, nothing tagged; so does the filesystem
 * still mounted in another mount namespace after the unmount), force a detach, or
 * touch a volume that is not `ebs-cache:managed=true`.
 */
import { mountPointOf } from "../../layout.ts";
import { dirname } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { AgentError, describeError, remediationOr, stopSignalName } from "../../errors.ts";
import { VolumeTag } from "../../tags.ts";
import { detachBlocker } from "../detach-guard.ts";
import type { VolumeInfo } from "../ports.ts";
import type { ReleaseDeps } from "./deps.ts";
import { dockerActive } from "./observe.ts";
import { isBelow, releaseTags, type ReleasePlan, type ReleaseSettings, type ReleaseStep } from "./plan.ts";
import type { ReleaseReport, ReleaseProblem } from "../outcomes.ts";

export interface ReleaseLimits {
  /** How long a detach may take to reach `available` (config timeouts.attachSeconds). */
  detachTimeoutMs: number;
  /**
   * How long a copy of the mount held in another mount namespace is given to go before the detach
   * is refused (config timeouts.mountHolderSeconds; absent: refused at once).
   */
  holderWaitMs?: number;
}

/** A step the release will not take, for a reason a person must remove: nothing of it was done. */
export class ReleaseRefusedError extends AgentError {
  readonly step: string;

  constructor(step: string, message: string, remediation: string) {
    super(`${step}: ${message}`, remediation);
    this.step = step;
  }
}

/** What every step handler is given. */
interface StepContext {
  instanceId: string;
  deps: ReleaseDeps;
  settings: ReleaseSettings;
  limits: ReleaseLimits;
  result: ReleaseReport;
  /** A stop (SIGTERM, SIGINT): ends a wait for a holder of the mount. */
  signal?: AbortSignal;
}

type StepName = ReleaseStep["step"];
type StepHandler<K extends StepName> = (step: Extract<ReleaseStep, { step: K }>, context: StepContext) => Promise<void>;

/** Runs the plan. Never throws for a refusal or a failed step: the result says (exit 1). */
export async function applyRelease(
  plan: ReleasePlan,
  deps: ReleaseDeps,
  settings: ReleaseSettings,
  limits: ReleaseLimits,
  options: { signal?: AbortSignal } = {},
): Promise<ReleaseReport> {
  const { log } = deps;
  const result: ReleaseReport = { outcome: "released", released: [], kept: [], problems: [], timeline: [] };
  for (const warning of plan.warnings) log.warning("release.plan", warning);
  if (plan.decision !== "release") return undecided(plan, deps, result);

  const context: StepContext = {
    instanceId: plan.instanceId,
    deps,
    settings,
    limits,
    result,
    signal: options.signal,
  };
  /** Volumes whose remaining steps are skipped (a step of theirs was refused or failed). */
  const stopped = new Set<string>();
  let hostSteps = true;
  for (const step of plan.steps) {
    const volumeId = "volumeId" in step ? step.volumeId : undefined;
    const entry = { step: step.step, ...(volumeId !== undefined ? { volumeId } : {}) };
    if (volumeId !== undefined && (stopped.has(volumeId) || !hostSteps)) {
      result.timeline.push({ ...entry, ms: 0, skipped: true });
      continue;
    }
    // A stop (SIGTERM, SIGINT): the step in flight was let finish (an unmount or a detach cut in half helps no
    // one); no further step starts. Every step re-checks the world, so the next release
    // (or gc, for a volume EC2 detaches at termination) takes it from here.
    if (options.signal?.aborted) {
      result.timeline.push({ ...entry, ms: 0, skipped: true });
      if (!result.problems.some((p) => p.step === "sigterm")) {
        const message = `stopped by ${stopSignalName(options.signal)} before ${step.step}`;
        result.problems.push({
          step: "sigterm",
          kind: "failed",
          message,
          remediation: "run ebs-cache-agent release again; it continues where this one stopped",
        });
        log.error("release.failed", message, { step: step.step, volume: volumeId });
      }
      continue;
    }
    // The monotonic clock: a step's time does not jump when NTP sets the host's clock.
    const started = performance.now();
    try {
      await runStep(step, context);
      result.timeline.push({ ...entry, ms: performance.now() - started });
    } catch (error) {
      result.timeline.push({ ...entry, ms: performance.now() - started });
      const problem = problemOf(step.step, volumeId, error);
      result.problems.push(problem);
      log.error(`release.${problem.kind}`, problem.message, {
        step: step.step,
        volume: volumeId,
        remediation: problem.remediation,
      });
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

/** A plan without steps (nothing, disabled, refused): logged and returned as the outcome. */
function undecided(plan: ReleasePlan, deps: ReleaseDeps, result: ReleaseReport): ReleaseReport {
  const reason = plan.reason ?? plan.decision;
  if (plan.decision === "refused") {
    deps.log.error("release.refused", reason, { remediation: plan.remediation });
    result.problems.push({ step: "plan", kind: "refused", message: reason, remediation: plan.remediation ?? "" });
  } else {
    deps.log.notice(`release.${plan.decision}`, reason);
  }
  return {
    ...result,
    outcome: plan.decision === "release" ? "released" : plan.decision,
    ...(plan.reason ? { reason: plan.reason } : {}),
  };
}

/** A failed step as the result reports it: refused (a person must act) or failed, with what to do. */
function problemOf(step: string, volumeId: string | undefined, error: unknown): ReleaseProblem {
  return {
    step,
    ...(volumeId !== undefined ? { volumeId } : {}),
    kind: error instanceof ReleaseRefusedError ? "refused" : "failed",
    message: describeError(error),
    remediation: remediationOr(error, "see the log lines above, then run release again"),
  };
}

function runStep<K extends StepName>(step: Extract<ReleaseStep, { step: K }>, context: StepContext): Promise<void> {
  return STEP_HANDLERS[step.step](step, context);
}

const STEP_HANDLERS: { [K in StepName]: StepHandler<K> } = {
  "withdraw-labels": withdrawLabels,
  "reset-data-root": resetDataRoot,
  "stop-docker": stopDocker,
  sync: syncFilesystems,
  unmount: unmountVolume,
  detach: detachVolume,
  "wait-detached": waitDetached,
  "keep-attached": keepAttached,
  "tag-released": tagReleased,
};

async function withdrawLabels(
  step: Extract<ReleaseStep, { step: "withdraw-labels" }>,
  { deps }: StepContext,
): Promise<void> {
  await deps.withdrawLabels({ node: step.node && (await dockerActive(deps)) });
}

async function resetDataRoot(
  step: Extract<ReleaseStep, { step: "reset-data-root" }>,
  { deps, settings }: StepContext,
): Promise<void> {
  const current = await deps.daemonConfig.dataRoot();
  if (!isBelow(settings.mountRoot, current)) return;
  await deps.daemonConfig.setDataRoot(step.to);
  deps.log.notice("release.data-root", "daemon.json data-root back to the host's own", {
    from: current,
    to: step.to ?? "(default)",
  });
}

async function stopDocker(step: Extract<ReleaseStep, { step: "stop-docker" }>, { deps }: StepContext): Promise<void> {
  if (!(await dockerActive(deps))) return;
  if (!deps.docker) {
    throw new ReleaseRefusedError(
      step.step,
      "docker runs on the cache volume and the agent does not control it (docker.control none)",
      "stop docker, then run release again",
    );
  }
  deps.log.notice("release.docker", "stopping docker: it still runs on the cache volume", { dataRoot: step.dataRoot });
  await deps.docker.stop();
  if (await deps.docker.isActive())
    throw new AgentError(
      "docker is still active after it was stopped",
      "systemctl status docker; stop it, then run release again",
    );
}

async function syncFilesystems(step: Extract<ReleaseStep, { step: "sync" }>, { deps }: StepContext): Promise<void> {
  for (const mountPoint of step.mountPoints) {
    await deps.mounts.sync(mountPoint).catch((error: unknown) => {
      // The unmount writes everything back too; a failed syncfs is worth a line, not a refusal.
      deps.log.warning("release.sync", `sync of ${mountPoint} failed: ${describeError(error)}`, {
        volume: step.volumeId,
      });
    });
  }
}

async function unmountVolume(
  step: Extract<ReleaseStep, { step: "unmount" }>,
  { deps, settings }: StepContext,
): Promise<void> {
  const ours = mountPointOf(settings.mountRoot, step.volumeId);
  // The pre-warm run begun at the mount reads the device: it ends first (at shutdown systemd stopped it already).
  await stopPrewarmRun(step, deps);
  await releaseContainerdRoot(ours, deps);
  const now = await deps.mounts.list(step.device, ours);
  // Deepest first: a mount below another must go before it.
  for (const mountPoint of [...new Set([...now, ...step.mountPoints])].sort((a, b) => b.length - a.length)) {
    try {
      await deps.storage.unmount(mountPoint);
    } catch (error) {
      throw new ReleaseRefusedError(
        step.step,
        `${mountPoint} could not be unmounted (${describeError(error)}); ${step.volumeId} stays attached and ` +
          `untagged: a mounted volume is never detached`,
        `find what still uses it (fuser -vm ${mountPoint}; lsof +f -- ${mountPoint}), stop it, then run release again`,
      );
    }
  }
  deps.log.info("release.unmount", "unmounted", { volume: step.volumeId });
}

/** Stops the pre-warm run begun at the mount; one that will not stop refuses the unmount (nothing is forced). */
async function stopPrewarmRun(step: Extract<ReleaseStep, { step: "unmount" }>, deps: ReleaseDeps): Promise<void> {
  if (!deps.stopPrewarm) return;
  try {
    await deps.stopPrewarm();
  } catch (error) {
    throw new ReleaseRefusedError(
      step.step,
      `the pre-warm run could not be stopped (${describeError(error)}); ${step.volumeId} stays mounted and attached`,
      "systemctl stop ebs-cache-agent-prewarm.service; then run release again",
    );
  }
}

/**
 * containerd's root on the volume (the containerd image store): config.toml put back as the
 * boot found it, and containerd stopped, since it holds its metadata (meta.db) open on the volume
 * and the unmount would be refused. Checked from config.toml each time, so a rerun converges.
 */
async function releaseContainerdRoot(mountPoint: string, deps: ReleaseDeps): Promise<void> {
  const containerd = deps.containerd;
  if (!containerd) return;
  const root = await containerd.root();
  if (!isBelow(mountPoint, root)) return;
  if (containerd.service) {
    // Stopped whatever is-active says: at shutdown its stop job may be under way, and a stop
    // waits for it.
    deps.log.notice("release.containerd", "stopping containerd: its root is on the cache volume", { root });
    await containerd.service.stop();
  } else {
    throw new ReleaseRefusedError(
      "unmount",
      `containerd's root (${root}) is on the cache volume and the agent does not control containerd ` +
        `(docker.control none)`,
      "stop containerd, then run release again",
    );
  }
  await containerd.restoreBackup().catch((error: unknown) => {
    deps.log.warning(
      "release.containerd",
      `could not restore config.toml from its backup (${describeError(error)}): removing its root instead`,
      { root },
    );
  });
  // A backup taken after an earlier boot's change would point at a volume again.
  if (isBelow(dirname(mountPoint), await containerd.root())) await containerd.setRoot(undefined);
  deps.log.notice("release.containerd", "containerd's root put back off the cache volume", {
    from: root,
    to: await containerd.root(),
  });
}

async function detachVolume(
  step: Extract<ReleaseStep, { step: "detach" }>,
  { deps, instanceId, limits, signal }: StepContext,
): Promise<void> {
  // Re-checked right before the call: never detach a volume whose filesystem is mounted.
  const mounted = await deps.mounts.list(step.device, step.mountPoint);
  if (mounted.length > 0) {
    throw new ReleaseRefusedError(
      step.step,
      `${step.volumeId} is still mounted (${mounted.join(", ")}): not detaching it`,
      "unmount it, then run release again",
    );
  }
  // Unmounted here is not unmounted everywhere: a mount namespace copied after the mount keeps
  // the filesystem live, and detaching it then would lose what is written back later. A copy
  // made for a moment (a container starting) is given timeouts.mountHolderSeconds to go.
  const wait = {
    boundMs: limits.holderWaitMs ?? 0,
    log: deps.log,
    area: "release" as const,
    signal,
  };
  const blocker = step.device
    ? await detachBlocker(deps.storage, step.volumeId, step.device, "release", wait)
    : undefined;
  if (blocker) throw new ReleaseRefusedError(step.step, blocker.message, blocker.remediation);
  const volume = await deps.cloud.describeVolume(step.volumeId);
  const a = volume?.attachment;
  if (!volume || !a || a.instanceId !== instanceId || a.state === "detaching" || a.state === "detached") {
    deps.log.info("release.detach", "not attached here any more: nothing to detach", { volume: step.volumeId });
    return;
  }
  await deps.cloud.detachVolume(step.volumeId, instanceId);
}

async function waitDetached(
  step: Extract<ReleaseStep, { step: "wait-detached" }>,
  { deps, instanceId, limits }: StepContext,
): Promise<void> {
  await deps.cloud.waitForAttachment(step.volumeId, instanceId, "detached", limits.detachTimeoutMs);
  const volume = await waitAvailable(deps, step.volumeId, instanceId, limits.detachTimeoutMs);
  deps.log.notice("release.detached", "volume detached", { volume: step.volumeId, state: volume?.state ?? "gone" });
}

async function keepAttached(
  step: Extract<ReleaseStep, { step: "keep-attached" }>,
  { deps, settings, result }: StepContext,
): Promise<void> {
  // Before anything is left attached: is it really unmounted? (The unmount step refuses
  // rather than leave a mount, so this only guards against a mount made since.)
  const mounted = await deps.mounts.list(undefined, mountPointOf(settings.mountRoot, step.volumeId));
  if (mounted.length > 0) {
    throw new ReleaseRefusedError(
      step.step,
      `${step.volumeId} is mounted again (${mounted.join(", ")})`,
      "unmount it, then run release again",
    );
  }
  if (Object.keys(step.setTags).length > 0) await deps.cloud.tagVolume(step.volumeId, step.setTags);
  if (step.removeTags.length > 0) await deps.cloud.untagVolume(step.volumeId, step.removeTags);
  result.kept.push(step.volumeId);
  deps.log.notice(
    "release.kept",
    "volume unmounted and left attached for the instance's next start (a stop): no expiry",
    { volume: step.volumeId },
  );
}

async function tagReleased(
  step: Extract<ReleaseStep, { step: "tag-released" }>,
  { deps, instanceId, result }: StepContext,
): Promise<void> {
  const { cloud, log } = deps;
  const volume = await cloud.describeVolume(step.volumeId);
  if (!volume) {
    log.warning("release.tag", "the volume no longer exists: nothing to tag", { volume: step.volumeId });
    return;
  }
  const a = volume.attachment;
  if (a && a.instanceId === instanceId && a.state !== "detached") {
    throw new AgentError(
      `${step.volumeId} is still ${a.state} to this instance: not tagging it released`,
      "run release again",
    );
  }
  if (a && a.instanceId !== instanceId) {
    // Claimed by another instance since our detach: its tags are its own now.
    await cloud.untagVolume(step.volumeId, { [VolumeTag.claimedBy]: instanceId });
    log.notice("release.tag", "already claimed by another instance: release tags left to it", {
      volume: step.volumeId,
      by: a.instanceId,
    });
    result.released.push(step.volumeId);
    return;
  }
  // EC2's time (asked after this step's DescribeVolumes): a host days behind must not write an
  // expiry already past in EC2's time, nor one days ahead an expiry that outlives its TTL.
  const releasedAt = step.releasedAt !== undefined ? new Date(step.releasedAt) : cloud.clock.now();
  const claimedAt = volume.tags[VolumeTag.claimedAt];
  const keepBy = volume.tags[VolumeTag.keepBy];
  const tags = releaseTags({
    instanceId,
    kind: step.kind,
    keep: step.keep,
    ttlHours: step.ttlHours,
    releasedAt,
    ...(claimedAt !== undefined ? { claimedAt } : {}),
    ...(keepBy !== undefined ? { keepBy } : {}),
  });
  if (step.keep && !(VolumeTag.keep in tags.set)) {
    log.info("release.tag", "keep applies to workspace volumes only: this pool volume gets an expiry", {
      volume: step.volumeId,
    });
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
}

/** Polls until the volume is `available` with no attachment of this instance (or gone, or another's). */
async function waitAvailable(
  deps: ReleaseDeps,
  volumeId: string,
  instanceId: string,
  timeoutMs: number,
): Promise<VolumeInfo | undefined> {
  // Monotonic, as the bound is a duration: the host's clock may be set while the detach goes.
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const volume = await deps.cloud.describeVolume(volumeId);
    const a = volume?.attachment;
    if (!volume || volume.state === "available" || (a && a.instanceId !== instanceId)) return volume;
    if (performance.now() >= deadline) {
      throw new AgentError(
        `${volumeId} is still '${volume.state}' after its detach`,
        `check it (aws ec2 describe-volumes --volume-ids ${volumeId}), then run release again`,
      );
    }
    await sleep(deps.pollMs ?? 1000);
  }
}
