/**
 * What `status` reads: the records in the state folder, the pre-warm's state, and the world now
 * (the filesystem at the boot's mount point, docker's data-root, the labels shown). The parts
 * owned by other modules come in as functions, so this file knows no adapter; the CLI passes
 * the real ones (prewarm-state's reader, daemon.json's data-root, the engine's labels).
 */
import type { PrewarmState } from "../agent/prewarm/state.ts";
import { describeError } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { RefreshState } from "../agent/refresh/state.ts";
import type { CacheFilesystem } from "../host/facts.ts";
import type { InstanceStoreDisk } from "../host/instance-store.ts";
import type { StatusInputs } from "./document.ts";
import { readBootRecord, readReleaseRecord } from "./records.ts";

export interface StatusSources {
  stateDir: string;
  /** The pre-warm's state and whether a process runs it (prewarmStatus). */
  prewarm(): Promise<{ state?: PrewarmState; running: boolean }>;
  /** The filesystem mounted exactly at a mount point (src/host/facts.ts readCacheFilesystem). */
  filesystem(mountPoint: string): Promise<CacheFilesystem | undefined>;
  /** daemon.json's `data-root` now (undefined: docker's default). */
  dockerDataRoot(): Promise<string | undefined>;
  /**
   * The agent's labels as docker shows them now (src/docker/readiness-labels.ts createLabelReader); undefined:
   * none are published (labels.mode off). Absent: not asked.
   */
  labels?(): Promise<Record<string, string> | undefined>;
  /** The refresh's state and whether its process runs; absent or no state: no refresh ran here. */
  refresh?(): Promise<{ state?: RefreshState; running: boolean }>;
  /** The instance's NVMe instance-store disks (src/host/instance-store.ts); absent: not looked for. */
  instanceStore?(): Promise<InstanceStoreDisk[]>;
  now?: () => Date;
  /** Where a source that is no problem when it fails (docker's labels) says why it gave nothing. */
  log?: Logger;
}

/**
 * Gathers the inputs of buildStatus; a source that fails is a problem in the document, not a crash of the health check.
 */
export async function observeStatus(sources: StatusSources): Promise<StatusInputs> {
  const problems: string[] = [];
  const attempt = async <T>(what: string, read: () => Promise<T>): Promise<T | undefined> => {
    try {
      return await read();
    } catch (error) {
      problems.push(`could not read ${what}: ${(error as Error)?.message ?? String(error)}`);
      return undefined;
    }
  };
  const [boot, release, prewarm, dockerDataRoot, labels] = await Promise.all([
    readBootRecord(sources.stateDir),
    readReleaseRecord(sources.stateDir),
    attempt("the pre-warm's state", sources.prewarm),
    attempt("daemon.json's data-root", sources.dockerDataRoot),
    shownLabels(sources),
  ]);
  const refresh = sources.refresh ? await attempt("the refresh's state", sources.refresh) : undefined;
  const instanceStore = sources.instanceStore
    ? await attempt("the instance-store disks", sources.instanceStore)
    : undefined;
  for (const read of [boot, release]) if (read.problem) problems.push(read.problem);
  const mountPoint = boot.record?.result.mountPoint;
  const filesystem = mountPoint
    ? await attempt(`the filesystem at ${mountPoint}`, () => sources.filesystem(mountPoint))
    : undefined;
  return {
    now: (sources.now ?? (() => new Date()))(),
    ...(boot.record ? { boot: boot.record } : {}),
    ...(release.record ? { release: release.record } : {}),
    ...(prewarm?.state ? { prewarm: { state: prewarm.state, running: prewarm.running } } : {}),
    ...(filesystem ? { filesystem } : {}),
    ...(dockerDataRoot !== undefined ? { dockerDataRoot } : {}),
    ...(labels ? { labels } : {}),
    ...(refresh?.state ? { refresh: { state: refresh.state, running: refresh.running } } : {}),
    ...(instanceStore ? { instanceStore } : {}),
    ...(problems.length > 0 ? { recordProblems: problems } : {}),
  };
}

/**
 * The labels docker shows, or undefined when docker does not answer: a stopped docker is not the
 * cache's problem here, and the data-root check still says where docker would start.
 */
async function shownLabels(sources: StatusSources): Promise<Record<string, string> | undefined> {
  if (!sources.labels) return undefined;
  try {
    return await sources.labels();
  } catch (error) {
    sources.log?.debug("status.labels-unread", `docker's labels not read: ${describeError(error)}`);
    return undefined;
  }
}
