/**
 * Fleet simulation: a day of a swarm's instances compressed into minutes, keeper off vs on.
 *
 * One lab with cold snapshots (every volume made from the snapshot reads slowly on the first
 * touch of each chunk, src/lab/volumes/cold.ts) and EC2 delays drawn from AWS's ranges, scaled down by
 * the time compression; one golden snapshot. A seeded day of arrivals (bench/fleet-schedule.ts:
 * morning burst, lunch dip, afternoon burst, night) is played twice on the same pool:
 *   off  the pool is filled once before the day (`--pool-size` volumes, initialized), then no
 *        keeper: a boot that finds no available volume creates one from the snapshot (cold);
 *   on   the same start, and the keeper (`pool fill`'s run entry) every simulated 5 minutes with
 *        the targets `--keeper-min` / `--keeper-max` and the caps.
 * Each instance is a fresh lab host running the agent as a process (the esbuild bundle, as on a
 * host): the first boot phase (`boot --no-docker`) to `prepared`, then, at the end of its drawn
 * life, `release`. No dockerd:
 * the volume's path to the host is what differs between the runs, docker's start does not.
 *
 *   npx tsx bench/fleet.ts [--minutes 3.5] [--seed 11] [--boots 40] [--pool-size 4]
 *                          [--keeper-min 4] [--keeper-max 6] [--cold-delay-ms 10] [--json] [--out DIR]
 *
 * Needs root, the lab's Debian packages and python3-pyfuse3 (scripts/setup.sh). Runs on demand.
 * See bench/README.md.
 */
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { cpus, loadavg, release, tmpdir, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { DeleteVolumeCommand } from "@aws-sdk/client-ec2";
import { keeperSettingsFrom, runKeeper } from "../src/agent/keeper/run.ts";
import { createCloudVolumes } from "../src/aws/ec2.ts";
import { describeError } from "../src/errors.ts";
import { run } from "../src/exec.ts";
import { labConfig, writeLabConfig, type ConfigOverrides } from "../src/lab/machines/agent.ts";
import { assertColdPrerequisites } from "../src/lab/volumes/cold.ts";
import { buildGoldenSnapshot } from "../src/lab/volumes/golden.ts";
import { startLab, type Lab, type LabHost } from "../src/lab/lab.ts";
import { createLogger, type Logger } from "../src/log.ts";
import { VolumeTag } from "../src/tags.ts";
import { assertLabPrerequisites } from "../test/fixtures/lab/lab-prereq.ts";
import { buildAgent } from "../scripts/build.mjs";
import {
  DAY_MINUTES,
  arrivalsPerHour,
  concurrency,
  fleetSchedule,
  gibHours,
  type FleetArrival,
} from "./fleet-schedule.ts";
import { EC2_RANGES, percentile } from "./sampling.ts";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
/** Each run has its own pool (and golden snapshot), so nothing of one run is seen by the other. */
const poolOf = (run: "off" | "on") => `fleet-${run}`;
const IMAGE_SET = "fleet-set-1";
const MiB = 1024 * 1024;
const KEEPER_EVERY_MIN = 5;
/** Two small images: the boot reads metadata, not the images (no dockerd in this bench). */
const IMAGES = [
  { tag: "fleet/app:1", payloadBytes: 8 * MiB },
  { tag: "fleet/tool:1", payloadBytes: 4 * MiB },
];
const USAGE = `usage: npx tsx bench/fleet.ts [options]
  --minutes N        wall minutes one simulated day takes (default 3.5; two days are run)
  --seed N           seed of the day's arrivals, lives and EC2 latencies (default 11)
  --boots N          instances booted over the day (default 40)
  --pool-size N      available volumes made before the day, in both runs (default 4)
  --keeper-min N     keeper.minAvailable of the keeper-on run (default 4)
  --keeper-max N     keeper.maxAvailable of the keeper-on run (default 6)
  --max-volumes N    keeper.maxVolumes (default 40)
  --size-gib N       size of the golden snapshot, hence of every volume (default 2)
  --cold-delay-ms N  wait on the first read of each 512 KiB chunk of a volume made from the snapshot (default 10)
  --runs off,on      which runs (default both, off first)
  --json             print the whole report as JSON instead of the table
  --out DIR          where the JSON report goes (default bench/results)
  --verbose          stream the agent's and the lab's log to stderr
`;

// ---------------------------------------------------------------------------------------------
// Options

interface Options {
  minutes: number;
  seed: number;
  boots: number;
  poolSize: number;
  keeperMin: number;
  keeperMax: number;
  maxVolumes: number;
  sizeGiB: number;
  coldDelayMs: number;
  runs: Array<"off" | "on">;
  json: boolean;
  out: string;
  verbose: boolean;
}

function parseOptions(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      minutes: { type: "string", default: "3.5" },
      seed: { type: "string", default: "11" },
      boots: { type: "string", default: "40" },
      "pool-size": { type: "string", default: "4" },
      "keeper-min": { type: "string", default: "4" },
      "keeper-max": { type: "string", default: "6" },
      "max-volumes": { type: "string", default: "40" },
      "size-gib": { type: "string", default: "2" },
      "cold-delay-ms": { type: "string", default: "10" },
      runs: { type: "string", default: "off,on" },
      json: { type: "boolean", default: false },
      out: { type: "string", default: join(REPO, "bench", "results") },
      verbose: { type: "boolean", default: false },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    process.exit(0);
  }
  const problems: string[] = [];
  const int = (name: string, value: string, min: number, max: number) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max)
      problems.push(`--${name} wants an integer in ${min}..${max}, not ${value}`);
    return n;
  };
  const minutes = Number(values.minutes);
  if (!(minutes >= 0.25 && minutes <= 120)) problems.push(`--minutes wants 0.25..120, not ${values.minutes}`);
  const runs = values.runs.split(",").map((r) => r.trim());
  for (const r of runs) if (r !== "off" && r !== "on") problems.push(`--runs: unknown run ${r} (off, on)`);
  const options: Options = {
    minutes,
    seed: int("seed", values.seed, 0, 2 ** 31),
    boots: int("boots", values.boots, 1, 1000),
    poolSize: int("pool-size", values["pool-size"], 0, 100),
    keeperMin: int("keeper-min", values["keeper-min"], 0, 100),
    keeperMax: int("keeper-max", values["keeper-max"], 0, 100),
    maxVolumes: int("max-volumes", values["max-volumes"], 1, 1000),
    sizeGiB: int("size-gib", values["size-gib"], 1, 64),
    coldDelayMs: int("cold-delay-ms", values["cold-delay-ms"], 0, 1000),
    runs: runs as Array<"off" | "on">,
    json: values.json,
    out: resolve(values.out),
    verbose: values.verbose,
  };
  if (options.keeperMax < options.keeperMin) problems.push("--keeper-max must be at least --keeper-min");
  if (problems.length > 0) {
    process.stderr.write(`${problems.join("\n")}\n${USAGE}`);
    process.exit(2);
  }
  return options;
}

