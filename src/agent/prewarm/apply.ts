/**
 * Carrying out the pre-warm's decisions (plan.ts), with the reads behind the PrewarmReader port
 * (src/host/volume-reads.ts on a host):
 *
 * - beginPrewarmAtBoot() / prewarmAtBoot(): the boot's step. Skips, checks (a bounded fio
 *   sample: verdict warm/cold) while docker starts, or, once docker is verified, starts the
 *   initialization: inline before `ready`, or handed to the background run (the node is
 *   labelled `warming` and usable at once, `prewarm=checking` until the run's first sample
 *   ends: the boot never waits for it). One handler per decision (AT_BOOT).
 * - runInitialization(): the long part (the `prewarm` command, or the background run): reads
 *   the allocated data (files) or the whole device, or follows EBS's provisioned-rate
 *   initialization (LONG_READS), with progress in the log, the state file and the
 *   `prewarm-progress` label; tags the volume `ebs-cache:initialized` only once every byte was
 *   read; then a second sample, and `ready`.
 *
 * Never blocks the node: a failing or missing fio gives the verdict `unknown`, one error line
 * with the remedy, and the node is still reported. A run killed half-way leaves a resume point
 * in the state file: the next run starts there (and reads again what may not have completed).
 */
import { setTimeout as delay } from "node:timers/promises";
import { describeError, remediationOr } from "../../errors.ts";
import { formatProgress } from "../../progress.ts";
import { stateFolderRefused } from "../../state-folder.ts";
import { VolumeTag } from "../../tags.ts";
import { observePrewarm, sampleVolume, type Sample } from "./observe.ts";
import type { PrewarmDeps } from "./deps.ts";
import { labelsGateOpen, waitForLabelsGate, type MountRunKey } from "./mount-run.ts";
import {
  CHECKING,
  headStartAtMount,
  planAfterSample,
  planPrewarm,
  formatBytes,
  formatDuration,
  prewarmLabels,
  progressLabel,
  progressFigures,
  progressOf,
  readyReport,
  readDepths,
  type PrewarmPlan,
  type PrewarmReport,
  type PrewarmSettings,
  type PrewarmTarget,
} from "./plan.ts";
import { isAlive, processStartTime } from "../process-identity.ts";
import {
  acquirePrewarmLock,
  readPrewarmState,
  writePrewarmState,
  type PrewarmState,
  resumePoint,
  startingState,
  stateOfVolume,
} from "./state.ts";

const nowOf = (deps: PrewarmDeps) => deps.now?.() ?? new Date();

// ---- the boot's step ----

/** The boot's step, once decided: the state file as decided, and the previous run's. */
interface AtBoot {
  target: PrewarmTarget;
  settings: PrewarmSettings;
  deps: PrewarmDeps;
  previous: PrewarmState | undefined;
  /** Updates the state file (a failed write is logged: the pre-warm goes on). */
  save(changes: Partial<PrewarmState>): Promise<void>;
}

type Action = PrewarmPlan["action"];
type AtBootHandler<A extends Action> = (
  run: AtBoot,
  decision: Extract<PrewarmPlan, { action: A }>,
) => Promise<PrewarmReport>;

/** One handler per decision of the boot's step. */
const AT_BOOT: { [A in Action]: AtBootHandler<A> } = {
  skip: skipReads,
  "record-initialized": recordInitialized,
  check: checkOnly,
  follow: (run, decision) => startLongRun(run, decision),
  initialize: (run, decision) => startLongRun(run, decision),
};

/** Decisions whose work needs only the device (and EC2), not docker: done as soon as the pre-warm begins. */
const DEVICE_ONLY = new Set<Action>(["skip", "record-initialized", "check"]);

/** The boot's pre-warm, begun (beginPrewarmAtBoot). */
export interface PrewarmAtBoot {
  /**
   * What to publish with the readiness labels. Call it once docker is verified: a long
   * initialization (`follow`, `initialize`) starts only then, since it publishes `warming` and
   * hands the reads to the background run. Never rejects for the pre-warm's own failures.
   */
  outcome(): Promise<PrewarmReport>;
  /** Resolves (never rejects) once nothing begun so far reads the device; starts nothing. */
  idle(): Promise<void>;
  /** What the pre-warm does with this volume, as soon as it is decided (before any read); rejects as outcome() does. */
  decided(): Promise<PrewarmPlan>;
  /**
   * What follows outcome()'s sample (`check`): a volume it found cold is handed to the background run, warmed by
   * need (planAfterSample), which publishes `warming`; any other outcome is returned as it is. Call it once the node
   * is published (the hand-over publishes its own labels). Never rejects for the pre-warm's own failures.
   */
  warmIfCold(report: PrewarmReport): Promise<PrewarmReport>;
}

