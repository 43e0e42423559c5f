/**
 * The boot use case's entry, called by the CLI (`ebs-cache-agent boot`): identify → resolve
 * settings → compose its parts → observe (or degrade) → plan → (dry run: print) → apply → exit
 * code. The host's adapters come from the caller (src/cli/wiring.ts: the CLI's real ones, or a lab
 * host's; the port fakes in the unit tests), so the same code runs on EC2, in the lab and in process.
 */
import { cloudFailureOf } from "../../aws/errors.ts";
import { AgentError, ConfigError, ExitCode, describeError } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import { applyBoot } from "./apply.ts";
import type { BootLimits } from "./context.ts";
import type { AgentConfig } from "../../config/index.ts";
import type { HostAdapters } from "../adapters.ts";
import { composeBoot } from "./compose.ts";
import { BootBudgetSpent, CancelledError } from "./errors.ts";
import { describeDeadline, planBootDeadline } from "./deadline.ts";
import { observeBoot, observeIdentity } from "./observe.ts";
import {
  preparedInThisBoot,
  readPreparedRecord,
  removePreparedRecord,
  writePreparedRecord,
} from "./prepared-record.ts";
import { planBoot, type BootObservation, type BootPlan, type BootSettings } from "./plan.ts";
import type { BootPhase, CloudClock, CloudVolumes, Identity } from "../ports.ts";
import type { HostStore } from "../../docker/image-store.ts";
import { recordOf, resolveSettings, type ResolvedSettings } from "../settings.ts";
import { writeWorkspaceRecord, type Activation, type WorkspaceRecord } from "../workspace-record.ts";
import { describeDiskError, diskErrorKind } from "../../disk-errors.ts";
import { stateFolderRefused } from "../../state-folder.ts";
import type { BootReport } from "../outcomes.ts";

export interface BootOutcome {
  identity: Identity;
  plan: BootPlan;
  report?: BootReport;
  exitCode: number;
}

/** Exit code of a finished boot: 0 ready or disabled, 4 degraded. */
export function bootExitCode(report: BootReport): number {
  return report.outcome === "degraded" ? ExitCode.degraded : ExitCode.ok;
}

export interface BootOptions {
  dryRun: boolean;
  withDocker?: boolean;
  mayClaim?: boolean;
  signal?: AbortSignal;
  /** Docker is on its final data-root: as soon as it is verified there, else when the boot ends (ApplyOptions). */
  dataRootFinal?: () => Promise<void>;
}

/**
 * Runs the boot (or, with dryRun, only plans it) over the host's adapters; it composes its own parts
 * (compose.ts) once its settings are known. Throws ConfigError on bad tags: nothing changed.
 */
export async function runBoot(config: AgentConfig, host: HostAdapters, options: BootOptions): Promise<BootOutcome> {
  const started = Date.now();
  // The host's image store (daemon.json, and `dockerd --version`: a process, ~0.1 s) is read
  // beside IMDS and EC2 rather than after them: with EC2 answering fast the observation would
  // otherwise wait for it. Read-only; a failure leaves the store unobserved, as in observeBoot.
  const hostStoreRead = host.hostStore?.();
  hostStoreRead?.catch(() => undefined);
  const hostStore = hostStoreRead ? () => hostStoreRead : undefined;
  const { identity, activation, resolved, record } = await identifyAndResolve(config, host, options);
  const settings = resolved.boot;

  const cloud = host.cloudFor(config.region ?? identity.region);
  // One deadline for the first phase (it may claim, and runs before docker.service): its budget or
  // the autoscaler's start limit from LaunchTime, whichever comes first (deadline.ts). Whatever is
  // not done by then is undone and the node degrades, so that it joins the swarm in time.
  const budget =
    settings.mayClaim && !settings.withDocker && !options.dryRun
      ? bootBudget(config, started, activation.launchTime, cloud.clock, host.log)
      : undefined;
  const signal = anySignal([options.signal, budget?.signal]);
  // The labels the last report of this run published (the reporter tells), for the boot's record.
  let published: Record<string, string> | undefined;
  const bootDeps = composeBoot(host, config, resolved, cloud, (labels) => (published = labels));
  // `dockerd --version` (~0.1 s, memoized per run) is wanted by the host check and the switch of a
  // run that may claim: read while EC2 is asked, off the boot's path. A failure is not kept.
  if (settings.mayClaim && settings.enabled && !options.dryRun) void bootDeps.dockerVersion().catch(() => undefined);
  const observation = await observeOrDegrade(cloud, identity, settings, host.log, signal, hostStore, options.dryRun);
  const plan = await planOf(observation, settings, config.paths.stateDir, host, identity, options);
  if (options.dryRun) return { identity, plan, exitCode: ExitCode.ok };

  const limits: BootLimits = {
    ...limitsOf(config, settings),
    defaultDataRoot: await host.dataRootToRestore(),
    ...(host.bootId ? { bootId: host.bootId } : {}),
    ...(activation.launchTime ? { launchTime: activation.launchTime } : {}),
    ...(record ? { workspaceRecord: record } : {}),
  };
  // Without docker (the phase before docker.service) nothing may start or restart docker: such
  // a start job would wait for this very unit. A degraded boot then only writes its label.
  if (!settings.withDocker) bootDeps.docker = undefined;
  const known =
    "observed" in observation
      ? [...observation.observed.attached, ...observation.observed.workspace, ...observation.observed.pool]
      : [];
  const report = await applyBoot(plan, bootDeps, limits, {
    known,
    createMs: config.timeouts.createSeconds * 1000,
    signal,
    deadline: budget?.deadline,
    dataRootFinal: options.dataRootFinal,
  }).finally(() => budget?.clear());
  // A problem that will not clear by itself (permissions) fails the unit, after the node came up degraded.
  const exitCode = "plan" in observation && !observation.transient ? ExitCode.failure : bootExitCode(report);
  await finishBoot(config, host, { identity, settings, report, published }, options);
  return { identity, plan, report, exitCode };
}

