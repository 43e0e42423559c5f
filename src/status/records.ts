/**
 * What the last boot and the last release did, kept in `<paths.stateDir>` (`last-boot.json`,
 * `last-release.json`) for `status`: the use cases return their result and are gone, so
 * without these a health check would have to read the journal. Written atomically (temp,
 * fsync, rename, fsync of the folder); a record that does not parse is reported, not trusted.
 */
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "../fs-atomic.ts";
import type { BootResult } from "../agent/boot/context.ts";
import type { ReleaseResult } from "../agent/release/apply.ts";
import type { BootSource } from "../metrics/boot.ts";

export const BOOT_RECORD_FILE = "last-boot.json";
export const RELEASE_RECORD_FILE = "last-release.json";

export interface BootRecord {
  version: 1;
  instanceId: string;
  finishedAt: string;
  source: BootSource;
  result: BootResult;
  /** The readiness labels the boot published (name → value), as read back. */
  labels?: Record<string, string>;
}

export interface ReleaseRecord {
  version: 1;
  instanceId: string;
  finishedAt: string;
  result: ReleaseResult;
}

export type RecordRead<T> = { record?: T; problem?: string };

async function writeJsonAtomic(dir: string, file: string, value: unknown): Promise<void> {
  await mkdir(dir, { recursive: true });
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
  if (typeof value.instanceId !== "string" || typeof value.finishedAt !== "string" || Number.isNaN(Date.parse(value.finishedAt))) {
    return `${file} lacks its instance id or finish time`;
  }
  const result = value.result;
  if (!isObject(result) || typeof result.outcome !== "string" || !Array.isArray(result.timeline)) return `${file} lacks its result`;
  return undefined;
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
