/**
 * `ebs-cache-agent prewarm`: the pre-warm of the cache volume attached to this instance, on its
 * own. With `--background` it is the run the boot hands a long initialization to (the node is
 * labelled `warming` meanwhile); by hand it checks, initializes, or resumes an interrupted
 * initialization. The host's adapters come from the caller (src/cli/wiring.ts: the CLI's real
 * ones, or a lab host's); it composes its labels and reads from them.
 *
 * And `ebs-cache-agent status`: the state file in words.
 */
import { constants } from "node:os";
import type { AgentConfig } from "../../config/index.ts";
import { ConfigError, ExitCode, StopSignalReceived } from "../../errors.ts";
import type { HostAdapters } from "../adapters.ts";
import type { BegunReads, Identity, VolumeInfo } from "../ports.ts";
import { volumeDetails } from "../report.ts";
import { resolveSettings, type ResolvedSettings } from "../settings.ts";
import { decidePrewarm, prewarmAtBoot, runInitialization } from "./apply.ts";
import { imagesOfNode } from "./need.ts";
import { findAttachedVolume, findMountedDevice } from "./observe.ts";
import type { PrewarmDeps } from "./deps.ts";
import {
  headStartAtMount,
  prewarmSettingsFrom,
  prewarmVolumeOf,
  type PrewarmReport,
  type PrewarmSettings,
  type PrewarmTarget,
} from "./plan.ts";
import type { PrewarmStrategy } from "../../config/index.ts";
import { isAlive } from "../process-identity.ts";
import { readPrewarmState, renderPrewarmStatus, stateOfVolume, type PrewarmState } from "./state.ts";
import { mountRunKey } from "./mount-run.ts";
import { beginReadsAtMount, takingOver } from "./read-first.ts";

export interface PrewarmCommandOptions {
  /** Overrides config `prewarm.strategy`. */
  strategy?: PrewarmStrategy;
  /** Stops the reads (SIGTERM): the state keeps the resume point. */
  signal?: AbortSignal;
  /**
   * The run the boot begins at the mount, before docker starts (`--from-mount`, ebs-cache-agent-prewarm.service): it
   * reads only a volume known cold, warmed in the background (headStartAtMount; any other decision is left to the
   * boot's `prewarm` step), and publishes nothing until the boot has published the node (mount-run.ts).
   */
  fromMount?: boolean;
}

export interface PrewarmOutcome {
  volumeId?: string;
  report?: PrewarmReport;
  /** 0 done (or nothing to do), 1 the pre-warm failed or was stopped (the node is still reported). */
  exitCode: number;
}

/** Runs the pre-warm of the attached cache volume. */
export async function runPrewarm(
  config: AgentConfig,
  host: HostAdapters,
  options: PrewarmCommandOptions = {},
): Promise<PrewarmOutcome> {
  const { log } = host;
  const identity = await host.identify();
  const resolved = resolveSettings(config, identity, { withDocker: true, mayClaim: false });
  if (!resolved.ok)
    throw new ConfigError(resolved.problems, "fix the instance tags (nothing was changed on this node)");
  const nodeImages = (volumeTags: Readonly<Record<string, string>>) =>
    imagesOfNode(volumeTags, resolved.value.effective.docker.expectedImages, {
      tags: identity.tags,
      prePulledImagesTag: config.refresh.prePulledImagesTag,
    });
  const settings: PrewarmSettings = {
    ...prewarmSettingsFrom(resolved.value.effective),
    ...(options.strategy ? { strategy: options.strategy } : {}),
  };
  // The run at the mount reads before EC2 answers (read-first.ts); whatever does not take its reads over stops them.
  const begun = options.fromMount
    ? await beginReadsAtMount(
        {
          reader: host.reader,
          storage: host.storage,
          stateDir: config.paths.stateDir,
          bootId: host.bootId,
          log,
        },
        settings,
        nodeImages,
        options.signal,
      )
    : undefined;
  try {
    return await prewarmVolume(config, host, options, {
      identity,
      resolved: resolved.value,
      settings,
      nodeImages,
      begun,
    });
  } finally {
    await begun?.stop();
  }
}