/**
 * The plan of what was observed (or the degraded boot observeOrDegrade planned). The second phase
 * need not redo what the first did in this boot (prepared-record.ts); a first phase vouches for
 * nothing until it has prepared the volume again, so it removes the record before it plans.
 */
async function planOf(
  observation: { observed: BootObservation } | { plan: BootPlan },
  settings: BootSettings,
  stateDir: string,
  host: HostAdapters,
  identity: Identity,
  options: BootOptions,
): Promise<BootPlan> {
  const prepared = !settings.mayClaim
    ? preparedInThisBoot(await readPreparedRecord(stateDir), { bootId: host.bootId, instanceId: identity.instanceId })
    : undefined;
  if (settings.mayClaim && !options.dryRun) await removePreparedRecord(stateDir).catch(() => undefined);
  const plan =
    "plan" in observation
      ? observation.plan
      : planBoot(settings, { ...observation.observed, ...(prepared ? { prepared } : {}) });
  host.log.info("boot.plan", `source: ${plan.selection.source}`, {
    candidates: "candidates" in plan.selection ? plan.selection.candidates.length : undefined,
    steps: plan.steps.length,
  });
  return plan;
}

/**
 * What follows a boot that ran: docker's data-root final, the prepared volume left to the second
 * phase, the boot's record, and the background refresh of a node that serves.
 */
async function finishBoot(
  config: AgentConfig,
  host: HostAdapters,
  ended: {
    identity: Identity;
    settings: BootSettings;
    report: BootReport;
    published: Record<string, string> | undefined;
  },
  options: BootOptions,
): Promise<void> {
  const { identity, settings, report, published } = ended;
  // A boot that ended otherwise (degraded, disabled, prepared) has docker where it stays too.
  await options.dataRootFinal?.();
  if (report.outcome === "prepared" && host.bootId)
    await recordPrepared(config.paths.stateDir, host.bootId, identity.instanceId, report, host.log);
  const phase: BootPhase = !settings.mayClaim ? "second" : settings.withDocker ? "single" : "first";
  await host.recorder?.bootFinished({
    instanceId: identity.instanceId,
    ...(host.bootId ? { bootId: host.bootId } : {}),
    phase,
    report,
    finishedAt: new Date(),
    ...(published ? { publishedLabels: published } : {}),
  });
  if (host.startRefresh && config.refresh.enabled && (report.outcome === "ready" || report.outcome === "warming"))
    await startRefresh(host.startRefresh, host.log);
}

/** The boot's limits of config `timeouts` and `docker`, and where it mounts. */
function limitsOf(config: AgentConfig, settings: BootSettings): Omit<BootLimits, "defaultDataRoot"> {
  return {
    attachTimeoutMs: config.timeouts.attachSeconds * 1000,
    deviceTimeoutMs: config.timeouts.deviceSeconds * 1000,
    holderWaitMs: config.timeouts.mountHolderSeconds * 1000,
    dockerTimeoutMs: config.timeouts.dockerSeconds * 1000,
    expectedImages: [...config.docker.expectedImages],
    device: settings.device,
    mountRoot: settings.mountRoot,
  };
}