// ---------------------------------------------------------------------------------------------
// Time: the simulated day on the wall clock

/** The compression of one run: simulated minutes ↔ wall ms. */
interface Clock {
  /** Wall ms per simulated minute. */
  msPerMin: number;
  /** Simulated time / wall time. */
  factor: number;
}

function clockFor(minutes: number): Clock {
  const msPerMin = (minutes * 60_000) / DAY_MINUTES;
  return { msPerMin, factor: 60_000 / msPerMin };
}

/**
 * EC2's delays as the emulator applies them during the day: the middle of each range, divided
 * by the compression, so a keeper's CreateVolume takes as long against the schedule as it would
 * in a real day. Each boot's time to `prepared` is then given at full length too (see
 * `fullLengthMs`).
 */
function scaledDelays(clock: Clock) {
  const mid = ([lo, hi]: readonly [number, number]) => (lo + hi) / 2;
  return {
    attachMs: Math.round(mid(EC2_RANGES.attachMs) / clock.factor),
    deviceMs: Math.round(mid(EC2_RANGES.deviceMs) / clock.factor),
    createMs: Math.round(mid(EC2_RANGES.createMs) / clock.factor),
  };
}

const now = () => performance.now();

// ---------------------------------------------------------------------------------------------
// The agent as a process on each instance

