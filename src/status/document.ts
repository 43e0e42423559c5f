/**
 * `status --json`: the whole state of the host in one document (schema/status.schema.json),
 * built purely from what the agent keeps (the last boot and release records, the pre-warm's
 * state file) and what was observed just now (the cache filesystem, docker's data-root, the
 * labels shown). The verdict `healthy` and its `problems` make it a health check; `warnings`
 * are shown but do not fail it.
 */
import type { CheckFigures } from "../agent/ports.ts";
import type { Progress } from "../agent/prewarm/plan.ts";
import { isInterrupted, type PrewarmState } from "../agent/prewarm/state.ts";
import type { RefreshState } from "../agent/refresh/state.ts";
import type { CacheFilesystem } from "../host/facts.ts";
import type { InstanceStoreDisk } from "../host/instance-store.ts";
import { Label } from "../tags.ts";
import type { BootRecord, ReleaseRecord } from "./records.ts";

export const STATUS_VERSION = 1;

/** What status reads and observes; every part may be missing on a host that never booted. */
export interface StatusInputs {
  now: Date;
  boot?: BootRecord;
  release?: ReleaseRecord;
  prewarm?: { state: PrewarmState; running: boolean };
  /** The filesystem mounted at the boot's mount point now (undefined: nothing mounted there). */
  filesystem?: CacheFilesystem;
  /** docker's data-root now (daemon.json's `data-root`; undefined: docker's default). */
  dockerDataRoot?: string;
  /** The readiness labels shown now (engine or node labels), when they could be read. */
  labels?: Record<string, string>;
  /** Records that did not parse: reported, not trusted. */
  recordProblems?: string[];
  /** The last refresh of the volume's images (src/agent/refresh/state.ts) and whether it runs. */
  refresh?: { state: RefreshState; running: boolean };
  /** The instance's NVMe instance-store disks now ([] none; undefined: not read). */
  instanceStore?: InstanceStoreDisk[];
}

export interface StatusThresholds {
  /** Fill at which the cache filesystem is a warning (0 to 1). */
  warnUsedRatio: number;
  /** Fill at which it is a problem: docker is about to fail writes. */
  failUsedRatio: number;
}

export const DEFAULT_THRESHOLDS: StatusThresholds = { warnUsedRatio: 0.85, failUsedRatio: 0.95 };

export interface StatusDocument {
  version: typeof STATUS_VERSION;
  generatedAt: string;
  healthy: boolean;
  problems: string[];
  warnings: string[];
  boot: null | {
    outcome: string;
    source: string;
    reason: string | null;
    finishedAt: string;
    durationSeconds: number;
    timeline: Array<{ step: string; seconds: number }>;
  };
  volume: null | { volumeId: string; device: string | null; model: string | null; serial: string | null };
  mount: null | {
    mountPoint: string;
    mounted: boolean;
    fsType: string | null;
    sizeBytes: number | null;
    usedBytes: number | null;
    availableBytes: number | null;
    usedRatio: number | null;
    /** statfs's inodes, in all and free (null: not read). */
    inodes: number | null;
    freeInodes: number | null;
  };
  dataRoot: null | { expected: string; current: string | null; matches: boolean };
  labels: null | { published: Record<string, string>; shown: Record<string, string> | null };
  prewarm: null | {
    volumeId: string;
    strategy: string;
    phase: string;
    verdict: string;
    running: boolean;
    reason: string;
    before: CheckFigures | null;
    after: CheckFigures | null;
    progress: Progress | null;
    updatedAt: string;
    error: string | null;
  };
  lastRelease: null | {
    outcome: string;
    reason: string | null;
    finishedAt: string;
    afterBoot: boolean;
    released: string[];
    kept: string[];
    problems: Array<{ step: string; volumeId: string | null; kind: string; message: string }>;
  };
  refresh: null | {
    volumeId: string | null;
    generation: string | null;
    phase: string;
    running: boolean;
    reason: string | null;
    wanted: number;
    present: number;
    pulled: number;
    failed: number;
    pending: number;
    pulledBytes: number;
    images: Array<{
      image: string;
      sources: string[];
      phase: string;
      bytes: number | null;
      seconds: number | null;
      error: string | null;
    }>;
    markedCurrent: boolean | null;
    startedAt: string;
    updatedAt: string;
    finishedAt: string | null;
  };
  /**
   * The instance's NVMe instance-store disks, which the agent never writes: what an AMI may run
   * docker on (osparc's mounts the largest disk at /mnt/docker). [] none; null: not read.
   */
  instanceStore: null | Array<{ device: string; sizeBytes: number }>;
}

const UP = new Set(["ready", "warming"]);
/** Labels the background pre-warm moves on after the boot (warming → ready, the progress): not a drift. */
const MOVING_LABELS = [Label.state, Label.prewarm, Label.prewarmProgress].map((name) => `.${name}`);

