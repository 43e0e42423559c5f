/**
 * The refresh's state file (`<paths.stateDir>/refresh.json`): what the last refresh of this host
 * wanted, pulled, failed, and whether it runs now. Rewritten (atomically) as each pull starts
 * and ends, so `status` and the metrics show the progress of a refresh that runs in the
 * background; a file that does not parse is reported, not trusted.
 */
import { readFile } from "node:fs/promises";
import { uptime } from "node:os";
import { join } from "node:path";
import { makeFolderFor, writeFileAtomic } from "../../fs-atomic.ts";
import { isAlive } from "../process-identity.ts";
import type { RefreshSource } from "./plan.ts";

export const REFRESH_STATE_FILE = "refresh.json";

export type RefreshPhase = "running" | "done" | "stopped" | "skipped";
export type ImagePhase = "present" | "pending" | "pulling" | "pulled" | "failed";

export interface RefreshImageState {
  image: string;
  sources: RefreshSource[];
  phase: ImagePhase;
  bytes?: number;
  seconds?: number;
  error?: string;
}

export interface RefreshState {
  version: 1;
  /** The process that runs (ran) it: `running` with a dead pid is a refresh that was killed. */
  pid: number;
  /**
   * That process's start time (/proc/<pid>/stat): a live pid that started at another time is a
   * reused one. Absent in a file an older agent wrote: its live pid is taken for the refresh.
   */
  pidStart?: string;
  volumeId: string | null;
  generation: string | null;
  phase: RefreshPhase;
  /** Why nothing was done (phase `skipped`). */
  reason?: string;
  images: RefreshImageState[];
  /** Whether the volume was tagged as the current generation: null when not asked for. */
  markedCurrent: boolean | null;
  warnings: string[];
  startedAt: string;
  updatedAt: string;
  finishedAt?: string;
}

/** Counts of the images by phase. */
export function countImages(state: Pick<RefreshState, "images">): Record<ImagePhase, number> {
  const counts: Record<ImagePhase, number> = { present: 0, pending: 0, pulling: 0, pulled: 0, failed: 0 };
  for (const image of state.images) counts[image.phase] += 1;
  return counts;
}

export async function writeRefreshState(stateDir: string, state: RefreshState): Promise<void> {
  await makeFolderFor(stateDir, REFRESH_STATE_FILE);
  await writeFileAtomic(join(stateDir, REFRESH_STATE_FILE), JSON.stringify(state, null, 2) + "\n");
}

/** The state, undefined when no refresh ran here; throws when the file does not parse as one. */
export async function readRefreshState(stateDir: string): Promise<RefreshState | undefined> {
  let text: string;
  try {
    text = await readFile(join(stateDir, REFRESH_STATE_FILE), "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
  const value = JSON.parse(text) as Partial<RefreshState>;
  if (
    value?.version !== 1 ||
    !Array.isArray(value.images) ||
    typeof value.phase !== "string" ||
    typeof value.pid !== "number"
  ) {
    throw new Error(`${REFRESH_STATE_FILE} is not a version 1 refresh state`);
  }
  return value as RefreshState;
}

/**
 * Whether the refresh still runs: `running`, started since the machine booted (a pid from before
 * a reboot may name another process now), and its process exists and started when the state says
 * (a refresh killed by SIGKILL or a power loss stays `running`, and its pid may be reused). A
 * `running` state whose process is gone was killed.
 */
export async function isRunning(
  state: Pick<RefreshState, "pid" | "pidStart" | "phase" | "startedAt">,
): Promise<boolean> {
  if (state.phase !== "running") return false;
  if (Date.parse(state.startedAt) < Date.now() - uptime() * 1000) return false;
  return isAlive(state.pid, state.pidStart);
}
