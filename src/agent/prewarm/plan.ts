/**
 * The pre-warm, as pure decisions: what to do with a volume (skip, check, initialize, follow
 * EBS's own initialization), the verdict of a sample against the thresholds, progress figures,
 * when a progress label is worth a label update, the labels themselves, and the outcome and
 * state a run starts from. Nothing here touches the world; apply.ts carries the decisions out.
 * See docs/prewarm.md.
 */
import { percentOf, type ProgressFigures } from "../../progress.ts";
import { defaultConfig, type AgentConfig, type PrewarmStrategy } from "../../config/index.ts";
import { Label, VolumeTag } from "../../tags.ts";
import type {
  CheckFigures,
  GiveWaySettings,
  InitializationStatus,
  InitializeOptions,
  ReadTarget,
  SampleBounds,
  VolumeInfo,
} from "../ports.ts";

/** What the pre-warm says about the volume's read performance. */
export type Verdict = "warm" | "cold" | "unknown";

/** The pre-warm's configuration (config `prewarm.*`). */
export interface PrewarmSettings {
  strategy: PrewarmStrategy;
  /**
   * files/device: run the initialization after docker is up (label `warming`, then `ready`),
   * so the node is usable early; false: before the node is reported ready.
   */
  background: boolean;
  check: SampleBounds;
  thresholds: {
    /** Below this many IOPS in the sample the volume is cold. */
    minIops: number;
    /** Above this median completion latency (ms) it is cold; null: latency is only reported. */
    maxMedianLatencyMs: number | null;
  };
  initialize: {
    ioDepth: number;
    /** Largest read of the files strategy (bytes). */
    maxIoBytes: number;
    /** Give up (and leave the volume untagged) after this long; null: no limit. */
    timeoutSeconds: number | null;
    /** Seconds between progress log lines and state-file updates. */
    progressSeconds: number;
  };
  /** How the background run's reads give way to others'; null: they never do (config `prewarm.giveWay`). */
  giveWay: GiveWaySettings | null;
}

/** Defaults, as the config schema has them. */

/** The settings from the configuration's `prewarm` group. */
export function prewarmSettingsFrom(config: AgentConfig): PrewarmSettings {
  const prewarm = config.prewarm;
  return {
    strategy: prewarm.strategy,
    background: prewarm.background,
    check: {
      seconds: prewarm.check.seconds,
      reads: prewarm.check.reads,
      ioDepth: prewarm.check.ioDepth,
      blockBytes: 4096,
    },
    thresholds: { minIops: prewarm.thresholds.minIops, maxMedianLatencyMs: prewarm.thresholds.maxMedianLatencyMs },
    initialize: {
      ioDepth: prewarm.initialize.ioDepth,
      maxIoBytes: prewarm.initialize.maxIoKiB * 1024,
      timeoutSeconds: prewarm.initialize.timeoutMinutes === null ? null : prewarm.initialize.timeoutMinutes * 60,
      progressSeconds: prewarm.initialize.progressSeconds,
    },
    giveWay: prewarm.giveWay.enabled
      ? {
          runMs: prewarm.giveWay.runMs,
          pauseMs: prewarm.giveWay.pauseMs,
          maxPausedMs: prewarm.giveWay.maxPausedMs,
          settleMs: prewarm.giveWay.settleMs,
          quietIops: prewarm.giveWay.othersIops,
        }
      : null,
  };
}

/**
 * The depth of a background initialization's reads once the wanted images' files are read: on a
 * device whose scheduler ignores I/O priorities (NVMe's `none`), a service's read waits behind
 * the reads in flight, so few are kept in flight while services start.
 */
export const YIELD_IO_DEPTH = 2;

/**
 * How an initialization reads (InitializeOptions' depths): in the background, giving way to others' reads as
 * configured (`prewarm.giveWay`) at YIELD_IO_DEPTH after the wanted files; inline, `initialize.ioDepth` throughout.
 */
export function readDepths(
  settings: Pick<PrewarmSettings, "initialize" | "giveWay">,
  background: boolean,
): Pick<InitializeOptions, "ioDepth" | "maxIoBytes" | "yieldDepth" | "giveWay"> {
  const { ioDepth, maxIoBytes } = settings.initialize;
  return {
    ioDepth,
    maxIoBytes,
    ...(background && settings.giveWay
      ? { yieldDepth: Math.min(YIELD_IO_DEPTH, ioDepth), giveWay: settings.giveWay }
      : {}),
  };
}

