/**
 * The OutcomeRecorder port (src/agent/ports.ts): what a finished use case leaves for operators,
 * the status records in `<paths.stateDir>` and one metrics textfile per use case in
 * `metrics.textfileDir` (null: none). Nothing here may change a use case's outcome: every write
 * that fails is a warning, never an exception.
 *
 * The host facts (systeminformation, 50-80 ms to load, then df and lsblk) are read only for a
 * boot that came up (`ready`, `warming`): by then docker runs on the volume and the labels are
 * published, so they cost the node nothing; the first phase, before docker.service, never
 * reads them.
 */
import { AgentError, describeError } from "../errors.ts";
import type { CacheFilesystem, HostContext } from "../host/facts.ts";
import type { Logger } from "../log.ts";
import { stateFolderRefused } from "../state-folder.ts";
import { bootFailedMetrics, bootMetrics } from "../metrics/boot.ts";
import type { MetricFamily } from "../metrics/family.ts";
import { gcFailedMetrics, gcMetrics } from "../metrics/gc.ts";
import { keeperFailedMetrics, keeperMetrics } from "../metrics/keeper.ts";
import { refreshMetrics } from "../metrics/refresh.ts";
import { cacheDeviceMetrics, cacheFilesystemMetrics, hostMetrics } from "../metrics/host.ts";
import { pruneFailedMetrics, pruneMetrics } from "../metrics/prune.ts";
import { prewarmMetrics } from "../metrics/prewarm.ts";
import { releaseFailedMetrics, releaseMetrics } from "../metrics/release.ts";
import { writeTextfile, type MetricsUseCase } from "../metrics/textfile.ts";
import { readBootRecord, withFirstPhase, writeBootRecord, writeReleaseRecord, type BootRecord } from "./records.ts";
import type { OutcomeRecorder } from "../agent/outcomes.ts";

/** The host facts the boot's metrics carry (src/host/facts.ts). */
export interface HostFacts {
  cacheFilesystem(mountPoint: string): Promise<CacheFilesystem | undefined>;
  host(): Promise<HostContext>;
}

export interface RecorderOptions {
  stateDir: string;
  /** node_exporter's textfile folder; null writes no metrics. */
  textfileDir: string | null;
  log: Logger;
  /** The host's facts: hostFacts() on a host, in-memory ones in tests. */
  facts: HostFacts;
}

/**
 * The real facts (src/host/facts.ts), imported on first use so that a run which reads none does
 * not load them; instance-store disks under `sysfsRoot` (config `paths.sysfsRoot`), as `status`
 * reads them.
 */
export function hostFacts(sysfsRoot: string): HostFacts {
  return {
    cacheFilesystem: async (mountPoint) => (await import("../host/facts.ts")).readCacheFilesystem(mountPoint),
    host: async () => (await import("../host/facts.ts")).readHostContext(sysfsRoot),
  };
}

/** Builds the recorder. */
export function createOutcomeRecorder(options: RecorderOptions): OutcomeRecorder {
  const { stateDir } = options;
  const textfile = (useCase: MetricsUseCase, families: () => Promise<MetricFamily[]> | MetricFamily[], carry = false) =>
    writeMetrics(options, useCase, families, carry);

  return {
    bootFinished: (boot) => recordBoot(options, boot),
    async releaseFinished({ instanceId, report, finishedAt = new Date() }) {
      await attempt(
        options,
        "the release's status record",
        () =>
          writeReleaseRecord(stateDir, {
            version: 1,
            instanceId,
            finishedAt: finishedAt.toISOString(),
            result: report,
          }),
        "release",
      );
      await textfile("release", () => releaseMetrics({ report, finishedAt }));
    },
    async gcFinished({ report, dryRun, finishedAt = new Date() }) {
      // gc's counters count over its runs: the previous file's values are carried.
      await textfile("gc", () => gcMetrics({ report, dryRun, finishedAt }), true);
    },
    async keeperFinished(facts) {
      // Like gc's, the keeper's action counters count over its runs.
      await textfile("keeper", () => keeperMetrics(facts), true);
    },
    async prewarmStateWritten(state) {
      await textfile("prewarm", () => prewarmMetrics(state));
    },
    async refreshStateWritten(state) {
      await textfile("refresh", () => refreshMetrics(state));
    },
    async pruneFinished(prune) {
      // Like gc's, the prune's counters count over its runs.
      await textfile("prune", () => pruneMetrics(prune), true);
      if (prune.fill) await textfile("fill", () => cacheFilesystemMetrics(prune.fill!));
    },
    runFailed: (failure) => recordFailure(options, failure),
  };
}

/**
 * Runs a write; a failure is logged, never thrown. A metrics file's is `metrics.write-failed`; a
 * status record's (`recordOf`: the use case whose record it is, in the state folder) is that use
 * case's `<use case>.record-failed`, said once per run with the folder's other failures
 * (src/state-folder.ts): an operator filtering the journal on the release finds its record there.
 */