/** What `boot --json` printed of its result (undefined: no JSON, the exit code and stderr tell). */
function bootResult(
  stdout: string,
): { outcome?: string; source?: string; volumeId?: string; reason?: string } | undefined {
  try {
    return (
      (
        JSON.parse(stdout) as {
          result?: { outcome?: string; source?: string; volumeId?: string; reason?: string } | null;
        }
      ).result ?? undefined
    );
  } catch {
    return undefined;
  }
}

const lastLines = (text: string) => text.split("\n").filter(Boolean).slice(-3).join(" | ");

/** The cold layer's count of chunks fetched for a volume; its status file may be mid-write, so read again. */
async function coldFetches(lab: Lab, volumeId: string): Promise<number | undefined> {
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      return (await lab.cold?.volumeStatus(volumeId))?.fetches;
    } catch {
      await sleep(20);
    }
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// One run

interface BootRecord {
  index: number;
  atMin: number;
  lifeMin: number;
  outcome: string;
  /** pool: a volume of the pool was claimed; snapshot: the boot created one from the snapshot. */
  source?: string;
  volumeId?: string;
  /** The claimed volume carried `ebs-cache:initialized` (EBS had loaded every block). */
  initialized?: boolean;
  /** Boot start → `prepared`, as run (EC2 delays scaled). */
  wallMs?: number;
  /** wallMs with this boot's EC2 waits at their full drawn length (see fullLengthMs). */
  preparedMs?: number;
  /** Cold chunks the boot fetched from the "snapshot" (the cold layer's count). */
  coldFetches?: number;
  /** How late the boot started against the schedule (ms of wall; the bench's own lag). */
  lateMs: number;
  released?: boolean;
  error?: string;
}

interface VolumeLife {
  volumeId: string;
  sizeGiB: number;
  bornMs: number;
  goneMs?: number;
  fromSnapshot: boolean;
  /**
   * Made by a boot from the snapshot: lazily loaded (no VolumeInitializationRate, the agent's
   * default), where the keeper's volumes carry the keeper's rate.
   */
  byBoot: boolean;
}

interface RunReport {
  run: "off" | "on";
  boots: number;
  ok: number;
  hits: number;
  hitRate: number;
  initializedHits: number;
  preparedP50Ms?: number;
  preparedP95Ms?: number;
  wallP50Ms?: number;
  wallP95Ms?: number;
  poolP50Ms?: number;
  snapshotP50Ms?: number;
  /** Boots that ended degraded (no volume: the node runs without the cache). */
  degraded: number;
  /** Volumes created during the day (by boots and by the keeper). */
  volumesCreated: number;
  createdByBoots: number;
  createdByKeeper: number;
  deletedByKeeper: number;
  gibHours: number;
  peakVolumes: number;
  peakInstances: number;
  /** Releases that exited non-zero (the record says why). */
  releaseFailed: number;
  keeperRuns: number;
  keeperFailed: number;
  maxLateMs: number;
  wallSeconds: number;
  records: BootRecord[];
}

/**
 * Time to `prepared` with EC2's waits at full length: the wall time as run plus, for each wait
 * on the boot's path, the drawn latency minus the scaled one the emulator applied. The agent
 * only polls during those waits, so their length adds up; the poll's granularity (100 ms in the
 * lab) is counted once, as run.
 */
function fullLengthMs(
  wallMs: number,
  source: string | undefined,
  arrival: FleetArrival,
  scaled: ReturnType<typeof scaledDelays>,
): number {
  const extra =
    arrival.ec2.attachMs -
    scaled.attachMs +
    (arrival.ec2.deviceMs - scaled.deviceMs) +
    (source === "snapshot" ? arrival.ec2.createMs - scaled.createMs : 0);
  return wallMs + extra;
}

const baseOverrides = (pool: string): ConfigOverrides => ({ pool, imageSet: IMAGE_SET, docker: { control: "none" } });