/** The defaults, read from the config schema\'s defaults (not repeated here). */
export const DEFAULT_PREWARM: PrewarmSettings = prewarmSettingsFrom(defaultConfig());

/** What the pre-warm needs to know of the volume. */
export interface PrewarmVolume {
  volumeId: string;
  snapshotId?: string;
  /** When EC2 created it (DescribeVolumes CreateTime), when known. */
  createTime?: Date;
  tags: Record<string, string>;
}

/** The pre-warm's view of a volume EC2 described: the boot's pre-warm and `prewarm` alike. */
export function prewarmVolumeOf(volume: VolumeInfo): PrewarmVolume {
  return {
    volumeId: volume.volumeId,
    ...(volume.snapshotId ? { snapshotId: volume.snapshotId } : {}),
    ...(volume.createTime ? { createTime: volume.createTime } : {}),
    tags: volume.tags,
  };
}

/**
 * An untagged volume created from a snapshot less than this long ago is cold without a sample:
 * EBS fetches a block from S3 on its first read, and nothing read it yet but this boot.
 */
export const FRESH_FROM_SNAPSHOT_MINUTES = 60;

/** What the pre-warm decides from (observePrewarm, ./observe.ts). */
export interface PrewarmObservation {
  volume: PrewarmVolume;
  /** EC2's initialization status; absent when EC2 does not say, or it was not needed (see observePrewarm). */
  status?: InitializationStatus;
  /** EC2's time when it was observed: a volume created from a snapshot minutes ago is cold. Default: the host's now. */
  now?: Date;
  /** The verdict this volume's earlier run left in the state file (a sample's, or EBS's), when it has one. */
  sampled?: Verdict;
}

export type PrewarmPlan =
  /** Nothing to read: the verdict is known (`warm`) or not wanted (`unknown`, strategy off). */
  | { action: "skip"; verdict: Verdict; reason: string }
  /** EBS reports the initialization done (provisioned rate): tag the volume, no reads. */
  | { action: "record-initialized"; reason: string }
  /** EBS initializes at a provisioned rate: follow its progress instead of reading. */
  | { action: "follow"; reason: string }
  | { action: "check"; reason: string }
  | {
      action: "initialize";
      mode: "files" | "device";
      background: boolean;
      reason: string;
      /** The verdict EBS already gives (no sample is taken before the reads). */
      known?: Verdict;
    };

/** Initialization types EBS drives itself (reading would only compete with it). */
const EBS_DRIVEN = new Set(["provisioned-rate", "volume-copy"]);

/**
 * Decides what to do with the volume, from its tags and EC2's initialization status when known.
 * Where EBS already tells the volume is cold (its lazy initialization under 100 %, or a volume
 * created from a snapshot minutes ago), no sample is taken: a sample on a cold volume costs the
 * boot seconds to learn what was known.
 */
export function planPrewarm(settings: PrewarmSettings, observed: PrewarmObservation): PrewarmPlan {
  const { volume, status, now = new Date() } = observed;
  if (!volume.snapshotId)
    return { action: "skip", verdict: "warm", reason: "not created from a snapshot: every block is local" };
  if (volume.tags[VolumeTag.initialized]) {
    return {
      action: "skip",
      verdict: "warm",
      reason: `tagged ${VolumeTag.initialized}=${volume.tags[VolumeTag.initialized]}`,
    };
  }
  if (settings.strategy === "off") return { action: "skip", verdict: "unknown", reason: "prewarm.strategy is off" };
  if (status && EBS_DRIVEN.has(status.type)) {
    if (status.progress >= 100)
      return { action: "record-initialized", reason: `EBS reports the ${status.type} initialization completed` };
    return {
      action: "follow",
      reason: `EBS initializes it (${status.type}, ${status.progress} %): following its progress`,
    };
  }
  const cold = knownCold(volume, status, now) ?? (observed.sampled === "cold" ? SAMPLED_COLD : undefined);
  // A volume EBS already says is cold is warmed by need without configuration: the files of the images the node is
  // about to run first (need.ts), read ahead of their services. Only a volume that may be warm is sampled.
  if (settings.strategy === "check")
    return cold
      ? {
          action: "initialize",
          mode: "files",
          background: settings.background,
          reason: `${cold}: cold, warmed by need`,
          known: "cold",
        }
      : { action: "check", reason: "prewarm.strategy is check" };
  return {
    action: "initialize",
    mode: settings.strategy,
    background: settings.background,
    reason: `prewarm.strategy is ${settings.strategy}${cold ? ` (${cold})` : ""}`,
    ...(cold ? { known: "cold" as const } : {}),
  };
}

