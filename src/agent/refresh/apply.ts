/**
 * Applies a refresh plan: the pulls, `concurrency` at a time, each bounded by its timeout, then
 * the mark-current step. A failed pull is a warning and the next image is pulled; nothing here
 * touches the readiness labels or the boot's exit code. A stop (the signal: SIGTERM, SIGINT) stops the
 * pulls in flight and starts no other: the state says `stopped`, and the volume is not tagged.
 */
import { describeError, stopSignalName } from "../../errors.ts";
import { processStartTime } from "../process-identity.ts";
import { asListed } from "./images.ts";
import type { RefreshPlan, RefreshSettings, RefreshStep } from "./plan.ts";
import type { RefreshState } from "./state.ts";
import type { RefreshDeps } from "./deps.ts";

/** Runs the plan's steps; resolves with the final state (never rejects for a pull's failure). */
export async function applyRefresh(
  plan: RefreshPlan,
  settings: RefreshSettings,
  deps: RefreshDeps,
  options: { signal?: AbortSignal } = {},
): Promise<RefreshState> {
  const { log } = deps;
  const now = deps.now ?? (() => new Date());
  const pulls = plan.steps.filter((s): s is Extract<RefreshStep, { step: "pull" }> => s.step === "pull");
  const mark = plan.steps.find((s): s is Extract<RefreshStep, { step: "mark-current" }> => s.step === "mark-current");
  const pidStart = await processStartTime(process.pid);
  const state: RefreshState = {
    version: 1,
    pid: process.pid,
    ...(pidStart ? { pidStart } : {}),
    volumeId: plan.volumeId,
    generation: plan.generation,
    phase: plan.skipped ? "skipped" : "running",
    ...(plan.skipped ? { reason: plan.skipped } : {}),
    images: [
      ...plan.wanted
        .filter((w) => plan.present.includes(w.image))
        .map((w) => ({ image: w.image, sources: w.sources, phase: "present" as const })),
      ...pulls.map((p) => ({ image: p.image, sources: p.sources, phase: "pending" as const })),
    ],
    markedCurrent: mark ? false : null,
    warnings: [...plan.warnings],
    startedAt: now().toISOString(),
    updatedAt: now().toISOString(),
  };
  // Writes go one after the other, so an older state never replaces a newer one.
  let saving = Promise.resolve();
  const save = () => {
    state.updatedAt = now().toISOString();
    const snapshot = structuredClone(state);
    saving = saving.then(() => deps.saveState(snapshot));
    return saving;
  };
  for (const warning of plan.warnings) log.warning("refresh.tag", warning);
  if (plan.skipped) {
    log.info("refresh.skipped", plan.skipped, { volume: plan.volumeId ?? undefined });
    state.finishedAt = state.updatedAt;
    await save();
    return state;
  }
  log.info("refresh.plan", `${pulls.length} of ${plan.wanted.length} wanted image(s) to pull`, {
    volume: plan.volumeId ?? undefined,
    generation: plan.generation ?? undefined,
    present: plan.present.length,
  });
  await save();

  let next = 0;
  let started = 0;
  const worker = async () => {
    while (next < pulls.length && !options.signal?.aborted) {
      const step = pulls[next++]!;
      const n = ++started;
      await pullOne(step, n, pulls.length, state, settings, deps, save, options.signal);
    }
  };
  await Promise.all(Array.from({ length: Math.min(settings.concurrency, pulls.length) }, worker));

  if (options.signal?.aborted) {
    state.phase = "stopped";
    log.notice(
      "refresh.stopped",
      `stopped by ${stopSignalName(options.signal)}: no further pull, the volume keeps its tags`,
      {
        volume: plan.volumeId ?? undefined,
      },
    );
  } else {
    if (mark) state.markedCurrent = await markCurrent(mark, deps);
    state.phase = "done";
  }
  state.finishedAt = now().toISOString();
  const counts = { pulled: 0, failed: 0, pending: 0 };
  for (const image of state.images) if (image.phase in counts) counts[image.phase as keyof typeof counts] += 1;
  log.info(
    "refresh.done",
    `refresh ${state.phase}: ${counts.pulled} pulled, ${counts.failed} failed, ${counts.pending} not started`,
    {
      volume: plan.volumeId ?? undefined,
      markedCurrent: state.markedCurrent ?? undefined,
    },
  );
  await save();
  return state;
}

/** One pull: logged with its place in the run, its outcome in the state; a failure is a warning. */
async function pullOne(
  step: Extract<RefreshStep, { step: "pull" }>,
  n: number,
  total: number,
  state: RefreshState,
  settings: RefreshSettings,
  deps: RefreshDeps,
  save: () => Promise<void>,
  signal: AbortSignal | undefined,
): Promise<void> {
  const { log } = deps;
  const entry = state.images.find((i) => i.image === step.image && i.phase === "pending")!;
  entry.phase = "pulling";
  log.info("refresh.pull", `pulling ${n} of ${total}: ${step.image}`, {
    image: step.image,
    from: step.sources.join(","),
  });
  void save();
  const started = Date.now();
  try {
    const { bytes } = await deps.puller.pull(step.image, {
      timeoutMs: settings.pullSeconds * 1000,
      signal,
    });
    entry.phase = "pulled";
    entry.seconds = (Date.now() - started) / 1000;
    if (bytes !== undefined) entry.bytes = bytes;
    log.info("refresh.pulled", `pulled ${n} of ${total}: ${step.image}`, {
      image: step.image,
      bytes,
      seconds: Math.round(entry.seconds * 10) / 10,
    });
  } catch (error) {
    entry.seconds = (Date.now() - started) / 1000;
    if (signal?.aborted) {
      // Stopped, not failed: the next refresh pulls it.
      entry.phase = "pending";
      return;
    }
    entry.phase = "failed";
    entry.error = describeError(error).slice(0, 500);
    log.warning(
      "refresh.pull-failed",
      `could not pull ${n} of ${total}: ${step.image}: ${entry.error}; the node's readiness is unchanged`,
      { image: step.image },
    );
  } finally {
    await save();
  }
}

/**
 * Tags the volume as the current generation when docker lists every image of it and the volume
 * is still attached here (a release may have taken it meanwhile). Returns whether it tagged.
 */
async function markCurrent(step: Extract<RefreshStep, { step: "mark-current" }>, deps: RefreshDeps): Promise<boolean> {
  const { log } = deps;
  try {
    const listed = new Set((await deps.engine.images()).map(asListed));
    const missing = step.images.filter((image) => !listed.has(asListed(image)));
    if (missing.length > 0) {
      log.notice(
        "refresh.not-current",
        `the volume lacks ${missing.length} image(s) of ${step.generation} (${missing.slice(0, 3).join(", ")}): ` +
          `its generation tags stay`,
        { volume: step.volumeId },
      );
      return false;
    }
    const volume = await deps.cloud.describeVolume(step.volumeId);
    if (volume?.attachment?.instanceId !== deps.instanceId) {
      log.notice("refresh.not-current", "the volume is no longer attached here: its tags stay", {
        volume: step.volumeId,
      });
      return false;
    }
    await deps.cloud.tagVolume(step.volumeId, step.tags);
    log.info(
      "refresh.marked-current",
      `the volume holds every image of ${step.generation}: tagged as that generation`,
      { volume: step.volumeId },
    );
    return true;
  } catch (error) {
    log.warning("refresh.mark-failed", `could not tag the volume as ${step.generation}: ${describeError(error)}`, {
      volume: step.volumeId,
    });
    return false;
  }
}
