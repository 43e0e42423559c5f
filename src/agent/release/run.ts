/**
 * The release's entry (`ebs-cache-agent release`, src/cli/release.ts): identify → resolve
 * settings → compose its parts → observe → plan → (dry run: print) → apply. The host's adapters
 * come from the caller (src/cli/wiring.ts: the CLI's real ones, or a lab host's), so the same code
 * runs on EC2 (systemd's ExecStop, after docker.service stopped) and in the lab.
 */
import type { AgentConfig } from "../../config/index.ts";
import { ExitCode } from "../../errors.ts";
import type { CloudVolumes, Identity } from "../ports.ts";
import { resolveReleaseSettings, type ResolvedReleaseSettings } from "../settings.ts";
import { readWorkspaceRecord, type WorkspaceRecord } from "../workspace-record.ts";
import { findVolumeRecord } from "../volume-record.ts";
import { applyRelease } from "./apply.ts";
import { observeRelease } from "./observe.ts";
import { planRelease, type ReleasePlan } from "./plan.ts";
import type { HostAdapters } from "../adapters.ts";
import type { ReleaseDeps } from "./deps.ts";

export type { ReleaseDeps } from "./deps.ts";
import type { ReleaseReport } from "../outcomes.ts";

export interface ReleaseOutcome {
  identity: Identity;
  plan: ReleasePlan;
  report?: ReleaseReport;
  exitCode: number;
}

/** 0: released, nothing to do, or disabled; 1: refused or failed (the log says what to do). */
export function releaseExitCode(report: ReleaseReport): number {
  return report.outcome === "refused" || report.outcome === "failed" ? ExitCode.failure : ExitCode.ok;
}

/**
 * The first boot phase's workspace record: the state folder's, else (lost: a full or read-only
 * folder, wiped) the copy on the volume still mounted for this boot (volume-record.ts; this
 * boot's kernel boot id is its activation here, the launch time being unknown to the release).
 */
async function recordOfThisInstance(
  config: AgentConfig,
  adapters: HostAdapters,
  identity: Identity,
): Promise<{ record?: WorkspaceRecord; problem?: string }> {
  const host = await readWorkspaceRecord(config.paths.stateDir);
  if (host.record?.instanceId === identity.instanceId) return host;
  if (!adapters.bootId) return host;
  const onVolume = await findVolumeRecord(config.paths.mountRoot, {
    instanceId: identity.instanceId,
    bootId: adapters.bootId,
  });
  if (onVolume.record) {
    if (host.problem)
      adapters.log.info("release.settings", `${host.problem}: the copy on ${onVolume.record.volumeId} is read`);
    return { record: onVolume.record };
  }
  return host.problem ? host : onVolume;
}

/** The release's deps: the host's adapters, its labels under the run's prefix and mode, its few knobs. */
export function composeRelease(
  config: AgentConfig,
  host: HostAdapters,
  settings: ResolvedReleaseSettings,
  cloud: CloudVolumes,
): ReleaseDeps {
  const { withdraw } = host.labels({ prefix: settings.effective.labels.prefix, mode: settings.effective.labels.mode });
  return {
    cloud,
    storage: host.storage,
    mounts: host.mounts,
    daemonConfig: host.daemonConfig,
    docker: host.docker,
    engine: host.engine,
    withdrawLabels: withdraw,
    ...(host.containerd ? { containerd: host.containerd } : {}),
    log: host.log,
    ...(host.pollMs ? { pollMs: host.pollMs } : {}),
    ...(host.spotInstanceAction ? { spotInstanceAction: host.spotInstanceAction } : {}),
    imdsRequestSeconds: config.timeouts.imdsRequestSeconds,
    ...(host.rebootQueued ? { rebootQueued: host.rebootQueued } : {}),
    ...(host.prewarmFromMount ? { stopPrewarm: () => host.prewarmFromMount!.stop() } : {}),
  };
}

/** Runs the release (or, with dryRun, only plans it). */
export async function runRelease(
  config: AgentConfig,
  host: HostAdapters,
  options: { dryRun: boolean; signal?: AbortSignal },
): Promise<ReleaseOutcome> {
  const { log } = host;
  const identity = await host.identify();
  log.info("release.identity", "instance identified", {
    instance: identity.instanceId,
    zone: identity.availabilityZone,
    tags: identity.tagsSource,
  });
  const previous = await recordOfThisInstance(config, host, identity);
  if (previous.problem)
    log.warning("release.settings", `${previous.problem}: keep is read from the labels tag instead`);
  const resolved = resolveReleaseSettings(config, identity, {
    defaultDataRoot: await host.dataRootToRestore(),
    recorded: previous.record,
  });
  for (const line of resolved.applied) log.info("release.settings", `instance tag override: ${line}`);
  for (const line of resolved.warnings) log.warning("release.settings", line);
  const settings = resolved.release;

  const cloud = host.cloudFor(config.region ?? identity.region);
  const releaseDeps = composeRelease(config, host, resolved, cloud);
  const observed = await observeRelease(releaseDeps, identity, settings);
  const plan = planRelease(settings, observed);
  if (observed.shutdown) {
    const what =
      plan.shutdown.kind === "stop"
        ? "the instance is being stopped or rebooted: its cache volume is unmounted and stays attached, with no " +
          "expiry, for its next start"
        : plan.shutdown.kind === "terminate"
          ? "the instance is being terminated: full release (detach, released-at / expires-at)"
          : "whether the instance stops or terminates is unknown: full release (detach, released-at / expires-at)";
    log.notice("release.shutdown", what, { why: plan.shutdown.reason });
  }
  log.info("release.plan", `decision: ${plan.decision}`, {
    volumes: plan.volumes.join(",") || undefined,
    steps: plan.steps.length,
  });
  if (options.dryRun) {
    for (const warning of plan.warnings) log.warning("release.plan", warning);
    return { identity, plan, exitCode: plan.decision === "refused" ? ExitCode.failure : ExitCode.ok };
  }
  const report = await applyRelease(
    plan,
    releaseDeps,
    settings,
    {
      detachTimeoutMs: config.timeouts.attachSeconds * 1000,
      holderWaitMs: config.timeouts.mountHolderSeconds * 1000,
    },
    options.signal ? { signal: options.signal } : {},
  );
  await host.recorder?.releaseFinished({ instanceId: identity.instanceId, report });
  return { identity, plan, report, exitCode: releaseExitCode(report) };
}