/** Why a volume EBS says nothing of is known cold: a sample of it said so (this boot's, or an earlier run's). */
const SAMPLED_COLD = "the sample found it cold";

/**
 * What follows a sample (`check`): a volume it finds cold is warmed by need, as one EBS says is cold (planPrewarm);
 * undefined: the verdict is all (warm, unknown, or a strategy that read already).
 */
export function planAfterSample(
  settings: PrewarmSettings,
  decision: PrewarmPlan,
  verdict: Verdict,
): Extract<PrewarmPlan, { action: "initialize" }> | undefined {
  if (decision.action !== "check" || verdict !== "cold" || settings.strategy !== "check") return undefined;
  return {
    action: "initialize",
    mode: "files",
    background: settings.background,
    reason: `${SAMPLED_COLD}: cold, warmed by need`,
    known: "cold",
  };
}

/**
 * Whether the decision's reads begin at the mount, before docker starts (the boot's head start): a volume known
 * cold, warmed in the background, with no sample to take first. The head start reads the need list (the node's
 * images' files first) while docker starts and is verified, and hands over to the background run at the `prewarm`
 * step; a sample first, or an inline initialization, waits for the step as before.
 */
export function headStartAtMount(decision: PrewarmPlan): decision is Extract<PrewarmPlan, { action: "initialize" }> {
  return decision.action === "initialize" && decision.background && decision.known !== undefined;
}

/**
 * Whether the first boot phase begins a pre-warm run at the mount: a volume that may be cold (made from a snapshot, not
 * tagged initialized) with a pre-warm wanted. The run decides the rest itself (it reads only what headStartAtMount
 * takes), so that this phase, before docker, asks EC2 nothing more.
 */
export function mayReadFromMount(volume: PrewarmVolume, strategy: PrewarmStrategy): boolean {
  return strategy !== "off" && volume.snapshotId !== undefined && !volume.tags[VolumeTag.initialized];
}

/**
 * Why EBS already says the (untagged, snapshot-made) volume is cold, or undefined when only a
 * sample can tell. EC2's initialization status, when it gives one, decides; without it, a volume
 * created from a snapshot minutes ago is cold. A lazy initialization at 100 % is not taken as
 * warm: EC2 also says 100 where it tracks nothing.
 */
export function knownCold(
  volume: PrewarmVolume,
  status: InitializationStatus | undefined,
  now: Date,
): string | undefined {
  if (status)
    return status.progress < 100 ? `EBS reports the ${status.type} initialization at ${status.progress} %` : undefined;
  if (volume.createTime) {
    const minutes = (now.getTime() - volume.createTime.getTime()) / 60_000;
    // `now` is EC2's time as estimated from whole-second Date headers: a volume created a moment
    // ago may look created up to a second or so ahead of it. Up to a minute ahead is that error;
    // further ahead is a clock that says nothing.
    if (minutes > -1 && minutes < FRESH_FROM_SNAPSHOT_MINUTES)
      return `created from ${volume.snapshotId} ${Math.max(0, Math.floor(minutes))} min ago`;
  }
  return undefined;
}

/** warm / cold against the thresholds, with the reasons in words. */
export function verdictOf(
  figures: CheckFigures | undefined,
  thresholds: PrewarmSettings["thresholds"],
): { verdict: Verdict; reasons: string[] } {
  if (!figures || figures.reads === 0) return { verdict: "unknown", reasons: ["no sample"] };
  const reasons: string[] = [];
  if (figures.iops < thresholds.minIops) reasons.push(`${round(figures.iops)} IOPS < ${thresholds.minIops}`);
  const p50 = figures.latencyMs.p50;
  if (thresholds.maxMedianLatencyMs !== null && p50 !== undefined && p50 > thresholds.maxMedianLatencyMs) {
    reasons.push(`median latency ${round(p50)} ms > ${thresholds.maxMedianLatencyMs} ms`);
  }
  if (reasons.length > 0) return { verdict: "cold", reasons };
  return {
    verdict: "warm",
    reasons: [
      `${round(figures.iops)} IOPS >= ${thresholds.minIops}${p50 !== undefined ? `, median ${round(p50)} ms` : ""}`,
    ],
  };
}

