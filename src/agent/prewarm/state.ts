/**
 * The pre-warm's state file, `<paths.stateDir>/prewarm.json`: what the boot decided, the sample
 * figures, and the progress of a long initialization (percent, MiB/s, ETA, the resume point).
 * The prewarm writes it (atomically: temp + rename) every few seconds; `ebs-cache-agent status`
 * reads it. A lock file (`prewarm.lock`, pid + start time) keeps two initializations of one
 * host from running at once; a dead holder's lock is taken over.
 */
import { open, readFile, rm, type FileHandle } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { diskErrorKind } from "../../disk-errors.ts";
import { FolderNotWritableError, makeFolderFor, writeFileAtomic } from "../../fs-atomic.ts";
import { isAlive, processStartTime } from "../process-identity.ts";
import type { CheckFigures } from "../ports.ts";
import type { PrewarmStrategy } from "../../config/index.ts";
import type { PrewarmPlan, PrewarmPhase, PrewarmSettings, PrewarmTarget, Progress, Verdict } from "./plan.ts";
import { formatDuration, progressFigures } from "./plan.ts";
import { formatProgress } from "../../progress.ts";

export const STATE_FILE = "prewarm.json";
export const LOCK_FILE = "prewarm.lock";

export interface PrewarmState {
  version: 1;
  volumeId: string;
  device: string;
  mountPoint: string;
  strategy: PrewarmStrategy;
  action: PrewarmPlan["action"];
  mode?: "files" | "device";
  reason: string;
  phase: PrewarmPhase;
  verdict: Verdict;
  /** The sample before the initialization (or the only one, strategy check). */
  before?: CheckFigures;
  /** The sample after it. */
  after?: CheckFigures;
  progress?: Progress;
  /** Everything below `offset` (device bytes) has been read: where a resumed run starts. */
  cursor?: { mode: "files" | "device"; offset: number };
  /** The labels published with the state (volume-id, pool, kind), for the background run. */
  labels: Record<string, string>;
  /** The process running the initialization (`pid`, and its start time from /proc). */
  pid?: number;
  pidStart?: string;
  startedAt: string;
  updatedAt: string;
  finishedAt?: string;
  error?: string;
}

export function statePath(stateDir: string): string {
  return join(stateDir, STATE_FILE);
}

/** The state, or undefined when there is none (or it does not parse: it is rewritten). */
export async function readPrewarmState(stateDir: string): Promise<PrewarmState | undefined> {
  try {
    const parsed = JSON.parse(await readFile(statePath(stateDir), "utf8")) as PrewarmState;
    return parsed && parsed.version === 1 && typeof parsed.volumeId === "string" ? parsed : undefined;
  } catch {
    return undefined;
  }
}

/** Writes the state atomically. */
export async function writePrewarmState(stateDir: string, state: PrewarmState): Promise<void> {
  await makeFolderFor(stateDir, STATE_FILE);
  await writeFileAtomic(statePath(stateDir), JSON.stringify(state, null, 2) + "\n");
}

/**
 * Whether the state is a run's that stopped half-way: it says a process works on the volume (reads
 * it, follows EBS, or samples it first, with its pid) and none runs it. `ebs-cache-agent prewarm`
 * resumes it.
 */
export function isInterrupted(state: PrewarmState, running: boolean): boolean {
  if (running) return false;
  if (state.phase === "initializing" || state.phase === "following") return true;
  // A boot's own sample has no pid (the boot waits for it); a long run's first sample has one.
  return state.phase === "checking" && state.pid !== undefined;
}

/** The lock of one running initialization. */
export interface PrewarmLock {
  release(): Promise<void>;
}