/**
 * Begins the boot's pre-warm: the decision, and at once what needs only the device (the
 * sample, a skip, the `initialized` tag), so that the boot can run it while docker starts: the
 * sample reads the device, not docker.
 */
export function beginPrewarmAtBoot(
  target: PrewarmTarget,
  settings: PrewarmSettings,
  deps: PrewarmDeps,
  options: { takeOver?: boolean } = {},
): PrewarmAtBoot {
  const decided = decideAtBoot(target, settings, deps);
  // A failed decision reaches outcome() through `begun`: here it only means no head start. `takeOver`: a run begun
  // at the first phase's mount reads already (mount-run.ts); reads of this process's own would read its blocks twice.
  const headStart = decided.then(
    (run) => (headStartAtMount(run.decision) && !options.takeOver ? beginHeadStart(run) : undefined),
    () => undefined,
  );
  const begun = decided.then(async (run) => ({
    run,
    early: DEVICE_ONLY.has(run.decision.action) ? await handleAtBoot(run) : undefined,
  }));
  // Rejections reach outcome(); idle() only waits.
  const settled = begun.then(
    () => undefined,
    () => undefined,
  );
  const stopHeadStart = async () => (await headStart)?.stop();
  return {
    outcome: async () => {
      const { run, early } = await begun;
      if (early) return early;
      // The background run takes the reads over from the start of its plan: the head start's reads are warm then.
      await stopHeadStart();
      return handleAtBoot(run);
    },
    // Nothing reads once the head start is stopped (only a failed boot waits for idle(), before it unmounts).
    idle: async () => {
      await stopHeadStart();
      await settled;
    },
    decided: async () => (await decided).decision,
    warmIfCold: async (report) => {
      const { run } = await begun;
      const next = planAfterSample(settings, report.decision, report.verdict);
      if (!next) return report;
      deps.log.info("prewarm.decide", `${next.action}: ${next.reason}`, {
        volume: target.volume.volumeId,
        strategy: settings.strategy,
      });
      await run.save({ action: next.action, mode: next.mode, reason: next.reason });
      try {
        return await startLongRun(run, next, { verdict: "cold", ...(report.before ? { figures: report.before } : {}) });
      } catch (error) {
        deps.log.error("prewarm.failed", `could not warm the cold volume: ${describeError(error)}`, {
          volume: target.volume.volumeId,
          remediation: remediationOr(error, "run `ebs-cache-agent prewarm --strategy files`"),
        });
        return report;
      }
    },
  };
}

/** The head start under way: stop() ends its reads and resolves once none is in flight. */
interface HeadStart {
  stop(): Promise<void>;
}

/**
 * The reads of a volume known cold from the mount on, before docker starts (headStartAtMount): the need list first,
 * the node's images' files at the depth EBS fetches at, the rest giving way to docker's own reads, as the background
 * run reads. Nothing is recorded (no state, no progress label): the background run reads from its plan's start.
 */
function beginHeadStart(run: AtBoot): HeadStart {
  const { target, settings, deps } = run;
  const controller = new AbortController();
  const started = performance.now();
  let readBytes = 0;
  deps.log.info("prewarm.headstart", "reading the need list from the mount on, while docker starts", {
    volume: target.volume.volumeId,
  });
  const reads = deps.reader
    .initialize(target, "files", {
      fromOffset: 0,
      ...readDepths(settings, true),
      ...(target.images ? { images: target.images } : {}),
      onProgress: (p) => {
        readBytes = p.runBytes;
      },
      signal: controller.signal,
    })
    .then(
      () => undefined,
      (error: unknown) => {
        if (!controller.signal.aborted)
          deps.log.warning("prewarm.headstart", `the reads before docker's start ended: ${describeError(error)}`, {
            volume: target.volume.volumeId,
          });
      },
    );
  return {
    stop: async () => {
      controller.abort(new Error("handed over"));
      await reads;
      const seconds = (performance.now() - started) / 1000;
      deps.log.info(
        "prewarm.headstart",
        `read ${formatBytes(readBytes)} before the hand-over, in ${formatDuration(seconds)}`,
        {
          volume: target.volume.volumeId,
        },
      );
    },
  };
}

