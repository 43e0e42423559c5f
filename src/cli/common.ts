/**
 * What every host command does first: load the config (file < env), make the logger, and have
 * src/cli/wiring.ts build the real adapters (EC2 of the instance's region, IMDS, systemd's
 * docker.service).
 */
import { spawn } from "node:child_process";
import type { HostAdapters } from "../agent/adapters.ts";
import { hostWiringOptions, wireAdapters } from "./wiring.ts";
import type { CloudVolumes } from "../agent/ports.ts";
import type { AgentConfig } from "../config/index.ts";
import type { Logger } from "../log.ts";
import { describeError, StopSignalReceived } from "../errors.ts";
import { loadCommandConfig } from "./load-config.ts";
import { onStopSignals } from "./stop-signals.ts";
import type { ProgressOutputs } from "../progress.ts";
import { serviceStatusNotifier } from "../host/systemd-notify.ts";
import { stderrLine } from "../terminal-line.ts";
import type { OutcomeRecorder, RunFailure } from "../agent/outcomes.ts";

export interface HostContext {
  config: AgentConfig;
  log: Logger;
  /** The host's adapters: each use case composes itself from them. */
  host: HostAdapters;
  /** EC2 in the configured region, or this instance's (from IMDS). */
  cloud(): Promise<CloudVolumes>;
  /** The status records and metrics textfiles (`gc` writes its metrics through it). */
  recorder: OutcomeRecorder;
}

/** Loads the config and wires the real adapters (src/cli/wiring.ts). */
export async function hostContext(configPath: string | undefined): Promise<HostContext> {
  const { config, log } = await loadCommandConfig(configPath);
  const wiring = {
    ...hostWiringOptions(config, log, () => startBackgroundPrewarm(configPath)),
    startRefresh: () => startBackgroundRefresh(configPath),
  };
  const host = wireAdapters(wiring);
  return {
    config,
    log,
    host,
    cloud: async () => host.cloudFor(config.region ?? (await host.identify()).region),
    recorder: host.recorder,
  };
}

/**
 * Runs a command's use case; when it throws (IMDS or EC2 could not be asked, bad instance tags, a
 * bug), the run's failure goes to its metrics file first (its time and outcome: the recorder never
 * throws), then the error goes on to the one top-level handler (src/fatal.ts) as before. A run that
 * fails before the config is read has no metrics folder to write to.
 */
export async function recordingFailure<T>(
  recorder: Pick<OutcomeRecorder, "runFailed">,
  failure: DistributiveOmit<RunFailure, "reason" | "finishedAt">,
  run: () => Promise<T>,
): Promise<T> {
  try {
    return await run();
  } catch (error) {
    await recorder.runFailed({ ...failure, reason: describeError(error), finishedAt: new Date() } as RunFailure);
    throw error;
  }
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/**
 * Starts this same program detached with `args` (and the config it was given): the caller exits
 * at once. Under systemd the child stays in the unit's cgroup (the boot units are oneshot with
 * RemainAfterExit), so stopping the unit stops it too, and it logs to the same journal.
 */
export async function startDetached(args: readonly string[], configPath: string | undefined): Promise<void> {
  const script = process.argv[1];
  if (!script) throw new Error("cannot tell this program's path (process.argv[1])");
  const child = spawn(
    process.execPath,
    [...process.execArgv, script, ...args, ...(configPath ? ["--config", configPath] : [])],
    {
      detached: true,
      stdio: ["ignore", "inherit", "inherit"],
    },
  );
  await new Promise<void>((resolve, reject) => {
    child.once("spawn", resolve);
    child.once("error", reject);
  });
  child.unref();
}

/**
 * Starts `ebs-cache-agent prewarm --background` for a long initialization the boot hands over,
 * so the boot can report `warming` and exit; the state file tells its progress
 * (`ebs-cache-agent status`).
 */
export async function startBackgroundPrewarm(configPath: string | undefined): Promise<void> {
  await startDetached(["prewarm", "--background"], configPath);
}

/**
 * Starts `ebs-cache-agent refresh --background` once a boot reported the node up: stopping the
 * boot unit (at shutdown, before docker stops) sends the refresh SIGTERM too, and it stops its
 * pulls.
 */
export async function startBackgroundRefresh(configPath: string | undefined): Promise<void> {
  await startDetached(["refresh", "--background"], configPath);
}

/** A command's stop: the abort signal, and the removal of its handler (for a command that returns). */
export interface CommandStop {
  signal: AbortSignal;
  remove(): void;
}

/**
 * An abort signal for a stop: systemd's SIGTERM (a stop, or TimeoutStartSec/TimeoutStopSec), or
 * SIGINT (Ctrl-C of a command run by hand). Handling the signal keeps Node from dying at once: the
 * command undoes (boot, snapshot build), finishes its current step (release, snapshot upload) or
 * stops its reads and pulls (prewarm, refresh) and exits by itself; systemd's SIGKILL still
 * follows after its timeout. The abort's reason names the signal (StopSignalReceived); `log`
 * gets a line saying what the command does about it (`doing`).
 */
export function stopOnSignals(log: Logger | undefined, doing: string): CommandStop {
  const controller = new AbortController();
  // Installed for the rest of the run, not once (src/cli/stop-signals.ts says why).
  const remove = onStopSignals((signal) => {
    log?.warning("agent.sigterm", `${signal} received: ${doing}`);
    controller.abort(new StopSignalReceived(signal));
  });
  return { signal: controller.signal, remove };
}

/** The stop of a command that runs until the process exits (its handler is never removed). */
export function stopSignal(log: Logger): AbortSignal {
  return stopOnSignals(log, "stopping after the step in flight").signal;
}

/**
 * Where a command's progress line goes besides its log: the terminal's line when stderr is one,
 * systemd's STATUS= when a unit takes notifications (src/progress.ts).
 */
export function progressOutputs(log: Logger): Pick<ProgressOutputs, "terminal" | "status"> {
  const terminal = stderrLine();
  const status = serviceStatusNotifier(log);
  return { ...(terminal ? { terminal } : {}), ...(status ? { status } : {}) };
}