function keeperOverrides(pool: string, zone: string, min: number, max: number, options: Options): ConfigOverrides {
  return {
    ...baseOverrides(pool),
    keeper: {
      zones: [zone],
      minAvailable: min,
      maxAvailable: max,
      maxVolumes: options.maxVolumes,
      maxGiB: options.maxVolumes * options.sizeGiB,
      initializationRateMiBps: 100,
    },
  };
}

/**
 * The keeper on the manager host, through its run entry (what `pool fill` runs) with the
 * settings of that host's config; its config and EC2 client are made once, as a timer's
 * process would hold them for one run (the bench's CPU goes to the boots, not to re-validating).
 */
function keeperOn(lab: Lab, manager: LabHost, overrides: ConfigOverrides, log: Logger) {
  const settings = keeperSettingsFrom(labConfig(lab, manager, overrides));
  const cloud = createCloudVolumes({ client: lab.ec2Client(), pollMs: 100, createTimeoutMs: 60_000 });
  return () => runKeeper({ cloud, log }, settings, { dryRun: false });
}

function poolVolumes(lab: Lab, pool: string) {
  return Object.values(lab.ec2.snapshotState().volumes).filter(
    (v) => v.tags[VolumeTag.managed] === "true" && v.tags[VolumeTag.pool] === pool,
  );
}

/**
 * Fills the pool before the day: `count` volumes made by one keeper fill, then waits until EBS has them initialized and
 * tagged.
 */
async function prepareStartingPool(
  lab: Lab,
  manager: LabHost,
  pool: string,
  zone: string,
  count: number,
  options: Options,
  log: Logger,
): Promise<void> {
  if (count === 0) return;
  const keeper = keeperOn(lab, manager, keeperOverrides(pool, zone, count, count, options), log);
  await keeper();
  const deadline = Date.now() + 120_000;
  for (;;) {
    // The keeper tags `initialized` once DescribeVolumeStatus says 100 %.
    await keeper();
    const ready = poolVolumes(lab, pool).filter(
      (v) => v.state === "available" && v.tags[VolumeTag.initialized] !== undefined,
    ).length;
    if (ready >= count) return;
    if (Date.now() > deadline)
      throw new Error(`the starting pool was not initialized within 120 s (${ready}/${count})`);
    await sleep(500);
  }
}

/** Deletes every volume of the bench's pool (all released by then) and waits until they are gone. */
async function emptyPool(lab: Lab, pool: string): Promise<void> {
  const ec2 = lab.ec2Client();
  for (const v of poolVolumes(lab, pool)) {
    if (v.state === "available" && !v.attachment) await ec2.send(new DeleteVolumeCommand({ VolumeId: v.volumeId }));
  }
  const deadline = Date.now() + 60_000;
  while (poolVolumes(lab, pool).length > 0) {
    if (Date.now() > deadline)
      throw new Error(
        `pool volumes left after the run: ${poolVolumes(lab, pool)
          .map((v) => `${v.volumeId} ${v.state}`)
          .join(", ")}`,
      );
    await sleep(200);
  }
}