/**
 * The boot's pre-warm step, whole. Returns what to publish with the readiness labels; never
 * throws for the pre-warm's own failures (the node is reported either way). `decided`: the
 * decision the caller already made (from one observation: the volume's tags and EC2's status
 * are not read again); default: decided here.
 */
export async function prewarmAtBoot(
  target: PrewarmTarget,
  settings: PrewarmSettings,
  deps: PrewarmDeps,
  decided?: PrewarmPlan,
): Promise<PrewarmReport> {
  return handleAtBoot(await decideAtBoot(target, settings, deps, decided));
}

/** The pre-warm's decision from the volume's tags and EC2's status (observed once), logged. */
export async function decidePrewarm(
  target: PrewarmTarget,
  settings: PrewarmSettings,
  deps: PrewarmDeps,
): Promise<PrewarmPlan> {
  const decision = planPrewarm(settings, await observePrewarm(deps, target.volume));
  deps.log.info("prewarm.decide", `${decision.action}: ${decision.reason}`, {
    volume: target.volume.volumeId,
    strategy: settings.strategy,
  });
  return decision;
}

/** The decision (the caller's, or made here), and the state file as decided beside the previous run's. */
async function decideAtBoot(
  target: PrewarmTarget,
  settings: PrewarmSettings,
  deps: PrewarmDeps,
  decided?: PrewarmPlan,
): Promise<AtBoot & { decision: PrewarmPlan }> {
  const { log } = deps;
  const decision = decided ?? (await decidePrewarm(target, settings, deps));
  const state = startingState(target, settings, decision, nowOf(deps));
  const previous = await readPrewarmState(deps.stateDir);
  const save = async (changes: Partial<PrewarmState>) => {
    Object.assign(state, changes, { updatedAt: nowOf(deps).toISOString() });
    try {
      await writePrewarmState(deps.stateDir, state);
    } catch (error) {
      stateFolderRefused(
        log,
        deps.stateDir,
        "prewarm.state",
        `could not write the state file: ${describeError(error)}`,
        {
          stateDir: deps.stateDir,
        },
      );
      return;
    }
    await deps.recorder?.prewarmStateWritten(state);
  };
  return { target, settings, deps, previous, save, decision };
}

function handleAtBoot(run: AtBoot & { decision: PrewarmPlan }): Promise<PrewarmReport> {
  return handleDecision(run, run.decision);
}

/** The table's key is the decision's action: each handler gets the decision it is written for. */
function handleDecision<A extends Action>(
  run: AtBoot,
  decision: Extract<PrewarmPlan, { action: A }>,
): Promise<PrewarmReport> {
  return AT_BOOT[decision.action](run, decision);
}

async function skipReads(run: AtBoot, decision: Extract<PrewarmPlan, { action: "skip" }>): Promise<PrewarmReport> {
  await run.save({ phase: "skipped", verdict: decision.verdict, finishedAt: nowOf(run.deps).toISOString() });
  return readyReport(decision, decision.verdict, "skipped");
}

async function recordInitialized(
  run: AtBoot,
  decision: Extract<PrewarmPlan, { action: "record-initialized" }>,
): Promise<PrewarmReport> {
  const { deps } = run;
  const volumeId = run.target.volume.volumeId;
  await deps
    .tagVolume(volumeId, { [VolumeTag.initialized]: deps.clock.now().toISOString() })
    .catch((error: unknown) => {
      deps.log.warning("prewarm.tag", `could not tag the volume initialized: ${describeError(error)}`, {
        volume: volumeId,
      });
    });
  await run.save({ phase: "done", verdict: "warm", finishedAt: nowOf(deps).toISOString() });
  deps.log.notice("prewarm.done", decision.reason, { volume: volumeId });
  return readyReport(decision, "warm", "done");
}