/** Takes the lock, or returns the pid holding it. A dead holder's lock is taken over. */
export async function acquirePrewarmLock(stateDir: string): Promise<PrewarmLock | { heldBy: number }> {
  await makeFolderFor(stateDir, LOCK_FILE);
  const path = join(stateDir, LOCK_FILE);
  const me = { pid: process.pid, start: await processStartTime(process.pid) };
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await writeLock(path, JSON.stringify(me) + "\n");
      return { release: () => rm(path, { force: true }) };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    let holder: { pid?: number; start?: string } = {};
    try {
      holder = JSON.parse(await readFile(path, "utf8")) as typeof holder;
    } catch {
      holder = {};
    }
    if (holder.pid === process.pid && holder.start === me.start) return { release: () => rm(path, { force: true }) };
    if (holder.pid && (await isAlive(holder.pid, holder.start))) return { heldBy: holder.pid };
    await rm(path, { force: true }); // A dead holder (the agent was killed): take over.
  }
  return { heldBy: -1 };
}

/**
 * Creates the lock file (EEXIST when it is there). A write that fails once the file exists (a full
 * disk) removes it again: an empty lock would read as a dead holder's. A full or read-only state
 * folder is told as such (FolderNotWritableError: what to free), not as the agent's bug.
 */
async function writeLock(path: string, text: string): Promise<void> {
  let handle: FileHandle | undefined;
  try {
    handle = await open(path, "wx", 0o644);
    await handle.writeFile(text);
    await handle.close();
  } catch (error) {
    if (handle) {
      await handle.close().catch(() => undefined);
      await rm(path, { force: true }).catch(() => undefined);
    }
    const kind = diskErrorKind(error);
    throw kind ? new FolderNotWritableError(dirname(path), basename(path), kind, error) : error;
  }
}

/** The state in words, for `ebs-cache-agent status`. */
export function renderPrewarmStatus(
  state: PrewarmState | undefined,
  running: boolean,
  now: Date = new Date(),
): string[] {
  if (!state) return ["pre-warm: no state yet (the boot has not reached the pre-warm on this host)"];
  const lines = [
    `volume:   ${state.volumeId} (${state.device}, mounted at ${state.mountPoint})`,
    `strategy: ${state.strategy}${state.mode ? ` (${state.mode})` : ""}: ${state.reason}`,
  ];
  let phase: string = state.phase;
  if (isInterrupted(state, running))
    phase = `${state.phase}, interrupted (no process runs it: \`ebs-cache-agent prewarm\` resumes)`;
  else if (running && state.pid) phase = `${state.phase} (pid ${state.pid})`;
  lines.push(`phase:    ${phase}`, `verdict:  ${state.verdict}`);
  const figures = (label: string, f: CheckFigures | undefined) => {
    if (!f) return;
    const lat = f.latencyMs;
    const ms = (v: number | undefined) => (v === undefined ? "?" : v.toFixed(2));
    lines.push(
      `${label} ${Math.round(f.iops)} IOPS, ${f.mibps.toFixed(1)} MiB/s, latency p50 ${ms(lat.p50)} ms p90 ` +
        `${ms(lat.p90)} ms p99 ${ms(lat.p99)} ms (${f.reads} reads in ${f.seconds.toFixed(1)} s)`,
    );
  };
  figures("before:  ", state.before);
  figures("after:   ", state.after);
  const progress = state.progress;
  if (progress) {
    lines.push(`progress: ${formatProgress(progressFigures(progress))}`);
  }
  const age = Math.max(0, Math.round((now.getTime() - Date.parse(state.updatedAt)) / 1000));
  lines.push(`updated:  ${state.updatedAt} (${formatDuration(age)} ago)`);
  if (state.finishedAt) lines.push(`finished: ${state.finishedAt}`);
  if (state.error) lines.push(`error:    ${state.error}`);
  return lines;
}

/** The state file of a run that has only decided. */
export function startingState(
  target: PrewarmTarget,
  settings: PrewarmSettings,
  decision: PrewarmPlan,
  now: Date,
): PrewarmState {
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

/** The previous state when it is this volume's (another volume's says nothing about this one). */
export function stateOfVolume(previous: PrewarmState | undefined, volumeId: string): PrewarmState | undefined {
  return previous?.volumeId === volumeId ? previous : undefined;
}

/** Where a read of `mode` resumes: the previous run's resume point, only when it read the same way. */
export function resumePoint(
  previous: PrewarmState | undefined,
  mode: "files" | "device" | undefined,
): PrewarmState["cursor"] {
  return previous?.cursor && previous.cursor.mode === mode ? previous.cursor : undefined;
}
