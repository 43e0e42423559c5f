/**
 * `ebs-cache-agent prewarm`: the pre-warm of the cache volume attached to this instance, on its
 * own. With `--background` it is the run the boot handed a long initialization to (the node is
 * labelled `warming` meanwhile); by hand it checks, initializes, or resumes an interrupted
 * initialization. The adapters come from the caller (the CLI's real ones, or a lab host's).
 *
 * And `ebs-cache-agent status`: the state file in words.
 */
import { AgentError, ConfigError, ExitCode } from "../errors.ts";
import { createFioReader } from "../host/volume-reads.ts";
import { VolumeTag } from "../tags.ts";
import type { BootCommandDeps } from "./boot/run.ts";
import type { VolumeInfo } from "./ports.ts";
import { prewarmAtBoot, runInitialization, type PrewarmDeps, type PrewarmOutcome, type PrewarmReader, type PrewarmTarget } from "./prewarm.ts";
import { decidePrewarm, prewarmSettingsFrom, type PrewarmStrategy } from "./prewarm-plan.ts";
import { isAlive, readPrewarmState, renderPrewarmStatus, type PrewarmState } from "./prewarm-state.ts";
import { resolveSettings } from "./settings.ts";
import { volumeDetails } from "./report.ts";

export interface PrewarmCommandOptions {
  /** Overrides config `prewarm.strategy`. */
  strategy?: PrewarmStrategy;
  /** Stops the reads (SIGTERM): the state keeps the resume point. */
  signal?: AbortSignal;
  /** The reads (default fio on this host). */
  reader?: PrewarmReader;
}

export interface PrewarmCommandOutcome {
  volumeId?: string;
  outcome?: PrewarmOutcome;
  /** 0 done (or nothing to do), 1 the pre-warm failed (the node is still reported). */
  exitCode: number;
}

/** The managed volume attached to this instance (a workspace volume first), if any. */
function attachedVolume(volumes: VolumeInfo[], instanceId: string): VolumeInfo | undefined {
  const mine = volumes.filter((v) => v.attachment?.instanceId === instanceId);
  return mine.find((v) => v.tags[VolumeTag.kind] === "workspace") ?? mine[0];
}

/** Runs the pre-warm of the attached cache volume. */
export async function runPrewarmCommand(deps: BootCommandDeps, options: PrewarmCommandOptions = {}): Promise<PrewarmCommandOutcome> {
  const { log, config } = deps;
  const identity = await deps.identify();
  const resolved = resolveSettings(config, identity, { withDocker: true, mayClaim: false });
  if (!resolved.ok) throw new ConfigError(resolved.problems, "fix the instance tags (nothing was changed on this node)");
  const cloud = deps.cloudFor(config.region ?? identity.region);
  const volume = attachedVolume(await cloud.findVolumes({ tags: { [VolumeTag.managed]: "true" }, attachedTo: identity.instanceId }), identity.instanceId);
  if (!volume) {
    log.notice("prewarm.none", "no cache volume is attached to this instance: nothing to pre-warm", { instance: identity.instanceId });
    return { exitCode: ExitCode.ok };
  }
  const bootDeps = deps.bootDeps(resolved.value, cloud);
  const device = await bootDeps.storage.findDevice(volume.volumeId);
  if (!device) throw new AgentError(`the device of ${volume.volumeId} is not present on this host`, "run `ebs-cache-agent boot` first");
  const mountPoint = await bootDeps.storage.mountPointOf(device);
  if (!mountPoint) throw new AgentError(`${volume.volumeId} (${device}) is not mounted`, "run `ebs-cache-agent boot` first");

  const settings = { ...prewarmSettingsFrom(resolved.value.effective), ...(options.strategy ? { strategy: options.strategy } : {}) };
  const previous = await readPrewarmState(config.paths.stateDir);
  const target: PrewarmTarget = {
    volume: { volumeId: volume.volumeId, ...(volume.snapshotId ? { snapshotId: volume.snapshotId } : {}), tags: volume.tags },
    sizeBytes: volume.sizeGiB * 1024 ** 3,
    device,
    mountPoint,
    labels:
      previous?.volumeId === volume.volumeId
        ? previous.labels
        : volumeDetails(volume),
  };
  const report = bootDeps.report;
  const prewarmDeps: PrewarmDeps = {
    reader: options.reader ?? createFioReader({ log }),
    initializationStatus: (volumeId) => cloud.initializationStatus(volumeId),
    tagVolume: (volumeId, tags) => cloud.tagVolume(volumeId, tags),
    report: (state, details) => report(state, details),
    stateDir: config.paths.stateDir,
    log,
  };
  const status = await prewarmDeps.initializationStatus!(volume.volumeId).catch(() => undefined);
  const decision = decidePrewarm(settings, target.volume, status);
  log.info("prewarm.decide", `${decision.action}: ${decision.reason}`, { volume: volume.volumeId, strategy: settings.strategy });
  let outcome: PrewarmOutcome;
  if (decision.action === "initialize" || decision.action === "follow") {
    outcome = await runInitialization(target, settings, prewarmDeps, { decision, publish: true, ...(options.signal ? { signal: options.signal } : {}) });
  } else {
    outcome = await prewarmAtBoot(target, settings, prewarmDeps);
    await report("ready", { ...target.labels, ...outcome.labels }).catch((error: unknown) => {
      log.warning("prewarm.labels", `could not publish the labels: ${String(error)}`);
    });
  }
  return { volumeId: volume.volumeId, outcome, exitCode: outcome.phase === "failed" ? ExitCode.failure : ExitCode.ok };
}

/** What `ebs-cache-agent status` shows: the pre-warm state and whether a process works on it. */
export async function prewarmStatus(stateDir: string): Promise<{ state: PrewarmState | undefined; running: boolean; lines: string[] }> {
  const state = await readPrewarmState(stateDir);
  const running = state ? await isAlive(state.pid, state.pidStart) : false;
  return { state, running, lines: renderPrewarmStatus(state, running) };
}
