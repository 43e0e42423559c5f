/**
 * What a finished use case hands the OutcomeRecorder (the port src/status/recorder.ts implements):
 * the reports of a boot, a release and a gc, the figures (`Facts`) of a keeper run and a prune, and
 * the pre-warm's and the refresh's state files. A module of their own, apart from src/agent/ports.ts: a report names
 * the
 * use case's own types, and the ports name none, so no adapter reaches a use case through them.
 */
import type { FillFigures } from "../host/facts.ts";
import type { ReadinessState } from "../tags.ts";
import type { BootSource } from "./boot/source.ts";
import type { GcDecision } from "./gc/plan.ts";
import type { BootPhase } from "./ports.ts";
import type { PrewarmReport } from "./prewarm/plan.ts";
import type { PrewarmState } from "./prewarm/state.ts";
import type { RefreshState } from "./refresh/state.ts";

// ---- boot ----

export interface BootReport {
  /** `prepared`: volume mounted and daemon.json switched; docker not started (first boot phase). */
  outcome: ReadinessState | "prepared";
  /** Where the data-root came from (./source.ts): a pool claim that fell back to the snapshot is `snapshot`. */
  source: BootSource;
  /** The pre-warm's verdict and what it did (see docs/prewarm.md). */
  prewarm?: Pick<PrewarmReport, "verdict" | "phase" | "before" | "after" | "error"> & { action: string };
  volumeId?: string;
  device?: string;
  mountPoint?: string;
  dataRoot?: string;
  reason?: string;
  timeline: Array<{ step: string; ms: number }>;
}

// ---- release ----

export interface ReleaseProblem {
  step: string;
  volumeId?: string;
  kind: "refused" | "failed";
  message: string;
  remediation: string;
}

export interface ReleaseReport {
  /** `released`: every planned step done; `refused` / `failed`: see `problems` (exit 1). */
  outcome: "released" | "nothing" | "disabled" | "refused" | "failed";
  reason?: string;
  /** Volumes detached (or found detached) and tagged released. */
  released: string[];
  /** Volumes unmounted and left attached over a stop, for the instance's next start. */
  kept: string[];
  problems: ReleaseProblem[];
  timeline: Array<{ step: string; volumeId?: string; ms: number; skipped?: boolean }>;
}

// ---- gc ----

/** `spared`: planned for deletion, but the volume changed since (see sparedSince) and was left alone. */
export type GcStepDone = "deleted" | "gone" | "tagged" | "spared" | "failed";

/** One decision as carried out: `done` absent where nothing was done (a dry run, a verdict that leaves it alone). */
export type GcStepReport = GcDecision & { done?: GcStepDone; error?: string };

export interface GcReport {
  decisions: GcStepReport[];
  /** The deletions the plan makes within this run's cap: what a dry run would delete, what a real run tries. */
  wouldDelete: number;
  /** Never-released volumes the plan tags to expire. */
  wouldTag: number;
  /** Deletions left to a later run by `--max-deletes`. */
  overCap: number;
  deleted: number;
  /** Deletions called off by the look right before them. */
  spared: number;
  failed: number;
}

// ---- the pool keeper ----

/** One thing a keeper run did to the pool (`create`, `tag-initialized`, `trim`). */
export interface KeeperAction {
  action: string;
  pool: string;
  outcome: "done" | "failed";
}

export interface KeeperFacts {
  actions: readonly KeeperAction[];
  /** Volumes in stock per pool after the run: available, and being created. */
  poolVolumes: Readonly<Record<string, number>>;
  /** Steps that failed and pools that could not be judged (what makes the run exit 1); absent: none. */
  failed?: number;
  /**
   * Per pool, the volumes attached to stopped instances (sleeping warm buffers, leaked stopped
   * machines) and the longest such stop in seconds (null: EC2 does not say since when).
   */
  heldByStopped?: Readonly<Record<string, { volumes: number; oldestSeconds: number | null }>>;
  finishedAt: Date;
}

// ---- the prune ----

/** What started the prune: the boot that came up, ebs-cache-agent-prune.timer, or an operator. */
export type PruneTrigger = "boot" | "timer" | "manual";

export interface PruneFacts {
  verdict: string;
  trigger: PruneTrigger;
  reason: string;
  dryRun: boolean;
  removedImages: number;
  failedImages: number;
  /** Bytes the removed images were estimated to free. */
  removedBytes: number;
  usedRatioBefore?: number;
  usedRatioAfter?: number;
  /** The fill after the run (before it, on a dry run), for the fill file; absent: nothing mounted. */
  fill?: FillFigures;
  finishedAt: Date;
}

// ---- the recorder ----

/**
 * Where a finished use case leaves what operators read without the journal: the records
 * `ebs-cache-agent status` reads (`last-boot.json`, `last-release.json`) and the metrics textfiles
 * of node_exporter (src/status/recorder.ts). Never throws: a write that fails is a warning in the
 * log, and the use case's outcome and exit code stay what they were.
 */
export interface OutcomeRecorder {
  bootFinished(boot: {
    instanceId: string;
    bootId?: string;
    phase: BootPhase;
    report: BootReport;
    finishedAt: Date;
    /** The readiness labels this run published last (name → value), for `status` to compare. */
    publishedLabels?: Record<string, string>;
  }): Promise<void>;
  /**
   * `finishedAt` defaults to the host's clock at the call: the record and the metrics are this
   * host's, read on this host (by `status`, node_exporter), never compared with EC2's times, so
   * the use cases that must keep to EC2's time (gc, the release) never read the host's clock.
   */
  releaseFinished(release: { instanceId: string; report: ReleaseReport; finishedAt?: Date }): Promise<void>;
  gcFinished(gc: { report: GcReport; dryRun: boolean; finishedAt?: Date }): Promise<void>;
  /** After a keeper run (`pool fill`) that was not a dry run. */
  keeperFinished(keeper: KeeperFacts): Promise<void>;
  /** After each write of the pre-warm's state file (at boot, and as a long initialization goes). */
  prewarmStateWritten(state: PrewarmState): Promise<void>;
  /** After each write of the refresh's state file (as its pulls go). */
  refreshStateWritten(state: RefreshState): Promise<void>;
  /** After a prune (src/agent/prune/): its figures, and the fill it left (a dry run: the fill it found). */
  pruneFinished(prune: PruneFacts): Promise<void>;
  /**
   * After a run that ended before its report (it threw: IMDS or EC2 could not be asked, bad
   * instance tags, a bug): its metrics file says so, with its time, in place of the last run's.
   */
  runFailed(failure: RunFailure): Promise<void>;
}

/** A run that ended before its report, as its metrics record it (src/cli/common.ts recordingFailure). */
export type RunFailure = { reason: string; finishedAt: Date } & (
  | { useCase: "boot" | "release" | "keeper" }
  | { useCase: "gc"; dryRun: boolean }
  | { useCase: "prune"; trigger: PruneTrigger; dryRun: boolean }
);