async function checkOnly(run: AtBoot, decision: Extract<PrewarmPlan, { action: "check" }>): Promise<PrewarmReport> {
  await run.save({ phase: "checking" });
  const result = await sampleVolume(run.target, run.settings, run.deps, "sample");
  await run.save({
    phase: result.error ? "failed" : "done",
    verdict: result.verdict,
    ...(result.figures ? { before: result.figures } : {}),
    ...(result.error ? { error: result.error } : {}),
    finishedAt: nowOf(run.deps).toISOString(),
  });
  return readyReport(decision, result.verdict, result.error ? "failed" : "done", {
    ...(result.figures ? { before: result.figures } : {}),
    ...(result.error ? { error: result.error } : {}),
  });
}

/** follow / initialize: handed to the background run when it can be, else run inline now. */
async function startLongRun(
  run: AtBoot,
  decision: Extract<PrewarmPlan, { action: "follow" | "initialize" }>,
  sampled?: Sample,
): Promise<PrewarmReport> {
  const running = await alreadyRunning(run, decision);
  if (running) return running;
  const before = sampled ?? sampleAtHand(run, decision);
  const background = decision.action === "follow" ? run.settings.background : decision.background;
  if (background && run.deps.startBackground) {
    const handed = await handToBackground(run, decision, before, run.deps.startBackground);
    if (handed) return handed;
  }
  await run.save(sampleState(before));
  // Inline, the run samples first when nothing is at hand (sampleFirst), before its reads.
  return runInitialization(run.target, run.settings, run.deps, { decision, publish: false });
}

/**
 * The verdict before the reads when it needs no sample: none is taken to follow EBS, EBS may know it already, or
 * this volume's previous run sampled it. Undefined: the long run samples first (sampleFirst), after the boot has
 * published the node, so that a sample (up to `prewarm.check.seconds`, more on a slow device) never holds the boot.
 */
function sampleAtHand(run: AtBoot, decision: Extract<PrewarmPlan, { action: LongAction }>): Sample | undefined {
  if (decision.action !== "initialize") return { verdict: "unknown" };
  if (decision.known) return { verdict: decision.known };
  const previous = stateOfVolume(run.previous, run.target.volume.volumeId);
  return previous?.before ? { figures: previous.before, verdict: previous.verdict } : undefined;
}

/** The state of a long run handed on: `pending`, with the sample at hand (none yet: `unknown`, no figures). */
function sampleState(before: Sample | undefined): Partial<PrewarmState> {
  return {
    phase: "pending",
    verdict: before?.verdict ?? "unknown",
    ...(before?.figures ? { before: before.figures } : {}),
  };
}

/** Another run may hold it already (a re-run of the boot while the background run works). */
async function alreadyRunning(run: AtBoot, decision: PrewarmPlan): Promise<PrewarmReport | undefined> {
  // Read now, not at the decision: a run begun at the mount may have written its first state since.
  const previous = stateOfVolume(
    (await readPrewarmState(run.deps.stateDir)) ?? run.previous,
    run.target.volume.volumeId,
  );
  if (!previous?.pid || !(await isAlive(previous.pid, previous.pidStart))) return undefined;
  run.deps.log.notice("prewarm.running", `already ${previous.phase} by process ${previous.pid}`, {
    volume: previous.volumeId,
  });
  return {
    decision,
    verdict: previous.verdict,
    phase: previous.phase,
    labelState: "warming",
    labels: prewarmLabels("warming", previous.verdict, previous.progress?.percent),
    ...(previous.progress ? { progress: previous.progress } : {}),
  };
}

/**
 * Publishes `warming` and starts the background run; undefined when it could not be started
 * (logged: the caller initializes inline instead). Without a sample at hand, `prewarm=checking`:
 * the background run samples first and publishes the verdict with its first `warming`.
 */