/**
 * The instance, its activation, its settings (config < instance tags < this activation's record), and
 * the workspace record this run writes (the first phase's, unless a dry run).
 */
async function identifyAndResolve(
  config: AgentConfig,
  host: HostAdapters,
  options: BootOptions,
): Promise<{ identity: Identity; activation: Activation; resolved: ResolvedSettings; record?: WorkspaceRecord }> {
  const { log } = host;
  const stateDir = config.paths.stateDir;
  const mayClaim = options.mayClaim ?? true;
  const withDocker = options.withDocker ?? true;
  // Bad instance tags refuse the boot whatever an earlier record says: checked as soon as they
  // are read, before any EC2 call (nothing was changed on this node).
  const checkTags = (found: Identity) => {
    const checked = resolveSettings(config, found, { withDocker, mayClaim });
    if (!checked.ok)
      throw new ConfigError(checked.problems, "fix the instance tags (nothing was changed on this node)");
  };
  const { identity, activation, previous } = await observeIdentity(
    { ...host, config },
    { mayClaim, checkTags, signal: options.signal },
  );
  log.info("boot.identity", "instance identified", {
    instance: identity.instanceId,
    zone: identity.availabilityZone,
    tags: identity.tagsSource,
  });
  if (previous.problem)
    log.warning("boot.settings", `${previous.problem}: the labels tag is read instead`, { stateDir });
  // A stop and start: whoever the record named is not this run's tenant until the tags say so.
  if (previous.earlier)
    log.info(
      "boot.settings",
      `the workspace record is of an earlier activation (${previous.earlier.recordedAt}): not used; the current ` +
        `tags say who this instance serves`,
      { stateDir },
    );
  const resolved = resolveSettings(config, identity, { withDocker, mayClaim, recorded: previous.record });
  if (!resolved.ok) {
    throw new ConfigError(resolved.problems, "fix the instance tags (nothing was changed on this node)");
  }
  for (const line of resolved.value.applied) log.info("boot.settings", `instance tag override: ${line}`);
  for (const line of resolved.value.warnings) log.warning("boot.settings", line);
  for (const line of resolved.value.notes) log.info("boot.settings", line);
  // The autoscaler deletes the labels tag after the join: phase 2, reboots' later phases and the
  // release read what this phase used from the record, in the state folder and on the volume.
  if (!mayClaim || options.dryRun) return { identity, activation, resolved: resolved.value };
  if (resolved.value.request.fromRecord)
    return { identity, activation, resolved: resolved.value, ...(previous.record ? { record: previous.record } : {}) };
  const record: WorkspaceRecord = {
    ...recordOf(identity, resolved.value.request),
    ...(activation.launchTime ? { launchTime: activation.launchTime } : {}),
    ...(activation.bootId ? { bootId: activation.bootId } : {}),
    recordedAt: new Date().toISOString(),
  };
  await writeWorkspaceRecord(stateDir, record).catch((error: unknown) =>
    stateFolderRefused(log, stateDir, "boot.state-folder", stateFolderLine(stateDir, error), {
      error: describeError(error),
    }),
  );
  return { identity, activation, resolved: resolved.value, record };
}

/** Hands the refresh to its own process once the node is up; a failure to start it is a warning, never the boot's. */
async function startRefresh(start: () => Promise<void>, log: Logger): Promise<void> {
  await start().catch((error: unknown) =>
    log.warning(
      "boot.refresh",
      `could not start the background refresh: ${describeError(error)}; readiness is unchanged`,
    ),
  );
}

/**
 * Leaves the prepared volume to the second phase (a failed write is logged: that phase then checks everything again).
 */
async function recordPrepared(
  stateDir: string,
  bootId: string,
  instanceId: string,
  report: BootReport,
  log: Logger,
): Promise<void> {
  const { volumeId, device, mountPoint, dataRoot } = report;
  if (!volumeId || !device || !mountPoint || !dataRoot) return;
  const record = {
    version: 1 as const,
    bootId,
    instanceId,
    volumeId,
    device,
    mountPoint,
    dataRoot,
    preparedAt: new Date().toISOString(),
  };
  await writePreparedRecord(stateDir, record).catch((error: unknown) =>
    stateFolderRefused(
      log,
      stateDir,
      "boot.prepared",
      `could not record the prepared volume: ${describeError(error)}; the second phase checks it again`,
      { stateDir },
    ),
  );
}

/**
 * The one line a state folder that takes no write gets (full, read-only, or otherwise refused):
 * what it means for this boot. Nothing that matters is lost: the workspace record goes on the
 * volume too (volume-record.ts), the second phase checks the volume again without prepared.json,
 * and the host's own data-root is recorded already or is docker's default (original-data-root.ts).
 */