/** runPrewarm once the settings are known: the attached volume's pre-warm. */
async function prewarmVolume(
  config: AgentConfig,
  host: HostAdapters,
  options: PrewarmCommandOptions,
  known: {
    identity: Identity;
    resolved: ResolvedSettings;
    /** The pre-warm's settings, the command's strategy over the config's. */
    settings: PrewarmSettings;
    nodeImages: (volumeTags: Readonly<Record<string, string>>) => string[];
    begun: BegunReads | undefined;
  },
): Promise<PrewarmOutcome> {
  const { log } = host;
  const { identity, resolved } = known;
  const cloud = host.cloudFor(config.region ?? identity.region);
  const volume = await findAttachedVolume(cloud, identity.instanceId);
  if (!volume) {
    log.notice("prewarm.none", "no cache volume is attached to this instance: nothing to pre-warm", {
      instance: identity.instanceId,
    });
    return { exitCode: ExitCode.ok };
  }
  const labels = host.labels({
    prefix: resolved.effective.labels.prefix,
    mode: resolved.effective.labels.mode,
  });
  const mounted = await findMountedDevice(host.storage, volume.volumeId);
  const { settings } = known;
  const target = {
    ...targetOf(volume, mounted, await readPrewarmState(config.paths.stateDir)),
    images: known.nodeImages(volume.tags),
  };
  const prewarmDeps: PrewarmDeps = {
    reader: takingOver(host.reader, known.begun),
    initializationStatus: (volumeId) => cloud.initializationStatus(volumeId),
    tagVolume: (volumeId, tags) => cloud.tagVolume(volumeId, tags),
    clock: cloud.clock,
    report: (state, details) => labels.report(state, details),
    stateDir: config.paths.stateDir,
    log,
    ...(host.recorder ? { recorder: host.recorder } : {}),
    ...(host.serviceStatus ? { status: (text: string) => host.serviceStatus?.(text) } : {}),
  };
  // Decided once: the long part and the boot's step both take this decision, not one of their own.
  const decision = await decidePrewarm(target, settings, prewarmDeps);
  if (options.fromMount && !headStartAtMount(decision)) {
    log.info("prewarm.mount", "nothing to read before docker starts: left to the boot's prewarm step", {
      volume: volume.volumeId,
      action: decision.action,
    });
    return { volumeId: volume.volumeId, exitCode: ExitCode.ok };
  }
  let report: PrewarmReport;
  if (decision.action === "initialize" || decision.action === "follow") {
    report = await runInitialization(target, settings, prewarmDeps, {
      decision,
      publish: true,
      signal: options.signal,
      ...(options.fromMount ? { holdLabels: mountRunKey(volume.volumeId, host.bootId) } : {}),
    });
  } else {
    report = await prewarmAtBoot(target, settings, prewarmDeps, decision);
    await labels.report("ready", { ...target.labels, ...report.labels }).catch((error: unknown) => {
      log.warning("prewarm.labels", `could not publish the labels: ${String(error)}`);
    });
  }
  // Failed, or stopped by a signal (SIGTERM, SIGINT; `pending`: the next run resumes): not done.
  const stopped = report.phase === "pending" && options.signal?.aborted === true;
  return {
    volumeId: volume.volumeId,
    report,
    exitCode: report.phase === "failed" ? ExitCode.failure : stopped ? stoppedExitCode(options.signal) : ExitCode.ok,
  };
}

/**
 * The exit code of a run stopped on request, with its state `pending`: 128 + the signal's number
 * (143 for SIGTERM, 130 for SIGINT), what a shell shows for a command that a signal ended. Not 0:
 * a script or an operator's shell must not read a run stopped half-way as done. Not 1 either: a
 * read failure exits 1, and the prewarm unit, which the release stops before every unmount, lists
 * 143 in SuccessExitStatus= so that systemd records such a stop as the clean stop it is (as it
 * does for a process the SIGTERM itself ends), while a failed run still shows the unit failed.
 * An abort with no signal named (a caller's own) stays 1.
 */
export function stoppedExitCode(signal: AbortSignal | undefined): number {
  const reason: unknown = signal?.reason;
  if (!(reason instanceof StopSignalReceived)) return ExitCode.failure;
  return 128 + constants.signals[reason.signalName];
}

/** The volume as the pre-warm sees it; the labels of this volume's previous run, which the boot chose. */
function targetOf(
  volume: VolumeInfo,
  mounted: { device: string; mountPoint: string },
  previous: PrewarmState | undefined,
): PrewarmTarget {
  return {
    volume: prewarmVolumeOf(volume),
    sizeBytes: volume.sizeGiB * 1024 ** 3,
    device: mounted.device,
    mountPoint: mounted.mountPoint,
    labels: stateOfVolume(previous, volume.volumeId)?.labels ?? volumeDetails(volume),
  };
}

/** What `ebs-cache-agent status` shows: the pre-warm state and whether a process works on it. */
export async function prewarmStatus(
  stateDir: string,
): Promise<{ state: PrewarmState | undefined; running: boolean; lines: string[] }> {
  const state = await readPrewarmState(stateDir);
  const running = state ? await isAlive(state.pid, state.pidStart) : false;
  return { state, running, lines: renderPrewarmStatus(state, running) };
}
