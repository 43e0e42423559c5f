/**
 * The host's own docker data-root, as it was before the agent first pointed daemon.json at a
 * cache volume: kept in `<paths.stateDir>/original-data-root.json`, written once, never
 * overwritten. The release and a degraded boot put exactly it back.
 *
 * Why a record and not "remove the key": an AMI may run docker on a disk of its own (osparc's
 * mounts the largest disk at /mnt/docker and points docker there). Removing `data-root` at the
 * release would leave the next degraded boot on /var/lib/docker, on the small root disk, and the
 * node out of space (osparc-simcore #7733). The daemon.json backup does not serve: it is the file
 * as the *current* run found it, which after a first release no longer names the host's disk.
 *
 * What counts as the original: daemon.json's `data-root` (absent: docker's default, recorded as
 * `null`). A `--data-root` flag on dockerd's command line is never changed (the boot refuses to
 * switch then: dockerd would refuse both), so it needs no record. A daemon.json that already
 * points below the cache mount root when no record exists (the record was lost, the state folder
 * wiped) is not an original: nothing is recorded, and the restore falls back to docker's default,
 * as before, with a warning.
 */
import { mkdir, readFile } from "node:fs/promises";
import { isAbsolute, join } from "node:path";
import { AgentError, describeError, ExitCode } from "../errors.ts";
import { writeFileAtomic } from "../fs-atomic.ts";
import type { Logger } from "../log.ts";

export const ORIGINAL_DATA_ROOT_FILE = "original-data-root.json";

export interface OriginalDataRoot {
  /** daemon.json's `data-root` before the agent's first switch; null: no key (docker's default). */
  dataRoot: string | null;
  recordedAt: string;
}

/** Whether `path` is the mount root or below it: a cache volume's data-root. */
export function isBelowMountRoot(mountRoot: string, path: string | undefined): boolean {
  if (path === undefined) return false;
  const root = mountRoot.replace(/\/+$/, "");
  return path === root || path.startsWith(`${root}/`);
}

/** Parses the record; a record that is not one (edited by hand, cut short) is a problem, never a guess. */
export function parseOriginalDataRoot(text: string): OriginalDataRoot {
  const parsed: unknown = JSON.parse(text);
  if (typeof parsed !== "object" || parsed === null) throw new Error("not a JSON object");
  const { dataRoot, recordedAt } = parsed as Record<string, unknown>;
  // eslint-disable-next-line no-control-regex
  if (dataRoot !== null && (typeof dataRoot !== "string" || !isAbsolute(dataRoot) || /[\u0000-\u001f]/.test(dataRoot)))
    throw new Error(`dataRoot ${JSON.stringify(dataRoot)} is neither null nor an absolute path`);
  if (typeof recordedAt !== "string") throw new Error("no recordedAt");
  return { dataRoot, recordedAt };
}

/** The record, none when there is no file; `problem` when there is one that cannot be used. */
export async function readOriginalDataRoot(stateDir: string): Promise<{ record?: OriginalDataRoot; problem?: string }> {
  const path = join(stateDir, ORIGINAL_DATA_ROOT_FILE);
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return {};
    return { problem: `could not read ${path}: ${describeError(error)}` };
  }
  try {
    return { record: parseOriginalDataRoot(text) };
  } catch (error) {
    return { problem: `${path} is not a record of the original data-root (${describeError(error)})` };
  }
}

/**
 * Records `current` (daemon.json's data-root now) as the host's original, once: an existing
 * record stays as it is, and a data-root below the mount root is not an original. Returns the
 * record in force afterwards (none: unknown).
 */
export async function recordOriginalDataRoot(
  stateDir: string,
  current: string | undefined,
  options: { mountRoot: string; fallback?: string | undefined; log?: Logger; now?: Date },
): Promise<OriginalDataRoot | undefined> {
  const existing = await readOriginalDataRoot(stateDir);
  if (existing.record) return existing.record;
  if (existing.problem) {
    // Never overwritten: an operator may have written it on purpose. The restore warns too.
    options.log?.warning("docker.original-data-root", `${existing.problem}: left as it is`, {
      remediation:
        `fix or remove ${join(stateDir, ORIGINAL_DATA_ROOT_FILE)} ({"dataRoot": "/path" or null, ` +
        `"recordedAt": "…"})`,
    });
    return undefined;
  }
  if (isBelowMountRoot(options.mountRoot, current)) {
    options.log?.warning(
      "docker.original-data-root",
      `daemon.json already points at a cache volume (${current}) and no original data-root is recorded: the release ` +
        `will fall back to docker's default`,
      {
        remediation:
          `write ${join(stateDir, ORIGINAL_DATA_ROOT_FILE)} with the host's own data-root ({"dataRoot": ` +
          `"/mnt/docker", "recordedAt": "…"})`,
      },
    );
    return undefined;
  }
  const record: OriginalDataRoot = {
    dataRoot: current ?? null,
    recordedAt: (options.now ?? new Date()).toISOString(),
  };
  try {
    await mkdir(stateDir, { recursive: true, mode: 0o700 });
    await writeFileAtomic(join(stateDir, ORIGINAL_DATA_ROOT_FILE), JSON.stringify(record, null, 2) + "\n", {
      mode: 0o644,
    });
  } catch (error) {
    // A state folder that takes no write (full, read-only) loses nothing here when what the
    // release puts back without a record (dataRootToRestore's fallback) is what daemon.json says now.
    if (current === options.fallback) {
      options.log?.info(
        "docker.original-data-root",
        `the host's own data-root is not recorded (${describeError(error)}): none is needed, the release puts ` +
          `back ${current ?? "docker's default"}, which it is now`,
      );
      return record;
    }
    throw new AgentError(
      `the host's own docker data-root (${current ?? "docker's default"}) cannot be recorded in ${stateDir} ` +
        `(${describeError(error)}): docker is not switched to the cache volume, since nothing could put it back`,
      `free space in ${stateDir} or make it writable (df -h ${stateDir}), then boot again`,
      ExitCode.failure,
      { cause: error },
    );
  }
  options.log?.info("docker.original-data-root", "recorded the host's own docker data-root before the first switch", {
    dataRoot: record.dataRoot ?? "(docker's default)",
  });
  return record;
}

/**
 * Where docker goes back to when the cache volume leaves it (release, degraded boot): the
 * recorded original; without a record, `fallback` (the lab's host root; on a host, none: docker's
 * default). undefined means "no data-root key".
 */
export async function dataRootToRestore(
  stateDir: string,
  fallback: string | undefined,
  log?: Logger,
): Promise<string | undefined> {
  const { record, problem } = await readOriginalDataRoot(stateDir);
  if (problem)
    log?.warning("docker.original-data-root", `${problem}: docker goes back to ${fallback ?? "its default"}`);
  if (!record) return fallback;
  return record.dataRoot ?? undefined;
}