async function runDay(
  lab: Lab,
  agent: string,
  manager: LabHost,
  zone: string,
  which: "off" | "on",
  schedule: readonly FleetArrival[],
  options: Options,
  log: Logger,
  say: (line: string) => void,
  stopping: () => boolean,
): Promise<RunReport> {
  const clock = clockFor(options.minutes);
  const scaled = scaledDelays(clock);
  const pool = poolOf(which);
  await prepareStartingPool(lab, manager, pool, zone, options.poolSize, options, log);
  const startingIds = new Set(poolVolumes(lab, pool).map((v) => v.volumeId));

  const dayStartWall = Date.now();
  const dayStart = now();
  const dayEnd = dayStart + DAY_MINUTES * clock.msPerMin;
  const at = (min: number) => dayStart + min * clock.msPerMin;
  const sleepUntil = async (t: number) => {
    const wait = t - now();
    if (wait > 0) await sleep(wait);
  };

  // The emulator's records: each pool volume's life, sampled through the day.
  const lives = new Map<string, VolumeLife>();
  let peakVolumes = 0;
  let peakInstances = 0;
  let running = 0;
  const sample = () => {
    const seen = new Set<string>();
    let live = 0;
    for (const v of poolVolumes(lab, pool)) {
      seen.add(v.volumeId);
      if (!lives.has(v.volumeId))
        lives.set(v.volumeId, {
          volumeId: v.volumeId,
          sizeGiB: v.sizeGiB,
          bornMs: Date.parse(v.createTime),
          fromSnapshot: v.snapshotId !== null,
          byBoot: v.initializationRate === null,
        });
      const life = lives.get(v.volumeId)!;
      if (v.state === "deleting") life.goneMs ??= Date.now();
      else live++;
    }
    for (const life of lives.values()) if (!seen.has(life.volumeId)) life.goneMs ??= Date.now();
    peakVolumes = Math.max(peakVolumes, live);
  };
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      sample();
      await sleep(Math.min(100, clock.msPerMin));
    }
  })();

  let keeperRuns = 0;
  let keeperFailed = 0;
  let deletedByKeeper = 0;
  const keeper =
    which === "on"
      ? (async () => {
          const keeperRun = keeperOn(
            lab,
            manager,
            keeperOverrides(pool, zone, options.keeperMin, options.keeperMax, options),
            log,
          );
          for (let tick = 0; at(tick * KEEPER_EVERY_MIN) < dayEnd && !stopping(); tick++) {
            await sleepUntil(at(tick * KEEPER_EVERY_MIN));
            try {
              const outcome = await keeperRun();
              keeperRuns++;
              keeperFailed += outcome.failed;
              deletedByKeeper += outcome.results.filter(
                (r) => r.step === "trim" && r.done !== "failed" && r.done !== "skipped",
              ).length;
            } catch (error) {
              keeperRuns++;
              keeperFailed++;
              log.warning("lab.fleet-keeper", "keeper run failed", { error: describeError(error) });
            }
          }
        })()
      : Promise.resolve();

  const records: BootRecord[] = [];
  const instance = async (arrival: FleetArrival): Promise<void> => {
    await sleepUntil(at(arrival.atMin));
    if (stopping()) return;
    const record: BootRecord = {
      index: arrival.index,
      atMin: arrival.atMin,
      lifeMin: arrival.lifeMin,
      outcome: "none",
      lateMs: Math.round(now() - at(arrival.atMin)),
    };
    records.push(record);
    running++;
    peakInstances = Math.max(peakInstances, running);
    let host: LabHost | undefined;
    let configPath: string | undefined;
    try {
      host = await lab.addHost({ availabilityZone: zone, tags: { Name: `fleet-${which}-${arrival.index}` } });
      configPath = await writeLabConfig(lab, host, baseOverrides(pool));
      const t0 = now();
      const booted = await run(process.execPath, [agent, "boot", "--no-docker", "--json", "--config", configPath], {
        check: false,
        cwd: REPO,
      });
      record.wallMs = Math.round(now() - t0);
      const result = bootResult(booted.stdout);
      record.outcome = result?.outcome ?? "none";
      if (result?.source) record.source = result.source;
      if (record.outcome === "prepared")
        record.preparedMs = Math.round(fullLengthMs(record.wallMs, record.source, arrival, scaled));
      else record.error = `exit ${booted.exitCode}: ${result?.reason ?? lastLines(booted.stderr)}`;
      if (result?.volumeId) {
        record.volumeId = result.volumeId;
        record.initialized =
          lab.ec2.snapshotState().volumes[result.volumeId]?.tags[VolumeTag.initialized] !== undefined;
        const fetches = await coldFetches(lab, result.volumeId);
        if (fetches !== undefined) record.coldFetches = fetches;
      }
    } catch (error) {
      record.error = describeError(error);
    }
    await sleepUntil(at(Math.min(DAY_MINUTES, arrival.atMin + arrival.lifeMin)));
    try {
      if (host && configPath) {
        // The instance's shutdown: ebs-cache-agent-release.service's ExecStop, then EC2 ends it.
        const released = await run(process.execPath, [agent, "release", "--config", configPath], {
          check: false,
          cwd: REPO,
        });
        record.released = released.exitCode === 0;
        if (!record.released)
          record.error =
            `${record.error ?? ""} release exit ${released.exitCode}: ${lastLines(released.stderr)}`.trim();
        lab.ec2.terminateInstance(host.instance.instanceId);
      }
    } catch (error) {
      record.error = `${record.error ?? ""} release: ${describeError(error)}`.trim();
    } finally {
      running--;
    }
  };

  const progress = setInterval(
    () => {
      const simHour = Math.min(24, (now() - dayStart) / clock.msPerMin / 60);
      say(
        `  [${which}] ${simHour.toFixed(1).padStart(4)} h: ${running} running, ${records.length} booted, ` +
          `${peakVolumes} peak volumes`,
      );
    },
    Math.max(5000, 120 * clock.msPerMin),
  );
  try {
    await Promise.all([...schedule.map(instance), keeper]);
  } finally {
    clearInterval(progress);
    sampling = false;
    await sampler;
  }
  sample();
  const dayEndWall = dayStartWall + DAY_MINUTES * clock.msPerMin;
  const wallSeconds = Math.round((now() - dayStart) / 100) / 10;

  const ok = records.filter((r) => r.outcome === "prepared");
  const hits = ok.filter((r) => r.source === "pool");
  const created = [...lives.values()].filter((l) => !startingIds.has(l.volumeId));
  // A boot that lost its new volume to another boot's claim made it all the same: count volumes, not boots.
  const createdByBoots = created.filter((l) => l.byBoot).length;
  const lifeList = [...lives.values()];
  const report: RunReport = {
    run: which,
    boots: records.length,
    ok: ok.length,
    hits: hits.length,
    hitRate: ok.length ? hits.length / ok.length : 0,
    initializedHits: hits.filter((r) => r.initialized).length,
    preparedP50Ms: percentile(
      ok.map((r) => r.preparedMs!),
      50,
    ),
    preparedP95Ms: percentile(
      ok.map((r) => r.preparedMs!),
      95,
    ),
    wallP50Ms: percentile(
      ok.map((r) => r.wallMs!),
      50,
    ),
    wallP95Ms: percentile(
      ok.map((r) => r.wallMs!),
      95,
    ),
    poolP50Ms: percentile(
      hits.map((r) => r.preparedMs!),
      50,
    ),
    snapshotP50Ms: percentile(
      ok.filter((r) => r.source === "snapshot").map((r) => r.preparedMs!),
      50,
    ),
    degraded: records.filter((r) => r.outcome === "degraded").length,
    volumesCreated: created.length,
    createdByBoots,
    createdByKeeper: Math.max(0, created.length - createdByBoots),
    deletedByKeeper,
    // Lives clipped to the day; simulated hours per wall ms = factor / 3.6e6.
    gibHours:
      Math.round(gibHours(lifeList, { fromMs: dayStartWall, toMs: dayEndWall }, clock.factor / 3_600_000) * 10) / 10,
    peakVolumes,
    peakInstances,
    releaseFailed: records.filter((r) => r.released === false || (r.error ?? "").includes("release")).length,
    keeperRuns,
    keeperFailed,
    maxLateMs: Math.max(0, ...records.map((r) => r.lateMs)),
    wallSeconds,
    records,
  };
  await emptyPool(lab, pool);
  return report;
}