/** Progress of a long read. */
export interface Progress {
  doneBytes: number;
  totalBytes: number;
  /** 0-100, one decimal. */
  percent: number;
  /** Average since the start of this run. */
  mibps: number;
  /** Seconds left at that rate; undefined until something was read. */
  etaSeconds?: number;
}

/** A pre-warm's progress as the shared progress line tells it (src/progress.ts). */
export function progressFigures(progress: Progress): ProgressFigures {
  return {
    bytes: { done: progress.doneBytes, total: progress.totalBytes },
    bytesPerSecond: progress.mibps * MiB,
    ...(progress.etaSeconds !== undefined ? { etaSeconds: progress.etaSeconds } : {}),
  };
}

/** Progress figures from bytes done (this run: `runDoneBytes` in `elapsedMs`) and total. */
export function progressOf(doneBytes: number, totalBytes: number, runDoneBytes: number, elapsedMs: number): Progress {
  const done = Math.max(0, Math.min(doneBytes, totalBytes));
  const percent = percentOf(done, totalBytes);
  const rate = elapsedMs > 0 ? runDoneBytes / (elapsedMs / 1000) : 0;
  const progress: Progress = { doneBytes: done, totalBytes, percent, mibps: round(rate / MiB) };
  if (rate > 0) progress.etaSeconds = Math.ceil((totalBytes - done) / rate);
  return progress;
}

/** The progress label moves in whole steps (default 10 %): each change reloads dockerd or updates the node. */
export function progressLabel(percent: number, step = 10): string {
  return String(Math.min(100, Math.floor(percent / step) * step));
}

/**
 * `prewarm` while the sample that gives the verdict still runs, the node published already (`ready`, or `warming`
 * with the initialization's sample still to come): "not known yet", the verdict replaces it when the sample ends.
 */
export const CHECKING = "checking";

/** The labels of a node whose volume is warming, or ready with a verdict (see docs/labels.md). */
export function prewarmLabels(
  phase: "warming" | "ready",
  verdict: Verdict | typeof CHECKING,
  percent?: number,
): Record<string, string> {
  return phase === "warming"
    ? { [Label.prewarm]: verdict, [Label.prewarmProgress]: progressLabel(percent ?? 0) }
    : { [Label.prewarm]: verdict };
}

/** The volume to pre-warm, on this host. */
export interface PrewarmTarget extends ReadTarget {
  volume: PrewarmVolume;
  /** The volume's size (for progress while EBS initializes it), when known. */
  sizeBytes?: number;
  /** The labels published with the state (volume-id, pool, kind). */
  labels: Record<string, string>;
  /** The images the node is about to run, most wanted first: `files` reads their files first (need.ts). */
  images?: string[];
}

/** Where a run stands. */
export type PrewarmPhase =
  /** Decided, nothing read yet, or the sample runs (the background run's first one: with its pid). */
  | "checking"
  /** Initialization handed to the background run, which has not started yet. */
  | "pending"
  | "initializing"
  /** Following EBS's own (provisioned-rate) initialization. */
  | "following"
  | "done"
  | "skipped"
  | "failed";

/** What a pre-warm did, and what the node's labels should say. */
export interface PrewarmReport {
  decision: PrewarmPlan;
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

/** The outcome of a pre-warm that leaves the node `ready`. */
export function readyReport(
  decision: PrewarmPlan,
  verdict: Verdict,
  phase: PrewarmPhase,
  extra: Partial<PrewarmReport> = {},
): PrewarmReport {
  return { decision, verdict, phase, labelState: "ready", labels: prewarmLabels("ready", verdict), ...extra };
}

/** The shared progress line's units (src/progress.ts), for the pre-warm's log lines and the status command. */
export { formatBytes, formatDuration } from "../../progress.ts";

const MiB = 1024 * 1024;

function round(n: number): number {
  return Math.round(n * 10) / 10;
}