/** What the document's blocks find wrong: problems make the host unhealthy, warnings do not. */
interface Verdict {
  problems: string[];
  warnings: string[];
}

/** Builds the document and its verdict. Pure: the same inputs give the same document. */
export function buildStatus(inputs: StatusInputs, thresholds: StatusThresholds = DEFAULT_THRESHOLDS): StatusDocument {
  const verdict: Verdict = { problems: [...(inputs.recordProblems ?? [])], warnings: [] };
  const { problems, warnings } = verdict;
  const bootRecord = inputs.boot;
  const boot = bootRecord?.result;
  judgeBoot(inputs, verdict);
  const mount = mountBlock(inputs, thresholds, verdict);
  const dataRoot = dataRootBlock(inputs, verdict);
  const published = bootRecord?.labels ?? {};
  const shown = inputs.labels ?? null;
  judgeLabels(inputs, verdict);
  judgePrewarm(inputs, verdict);
  const lastRelease = releaseBlock(inputs, verdict);
  const refresh = refreshBlock(inputs.refresh);
  judgeRefresh(refresh, verdict);

  const fs = inputs.filesystem;
  const p = inputs.prewarm;
  const timeline = (boot?.timeline ?? []).map((entry) => ({ step: entry.step, seconds: entry.ms / 1000 }));
  return {
    version: STATUS_VERSION,
    generatedAt: inputs.now.toISOString(),
    healthy: problems.length === 0,
    problems,
    warnings,
    boot:
      bootRecord && boot
        ? {
            outcome: boot.outcome,
            source: boot.source,
            reason: boot.reason ?? null,
            finishedAt: bootRecord.finishedAt,
            durationSeconds: round(
              timeline.reduce((sum, t) => sum + t.seconds, 0),
              3,
            ),
            timeline,
          }
        : null,
    volume: boot?.volumeId
      ? { volumeId: boot.volumeId, device: boot.device ?? null, model: fs?.model ?? null, serial: fs?.serial ?? null }
      : null,
    mount,
    dataRoot,
    labels: bootRecord ? { published, shown } : null,
    prewarm: p
      ? {
          volumeId: p.state.volumeId,
          strategy: p.state.strategy,
          phase: p.state.phase,
          verdict: p.state.verdict,
          running: p.running,
          reason: p.state.reason,
          before: p.state.before ?? null,
          after: p.state.after ?? null,
          progress: p.state.progress ?? null,
          updatedAt: p.state.updatedAt,
          error: p.state.error ?? null,
        }
      : null,
    lastRelease,
    refresh,
    instanceStore: inputs.instanceStore?.map((d) => ({ device: d.device, sizeBytes: d.sizeBytes })) ?? null,
  };
}

/** The boot's outcome: none recorded, degraded or only prepared is a problem; disabled a warning. */
function judgeBoot(inputs: StatusInputs, { problems, warnings }: Verdict): void {
  const boot = inputs.boot?.result;
  if (!inputs.boot || !boot)
    problems.push("no boot recorded on this host (`ebs-cache-agent boot` has not finished here)");
  else if (boot.outcome === "degraded") problems.push(`the boot degraded: ${boot.reason ?? "see the journal"}`);
  else if (boot.outcome === "prepared")
    problems.push("the boot's second phase has not run: docker is not started on the cache volume");
  else if (boot.outcome === "disabled")
    warnings.push(`the cache is disabled on this host${boot.reason ? `: ${boot.reason}` : ""}`);
}

/** The cache volume's mount: missing while the cache is up, or too full, is a problem; filling, a warning. */
function mountBlock(inputs: StatusInputs, thresholds: StatusThresholds, verdict: Verdict): StatusDocument["mount"] {
  const boot = inputs.boot?.result;
  if (!boot?.mountPoint) return null;
  const fs = inputs.filesystem;
  const percent = (ratio: number) => `${(ratio * 100).toFixed(1)} %`;
  if (!fs && UP.has(boot.outcome)) verdict.problems.push(`the cache volume is not mounted at ${boot.mountPoint}`);
  else if (fs && fs.usedRatio >= thresholds.failUsedRatio)
    verdict.problems.push(`the cache filesystem is ${percent(fs.usedRatio)} full`);
  else if (fs && fs.usedRatio >= thresholds.warnUsedRatio)
    verdict.warnings.push(
      `the cache filesystem is ${percent(fs.usedRatio)} full (\`ebs-cache-agent prune\` removes images outside ` +
        `the current generation of a pool volume)`,
    );
  return {
    mountPoint: boot.mountPoint,
    mounted: fs !== undefined,
    fsType: fs?.fsType ?? null,
    sizeBytes: fs?.sizeBytes ?? null,
    usedBytes: fs?.usedBytes ?? null,
    availableBytes: fs?.availableBytes ?? null,
    usedRatio: fs ? round(fs.usedRatio, 4) : null,
    inodes: fs?.inodes ?? null,
    freeInodes: fs?.freeInodes ?? null,
  };
}

