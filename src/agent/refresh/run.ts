/**
 * `ebs-cache-agent refresh`: the refresh of the attached pool volume's images — observe → plan →
 * (dry run: print) → apply. With `--background` it is the run a boot starts after `ready`
 * (config refresh.enabled); by hand it runs whatever that setting says. Its outcome never
 * changes the node's readiness: the exit code is 0 unless the refresh could not run at all.
 */
import type { AgentConfig } from "../../config/index.ts";
import { ConfigError, ExitCode, describeError, remediationOr } from "../../errors.ts";
import type { HostAdapters } from "../adapters.ts";
import { resolveSettings } from "../settings.ts";
import { applyRefresh } from "./apply.ts";
import { observeRefresh } from "./observe.ts";
import { planRefresh, type RefreshPlan, type RefreshSettings } from "./plan.ts";
import { isRunning, readRefreshState, writeRefreshState, type RefreshState } from "./state.ts";

export interface RefreshOutcome {
  plan: RefreshPlan;
  state?: RefreshState;
  exitCode: number;
}

/** The settings of config `refresh` and the effective image set. */
export function refreshSettingsFrom(config: AgentConfig, imageSet: string | null): RefreshSettings {
  return {
    concurrency: config.refresh.concurrency,
    pullSeconds: config.refresh.pullSeconds,
    prePulledImagesTag: config.refresh.prePulledImagesTag,
    imageSet,
  };
}

/** Runs the refresh (or, with dryRun, only plans it). */
export async function runRefresh(
  config: AgentConfig,
  host: HostAdapters,
  options: { dryRun: boolean; signal?: AbortSignal },
): Promise<RefreshOutcome> {
  const { log } = host;
  const stateDir = config.paths.stateDir;
  const identity = await host.identify();
  const resolved = resolveSettings(config, identity, { withDocker: true, mayClaim: false });
  if (!resolved.ok)
    throw new ConfigError(resolved.problems, "fix the instance tags (nothing was changed on this node)");
  const settings = refreshSettingsFrom(config, resolved.value.effective.imageSet);
  const cloud = host.cloudFor(config.region ?? identity.region);
  const observed = await observeRefresh(cloud, host.engine, identity, settings.imageSet);
  const plan = planRefresh(settings, observed);
  if (options.dryRun) return { plan, exitCode: ExitCode.ok };

  const previous = await readRefreshState(stateDir).catch(() => undefined);
  if (previous && previous.pid !== process.pid && (await isRunning(previous))) {
    log.notice("refresh.running", `a refresh runs already (process ${previous.pid}): this one does nothing`);
    return { plan, state: previous, exitCode: ExitCode.ok };
  }
  const saveState = async (state: RefreshState) => {
    await writeRefreshState(stateDir, state).catch((error: unknown) =>
      log.warning(
        "refresh.state",
        `could not write the refresh's state: ${describeError(error)}; status will not show its progress`,
        { stateDir, remediation: remediationOr(error, "make the state folder writable") },
      ),
    );
    await host.recorder?.refreshStateWritten(state);
  };
  const state = await applyRefresh(
    plan,
    settings,
    { cloud, engine: host.engine, puller: host.puller, saveState, instanceId: identity.instanceId, log },
    options.signal ? { signal: options.signal } : {},
  );
  // Stopped by a signal (SIGTERM, SIGINT): not done, whatever it pulled; the next run pulls the rest.
  return { plan, state, exitCode: state.phase === "stopped" ? ExitCode.failure : ExitCode.ok };
}

/** The plan (dry run) or the state, for people. */
export function renderRefresh(outcome: RefreshOutcome): string[] {
  const { plan, state } = outcome;
  const lines = [
    `volume: ${plan.volumeId ?? "none"}${plan.generation ? `, current generation ${plan.generation}` : ""}`,
  ];
  if (plan.skipped) return [...lines, `nothing to do: ${plan.skipped}`];
  for (const warning of plan.warnings) lines.push(`warning: ${warning}`);
  if (!state) {
    lines.push(`wanted: ${plan.wanted.length} image(s), ${plan.present.length} present`);
    lines.push("plan (dry run, nothing changed):");
    for (const [i, step] of plan.steps.entries()) {
      lines.push(
        `  ${String(i + 1).padStart(2)}. ` +
          (step.step === "pull"
            ? `pull ${step.image} (${step.sources.join(", ")})`
            : `mark-current ${step.volumeId} as ${step.generation}`),
      );
    }
    return lines;
  }
  lines.push(...renderRefreshState(state));
  return lines;
}

/** A refresh state in words (also `status`'s details). */
export function renderRefreshState(state: RefreshState, running = false): string[] {
  const lines = [
    `refresh ${state.phase}${running ? " (running)" : ""}, updated ` +
      `${state.updatedAt}${state.reason ? `: ${state.reason}` : ""}`,
  ];
  for (const image of state.images) {
    const extra = [
      image.bytes !== undefined ? `${(image.bytes / 1024 ** 2).toFixed(1)} MiB` : "",
      image.seconds !== undefined ? `${image.seconds.toFixed(1)} s` : "",
      image.error ?? "",
    ]
      .filter(Boolean)
      .join(", ");
    lines.push(`  ${image.phase.padEnd(8)} ${image.image}${extra ? ` (${extra})` : ""}`);
  }
  if (state.markedCurrent !== null)
    lines.push(`  volume tagged as the current generation: ${state.markedCurrent ? "yes" : "no"}`);
  return lines;
}

/** What `status` shows: the refresh's state and whether its process runs. */
export async function refreshStatus(stateDir: string): Promise<{ state?: RefreshState; running: boolean }> {
  const state = await readRefreshState(stateDir);
  return state ? { state, running: await isRunning(state) } : { running: false };
}