async function handToBackground(
  run: AtBoot,
  decision: PrewarmPlan,
  before: Sample | undefined,
  startBackground: () => Promise<void>,
): Promise<PrewarmReport | undefined> {
  const { deps, target } = run;
  const { log } = deps;
  const volumeId = target.volume.volumeId;
  const previous = stateOfVolume(run.previous, volumeId);
  const cursor = resumePoint(previous, decision.action === "initialize" ? decision.mode : undefined);
  const progress = previous?.progress;
  await run.save({ ...sampleState(before), ...(cursor ? { cursor } : {}), ...(progress ? { progress } : {}) });
  const labels = prewarmLabels("warming", before?.verdict ?? CHECKING, progress?.percent);
  let published = false;
  if (deps.report) {
    try {
      await deps.report("warming", { ...target.labels, ...labels });
      published = true;
    } catch (error) {
      log.warning("prewarm.labels", `could not publish the warming labels: ${describeError(error)}`);
    }
  }
  try {
    await startBackground();
    log.notice("prewarm.background", "initialization handed to the background run: the node is usable meanwhile", {
      volume: volumeId,
    });
    return {
      decision,
      verdict: before?.verdict ?? "unknown",
      phase: "pending",
      labelState: "warming",
      labels,
      published,
      ...(before?.figures ? { before: before.figures } : {}),
    };
  } catch (error) {
    log.error("prewarm.background", `could not start the background run, initializing now: ${describeError(error)}`, {
      volume: volumeId,
    });
    return undefined;
  }
}

// ---- the long part ----

/** Options of runInitialization. */
export interface RunInitializationOptions {
  /** Default: decided afresh from the volume's tags and EC2's status. */
  decision?: PrewarmPlan;
  /** Publish `warming` with progress, then `ready` (the background run does; inline at boot, the boot does). */
  publish: boolean;
  signal?: AbortSignal;
  /**
   * A run begun at the mount (`prewarm --from-mount`): nothing is published until the boot has opened the gate for
   * this key (mount-run.ts); `warming` and progress meanwhile are left out (the boot's own publication carries
   * them, from the state file), `ready` waits for the gate.
   */
  holdLabels?: MountRunKey;
}

type LongAction = "follow" | "initialize";
type Publish = (state: "warming" | "ready", labels: Record<string, string>) => Promise<void>;
type OnProgress = (p: {
  doneBytes: number;
  totalBytes: number;
  runBytes: number;
  cursor?: number;
  etaSeconds?: number;
}) => void;

/** A long run under way: its state file (writes chained) and its label publisher. */
interface LongRun<A extends LongAction = LongAction> {
  target: PrewarmTarget;
  settings: PrewarmSettings;
  deps: PrewarmDeps;
  decision: Extract<PrewarmPlan, { action: A }>;
  state: PrewarmState;
  /** Updates the state and queues a write; resolves once the queue has drained to it. */
  save(changes: Partial<PrewarmState>): Promise<void>;
  /** Waits for the writes queued so far. */
  flush(): Promise<void>;
  publish: Publish;
  /** Date.now() at the start: progress rates are this run's. */
  started: number;
}

/** The reads of the long part, one per decision. */
const LONG_READS: {
  [A in LongAction]: (run: LongRun<A>, onProgress: OnProgress, signal: AbortSignal) => Promise<void>;
} = {
  follow: followEbs,
  initialize: readVolume,
};

/**
 * The long part: initialize (or follow EBS's initialization), tag, sample again, publish
 * `ready`. Resumes from the state file's resume point when it is this volume's and mode's.
 */
export async function runInitialization(
  target: PrewarmTarget,
  settings: PrewarmSettings,
  deps: PrewarmDeps,
  options: RunInitializationOptions,
): Promise<PrewarmReport> {
  const decision = options.decision ?? (await decidePrewarm(target, settings, deps));
  const publish = publisher(target, deps, options.publish, options.holdLabels, options.signal);
  if (decision.action !== "initialize" && decision.action !== "follow") {
    // Nothing long to do (tagged meanwhile, or the strategy changed): the boot's step covers it, as decided.
    const outcome = await prewarmAtBoot(target, settings, { ...deps, startBackground: undefined }, decision);
    await publish("ready", outcome.labels);
    return outcome;
  }
  const lock = await acquirePrewarmLock(deps.stateDir);
  if ("heldBy" in lock) return leaveToHolder(target, deps, decision, lock.heldBy);

  const run = await startRun(target, settings, deps, decision, publish);
  const stop = stopper(settings, options.signal);
  try {
    // From its start the state shows this run (its pid, its phase), not the boot's `pending`.
    await run.save(needsSample(run) ? { phase: "checking" } : {});
    await sampleFirst(run);
    await run.save({});
    await publish("warming", prewarmLabels("warming", run.state.verdict, run.state.progress?.percent));
    const read = LONG_READS[decision.action] as (
      run: LongRun,
      onProgress: OnProgress,
      signal: AbortSignal,
    ) => Promise<void>;
    await read(run, progressReporter(run), stop.signal);
    return await finishRun(run);
  } catch (error) {
    const interrupted = stop.signal.aborted && options.signal?.aborted === true;
    return await failRun(run, stop.signal.aborted ? stop.signal.reason : error, interrupted, error);
  } finally {
    stop.dispose();
    await lock.release();
  }
}

