/**
 * The keeper's entry (`ebs-cache-agent pool fill`, src/cli/pool.ts): observe the pool, plan
 * (pure, ./plan.ts), apply. The first round tags and trims what it planned and makes one
 * volume; every further volume only after a recount (observe and plan again), so a keeper that
 * raced another sees the other's volumes before it makes more, and the caps are checked against
 * the pool as it is, not as it was at the start.
 */
import { ConfigError, ExitCode } from "../../errors.ts";
import { applyKeeper, type KeeperStepReport } from "./apply.ts";
import { observeKeeper } from "./observe.ts";
import { planKeeper, type KeeperPlan, type KeeperSettings } from "./plan.ts";
import type { KeeperFacts } from "../outcomes.ts";
import type { KeeperDeps } from "./deps.ts";
import { parseInstanceTypePools, stockedPools } from "../../config/instance-type-pools.ts";
import type { AgentConfig } from "../../config/index.ts";
import { volumeCreation } from "../volume-creation.ts";
import { progressReporter, type ProgressFigures } from "../../progress.ts";
import type { VolumeInfo } from "../ports.ts";

export interface KeeperReport {
  /** The first round's plan (what `--dry-run` prints). */
  plan: KeeperPlan;
  /** The last plan: the pool as the keeper left it (after its last recount). */
  final: KeeperPlan;
  results: KeeperStepReport[];
  rounds: number;
  /** Steps that failed, and volumes whose initialization could not be read (each a tag not made). */
  failed: number;
  /** Volumes whose DescribeVolumeStatus failed this run, with why: left untagged, nothing else changed. */
  unread: Array<{ volumeId: string; zone: string; error: string }>;
}

/** The keeper's settings from the configuration; refuses a keeper with no zone to stock. */
export function keeperSettingsFrom(config: {
  pool: string;
  imageSet: string | null;
  volumeType: string;
  claim: { quarantineHours: number };
  ttlHours?: number;
  volumes: AgentConfig["volumes"];
  keeper: Omit<KeeperSettings, "pool" | "imageSet" | "volumeType" | "quarantineHours" | "ttlHours" | "creation">;
}): KeeperSettings {
  if (config.keeper.zones.length === 0) {
    throw new ConfigError(
      ["keeper.zones: empty, so the keeper has no zone to stock"],
      "list the availability zones the autoscaler launches machines in under keeper.zones",
    );
  }
  return {
    pool: config.pool,
    imageSet: config.imageSet,
    volumeType: config.volumeType,
    quarantineHours: config.claim.quarantineHours,
    creation: volumeCreation(config),
    ...(config.ttlHours !== undefined ? { ttlHours: config.ttlHours } : {}),
    ...config.keeper,
  };
}

/**
 * The settings of every pool the keeper stocks: `pool` and each pool of config
 * `instanceTypePools`, at its size (stockedPools). The caps (`keeper.maxVolumes`, `maxGiB`) hold
 * for each pool on its own.
 */
export function keeperSettingsForPools(
  config: Parameters<typeof keeperSettingsFrom>[0] & { instanceTypePools: readonly string[] },
): KeeperSettings[] {
  const base = keeperSettingsFrom(config);
  return stockedPools(config.pool, parseInstanceTypePools(config.instanceTypePools)).map(({ pool, sizeGiB }) => ({
    ...base,
    pool,
    ...(sizeGiB !== undefined ? { sizeGiB } : {}),
  }));
}

/**
 * Runs the keeper over each pool in turn, and records what all the runs did as one report (the
 * metrics textfile is replaced as a whole). A pool's failure does not stop the next pool.
 */
export async function runKeepers(
  deps: KeeperDeps,
  pools: readonly KeeperSettings[],
  options: { dryRun: boolean },
): Promise<KeeperReport[]> {
  const { recorder, ...each } = deps;
  const reports: KeeperReport[] = [];
  for (const [index, settings] of pools.entries()) {
    // Several pools: the progress line says which one of them is being stocked.
    const step =
      pools.length > 1 ? { index: index + 1, count: pools.length, name: `pool ${settings.pool}` } : undefined;
    reports.push(await runKeeper(each, settings, { ...options, ...(step ? { step } : {}) }));
  }
  if (!options.dryRun && recorder) {
    const finishedAt = new Date();
    const facts = reports.map((report) => keeperFacts(report, finishedAt));
    await recorder.keeperFinished({
      actions: facts.flatMap((f) => f.actions),
      // One entry per pool: each report is one pool's, so no pool's figures overwrite another's.
      poolVolumes: Object.fromEntries(facts.flatMap((f) => Object.entries(f.poolVolumes))),
      heldByStopped: Object.fromEntries(facts.flatMap((f) => Object.entries(f.heldByStopped ?? {}))),
      failed: facts.reduce((sum, f) => sum + (f.failed ?? 0), 0),
      finishedAt,
    });
  }
  return reports;
}

