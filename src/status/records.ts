/**
 * What the last boot and the last release did, kept in `<paths.stateDir>` (`last-boot.json`,
 * `last-release.json`) for `status`: the use cases return their result and are gone, so
 * without these a health check would have to read the journal. Written atomically (temp,
 * fsync, rename, fsync of the folder); a record that does not parse is reported, not trusted.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { makeFolderFor, writeFileAtomic } from "../fs-atomic.ts";
import type { BootPhase } from "../agent/ports.ts";
import type { BootReport, ReleaseReport } from "../agent/outcomes.ts";

export const BOOT_RECORD_FILE = "last-boot.json";
export const RELEASE_RECORD_FILE = "last-release.json";

export interface BootRecord {
  version: 1;
  instanceId: string;
  /** The machine boot it belongs to (/proc/sys/kernel/random/boot_id): the two phases of one boot share it. */
  bootId?: string;
  /** `first` (`boot --no-docker`), `second` (`boot --no-claim`), or `single` (a boot that does both). */
  phase?: BootPhase;
  finishedAt: string;
  /** The result with its source; after a two-phase boot, both phases' (see withFirstPhase). */
  result: BootReport;
  /** The readiness labels the boot published (name → value), as read back. */
  labels?: Record<string, string>;
}

export interface ReleaseRecord {
  version: 1;
  instanceId: string;
  finishedAt: string;
  result: ReleaseReport;
}

export type RecordRead<T> = { record?: T; problem?: string };

async function writeJsonAtomic(dir: string, file: string, value: unknown): Promise<void> {
  await makeFolderFor(dir, file);
  await writeFileAtomic(join(dir, file), JSON.stringify(value, null, 2) + "\n");
}

async function readJson(dir: string, file: string): Promise<{ value?: unknown; problem?: string }> {
  let text: string;
  try {
    text = await readFile(join(dir, file), "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return {};
    return { problem: `${file}: ${(error as Error).message}` };
  }
  try {
    return { value: JSON.parse(text) };
  } catch {
    return { problem: `${file} does not parse as JSON` };
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Checks the shape status relies on; the rest of the record is taken as the agent wrote it. */
function checkRecord(value: unknown, file: string): string | undefined {
  if (!isObject(value) || value.version !== 1) return `${file} is not a version 1 record`;
  if (
    typeof value.instanceId !== "string" ||
    typeof value.finishedAt !== "string" ||
    Number.isNaN(Date.parse(value.finishedAt))
  ) {
    return `${file} lacks its instance id or finish time`;
  }
  const result = value.result;
  if (!isObject(result) || typeof result.outcome !== "string" || !Array.isArray(result.timeline))
    return `${file} lacks its result`;
  return undefined;
}

/**
 * The second phase's record (`boot --no-claim`, after docker.service) on top of the first's of the
 * same machine boot (`boot --no-docker`): the second phase only reuses the volume the first
 * attached, so alone it would say `attached` for every boot and time only its half. The joined
 * record keeps the first phase's source (unless the second degraded) and, when both degraded,
 * the first's reason (the cause; the second only finds no volume); its timeline is both phases'.
 * A record of another machine boot or instance is not joined.
 */
export function withFirstPhase(first: BootRecord | undefined, second: BootRecord): BootRecord {
  if (second.phase !== "second" || first?.phase !== "first") return second;
  if (first.instanceId !== second.instanceId || !first.bootId || first.bootId !== second.bootId) return second;
  const before = first.result;
  const after = second.result;
  if (before.outcome !== "prepared" && before.outcome !== "degraded") return second;
  if (before.outcome === "prepared" && after.volumeId && after.volumeId !== before.volumeId) return second;
  const bothDegraded = before.outcome === "degraded" && after.outcome === "degraded";
  const keepsSource = before.outcome === "prepared" && after.outcome !== "degraded" && after.outcome !== "disabled";
  return {
    ...second,
    result: {
      ...after,
      ...(keepsSource ? { source: before.source } : {}),
      ...(bothDegraded && before.reason ? { reason: before.reason } : {}),
      timeline: [...before.timeline, ...after.timeline],
    },
  };
}

export function writeBootRecord(stateDir: string, record: BootRecord): Promise<void> {
  return writeJsonAtomic(stateDir, BOOT_RECORD_FILE, record);
}

export function writeReleaseRecord(stateDir: string, record: ReleaseRecord): Promise<void> {
  return writeJsonAtomic(stateDir, RELEASE_RECORD_FILE, record);
}

async function readRecord<T>(stateDir: string, file: string): Promise<RecordRead<T>> {
  const { value, problem } = await readJson(stateDir, file);
  if (problem) return { problem };
  if (value === undefined) return {};
  const bad = checkRecord(value, file);
  return bad ? { problem: bad } : { record: value as T };
}

export function readBootRecord(stateDir: string): Promise<RecordRead<BootRecord>> {
  return readRecord<BootRecord>(stateDir, BOOT_RECORD_FILE);
}

export function readReleaseRecord(stateDir: string): Promise<RecordRead<ReleaseRecord>> {
  return readRecord<ReleaseRecord>(stateDir, RELEASE_RECORD_FILE);
}