/** Docker's data-root: another than the cache volume's while the cache is up is a problem. */
function dataRootBlock(inputs: StatusInputs, verdict: Verdict): StatusDocument["dataRoot"] {
  const boot = inputs.boot?.result;
  if (!boot?.dataRoot) return null;
  const current = inputs.dockerDataRoot ?? null;
  const dataRoot = { expected: boot.dataRoot, current, matches: current === boot.dataRoot };
  if (!dataRoot.matches && UP.has(boot.outcome))
    verdict.problems.push(`docker's data-root is ${current ?? "its default"}, not the cache volume's ${boot.dataRoot}`);
  return dataRoot;
}

/** A label the node shows otherwise than the boot published it is a warning (those the pre-warm moves apart). */
function judgeLabels(inputs: StatusInputs, verdict: Verdict): void {
  const published = inputs.boot?.labels;
  const shown = inputs.labels ?? null;
  if (!shown || !published) return;
  const differ = Object.entries(published).filter(
    ([name, value]) => shown[name] !== value && !MOVING_LABELS.some((suffix) => name.endsWith(suffix)),
  );
  for (const [name, value] of differ)
    verdict.warnings.push(
      `label ${name} shows ${JSON.stringify(shown[name] ?? null)}, the boot published ${JSON.stringify(value)}`,
    );
}

/** The pre-warm interrupted, failed, or the volume cold: warnings. */
function judgePrewarm(inputs: StatusInputs, { warnings }: Verdict): void {
  const p = inputs.prewarm;
  if (p && isInterrupted(p.state, p.running)) {
    warnings.push("the pre-warm's initialization was interrupted (`ebs-cache-agent prewarm` resumes it)");
  }
  if (p?.state.phase === "failed") warnings.push(`the pre-warm failed: ${p.state.error ?? "see the journal"}`);
  if (p?.state.verdict === "cold" && p.state.phase !== "initializing")
    warnings.push("the cache volume is cold: its first reads come from S3");
}

/** The last release: one that ran after the boot took the node off its cache volume, a problem. */
function releaseBlock(inputs: StatusInputs, verdict: Verdict): StatusDocument["lastRelease"] {
  const releaseRecord = inputs.release;
  if (!releaseRecord) return null;
  const bootRecord = inputs.boot;
  const afterBoot = !bootRecord || Date.parse(releaseRecord.finishedAt) > Date.parse(bootRecord.finishedAt);
  const { outcome } = releaseRecord.result;
  if (afterBoot && (outcome === "released" || outcome === "failed" || outcome === "refused")) {
    verdict.problems.push(
      `a release (${releaseRecord.result.outcome}) ran after the boot: the node is no longer on its cache volume`,
    );
  }
  return {
    outcome: releaseRecord.result.outcome,
    reason: releaseRecord.result.reason ?? null,
    finishedAt: releaseRecord.finishedAt,
    afterBoot,
    released: releaseRecord.result.released,
    kept: releaseRecord.result.kept,
    problems: releaseRecord.result.problems.map((x) => ({
      step: x.step,
      volumeId: x.volumeId ?? null,
      kind: x.kind,
      message: x.message,
    })),
  };
}

/** A refresh never changes readiness: what it failed to pull, or its interruption, is a warning. */
function judgeRefresh(refresh: StatusDocument["refresh"], { warnings }: Verdict): void {
  if (refresh && refresh.failed > 0)
    warnings.push(
      `the refresh could not pull ${refresh.failed} of ${refresh.wanted} image(s): ${refresh.images
        .filter((i) => i.phase === "failed")
        .map((i) => i.image)
        .slice(0, 3)
        .join(", ")}`,
    );
  if (refresh?.phase === "running" && !refresh.running)
    warnings.push("the refresh was interrupted (`ebs-cache-agent refresh` runs it again)");
}

/** The refresh's block: its state with counts by phase. */
function refreshBlock(input: StatusInputs["refresh"]): StatusDocument["refresh"] {
  if (!input) return null;
  const { state, running } = input;
  const count = (phase: string) => state.images.filter((i) => i.phase === phase).length;
  return {
    volumeId: state.volumeId,
    generation: state.generation,
    phase: state.phase,
    running,
    reason: state.reason ?? null,
    wanted: state.images.length,
    present: count("present"),
    pulled: count("pulled"),
    failed: count("failed"),
    pending: count("pending") + count("pulling"),
    pulledBytes: state.images.reduce((sum, i) => sum + (i.phase === "pulled" ? (i.bytes ?? 0) : 0), 0),
    images: state.images.map((i) => ({
      image: i.image,
      sources: [...i.sources],
      phase: i.phase,
      bytes: i.bytes ?? null,
      seconds: i.seconds ?? null,
      error: i.error ?? null,
    })),
    markedCurrent: state.markedCurrent,
    startedAt: state.startedAt,
    updatedAt: state.updatedAt,
    finishedAt: state.finishedAt ?? null,
  };
}

function round(value: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}