/** Runs the keeper once over the pool. */
export async function runKeeper(
  deps: KeeperDeps,
  settings: KeeperSettings,
  options: { dryRun: boolean; step?: ProgressFigures["step"] },
): Promise<KeeperReport> {
  const { cloud, log, recorder } = deps;
  const observed = await observeKeeper(cloud, settings);
  const plan = planKeeper(settings, observed);
  const zoneOf = new Map(observed.volumes.map((v) => [v.volumeId, v.availabilityZone]));
  const unread = Object.entries(observed.unread ?? {}).map(([volumeId, error]) => ({
    volumeId,
    zone: zoneOf.get(volumeId) ?? "",
    error,
  }));
  for (const { volumeId, zone, error } of unread) {
    log.warning(
      "keeper.status-unread",
      `could not read the volume's initialization: ${error}; not tagged initialized this run`,
      { volume: volumeId, zone },
    );
  }
  // A pool configured below its snapshot's size: said once per run, and the run fails.
  const misconfigured = plan.problem ? 1 : 0;
  if (plan.problem) log.error("keeper.pool-size", plan.problem, { pool: settings.pool });
  const report: KeeperReport = {
    plan,
    final: plan,
    results: [],
    rounds: 1,
    failed: unread.length + misconfigured,
    unread,
  };
  if (options.dryRun) return report;

  const known = new Set(observed.volumes.map((v) => v.volumeId));
  const waiting = volumesProgress(deps, plan.steps.filter((s) => s.step === "create").length, options.step);
  const ctx = {
    cloud,
    log,
    known,
    onWait: waiting.onWait,
    ...(settings.ttlHours !== undefined ? { ttlHours: settings.ttlHours } : {}),
  };
  const firstCreate = plan.steps.find((s) => s.step === "create");
  report.results.push(
    ...(await applyKeeper(
      [...plan.steps.filter((s) => s.step !== "create"), ...(firstCreate ? [firstCreate] : [])],
      ctx,
    )),
  );

  // Bounded: each round makes at most one volume, and the cap bounds the volumes.
  for (let round = 2; round <= settings.maxVolumes + 1; round++) {
    const last = report.results.at(-1);
    // A failed create, or a token that answered a volume seen before (nothing new): stop here, the next run goes on.
    if (!firstCreate || !last || last.step !== "create" || last.done !== "created") break;
    if (last.volumeId) known.add(last.volumeId);
    const recount = await observeKeeper(cloud, settings, { withInitialization: false });
    for (const v of recount.volumes) known.add(v.volumeId);
    report.final = planKeeper(settings, recount);
    report.rounds = round;
    const next = report.final.steps.find((s) => s.step === "create");
    waiting.made(report.results, report.final.steps.filter((s) => s.step === "create").length);
    if (!next) break;
    report.results.push(...(await applyKeeper([next], ctx)));
  }
  waiting.end(report.results);
  report.failed = report.results.filter((r) => r.done === "failed").length + unread.length + misconfigured;
  await recorder?.keeperFinished(keeperFacts(report, new Date()));
  return report;
}

/**
 * The keeper's wait for the volumes it creates, told as one progress line (src/progress.ts): n of
 * m available, and the state of the one awaited (one at a time: the slowest so far); in the log
 * at its pace, on a terminal, to systemd. Nothing is told when the run creates nothing.
 */
function volumesProgress(deps: KeeperDeps, wanted: number, step: ProgressFigures["step"]) {
  const reporter = progressReporter({
    log: deps.log,
    event: "keeper.progress",
    now: deps.now ?? (() => performance.now()),
    ...deps.progress,
  });
  let total = wanted;
  let available = 0;
  const figures = (note?: string): ProgressFigures => ({
    ...(step ? { step } : {}),
    count: { done: available, total, noun: "volumes available" },
    ...(note ? { note } : {}),
  });
  const madeOf = (results: readonly KeeperStepReport[]) =>
    results.filter((r) => r.step === "create" && (r.done === "created" || r.done === "existing")).length;
  return {
    onWait(volume: VolumeInfo | undefined, zone: string) {
      const state = volume
        ? `${volume.volumeId} (${zone}): ${volume.state}`
        : `a new volume (${zone}): not visible yet`;
      reporter.update(figures(`waiting for ${state}`));
    },
    /** After a round: what was made, and how many creates the recount still wants. */
    made(results: readonly KeeperStepReport[], stillWanted: number) {
      available = madeOf(results);
      total = available + stillWanted;
    },
    end(results: readonly KeeperStepReport[]) {
      if (wanted === 0) return;
      available = madeOf(results);
      reporter.update(figures(), true);
    },
  };
}

/**
 * 0: done (or nothing to do); 1: some step failed, or a volume's initialization could not be read (the log says which).
 */
export function keeperExitCode(report: KeeperReport): number {
  return report.failed > 0 ? ExitCode.failure : ExitCode.ok;
}

/**
 * What a run reports to the metrics textfile (src/metrics/keeper.ts): each step done or failed
 * (skipped trims are no action), a status that could not be read as a failed tag-initialized,
 * and the pool's stock after the run.
 */
export function keeperFacts(report: KeeperReport, finishedAt: Date): KeeperFacts {
  const actions = [
    ...report.results
      .filter((r) => r.done !== "skipped")
      .map((r) => ({
        action: r.step,
        pool: report.plan.pool,
        outcome: r.done === "failed" ? ("failed" as const) : ("done" as const),
      })),
    ...report.unread.map(() => ({
      action: "tag-initialized" as const,
      pool: report.plan.pool,
      outcome: "failed" as const,
    })),
  ];
  const stock = report.final.zones.reduce((sum, z) => sum + z.available + z.creating, 0);
  const held = report.final.zones.reduce((sum, z) => sum + z.heldByStopped, 0);
  const days = report.final.zones.flatMap((z) => (z.oldestStoppedDays === null ? [] : [z.oldestStoppedDays]));
  return {
    actions,
    poolVolumes: { [report.plan.pool]: stock },
    heldByStopped: {
      [report.plan.pool]: { volumes: held, oldestSeconds: days.length > 0 ? Math.max(...days) * 86_400 : null },
    },
    failed: report.failed,
    finishedAt,
  };
}