async function attempt(
  options: RecorderOptions,
  what: string,
  write: () => Promise<unknown>,
  recordOf?: "boot" | "release",
): Promise<void> {
  const { log, stateDir } = options;
  try {
    await write();
  } catch (error) {
    const line = `could not write ${what}: ${describeError(error)}; the outcome is unchanged`;
    const fields = { remediation: error instanceof AgentError ? error.remediation : undefined };
    if (recordOf) stateFolderRefused(log, stateDir, `${recordOf}.record-failed`, line, fields);
    else log.warning("metrics.write-failed", line, fields);
  }
}

/** A use case's metrics textfile (none without a textfile folder); `carry` keeps the previous file's counters. */
function writeMetrics(
  options: RecorderOptions,
  useCase: MetricsUseCase,
  families: () => Promise<MetricFamily[]> | MetricFamily[],
  carry = false,
): Promise<void> {
  const { textfileDir } = options;
  return textfileDir === null
    ? Promise.resolve()
    : attempt(options, `the ${useCase} metrics`, async () =>
        writeTextfile(textfileDir, useCase, await families(), { carry }),
      );
}

/** The boot's status record (the second phase's carries the first's), its metrics and the fill. */
async function recordBoot(
  options: RecorderOptions,
  {
    instanceId,
    bootId,
    phase,
    report,
    finishedAt,
    publishedLabels: labels,
  }: Parameters<OutcomeRecorder["bootFinished"]>[0],
): Promise<void> {
  const { stateDir } = options;
  let record: BootRecord = {
    version: 1,
    instanceId,
    ...(bootId ? { bootId } : {}),
    phase,
    finishedAt: finishedAt.toISOString(),
    result: report,
    ...(labels ? { labels } : {}),
  };
  if (phase === "second")
    record = withFirstPhase((await readBootRecord(stateDir).catch(() => ({ record: undefined }))).record, record);
  await attempt(options, "the boot's status record", () => writeBootRecord(stateDir, record), "boot");
  const up = report.outcome === "ready" || report.outcome === "warming";
  const figures = up && report.mountPoint ? await factsFor(options, report.mountPoint) : { boot: [], fill: [] };
  await writeMetrics(options, "boot", () => [...bootMetrics({ report: record.result, finishedAt }), ...figures.boot]);
  // A boot that did not come up leaves no fill of an earlier one behind.
  await writeMetrics(options, "fill", () => figures.fill);
}

/**
 * The boot's host figures (the device, the host) and the fill (its own file, which the prune
 * replaces too), each left out (with a note) when it cannot be read.
 */
async function factsFor(
  { facts, log }: RecorderOptions,
  mountPoint: string,
): Promise<{ boot: MetricFamily[]; fill: MetricFamily[] }> {
  const [fs, host] = await Promise.allSettled([facts.cacheFilesystem(mountPoint), facts.host()]);
  const figures = { boot: [] as MetricFamily[], fill: [] as MetricFamily[] };
  if (fs.status === "fulfilled" && fs.value) {
    figures.boot.push(...cacheDeviceMetrics(fs.value));
    figures.fill.push(...cacheFilesystemMetrics(fs.value));
  } else
    log.info(
      "metrics.no-figures",
      `no figures of the cache filesystem at ${mountPoint}: ` +
        `${fs.status === "rejected" ? describeError(fs.reason) : "nothing mounted there"}`,
    );
  if (host.status === "fulfilled") {
    figures.boot.push(...hostMetrics(host.value));
    const disks = host.value.instanceStore ?? [];
    if (disks.length > 0)
      log.notice(
        "host.instance-store",
        `${disks.length} NVMe instance-store disk(s) on this host, left alone: ` +
          `${disks.map((d) => `${d.device} ${(d.sizeBytes / 1e9).toFixed(0)} GB`).join(", ")}`,
      );
  } else log.info("metrics.no-figures", `no figures of the host: ${describeError(host.reason)}`);
  return figures;
}

/** A run that failed: only the metrics (a status record of a run that learned nothing would hide the last real one). */
async function recordFailure(
  options: RecorderOptions,
  failure: Parameters<OutcomeRecorder["runFailed"]>[0],
): Promise<void> {
  const { reason, finishedAt } = failure;
  switch (failure.useCase) {
    case "boot":
      await writeMetrics(options, "boot", () => bootFailedMetrics({ reason, finishedAt }));
      // As a boot that did not come up: no fill of an earlier one left behind.
      await writeMetrics(options, "fill", () => []);
      return;
    case "release":
      return writeMetrics(options, "release", () => releaseFailedMetrics({ reason, finishedAt }));
    case "gc":
      return writeMetrics(options, "gc", () => gcFailedMetrics({ reason, dryRun: failure.dryRun, finishedAt }), true);
    case "keeper":
      return writeMetrics(options, "keeper", () => keeperFailedMetrics({ reason, finishedAt }), true);
    case "prune":
      return writeMetrics(
        options,
        "prune",
        () => pruneFailedMetrics({ reason, trigger: failure.trigger, dryRun: failure.dryRun, finishedAt }),
        true,
      );
  }
}