/**
 * Publishes the labels when this run publishes (a failure is logged, not thrown). Held (`hold`): `warming` only once
 * the boot has opened the gate, `ready` once it does (unless the run is stopped meanwhile: then nothing).
 */
function publisher(
  target: PrewarmTarget,
  deps: PrewarmDeps,
  enabled: boolean,
  hold?: MountRunKey,
  signal?: AbortSignal,
): Publish {
  const send = async (state: "warming" | "ready", labels: Record<string, string>) => {
    if (!enabled || !deps.report) return;
    await deps.report(state, { ...target.labels, ...labels }).catch((error: unknown) => {
      deps.log.warning("prewarm.labels", `could not publish the labels: ${describeError(error)}`, { state });
    });
  };
  if (!hold || !enabled) return send;
  let open = false;
  return async (state, labels) => {
    open ||= await labelsGateOpen(deps.stateDir, hold);
    if (!open && state === "ready" && !signal?.aborted) {
      deps.log.info("prewarm.labels", "read to the end before the boot published the node: waiting for it", {
        volume: target.volume.volumeId,
      });
      open = await waitForLabelsGate(deps.stateDir, hold, signal ?? new AbortController().signal).then(
        () => true,
        () => false,
      );
    }
    if (open) await send(state, labels);
    else deps.log.debug("prewarm.labels", `${state} held: the boot has not published the node yet`);
  };
}

/** Another process holds the lock: its state says where the node stands. */
async function leaveToHolder(
  target: PrewarmTarget,
  deps: PrewarmDeps,
  decision: PrewarmPlan,
  holder: number,
): Promise<PrewarmReport> {
  deps.log.notice("prewarm.running", `another pre-warm runs already (process ${holder}): leaving it to finish`, {
    volume: target.volume.volumeId,
  });
  const current = await readPrewarmState(deps.stateDir);
  return {
    decision,
    verdict: current?.verdict ?? "unknown",
    phase: current?.phase ?? "initializing",
    labelState: "warming",
    labels: prewarmLabels("warming", current?.verdict ?? "unknown", current?.progress?.percent),
  };
}

/** The run's state (carrying over this volume's sample, resume point and progress) and its writer. */
async function startRun(
  target: PrewarmTarget,
  settings: PrewarmSettings,
  deps: PrewarmDeps,
  decision: Extract<PrewarmPlan, { action: LongAction }>,
  publish: Publish,
): Promise<LongRun> {
  const mine = stateOfVolume(await readPrewarmState(deps.stateDir), target.volume.volumeId);
  const cursor = resumePoint(mine, decision.action === "initialize" ? decision.mode : undefined);
  const state: PrewarmState = {
    ...startingState(target, settings, decision, nowOf(deps)),
    ...(mine?.before ? { before: mine.before } : {}),
    verdict: mine?.verdict ?? "unknown",
    phase: decision.action === "follow" ? "following" : "initializing",
    pid: process.pid,
    ...(cursor ? { cursor } : {}),
    ...(mine?.progress ? { progress: mine.progress } : {}),
  };
  const start = await processStartTime(process.pid);
  if (start) state.pidStart = start;
  // Writes are chained: progress arrives while a write may still be under way.
  let writes: Promise<void> = Promise.resolve();
  const save = (changes: Partial<PrewarmState>) => {
    Object.assign(state, changes, { updatedAt: nowOf(deps).toISOString() });
    const snapshot = JSON.parse(JSON.stringify(state)) as PrewarmState;
    writes = writes
      .then(() => writePrewarmState(deps.stateDir, snapshot))
      .then(() => deps.recorder?.prewarmStateWritten(snapshot))
      .catch((error: unknown) =>
        stateFolderRefused(
          deps.log,
          deps.stateDir,
          "prewarm.state",
          `could not write the state file: ${describeError(error)}`,
        ),
      );
    return writes;
  };
  return { target, settings, deps, decision, state, save, flush: () => writes, publish, started: Date.now() };
}