export function stateFolderLine(stateDir: string, error: unknown): string {
  const kind = diskErrorKind(error);
  const why = kind ? describeDiskError(kind) : "refused";
  return (
    `the agent's state folder ${stateDir} takes no write (${why}): the workspace record is kept on the volume ` +
    `instead, and the second phase checks the volume again; free space there (or make it writable)`
  );
}

/**
 * Observes, or — when EC2 cannot be asked (no credentials, EC2 unreachable or throttling past
 * the SDK's retries, a permission refused) — plans the degraded boot instead, so the same
 * degrade path runs: docker on its default data-root, the `degraded` label with the reason.
 * `transient` tells a failure that may clear (exit 4) from one an operator must fix (exit 1).
 * Anything else (a bug, an unexpected answer) is thrown as before, and so is every failure of a
 * run that may not claim (`--no-claim`, after docker started): docker may already run on the
 * volume the first phase mounted, and a degrade would move it off that volume under a node
 * that may have joined the swarm; that run fails and leaves docker as it is.
 */
async function observeOrDegrade(
  cloud: CloudVolumes,
  identity: Identity,
  settings: BootSettings,
  log: Logger,
  signal: AbortSignal | undefined,
  hostStore: (() => Promise<HostStore>) | undefined,
  dryRun: boolean,
): Promise<{ observed: BootObservation } | { plan: BootPlan; transient: boolean }> {
  try {
    return {
      observed: await observeBoot(cloud, identity, settings, {
        signal,
        hostStore,
      }),
    };
  } catch (error) {
    // SIGTERM or the budget while observing: nothing was claimed yet; the node degrades like
    // any stopped boot.
    const failure = signal?.aborted ? { transient: true } : cloudFailureOf(error);
    // A dry run that could not ask EC2 has no plan to show: the failure is its outcome (exit 1), not a degraded boot.
    if (!failure || !settings.mayClaim || dryRun) throw error;
    const { transient } = failure;
    const reason = signal?.aborted ? new CancelledError("observe", signal).message : describeError(error);
    log.error("boot.observe", `${reason}; no volume was claimed`, {
      remediation: error instanceof AgentError ? error.remediation : undefined,
      transient,
    });
    return {
      plan: {
        instanceId: identity.instanceId,
        availabilityZone: identity.availabilityZone,
        selection: { source: "none", reason },
        steps: [{ step: "degrade", reason }],
      },
      transient,
    };
  }
}

/**
 * The first phase's deadline (deadline.ts, logged): a signal aborted then (with BootBudgetSpent as
 * its reason, naming the bound that ran out), and that deadline on the host's wall clock. The
 * timer does not keep the process alive.
 */
function bootBudget(
  config: AgentConfig,
  started: number,
  launchTime: string | undefined,
  clock: CloudClock,
  log: Logger,
): { signal: AbortSignal; deadline: number; clear(): void } {
  const { bootSeconds, startLimitSeconds, joinMarginSeconds } = config.timeouts;
  let ec2Now: Date | undefined;
  try {
    ec2Now = clock.now();
  } catch {
    ec2Now = undefined;
  }
  const inputs = {
    startedMs: started,
    hostNowMs: Date.now(),
    ec2Now,
    launchTime,
    budgetSeconds: bootSeconds,
    startLimitSeconds,
    joinMarginSeconds,
  };
  const planned = planBootDeadline(inputs);
  const what = describeDeadline(planned, inputs);
  log.info("boot.deadline", planned.note ? `${what}; ${planned.note}` : what, {
    secondsLeft: Math.round((planned.deadlineMs - inputs.hostNowMs) / 100) / 10,
    sinceLaunchSeconds: planned.sinceLaunchSeconds,
  });
  const controller = new AbortController();
  const deadline = planned.deadlineMs;
  const reason = new BootBudgetSpent(bootSeconds, what, planned.bound === "start-limit");
  const timer = setTimeout(() => controller.abort(reason), Math.max(0, deadline - Date.now()));
  timer.unref();
  return { signal: controller.signal, deadline, clear: () => clearTimeout(timer) };
}

/** One signal for several (SIGTERM, the budget): aborted by whichever comes first, with its reason. */
function anySignal(signals: Array<AbortSignal | undefined>): AbortSignal | undefined {
  const present = signals.filter((s): s is AbortSignal => s !== undefined);
  return present.length <= 1 ? present[0] : AbortSignal.any(present);
}