// ---------------------------------------------------------------------------------------------
// Report

const sec = (ms: number | undefined) => (ms === undefined ? "-" : (ms / 1000).toFixed(1));
const pct = (x: number) => `${Math.round(x * 100)} %`;

function ratio(on: number | undefined, off: number | undefined): string {
  if (on === undefined || off === undefined || off === 0) return "-";
  return `${(on / off).toFixed(2)}×`;
}

function table(reports: RunReport[]): string {
  const off = reports.find((r) => r.run === "off");
  const on = reports.find((r) => r.run === "on");
  const rows: Array<[string, (r: RunReport) => string, (r: RunReport) => number | undefined]> = [
    ["boots: prepared / degraded", (r) => `${r.ok} / ${r.degraded} of ${r.boots}`, (r) => r.ok],
    [
      "hit rate (pool volume claimed)",
      (r) => `${pct(r.hitRate)} (${r.hits}; ${r.initializedHits} initialized)`,
      (r) => r.hitRate,
    ],
    ["time to prepared p50", (r) => `${sec(r.preparedP50Ms)} s`, (r) => r.preparedP50Ms],
    ["time to prepared p95", (r) => `${sec(r.preparedP95Ms)} s`, (r) => r.preparedP95Ms],
    ["  p50 pool / snapshot path", (r) => `${sec(r.poolP50Ms)} / ${sec(r.snapshotP50Ms)} s`, () => undefined],
    ["  as run (scaled EC2) p50 / p95", (r) => `${sec(r.wallP50Ms)} / ${sec(r.wallP95Ms)} s`, () => undefined],
    [
      "volumes created (by boots + keeper)",
      (r) => `${r.volumesCreated} (${r.createdByBoots} + ${r.createdByKeeper})`,
      (r) => r.volumesCreated,
    ],
    ["volumes deleted by the keeper", (r) => String(r.deletedByKeeper), () => undefined],
    ["GiB-hours", (r) => r.gibHours.toFixed(1), (r) => r.gibHours],
    ["peak volumes", (r) => String(r.peakVolumes), (r) => r.peakVolumes],
    ["peak instances", (r) => String(r.peakInstances), () => undefined],
    [
      "keeper runs (steps failed)",
      (r) => (r.run === "on" ? `${r.keeperRuns} (${r.keeperFailed})` : "-"),
      () => undefined,
    ],
    ["releases failed", (r) => String(r.releaseFailed), () => undefined],
  ];
  const lines = ["| figure | keeper off | keeper on | on / off |", "| --- | ---: | ---: | ---: |"];
  for (const [name, show, value] of rows) {
    lines.push(
      `| ${name} | ${off ? show(off) : "-"} | ${on ? show(on) : "-"} | ` +
        `${off && on ? ratio(value(on), value(off)) : "-"} |`,
    );
  }
  return lines.join("\n");
}