/** Aborts the reads on the caller's signal (SIGTERM) or at `initialize.timeoutSeconds`. */
function stopper(settings: PrewarmSettings, signal: AbortSignal | undefined): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const stop = () => controller.abort(new Error("stopped"));
  // A signal that came before the run began (while the command asked EC2 and decided) fires no
  // event any more: taken as it is, or the reads would ignore the stop and run to their end.
  if (signal?.aborted) stop();
  else signal?.addEventListener("abort", stop, { once: true });
  const limit = settings.initialize.timeoutSeconds;
  const timer = limit
    ? setTimeout(() => controller.abort(new Error(`timed out after ${limit} s`)), limit * 1000)
    : undefined;
  return {
    signal: controller.signal,
    dispose: () => {
      if (timer) clearTimeout(timer);
      signal?.removeEventListener("abort", stop);
    },
  };
}

/**
 * Run on its own (`ebs-cache-agent prewarm`), an initialization has no sample yet: the figures to compare the result
 * with.
 */
async function sampleFirst(run: LongRun): Promise<void> {
  if (run.decision.action !== "initialize" || run.state.before) return;
  if (run.decision.known) {
    run.state.verdict = run.decision.known;
    return;
  }
  const before = await sampleVolume(run.target, run.settings, run.deps, "before initialization");
  Object.assign(run.state, {
    phase: "initializing",
    verdict: before.verdict,
    ...(before.figures ? { before: before.figures } : {}),
  });
}

/** Whether the run samples the volume before its reads (sampleFirst): its state says `checking` meanwhile. */
function needsSample(run: LongRun): boolean {
  return run.decision.action === "initialize" && !run.state.before && !run.decision.known;
}

/**
 * Progress into the state (written every `progressSeconds`), the log and systemd's STATUS=, and the `prewarm-progress`
 * label (only when it moves a whole step: each change reloads dockerd or updates the node).
 */
function progressReporter(run: LongRun): OnProgress {
  const { state, settings } = run;
  const mode = run.decision.action === "initialize" ? run.decision.mode : undefined;
  let lastLog = 0;
  let lastLabel = state.progress ? progressLabel(state.progress.percent) : "";
  return (p) => {
    const progress = progressOf(p.doneBytes, p.totalBytes, p.runBytes, Date.now() - run.started);
    if (p.etaSeconds !== undefined) progress.etaSeconds = p.etaSeconds;
    const changes: Partial<PrewarmState> = { progress };
    if (mode && p.cursor !== undefined) changes.cursor = { mode, offset: p.cursor };
    const due = Date.now() - lastLog >= settings.initialize.progressSeconds * 1000;
    if (due || progress.percent >= 100) {
      lastLog = Date.now();
      void run.save(changes);
      const line = formatProgress(progressFigures(progress));
      run.deps.log.info("prewarm.progress", line, { volume: run.target.volume.volumeId });
      run.deps.status?.(line);
    } else {
      Object.assign(state, changes);
    }
    const label = progressLabel(progress.percent);
    if (label !== lastLabel && progress.percent < 100) {
      lastLabel = label;
      void run.publish("warming", prewarmLabels("warming", state.verdict, progress.percent));
    }
  };
}

/** files / device: every byte once, from the resume point. */
async function readVolume(run: LongRun<"initialize">, onProgress: OnProgress, signal: AbortSignal): Promise<void> {
  const { target, settings, decision, state } = run;
  const { log } = run.deps;
  const from = state.cursor?.offset ?? 0;
  const done = state.progress ? ` (${state.progress.percent.toFixed(1)} % done)` : "";
  log.notice(
    "prewarm.initialize",
    from > 0
      ? `resuming at device offset ${formatBytes(from)}${done}`
      : `reading the ${decision.mode === "files" ? "allocated data" : "whole device"}`,
    {
      volume: target.volume.volumeId,
      mode: decision.mode,
      device: target.device,
    },
  );
  const result = await run.deps.reader.initialize(target, decision.mode, {
    fromOffset: from,
    // In the background the reads give way to the services starting meanwhile, unless configured not to.
    ...readDepths(settings, decision.background),
    ...(target.images ? { images: target.images } : {}),
    onProgress,
    signal,
  });
  log.notice(
    "prewarm.initialize",
    `read ${formatBytes(result.readBytes)} in ${formatDuration((Date.now() - run.started) / 1000)}`,
    {
      volume: target.volume.volumeId,
      total: formatBytes(result.totalBytes),
    },
  );
}

