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
  const { stateDir, textfileDir, log } = options;
  const { facts } = options;

  /**
   * Runs a write; a failure is logged, never thrown. One into the state folder (`inStateDir`) is
   * said once per run with the folder's other failures (src/state-folder.ts).
   */
  const attempt = async (what: string, write: () => Promise<unknown>, inStateDir = false): Promise<void> => {
    try {
      await write();
    } catch (error) {
      const line = `could not write ${what}: ${describeError(error)}; the outcome is unchanged`;
      const fields = { remediation: error instanceof AgentError ? error.remediation : undefined };
      if (inStateDir) stateFolderRefused(log, stateDir, "metrics.write-failed", line, fields);
      else log.warning("metrics.write-failed", line, fields);
    }
  };
  const textfile = (
    useCase: MetricsUseCase,
    families: () => Promise<MetricFamily[]> | MetricFamily[],
    carry = false,
  ) =>
    textfileDir === null
      ? Promise.resolve()
      : attempt(`the ${useCase} metrics`, async () => writeTextfile(textfileDir, useCase, await families(), { carry }));

  /**
   * The boot's host figures (the device, the host) and the fill (its own file, which the prune
   * replaces too), each left out (with a note) when it cannot be read.
   */
  const factsFor = async (mountPoint: string): Promise<{ boot: MetricFamily[]; fill: MetricFamily[] }> => {
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
  };

  return {
    async bootFinished({ instanceId, bootId, phase, report, finishedAt, publishedLabels: labels }) {
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
      await attempt("the boot's status record", () => writeBootRecord(stateDir, record), true);
      const up = report.outcome === "ready" || report.outcome === "warming";
      const figures = up && report.mountPoint ? await factsFor(report.mountPoint) : { boot: [], fill: [] };
      await textfile("boot", () => [...bootMetrics({ report: record.result, finishedAt }), ...figures.boot]);
      // A boot that did not come up leaves no fill of an earlier one behind.
      await textfile("fill", () => figures.fill);
    },
    async releaseFinished({ instanceId, report, finishedAt }) {
      await attempt(
        "the release's status record",
        () =>
          writeReleaseRecord(stateDir, {
            version: 1,
            instanceId,
            finishedAt: finishedAt.toISOString(),
            result: report,
          }),
        true,
      );
      await textfile("release", () => releaseMetrics({ report, finishedAt }));
    },
    async gcFinished({ report, dryRun, finishedAt }) {
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
    async runFailed(failure) {
      // Only the metrics: a status record of a run that learned nothing would hide the last real one.
      const { reason, finishedAt } = failure;
      switch (failure.useCase) {
        case "boot":
          await textfile("boot", () => bootFailedMetrics({ reason, finishedAt }));
          // As a boot that did not come up: no fill of an earlier one left behind.
          await textfile("fill", () => []);
          return;
        case "release":
          return textfile("release", () => releaseFailedMetrics({ reason, finishedAt }));
        case "gc":
          return textfile("gc", () => gcFailedMetrics({ reason, dryRun: failure.dryRun, finishedAt }), true);
        case "keeper":
          return textfile("keeper", () => keeperFailedMetrics({ reason, finishedAt }), true);
        case "prune":
          return textfile(
            "prune",
            () => pruneFailedMetrics({ reason, trigger: failure.trigger, dryRun: failure.dryRun, finishedAt }),
            true,
          );
      }
    },
  };
}