// ---------------------------------------------------------------------------------------------
// Main

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2));
  await assertLabPrerequisites();
  await assertColdPrerequisites();
  const say = (line: string) => (options.json ? process.stderr : process.stdout).write(line + "\n");
  const tail: string[] = [];
  const log = createLogger((line) => {
    tail.push(line);
    if (tail.length > 400) tail.splice(0, tail.length - 400);
    if (options.verbose) process.stderr.write(line + "\n");
  }, "info");

  const clock = clockFor(options.minutes);
  const scaled = scaledDelays(clock);
  const schedule = fleetSchedule({ seed: options.seed, boots: options.boots });
  const perHour = arrivalsPerHour(schedule);
  const peakConcurrency = Math.max(...concurrency(schedule));
  const started = new Date();
  say(
    `fleet bench: ${options.boots} boots over a day in ${options.minutes} min of wall ` +
      `(×${Math.round(clock.factor)}), seed ${options.seed}; ` +
      `arrivals per hour ${perHour.join(" ")}; at most ${peakConcurrency} instances at once by the schedule`,
  );
  say(
    `  EC2 delays as run: attach ${scaled.attachMs} ms, device ${scaled.deviceMs} ms, create ${scaled.createMs} ` +
      `ms (AWS ranges ÷ ${Math.round(clock.factor)}); cold chunks ${options.coldDelayMs} ms on first read`,
  );

  let stopped = false;
  const lab = await startLab({
    name: "fleet",
    delays: { attachMs: scaled.attachMs, createMs: scaled.createMs, detachMs: scaled.attachMs, snapshotMs: 100 },
    deviceDelayMs: scaled.deviceMs,
    coldSnapshots: { firstReadDelayMs: options.coldDelayMs },
    // EBS's provisioned-rate initialization runs on the day's clock too.
    initializationSpeedup: clock.factor,
    log,
  });
  const temp = await mkdtemp(join(tmpdir(), "ebs-bench-fleet-"));
  // Interrupted: the lab's close reaps its mounts, loop devices, FUSE layer and root (its janitor
  // does the same if this process is killed outright).
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopped) return;
    stopped = true;
    process.stderr.write(`\n${signal}: cleaning up the lab\n`);
    void lab
      .close()
      .then(() => rm(temp, { recursive: true, force: true }))
      .finally(() => process.exit(130));
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);

  const reports: RunReport[] = [];
  try {
    // The agent as on a host: the bundle scripts/build.mjs makes (dist/ is left alone).
    const agent = join(await buildAgent(temp, REPO).then(() => temp), "ebs-cache-agent.mjs");
    const zone = `${lab.region}a`;
    const t = now();
    // One golden snapshot per run's pool: the same images, built the same way.
    for (const which of options.runs) {
      const golden = await buildGoldenSnapshot(lab, {
        pool: poolOf(which),
        imageSet: IMAGE_SET,
        images: IMAGES,
        sizeGiB: options.sizeGiB,
        availabilityZone: zone,
        log,
      });
      say(`  golden snapshot of pool ${poolOf(which)}: ${golden.snapshotId} (${golden.sizeGiB} GiB)`);
    }
    say(`  built in ${sec(now() - t)} s`);
    const manager = await lab.addHost({ availabilityZone: zone, tags: { Name: "fleet-manager" } });
    for (const which of options.runs) {
      if (stopped) break;
      say(
        `\n== keeper ${which}: ${options.poolSize} initialized volumes to ` +
          "start" +
          (which === "on"
            ? `, keeper every ${KEEPER_EVERY_MIN} simulated min ` +
              `(min ${options.keeperMin}, max ${options.keeperMax}, cap ${options.maxVolumes})`
            : ""),
      );
      const report = await runDay(lab, agent, manager, zone, which, schedule, options, log, say, () => stopped);
      reports.push(report);
      const failed = report.records.filter((r) => r.error);
      say(
        `  done in ${report.wallSeconds} s wall: ${report.ok}/${report.boots} prepared, hit rate ` +
          `${pct(report.hitRate)}, ${report.volumesCreated} volumes created, ${report.gibHours.toFixed(1)} GiB-h, ` +
          `bench lag at most ${report.maxLateMs} ms`,
      );
      for (const r of failed.slice(0, 5)) say(`  instance ${r.index} (${r.source ?? "no volume"}) FAILED: ${r.error}`);
    }
  } catch (error) {
    process.stderr.write(`${tail.slice(-20).join("\n")}\n`);
    throw error;
  } finally {
    if (!stopped) {
      stopped = true;
      await lab.close();
      await rm(temp, { recursive: true, force: true });
    }
  }

  const result = {
    bench: "fleet",
    startedAt: started.toISOString(),
    finishedAt: new Date().toISOString(),
    command: `npx tsx bench/fleet.ts ${process.argv.slice(2).join(" ")}`.trim(),
    options,
    clock: { ...clock, scaledDelays: scaled, ec2Ranges: EC2_RANGES },
    schedule: { arrivalsPerHour: perHour, peakConcurrency, arrivals: schedule },
    machine: {
      kernel: release(),
      cpus: cpus().length,
      memoryGiB: Math.round(totalmem() / 2 ** 30),
      node: process.version,
      loadavg: loadavg(),
    },
    reports,
  };
  await mkdir(options.out, { recursive: true });
  const file = join(options.out, `fleet-${started.toISOString().replace(/\..*$/, "").replace(/:/g, "-")}.json`);
  await writeFile(file, JSON.stringify(result, null, 2) + "\n");
  if (options.json) process.stdout.write(JSON.stringify(result, null, 2) + "\n");
  else say(`\n${table(reports)}\n\nwrote ${file}`);
  if (reports.some((r) => r.records.some((record) => record.error))) process.exitCode = 1;
}

try {
  await main();
} catch (error) {
  process.stderr.write(`bench failed: ${describeError(error)}\n`);
  process.exitCode = 1;
}