/** follow: polls EBS's initialization status until it reports 100 %. */
async function followEbs(run: LongRun<"follow">, onProgress: OnProgress, signal: AbortSignal): Promise<void> {
  const { deps, target } = run;
  if (!deps.initializationStatus) throw new Error("EC2's initialization status is not available");
  // The pause between polls ends at the stop too (a poll is 10 s): SIGTERM does not wait for it.
  const sleep = deps.sleep ?? ((ms: number) => delay(ms, undefined, { signal }));
  const total = target.sizeBytes ?? 100;
  let first: number | undefined;
  for (;;) {
    if (signal.aborted) throw signal.reason;
    const status = await deps.initializationStatus(target.volume.volumeId);
    const percent = status ? status.progress : 100;
    first ??= percent;
    onProgress({
      doneBytes: (percent / 100) * total,
      totalBytes: total,
      runBytes: ((percent - first) / 100) * total,
      ...(status?.etaSeconds !== undefined ? { etaSeconds: status.etaSeconds } : {}),
    });
    if (percent >= 100) return;
    await sleep(deps.followPollMs ?? 10_000);
  }
}

/** Every byte was read (or EBS says it is done): only now is the volume tagged; then the second sample. */
async function finishRun(run: LongRun): Promise<PrewarmReport> {
  const { deps, state } = run;
  const volumeId = run.target.volume.volumeId;
  await run.flush();
  await deps.tagVolume(volumeId, { [VolumeTag.initialized]: deps.clock.now().toISOString() });
  const after = await sampleVolume(run.target, run.settings, deps, "after initialization");
  const verdict = after.verdict === "unknown" ? "warm" : after.verdict;
  await run.save({
    phase: "done",
    verdict,
    ...(after.figures ? { after: after.figures } : {}),
    finishedAt: nowOf(deps).toISOString(),
  });
  await run.flush();
  deps.log.notice("prewarm.done", `volume initialized and tagged ${VolumeTag.initialized}`, {
    volume: volumeId,
    verdict,
  });
  const outcome = readyReport(run.decision, verdict, "done", {
    ...(state.before ? { before: state.before } : {}),
    ...(after.figures ? { after: after.figures } : {}),
    ...(state.progress ? { progress: state.progress } : {}),
  });
  await run.publish("ready", outcome.labels);
  return outcome;
}

/**
 * Stopped (SIGTERM: `pending`, resumable), timed out or failed: the state says so, the volume
 * stays untagged, and the node is `ready` with the verdict it had. `cause` is what the message
 * tells (the abort's reason when aborted), `error` the error thrown (its remediation).
 */
async function failRun(run: LongRun, cause: unknown, interrupted: boolean, error: unknown): Promise<PrewarmReport> {
  const { deps, state } = run;
  const message = describeError(cause);
  await run.save({
    phase: interrupted ? "pending" : "failed",
    error: message,
    ...(interrupted ? {} : { finishedAt: nowOf(deps).toISOString() }),
  });
  await run.flush();
  deps.log.error(
    "prewarm.failed",
    `initialization ${interrupted ? "interrupted" : "failed"}: ${message}; the volume is not tagged initialized ` +
      `and the node stays usable`,
    {
      volume: run.target.volume.volumeId,
      remediation: remediationOr(error, "run `ebs-cache-agent prewarm` to resume"),
    },
  );
  const outcome = readyReport(run.decision, state.verdict, interrupted ? "pending" : "failed", {
    error: message,
    ...(state.before ? { before: state.before } : {}),
    ...(state.progress ? { progress: state.progress } : {}),
  });
  await run.publish("ready", outcome.labels);
  return outcome;
}
