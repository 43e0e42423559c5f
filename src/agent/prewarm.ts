/**
 * Carrying out the pre-warm (decisions in prewarm-plan.ts, reads in src/host/volume-reads.ts):
 *
 * - prewarmAtBoot(): the boot's step, after docker is verified. Skips, checks (a bounded fio
 *   sample: verdict warm/cold), or starts the initialization: inline before `ready`, or handed to
 *   the background run (the node is labelled `warming` and usable at once).
 * - runInitialization(): the long part (the `prewarm` command, or the background run): reads
 *   the allocated data (files) or the whole device, or follows EBS's provisioned-rate
 *   initialization, with progress in the log, the state file and the `prewarm-progress` label;
 *   tags the volume `ebs-cache:initialized` only once every byte was read; then a second sample,
 *   and `ready`.
 *
 * Never blocks the node: a failing or missing fio gives the verdict `unknown`, one error line
 * with the remedy, and the node is still reported. A run killed half-way leaves a resume point
 * in the state file: the next run starts there (and reads again what may not have completed).
 */
import { describeError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { VolumeTag } from "../tags.ts";
import {
  decidePrewarm,
  formatBytes,
  formatDuration,
  prewarmLabels,
  progressLabel,
  progressOf,
  verdictOf,
  type CheckFigures,
  type InitializationStatus,
  type PrewarmDecision,
  type PrewarmSettings,
  type PrewarmVolume,
  type Progress,
  type Verdict,
} from "./prewarm-plan.ts";
import {
  acquirePrewarmLock,
  isAlive,
  processStartTime,
  readPrewarmState,
  writePrewarmState,
  type PrewarmPhase,
  type PrewarmState,
} from "./prewarm-state.ts";

/** The device to read and where its filesystem is mounted. */
export interface ReadTarget {
  device: string;
  mountPoint: string;
}

/** Progress of a long read, as the reader reports it. */
export interface ReadProgress {
  /** Bytes of the whole job read (a resumed run starts above 0). */
  doneBytes: number;
  totalBytes: number;
  /** Every byte of the device below this offset has been read: the resume point. */
  cursor: number;
  /** Bytes read by this run. */
  runBytes: number;
}

export interface InitializeOptions {
  fromOffset: number;
  ioDepth: number;
  maxIoBytes: number;
  onProgress(progress: ReadProgress): void;
  signal?: AbortSignal;
}

export interface InitializeResult {
  totalBytes: number;
  readBytes: number;
}

/** The reads (fio on a host: src/host/volume-reads.ts). */
export interface PrewarmReader {
  /** Bytes of data the filesystem holds (what `files` reads). */
  allocatedBytes(target: ReadTarget): Promise<number>;
  check(target: ReadTarget, check: PrewarmSettings["check"]): Promise<CheckFigures>;
  initialize(target: ReadTarget, mode: "files" | "device", options: InitializeOptions): Promise<InitializeResult>;
}

/** The volume to pre-warm, on this host. */
export interface PrewarmTarget extends ReadTarget {
  volume: PrewarmVolume;
  /** The volume's size (for progress while EBS initializes it), when known. */
  sizeBytes?: number;
  /** The labels published with the state (volume-id, pool, kind). */
  labels: Record<string, string>;
}

export interface PrewarmDeps {
  reader: PrewarmReader;
  /** DescribeVolumeStatus initialization details; undefined when EC2 does not say. */
  initializationStatus?(volumeId: string): Promise<InitializationStatus | undefined>;
  tagVolume(volumeId: string, tags: Record<string, string>): Promise<void>;
  /** Publishes the readiness labels (absent: nothing is published, e.g. before docker runs). */
  report?(state: "warming" | "ready", details: Record<string, string>): Promise<void>;
  /** `paths.stateDir`: prewarm.json and prewarm.lock. */
  stateDir: string;
  log: Logger;
  now?: () => Date;
  sleep?: (ms: number) => Promise<void>;
  /**
   * Starts the background run (on a host: a detached `ebs-cache-agent prewarm --background`).
   * Absent: the initialization runs inline, before the node is reported ready.
   */
  startBackground?: () => Promise<void>;
  /** How often EBS's initialization status is polled while following it (default 10 s). */
  followPollMs?: number;
}

export interface PrewarmOutcome {
  decision: PrewarmDecision;
  verdict: Verdict;
  phase: PrewarmPhase;
  /** What the node's state label should say now. */
  labelState: "ready" | "warming";
  /** The pre-warm's labels (`prewarm`, and `prewarm-progress` while warming). */
  labels: Record<string, string>;
  before?: CheckFigures;
  after?: CheckFigures;
  progress?: Progress;
  error?: string;
  /**
   * The labels were published already (before the background run was started, which publishes
   * from then on): the boot must not publish them again, or it could overwrite a later `ready`.
   */
  published?: boolean;
}

const nowOf = (deps: PrewarmDeps) => deps.now?.() ?? new Date();

/** EC2's initialization status, or undefined (logged) when it cannot be had. */
async function statusOf(deps: PrewarmDeps, volume: PrewarmVolume): Promise<InitializationStatus | undefined> {
  if (!deps.initializationStatus || !volume.snapshotId || volume.tags[VolumeTag.initialized]) return undefined;
  try {
    return await deps.initializationStatus(volume.volumeId);
  } catch (error) {
    deps.log.warning("prewarm.status", `DescribeVolumeStatus failed, deciding without it: ${describeError(error)}`, { volume: volume.volumeId });
    return undefined;
  }
}

/** Runs the sample; a failure is logged and gives `unknown` (never throws). */
async function sample(target: PrewarmTarget, settings: PrewarmSettings, deps: PrewarmDeps, when: string): Promise<{ figures?: CheckFigures; verdict: Verdict; error?: string }> {
  const { log } = deps;
  try {
    const figures = await deps.reader.check(target, settings.check);
    const { verdict, reasons } = verdictOf(figures, settings.thresholds);
    const lat = figures.latencyMs;
    log.notice("prewarm.verdict", `${when}: ${verdict} (${reasons.join("; ")})`, {
      volume: target.volume.volumeId,
      iops: Math.round(figures.iops),
      mibps: figures.mibps.toFixed(1),
      p50ms: lat.p50?.toFixed(2),
      p90ms: lat.p90?.toFixed(2),
      p99ms: lat.p99?.toFixed(2),
      reads: figures.reads,
      seconds: figures.seconds.toFixed(1),
    });
    return { figures, verdict };
  } catch (error) {
    const message = describeError(error);
    const remediation = (error as { remediation?: unknown }).remediation;
    log.error("prewarm.verdict", `${when}: no verdict, the sample failed: ${message}`, {
      volume: target.volume.volumeId,
      remediation: typeof remediation === "string" ? remediation : "install fio and check the device",
    });
    return { verdict: "unknown", error: message };
  }
}

function baseState(target: PrewarmTarget, settings: PrewarmSettings, decision: PrewarmDecision, now: Date): PrewarmState {
  return {
    version: 1,
    volumeId: target.volume.volumeId,
    device: target.device,
    mountPoint: target.mountPoint,
    strategy: settings.strategy,
    action: decision.action,
    ...(decision.action === "initialize" ? { mode: decision.mode } : {}),
    reason: decision.reason,
    phase: "checking",
    verdict: "unknown",
    labels: target.labels,
    startedAt: now.toISOString(),
    updatedAt: now.toISOString(),
  };
}

function ready(decision: PrewarmDecision, verdict: Verdict, phase: PrewarmPhase, extra: Partial<PrewarmOutcome> = {}): PrewarmOutcome {
  return { decision, verdict, phase, labelState: "ready", labels: prewarmLabels("ready", verdict), ...extra };
}

/**
 * The boot's pre-warm step. Returns what to publish with the readiness labels; never throws
 * for the pre-warm's own failures (the node is reported either way).
 */
export async function prewarmAtBoot(target: PrewarmTarget, settings: PrewarmSettings, deps: PrewarmDeps): Promise<PrewarmOutcome> {
  const { log } = deps;
  const volumeId = target.volume.volumeId;
  const decision = decidePrewarm(settings, target.volume, await statusOf(deps, target.volume));
  log.info("prewarm.decide", `${decision.action}: ${decision.reason}`, { volume: volumeId, strategy: settings.strategy });
  const state = baseState(target, settings, decision, nowOf(deps));
  const previous = await readPrewarmState(deps.stateDir);
  const save = async (changes: Partial<PrewarmState>) => {
    Object.assign(state, changes, { updatedAt: nowOf(deps).toISOString() });
    await writePrewarmState(deps.stateDir, state).catch((error: unknown) => {
      log.warning("prewarm.state", `could not write the state file: ${describeError(error)}`, { stateDir: deps.stateDir });
    });
  };

  switch (decision.action) {
    case "skip":
      await save({ phase: "skipped", verdict: decision.verdict, finishedAt: nowOf(deps).toISOString() });
      return ready(decision, decision.verdict, "skipped");

    case "record-initialized": {
      await deps.tagVolume(volumeId, { [VolumeTag.initialized]: nowOf(deps).toISOString() }).catch((error: unknown) => {
        log.warning("prewarm.tag", `could not tag the volume initialized: ${describeError(error)}`, { volume: volumeId });
      });
      await save({ phase: "done", verdict: "warm", finishedAt: nowOf(deps).toISOString() });
      log.notice("prewarm.done", decision.reason, { volume: volumeId });
      return ready(decision, "warm", "done");
    }

    case "check": {
      await save({ phase: "checking" });
      const result = await sample(target, settings, deps, "sample");
      await save({
        phase: result.error ? "failed" : "done",
        verdict: result.verdict,
        ...(result.figures ? { before: result.figures } : {}),
        ...(result.error ? { error: result.error } : {}),
        finishedAt: nowOf(deps).toISOString(),
      });
      return ready(decision, result.verdict, result.error ? "failed" : "done", {
        ...(result.figures ? { before: result.figures } : {}),
        ...(result.error ? { error: result.error } : {}),
      });
    }

    case "follow":
    case "initialize": {
      // Another run may hold it already (a re-run of the boot while the background run works).
      if (previous?.volumeId === volumeId && previous.pid && (await isAlive(previous.pid, previous.pidStart))) {
        log.notice("prewarm.running", `already ${previous.phase} by process ${previous.pid}`, { volume: volumeId });
        return {
          decision,
          verdict: previous.verdict,
          phase: previous.phase,
          labelState: "warming",
          labels: prewarmLabels("warming", previous.verdict, previous.progress?.percent),
          ...(previous.progress ? { progress: previous.progress } : {}),
        };
      }
      let before: { figures?: CheckFigures; verdict: Verdict; error?: string } = { verdict: "unknown" };
      if (decision.action === "initialize") {
        before =
          previous?.volumeId === volumeId && previous.before
            ? { figures: previous.before, verdict: previous.verdict }
            : await sample(target, settings, deps, "before initialization");
      }
      const background = decision.action === "follow" ? settings.background : decision.background;
      if (background && deps.startBackground) {
        const resume = previous?.volumeId === volumeId && previous.cursor && previous.cursor.mode === state.mode ? { cursor: previous.cursor } : {};
        const progress = previous?.volumeId === volumeId ? previous.progress : undefined;
        await save({
          phase: "pending",
          verdict: before.verdict,
          ...(before.figures ? { before: before.figures } : {}),
          ...resume,
          ...(progress ? { progress } : {}),
        });
        const labels = prewarmLabels("warming", before.verdict, progress?.percent);
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
          await deps.startBackground();
          log.notice("prewarm.background", "initialization handed to the background run: the node is usable meanwhile", { volume: volumeId });
          return {
            decision,
            verdict: before.verdict,
            phase: "pending",
            labelState: "warming",
            labels,
            published,
            ...(before.figures ? { before: before.figures } : {}),
          };
        } catch (error) {
          log.error("prewarm.background", `could not start the background run, initializing now: ${describeError(error)}`, { volume: volumeId });
        }
      }
      await save({ phase: "pending", verdict: before.verdict, ...(before.figures ? { before: before.figures } : {}) });
      return runInitialization(target, settings, deps, { decision, publish: false });
    }
  }
}

/** Options of runInitialization. */
export interface RunInitializationOptions {
  /** Default: decided afresh from the volume's tags and EC2's status. */
  decision?: PrewarmDecision;
  /** Publish `warming` with progress, then `ready` (the background run does; inline at boot, the boot does). */
  publish: boolean;
  signal?: AbortSignal;
}

/**
 * The long part: initialize (or follow EBS's initialization), tag, sample again, publish
 * `ready`. Resumes from the state file's resume point when it is this volume's and mode's.
 */
export async function runInitialization(target: PrewarmTarget, settings: PrewarmSettings, deps: PrewarmDeps, options: RunInitializationOptions): Promise<PrewarmOutcome> {
  const { log } = deps;
  const volumeId = target.volume.volumeId;
  const decision = options.decision ?? decidePrewarm(settings, target.volume, await statusOf(deps, target.volume));
  const publish = async (state: "warming" | "ready", labels: Record<string, string>) => {
    if (!options.publish || !deps.report) return;
    await deps.report(state, { ...target.labels, ...labels }).catch((error: unknown) => {
      log.warning("prewarm.labels", `could not publish the labels: ${describeError(error)}`, { state });
    });
  };
  if (decision.action !== "initialize" && decision.action !== "follow") {
    // Nothing long to do (tagged meanwhile, or the strategy changed): the boot's step covers it.
    const outcome = await prewarmAtBoot(target, settings, { ...deps, startBackground: undefined });
    await publish("ready", outcome.labels);
    return outcome;
  }

  const lock = await acquirePrewarmLock(deps.stateDir);
  if ("heldBy" in lock) {
    log.notice("prewarm.running", `another pre-warm runs already (process ${lock.heldBy}): leaving it to finish`, { volume: volumeId });
    const current = await readPrewarmState(deps.stateDir);
    return {
      decision,
      verdict: current?.verdict ?? "unknown",
      phase: current?.phase ?? "initializing",
      labelState: "warming",
      labels: prewarmLabels("warming", current?.verdict ?? "unknown", current?.progress?.percent),
    };
  }

  const previous = await readPrewarmState(deps.stateDir);
  const mine = previous?.volumeId === volumeId ? previous : undefined;
  const mode = decision.action === "initialize" ? decision.mode : undefined;
  const state: PrewarmState = {
    ...baseState(target, settings, decision, nowOf(deps)),
    ...(mine?.before ? { before: mine.before } : {}),
    verdict: mine?.verdict ?? "unknown",
    phase: decision.action === "follow" ? "following" : "initializing",
    pid: process.pid,
    ...(mine?.cursor && mine.cursor.mode === mode ? { cursor: mine.cursor } : {}),
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
      .catch((error: unknown) => log.warning("prewarm.state", `could not write the state file: ${describeError(error)}`));
    return writes;
  };

  const controller = new AbortController();
  const stop = () => controller.abort(new Error("stopped"));
  options.signal?.addEventListener("abort", stop, { once: true });
  const timer = settings.initialize.timeoutSeconds ? setTimeout(() => controller.abort(new Error(`timed out after ${settings.initialize.timeoutSeconds} s`)), settings.initialize.timeoutSeconds * 1000) : undefined;
  const started = Date.now();
  let lastLog = 0;
  let lastLabel = state.progress ? progressLabel(state.progress.percent) : "";
  const onProgress = (p: { doneBytes: number; totalBytes: number; runBytes: number; cursor?: number; etaSeconds?: number }) => {
    const progress = progressOf(p.doneBytes, p.totalBytes, p.runBytes, Date.now() - started);
    if (p.etaSeconds !== undefined) progress.etaSeconds = p.etaSeconds;
    const changes: Partial<PrewarmState> = { progress };
    if (mode && p.cursor !== undefined) changes.cursor = { mode, offset: p.cursor };
    const due = Date.now() - lastLog >= settings.initialize.progressSeconds * 1000;
    if (due || progress.percent >= 100) {
      lastLog = Date.now();
      void save(changes);
      log.info("prewarm.progress", `${progress.percent.toFixed(1)} % (${formatBytes(progress.doneBytes)} of ${formatBytes(progress.totalBytes)}), ${progress.mibps.toFixed(1)} MiB/s${progress.etaSeconds !== undefined ? `, ETA ${formatDuration(progress.etaSeconds)}` : ""}`, { volume: volumeId });
    } else {
      Object.assign(state, changes);
    }
    const label = progressLabel(progress.percent);
    if (label !== lastLabel && progress.percent < 100) {
      lastLabel = label;
      void publish("warming", prewarmLabels("warming", state.verdict, progress.percent));
    }
  };

  try {
    if (decision.action === "initialize" && !state.before) {
      // Run on its own (`ebs-cache-agent prewarm`): the figures to compare the result with.
      const before = await sample(target, settings, deps, "before initialization");
      Object.assign(state, { verdict: before.verdict, ...(before.figures ? { before: before.figures } : {}) });
    }
    await save({});
    await publish("warming", prewarmLabels("warming", state.verdict, state.progress?.percent));
    if (decision.action === "follow") {
      await follow(target, deps, onProgress, controller.signal);
    } else {
      const from = state.cursor?.offset ?? 0;
      const done = state.progress ? ` (${state.progress.percent.toFixed(1)} % done)` : "";
      log.notice("prewarm.initialize", from > 0 ? `resuming at device offset ${formatBytes(from)}${done}` : `reading the ${decision.mode === "files" ? "allocated data" : "whole device"}`, {
        volume: volumeId,
        mode: decision.mode,
        device: target.device,
      });
      const result = await deps.reader.initialize(target, decision.mode, {
        fromOffset: from,
        ioDepth: settings.initialize.ioDepth,
        maxIoBytes: settings.initialize.maxIoBytes,
        onProgress,
        signal: controller.signal,
      });
      log.notice("prewarm.initialize", `read ${formatBytes(result.readBytes)} in ${formatDuration((Date.now() - started) / 1000)}`, { volume: volumeId, total: formatBytes(result.totalBytes) });
    }
    await writes;
    // Every byte was read (or EBS says it is done): only now is the volume tagged.
    await deps.tagVolume(volumeId, { [VolumeTag.initialized]: nowOf(deps).toISOString() });
    const after = await sample(target, settings, deps, "after initialization");
    const verdict = after.verdict === "unknown" ? "warm" : after.verdict;
    await save({ phase: "done", verdict, ...(after.figures ? { after: after.figures } : {}), finishedAt: nowOf(deps).toISOString() });
    await writes;
    log.notice("prewarm.done", `volume initialized and tagged ${VolumeTag.initialized}`, { volume: volumeId, verdict });
    const outcome = ready(decision, verdict, "done", {
      ...(state.before ? { before: state.before } : {}),
      ...(after.figures ? { after: after.figures } : {}),
      ...(state.progress ? { progress: state.progress } : {}),
    });
    await publish("ready", outcome.labels);
    return outcome;
  } catch (error) {
    const interrupted = controller.signal.aborted && options.signal?.aborted === true;
    const message = controller.signal.aborted ? describeError(controller.signal.reason) : describeError(error);
    await save({ phase: interrupted ? "pending" : "failed", error: message, ...(interrupted ? {} : { finishedAt: nowOf(deps).toISOString() }) });
    await writes;
    const remediation = (error as { remediation?: unknown }).remediation;
    log.error("prewarm.failed", `initialization ${interrupted ? "interrupted" : "failed"}: ${message}; the volume is not tagged initialized and the node stays usable`, {
      volume: volumeId,
      remediation: typeof remediation === "string" ? remediation : "run `ebs-cache-agent prewarm` to resume",
    });
    const outcome = ready(decision, state.verdict, interrupted ? "pending" : "failed", {
      error: message,
      ...(state.before ? { before: state.before } : {}),
      ...(state.progress ? { progress: state.progress } : {}),
    });
    await publish("ready", outcome.labels);
    return outcome;
  } finally {
    if (timer) clearTimeout(timer);
    options.signal?.removeEventListener("abort", stop);
    await lock.release();
  }
}

/** Polls EBS's initialization status until it reports 100 %. */
async function follow(
  target: PrewarmTarget,
  deps: PrewarmDeps,
  onProgress: (p: { doneBytes: number; totalBytes: number; runBytes: number; etaSeconds?: number }) => void,
  signal: AbortSignal,
): Promise<void> {
  if (!deps.initializationStatus) throw new Error("EC2's initialization status is not available");
  const sleep = deps.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
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
