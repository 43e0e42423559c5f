/**
 * Boot-time benchmark with EC2's latencies, and the agent's own overhead without them.
 *
 *   latency   N fresh lab instances boot one after another, each with EC2 latencies drawn anew
 *             (below), the way a host boots: phase 1 `boot --no-docker` as a CLI process (the
 *             esbuild bundle) → `prepared`; dockerd started on the volume (systemd's
 *             docker.service); phase 2 `boot --no-claim` → `ready`. Per path: a pool volume is
 *             claimed (`pool`); an instance with osparc's labels tag for ids that have no workspace
 *             yet takes a pool volume and makes it their workspace (`new-ids`, stock in the pool);
 *             the pool used up, a volume is created from the pool's snapshot (`snapshot`).
 *   overhead  Zero EC2 delays: the one-shot boot (claim … docker … pre-warm sample … labels) on a
 *             fresh instance and pool volume, then, on the same host and volume, the floor: mount
 *             and dockerd start alone. Reported side by side with the agent's step timeline.
 *
 *   nspawn    launch → joined inside a real systemd (an engine machine with the agent's units and a
 *             cloud-final.service like Debian's running osparc's join), before and after phase 2 became
 *             Type=notify, from the machine's journal (bench/nspawn-join.ts). Not in the default parts.
 *
 *   npx tsx bench/boot-latency.ts [--boots 20] [--overhead-runs 10] [--parts latency,overhead,nspawn]
 *                                 [--nspawn-boots 3]
 *                                 [--paths pool,new-ids,snapshot] [--seed 13] [--drop-caches] [--verbose]
 *
 * Needs root and the lab's Debian packages (docs/lab.md). Runs on demand only. See bench/README.md.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { subscribe } from "node:diagnostics_channel";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { cpus, loadavg, release, tmpdir, totalmem } from "node:os";
import { basename, dirname, join, relative, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { runBoot, type BootOutcome } from "../src/agent/boot/run.ts";
import { wireAdapters } from "../src/cli/wiring.ts";
import { createMetadataService } from "../src/aws/imds.ts";
import { describeError } from "../src/errors.ts";
import { run } from "../src/exec.ts";
import { createLogger, type Logger } from "../src/log.ts";
import { labConfig, writeLabConfig, type ConfigOverrides } from "../src/lab/machines/agent.ts";
import { mountPointsUnder } from "../src/lab/reaper/devices.ts";
import type { Faults } from "../src/lab/ec2/index.ts";
import { buildGoldenSnapshot, createPoolVolumes } from "../src/lab/volumes/golden.ts";
import { startLab, type Lab, type LabHost } from "../src/lab/lab.ts";
import { attachDelayMsOf, type EbsModel } from "../src/lab/volumes/ebs-model.ts";
import { ebsModelOption, labTimingOf, type EbsModelChoice } from "./ebs-model-option.ts";
import { buildAgent } from "../scripts/build.mjs";
import { startOsparcSwarm, type OsparcSwarm } from "../src/lab/machines/osparc-swarm.ts";
import { Osparc } from "../src/lab/machines/autoscaler.ts";
import { labelsTagAsOsparcWrites } from "../src/agent/labels-tag.ts";
import { nspawnJoinPart } from "./nspawn-join.ts";
import { EC2_RANGES, EC2_START_RANGES, percentile, seededRandom } from "./sampling.ts";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const POOL = "bootlat";
const IMAGE_SET = "bootlat-set-1";
const MiB = 1024 * 1024;
/** Two small images: boot time does not depend on the set's size (bench/boot.ts shows it flat). */
const IMAGES = [
  { tag: "bench/app:1", payloadBytes: 8 * MiB },
  { tag: "bench/tool:1", payloadBytes: 4 * MiB },
];

// ---------------------------------------------------------------------------------------------
// EC2's latencies
//
// AWS publishes no latency figures for these transitions; the ranges are the ones commonly seen,
// and the way AWS's own tooling waits for them:
// - AttachVolume → `attached`: a few seconds. AWS's parallelcluster cookbook polls the attachment
//   every 5 s rather than assume it (aws/aws-parallelcluster-cookbook PR #103, "Poll on EBS Volume
//   Attachment"); drawn from 1–4 s.
// - the NVMe device after the attachment: the guest kernel enumerates it some time after EC2
//   reports the attach; dstack had intermittent "volume not found among block devices" right
//   after AttachVolume and now polls for the device every 500 ms for up to 30 s
//   (dstackai/dstack PR #4002, "Fix/ebs device resolve retry"); drawn from 0.5–3 s.
// - CreateVolume from a snapshot → `available`: seconds to tens of seconds; the SDKs' VolumeAvailable
//   waiter polls every 15 s (aws-sdk-ruby Aws::EC2::Waiters::VolumeAvailable: delay 15, 40
//   attempts); drawn from 5–20 s.
// - one EC2 API request (TLS to the regional endpoint, the service's own time): 50–300 ms,
//   drawn per action for each boot (every request of that action in the boot waits the same).
// The emulator adds `attachMs` before `attached`, the lab's loop backend `deviceDelayMs` after it,
// `createMs` before `available`, and the `latencyMs` fault before answering a request.

interface Latencies {
  attachMs: number;
  deviceDelayMs: number;
  createMs: number;
  apiMs: Record<string, number>;
}

/** The ranges drawn from (bench/sampling.ts), under the names this bench's JSON has always used. */
const RANGES = {
  attachMs: EC2_RANGES.attachMs,
  deviceDelayMs: EC2_RANGES.deviceMs,
  createMs: EC2_RANGES.createMs,
  apiMs: EC2_RANGES.apiMs,
} as const;

/** The EC2 actions a boot makes (docs/boot.md), each with its own draw. */
const ACTIONS = [
  "DescribeInstances",
  "DescribeVolumes",
  "DescribeSnapshots",
  "CreateVolume",
  "AttachVolume",
  "CreateTags",
  "DeleteTags",
  "DescribeVolumeStatus",
];

/** One boot's latencies; a model's attach time, when given, replaces the attach and device draws. */
function draw(random: () => number, model?: EbsModel): Latencies {
  const between = ([lo, hi]: readonly [number, number]) => Math.round(lo + (hi - lo) * random());
  const attachMs = between(RANGES.attachMs);
  const deviceDelayMs = between(RANGES.deviceDelayMs);
  return {
    ...(model ? { attachMs: attachDelayMsOf(model), deviceDelayMs: 0 } : { attachMs, deviceDelayMs }),
    createMs: between(RANGES.createMs),
    apiMs: Object.fromEntries(ACTIONS.map((action) => [action, between(RANGES.apiMs)])),
  };
}

const ZERO: Latencies = { attachMs: 0, deviceDelayMs: 0, createMs: 0, apiMs: {} };

function applyLatencies(lab: Lab, latencies: Latencies): void {
  lab.ec2.setDelays({ attachMs: latencies.attachMs, createMs: latencies.createMs, detachMs: 0, snapshotMs: 0 });
  lab.backend.deviceDelayMs = latencies.deviceDelayMs;
  const faults: Faults = {
    actions: Object.fromEntries(Object.entries(latencies.apiMs).map(([action, latencyMs]) => [action, { latencyMs }])),
  };
  lab.ec2.setFaults(faults);
}

// ---------------------------------------------------------------------------------------------
// Options

type Part = "latency" | "overhead" | "nspawn";
const PARTS: readonly Part[] = ["latency", "overhead", "nspawn"];

interface Options {
  boots: number;
  overheadRuns: number;
  parts: Set<Part>;
  nspawnBoots: number;
  paths: BenchPath[];
  seed: number;
  dropCaches: boolean;
  zeroLatency: boolean;
  /** `--ebs-model FILE`: the attach time and the cold layer from a calibration. */
  ebsModel: EbsModelChoice | undefined;
  verbose: boolean;
  outDir: string;
}

async function parseOptions(argv: string[]): Promise<Options> {
  const { values } = parseArgs({
    args: argv,
    options: {
      boots: { type: "string", default: "20" },
      "overhead-runs": { type: "string", default: "10" },
      "nspawn-boots": { type: "string", default: "3" },
      parts: { type: "string", default: "latency,overhead" },
      paths: { type: "string", default: "pool,snapshot" },
      seed: { type: "string", default: "13" },
      "drop-caches": { type: "boolean", default: false },
      "zero-latency": { type: "boolean", default: false },
      "ebs-model": { type: "string" },
      verbose: { type: "boolean", default: false },
      out: { type: "string", default: join(REPO, "bench", "results") },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    process.stdout.write(
      [
        "usage: npx tsx bench/boot-latency.ts [options]",
        "  --boots N            instances booted per path with EC2 latencies (default 20)",
        "  --paths pool,new-ids,snapshot  where the volume comes from: a pool volume; a pool volume made the",
        "                       workspace of new ids (osparc's labels tag); a volume created from the snapshot",
        "  --overhead-runs N    zero-delay boots, each beside its floor (mount + dockerd start) (default 10)",
        "  --parts latency,overhead[,nspawn]",
        "  --nspawn-boots N     nspawn machines per variant, before and after (default 3)",
        "  --seed N             seed of the latency draws (default 13)",
        "  --zero-latency       the latency part with every EC2 delay at 0 (the phased boot's own time)",
        "  --ebs-model FILE     a calibration (schema/ebs-model.schema.json): its attach time instead of the attach",
        "                       and device draws, volumes from a snapshot cold as it says (default: the ranges of",
        "                       bench/sampling.ts, no cold layer)",
        "  --drop-caches        drop the page cache before each timed overhead run (agent and floor alike)",
        "  --out DIR            where the JSON goes (default bench/results)",
        "  --verbose            stream the lab's and the agent's log lines to stderr",
        "",
      ].join("\n"),
    );
    process.exit(0);
  }
  const count = (name: string, value: string, max: number) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 0 || n > max) throw new Error(`--${name} wants 0..${max}, not ${value}`);
    return n;
  };
  const parts = new Set(values.parts.split(",").map((p) => p.trim()));
  for (const part of parts) if (!PARTS.includes(part as Part)) throw new Error(`--parts: unknown part ${part}`);
  const paths = values.paths.split(",").map((p) => p.trim());
  for (const path of paths)
    if (!(BENCH_PATHS as readonly string[]).includes(path)) throw new Error(`--paths: unknown path ${path}`);
  return {
    boots: count("boots", values.boots, 200),
    overheadRuns: count("overhead-runs", values["overhead-runs"], 100),
    parts: parts as Set<Part>,
    nspawnBoots: count("nspawn-boots", values["nspawn-boots"], 50),
    paths: paths as BenchPath[],
    seed: count("seed", values.seed, 2 ** 31),
    dropCaches: values["drop-caches"],
    zeroLatency: values["zero-latency"],
    ebsModel: await ebsModelOption(values["ebs-model"]),
    verbose: values.verbose,
    outDir: resolve(values.out),
  };
}

// ---------------------------------------------------------------------------------------------
// Helpers

const now = () => performance.now();
const ms = (from: number) => Math.round(now() - from);
const sec = (value: number | undefined) => (value === undefined ? "-" : (value / 1000).toFixed(2));

const stats = (values: number[]) => ({
  n: values.length,
  p50: percentile(values, 50),
  p95: percentile(values, 95),
  min: values.length ? Math.min(...values) : undefined,
  max: values.length ? Math.max(...values) : undefined,
});

/** A logger keeping each line with the time it was written (to place `boot.identity`). */
/** A log line, with the CPU and spawn count when it is the line that says `ready`. */
interface TimedLine {
  at: number;
  line: string;
  cpu?: { selfMs: number; childrenMs: number };
  spawned?: number;
}

function timedLogger(verbose: boolean): Logger & { lines: TimedLine[] } {
  const lines: TimedLine[] = [];
  const logger = createLogger((line) => {
    lines.push({
      at: now(),
      line,
      ...(line.includes("boot.ready") ? { cpu: cpuNowSync(), spawned: spawned.length } : {}),
    });
    if (lines.length > 2000) lines.splice(0, lines.length - 2000);
    if (verbose) process.stderr.write(line + "\n");
  }, "debug");
  return Object.assign(logger, { lines });
}

async function unmountVolumes(host: LabHost): Promise<void> {
  for (const mountPoint of await mountPointsUnder(host.paths.mountRoot)) await run("umount", [mountPoint]);
}

async function dropCaches(): Promise<void> {
  await run("sync", []);
  await writeFile("/proc/sys/vm/drop_caches", "3\n");
}

/** Builds the agent with scripts/build.mjs into `dir` (dist/ is left alone); returns its entry. */
async function bundleAgent(dir: string): Promise<string> {
  await buildAgent(dir, REPO);
  return join(dir, "ebs-cache-agent.mjs");
}

interface CliRun {
  exitCode: number;
  wallMs: number;
  outcome?: string;
  reason?: string;
  source?: string;
  bootSource?: string;
  timeline?: Array<{ step: string; ms: number }>;
  stderrTail: string[];
  /** Each log line with the ms since spawn it arrived at: places what the timeline does not cover (start, exit). */
  logAt: Array<[number, string]>;
}

/** `node <bundle> <args>` as a child process: wall time and the JSON result. */
async function runCli(bundle: string, args: string[]): Promise<CliRun> {
  const child = spawn(process.execPath, [bundle, ...args], { stdio: ["ignore", "pipe", "pipe"], cwd: REPO });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
  const t0 = now();
  const logAt: Array<[number, string]> = [];
  child.stderr.on("data", (chunk: Buffer) => {
    const text = chunk.toString("utf8");
    stderr += text;
    for (const line of text.split("\n")) if (line.startsWith("<")) logAt.push([ms(t0), line.slice(0, 100)]);
  });
  const exitCode = await new Promise<number>((done, reject) => {
    child.once("error", reject);
    child.once("close", (code) => done(code ?? -1));
  });
  const wallMs = ms(t0);
  const result: CliRun = {
    exitCode,
    wallMs,
    logAt,
    stderrTail: stderr
      .split("\n")
      .filter((l) => l.startsWith("<"))
      .slice(-4),
  };
  try {
    const parsed = JSON.parse(stdout) as {
      plan?: { selection?: { source?: string } };
      result?: { outcome?: string; reason?: string; source?: string; timeline?: CliRun["timeline"] } | null;
    };
    if (parsed.result?.source) result.bootSource = parsed.result.source;
    if (parsed.result?.outcome) result.outcome = parsed.result.outcome;
    if (parsed.result?.reason) result.reason = parsed.result.reason;
    if (parsed.result?.timeline) result.timeline = parsed.result.timeline;
    if (parsed.plan?.selection?.source) result.source = parsed.plan.selection.source;
  } catch {
    // exitCode and stderrTail say what happened.
  }
  return result;
}

/**
 * The agent in this process on a lab host, wired as on EC2 (src/cli/wiring.ts) but without the
 * lab's short EC2 poll (src/lab/machines/agent.ts uses 100 ms; the product's default is kept here).
 */
async function bootInProcess(
  lab: Lab,
  host: LabHost,
  overrides: ConfigOverrides,
  log: Logger,
  options: { withDocker: boolean; mayClaim: boolean; dataRootFinal?: () => Promise<void> },
): Promise<BootOutcome> {
  const config = labConfig(lab, host, overrides);
  const adapters = wireAdapters({
    config,
    ec2Client: () => lab.ec2Client(host.credentials),
    metadata: createMetadataService({ endpoint: host.imds.endpoint }),
    docker: host.dockerService(),
    defaultDataRoot: host.paths.defaultDataRoot,
    log,
    dockerdCommand: async () => host.dockerdCommand(),
  });
  return runBoot(config, adapters, { dryRun: false, ...options });
}

const overrides: ConfigOverrides = { pool: POOL, imageSet: IMAGE_SET };

const BENCH_PATHS = ["pool", "new-ids", "snapshot"] as const;
type BenchPath = (typeof BENCH_PATHS)[number];

/** What a path's boot must end with to count: the source of its report. */
const EXPECTED_SOURCE: Record<BenchPath, string> = { pool: "pool", "new-ids": "pool", snapshot: "snapshot" };

let newIds = 0;
/**
 * osparc's labels tag for ids no workspace exists for yet (a new `node_id`: every cold launch's
 * user, `_assign_tasks_to_current_cluster` leaving only new work to RunInstances).
 */
function newIdsTags(): Record<string, string> {
  newIds++;
  return labelsTagAsOsparcWrites(Osparc.labelsTag, {
    "user-id": `bench_${newIds}`,
    "project-id": `p-${newIds}`,
    "node-id": `n-${newIds}`,
  });
}

// ---------------------------------------------------------------------------------------------
// Part 1: boots with EC2's latencies

interface LatencyBoot {
  path: BenchPath;
  latencies: Latencies;
  /** The plan's selection (`new-workspace` for new ids). */
  source?: string;
  /** Where the volume came from in the end (the report's source: `pool` for a pool volume adopted). */
  bootSource?: string;
  /** Phase 1 as a process, spawn → exit: time to `prepared`. */
  preparedMs?: number;
  phase1Outcome?: string;
  phase1Timeline?: Array<{ step: string; ms: number }>;
  /** Phase 1's log lines with their arrival (ms since spawn). */
  phase1Log?: Array<[number, string]>;
  /** dockerd started on the volume (systemd's docker.service between the phases). */
  dockerStartMs?: number;
  /** Phase 2 in this process (see the README: a process adds nodeStartMs). */
  phase2Ms?: number;
  phase2Outcome?: string;
  phase2Timeline?: Array<{ step: string; ms: number }>;
  /** preparedMs + dockerStartMs + phase2Ms + the bundle's node start. */
  readyMs?: number;
  /** EC2's own start, drawn (EC2_START_RANGES): LaunchTime to the agent's first unit. */
  ec2StartMs?: number;
  /**
   * Phase 2's start → its join point (docker verified on the volume: READY=1 of its Type=notify unit, which
   * cloud-final after multi-user.target waits for).
   */
  phase2ToFinalMs?: number;
  /**
   * osparc's user data from the join point, beside the rest of phase 2: `docker swarm join --availability=drain` to
   * a manager, measured.
   */
  joinMs?: number;
  /**
   * ec2StartMs + preparedMs + dockerStartMs + the node start + phase2ToFinalMs + joinMs: what osparc's start limit
   * (EC2_INSTANCES_MAX_START_TIME) counts.
   */
  launchToJoinedMs?: number;
  error?: string;
  loadAvg1: number;
}

async function latencyBoot(
  lab: Lab,
  path: BenchPath,
  latencies: Latencies,
  bundle: string,
  nodeStartMs: number,
  log: ReturnType<typeof timedLogger>,
  osparc: { swarm: OsparcSwarm; ec2StartMs: number },
): Promise<LatencyBoot> {
  const boot: LatencyBoot = { path, latencies, loadAvg1: Math.round((loadavg()[0] ?? 0) * 100) / 100 };
  const host = await lab.addHost({ tags: { Name: `bench-${path}`, ...(path === "new-ids" ? newIdsTags() : {}) } });
  try {
    const config = await writeLabConfig(lab, host, { ...overrides, docker: { control: "none" } });
    applyLatencies(lab, latencies);
    const phase1 = await runCli(bundle, ["boot", "--no-docker", "--json", "--config", config]);
    boot.preparedMs = phase1.wallMs;
    if (phase1.outcome) boot.phase1Outcome = phase1.outcome;
    if (phase1.source) boot.source = phase1.source;
    if (phase1.bootSource) boot.bootSource = phase1.bootSource;
    if (phase1.timeline) boot.phase1Timeline = phase1.timeline;
    boot.phase1Log = phase1.logAt;
    if (phase1.outcome !== "prepared") {
      throw new Error(
        `phase 1 exit ${phase1.exitCode}, ${phase1.outcome ?? "no result"}: ` +
          `${phase1.reason ?? phase1.stderrTail.join(" | ")}`,
      );
    }
    let t = now();
    await host.startDocker();
    boot.dockerStartMs = ms(t);
    t = now();
    // Debian's cloud-final runs after multi-user.target, which waits for phase 2 until it has started: its join
    // point, docker verified on the volume. The join runs from there, beside the rest of phase 2.
    let joining: Promise<number> | undefined;
    const dataRootFinal = async () => {
      if (joining) return;
      boot.phase2ToFinalMs = ms(t);
      joining = joinSwarm(host, osparc.swarm);
      joining.catch(() => undefined);
    };
    const phase2 = await bootInProcess(lab, host, overrides, log, { withDocker: true, mayClaim: false, dataRootFinal });
    boot.phase2Ms = ms(t);
    boot.phase2Outcome = phase2.report?.outcome ?? "none";
    boot.phase2Timeline = phase2.report?.timeline ?? [];
    if (boot.phase2Outcome !== "ready")
      throw new Error(`phase 2 ended ${boot.phase2Outcome}: ${phase2.report?.reason ?? "?"}`);
    boot.readyMs = boot.preparedMs + boot.dockerStartMs + boot.phase2Ms + nodeStartMs;
    if (!joining) throw new Error("phase 2 never reached its join point");
    boot.joinMs = await joining;
    boot.ec2StartMs = osparc.ec2StartMs;
    boot.launchToJoinedMs =
      osparc.ec2StartMs + boot.preparedMs + boot.dockerStartMs + nodeStartMs + boot.phase2ToFinalMs! + boot.joinMs;
  } catch (error) {
    boot.error = describeError(error);
  } finally {
    applyLatencies(lab, ZERO);
    // Frees the CPU and the mount for the next boot; the volume stays attached to this host.
    await host.dockerd?.docker(["swarm", "leave", "--force"]).catch(() => undefined);
    await host.dockerd?.stop().catch(() => undefined);
    await unmountVolumes(host).catch(() => undefined);
  }
  return boot;
}

/** osparc's user data, its join: the path to the manager made, then `docker swarm join`; returns its ms. */
async function joinSwarm(host: LabHost, swarm: OsparcSwarm): Promise<number> {
  const t = now();
  await swarm.link(host.instance.instanceId, join(host.dockerd!.root, "net.ns"));
  const { token, address } = await swarm.joinTarget();
  await host.dockerd!.docker(["swarm", "join", "--availability=drain", "--token", token, address]);
  return ms(t);
}

// ---------------------------------------------------------------------------------------------
// Work done, as the machine's load cannot fake it: processes spawned and CPU time

/**
 * Every process this one spawns (node's `child_process` diagnostics channel: execa, the lab, the
 * agent alike), by its command's name. The overhead run reads it around the agent's boot: the lab
 * spawns too (losetup for an attach, dockerd), so the names say whose each is.
 */
const spawned: Array<{ name: string; argv: string }> = [];
subscribe("child_process", (message) => {
  const child = (message as { process: ChildProcess }).process;
  child.once("spawn", () =>
    spawned.push({ name: basename(child.spawnfile ?? "?"), argv: child.spawnargs.join(" ").slice(0, 200) }),
  );
});

/** CPU seconds of this process (user + system) and of its children waited for (`/proc/self/stat` cutime + cstime). */
async function cpuNow(): Promise<{ selfMs: number; childrenMs: number }> {
  return cpuFrom(await readFile("/proc/self/stat", "utf8"));
}

/** The same, read synchronously: inside the log's sink, at the very line that says `ready`. */
function cpuNowSync(): { selfMs: number; childrenMs: number } {
  return cpuFrom(readFileSync("/proc/self/stat", "utf8"));
}

function cpuFrom(procStat: string): { selfMs: number; childrenMs: number } {
  const usage = process.cpuUsage();
  // The fields after the command's closing parenthesis; cutime and cstime are the stat's 16th and 17th.
  const stat = procStat.split(") ")[1]!.split(" ");
  const ticks = Number(stat[13]) + Number(stat[14]);
  return {
    selfMs: Math.round((usage.user + usage.system) / 1000),
    childrenMs: Math.round((ticks * 1000) / CLOCK_TICKS),
  };
}
/** USER_HZ: 100 on every Linux this runs on (getconf CLK_TCK). */
const CLOCK_TICKS = 100;

/** What ran between two readings: spawns by command, CPU of this process and of its exited children. */
function workSince(
  spawnMark: number,
  cpu: { selfMs: number; childrenMs: number },
  after: { selfMs: number; childrenMs: number },
  spawnEnd = spawned.length,
): Work {
  const commands: Record<string, number> = {};
  const processes = spawned.slice(spawnMark, spawnEnd);
  for (const { name } of processes) commands[name] = (commands[name] ?? 0) + 1;
  return {
    spawns: processes.length,
    commands,
    argv: processes.map((p) => p.argv),
    cpuSelfMs: after.selfMs - cpu.selfMs,
    cpuChildrenMs: after.childrenMs - cpu.childrenMs,
  };
}

interface Work {
  /** Processes spawned (the agent's and the lab's: see `commands`). */
  spawns: number;
  commands: Record<string, number>;
  /** Each process's command line, in the order they started. */
  argv: string[];
  /** CPU of the bench's process: the agent in process, and the lab's EC2 emulator and IMDS. */
  cpuSelfMs: number;
  /** CPU of the children that exited meanwhile (not dockerd, which runs on). */
  cpuChildrenMs: number;
}

// ---------------------------------------------------------------------------------------------
// Part 2: the agent's own overhead at zero EC2 delay

interface OverheadRun {
  /** The one-shot boot in this process, boot start → `ready` (labels published, `boot.ready` logged). */
  agentMs?: number;
  /**
   * `ready` → runBoot's return: the status record and metrics textfile, with the host facts they
   * read (systeminformation's df, lsblk, lscpu): after the labels, off the node's path.
   */
  recordMs?: number;
  outcome?: string;
  /** start → `boot.identity` logged. */
  identifyMs?: number;
  /** identity → the first step (observe, plan). */
  observeMs?: number;
  timeline?: Array<{ step: string; ms: number }>;
  /** The floor on the same host and volume: mount, then dockerd start. */
  floorMountMs?: number;
  floorDockerMs?: number;
  floorMs?: number;
  overMs?: number;
  /** The agent's boot, spawns and CPU (see Work), to runBoot's return (the after-ready record included). */
  work?: Work;
  /** The same to `ready` (read in the log's sink at the `boot.ready` line). */
  toReady?: Work;
  /** The boot's log lines (debug included: each command run) with their time since boot start (ms). */
  log?: Array<[number, string]>;
  error?: string;
  loadAvg1: number;
}

async function overheadRun(lab: Lab, log: ReturnType<typeof timedLogger>, drop: boolean): Promise<OverheadRun> {
  const result: OverheadRun = { loadAvg1: Math.round((loadavg()[0] ?? 0) * 100) / 100 };
  const host = await lab.addHost({ tags: { Name: "bench-overhead" } });
  try {
    applyLatencies(lab, ZERO);
    if (drop) await dropCaches();
    const mark = log.lines.length;
    const spawnMark = spawned.length;
    const cpu = await cpuNow();
    const t0 = now();
    const booted = await bootInProcess(lab, host, overrides, log, { withDocker: true, mayClaim: true });
    const returned = now();
    result.work = workSince(spawnMark, cpu, await cpuNow());
    result.outcome = booted.report?.outcome ?? "none";
    result.timeline = booted.report?.timeline ?? [];
    const lines = log.lines.slice(mark);
    const ready = lines.find((entry) => entry.line.includes("boot.ready"));
    if (result.outcome !== "ready" || !ready || !booted.report?.device || !booted.report.mountPoint) {
      throw new Error(`boot ended ${result.outcome}: ${booted.report?.reason ?? "?"}`);
    }
    result.log = lines.map((entry) => [Math.round(entry.at - t0), entry.line.slice(0, 300)]);
    if (ready.cpu && ready.spawned !== undefined) result.toReady = workSince(spawnMark, cpu, ready.cpu, ready.spawned);
    result.agentMs = Math.round(ready.at - t0);
    result.recordMs = Math.round(returned - ready.at);
    const identified = lines.find((entry) => entry.line.includes("boot.identity"));
    const steps = result.timeline.reduce((sum, step) => sum + step.ms, 0);
    if (identified) {
      result.identifyMs = Math.round(identified.at - t0);
      result.observeMs = Math.max(0, result.agentMs - result.identifyMs - steps);
    }

    // The floor: the same volume on the same host, docker's daemon.json already pointing at it.
    await host.dockerd?.stop();
    await unmountVolumes(host);
    if (drop) await dropCaches();
    let t = now();
    await run("mount", ["-o", "noatime,nouuid", booted.report.device, booted.report.mountPoint]);
    result.floorMountMs = ms(t);
    t = now();
    await host.startDocker();
    result.floorDockerMs = ms(t);
    result.floorMs = result.floorMountMs + result.floorDockerMs;
    result.overMs = result.agentMs - result.floorMs;
  } catch (error) {
    result.error = describeError(error);
  } finally {
    await host.dockerd?.docker(["swarm", "leave", "--force"]).catch(() => undefined);
    await host.dockerd?.stop().catch(() => undefined);
    await unmountVolumes(host).catch(() => undefined);
  }
  return result;
}

/** Median count of each command over the runs (0 in a run that did not spawn it), most spawned first. */
function commandMedians(runs: Array<Record<string, number>>): Record<string, number> {
  const names = new Set(runs.flatMap((r) => Object.keys(r)));
  const medians = [...names].map(
    (name) =>
      [
        name,
        percentile(
          runs.map((r) => r[name] ?? 0),
          50,
        )!,
      ] as const,
  );
  return Object.fromEntries(medians.filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])));
}

/** Median of each step's duration over the runs, in the order the steps ran. */
function stepMedians(timelines: Array<Array<{ step: string; ms: number }>>): Array<{ step: string; p50: number }> {
  const order: string[] = [];
  const byStep = new Map<string, number[]>();
  for (const timeline of timelines) {
    const perRun = new Map<string, number>();
    for (const { step, ms: d } of timeline) {
      if (!byStep.has(step)) {
        byStep.set(step, []);
        order.push(step);
      }
      perRun.set(step, (perRun.get(step) ?? 0) + d);
    }
    for (const [step, d] of perRun) byStep.get(step)!.push(d);
  }
  return order.map((step) => ({ step, p50: percentile(byStep.get(step)!, 50)! }));
}

// ---------------------------------------------------------------------------------------------
// Main

async function main(): Promise<void> {
  const options = await parseOptions(process.argv.slice(2));
  if (process.getuid?.() !== 0) throw new Error("the lab needs root: run it with sudo");
  const say = (line: string) => process.stdout.write(line + "\n");
  if (options.ebsModel) say(options.ebsModel.description);
  const log = timedLogger(options.verbose);
  const started = new Date();
  const temp = await mkdtemp(join(tmpdir(), "ebs-bench-lat-"));
  const random = seededRandom(options.seed);
  const latencyBoots: LatencyBoot[] = [];
  const overheadRuns: OverheadRun[] = [];
  let nodeStartMs: number;
  const nodeStarts: number[] = [];

  const doLatency = options.parts.has("latency") && options.boots > 0;
  const doOverhead = options.parts.has("overhead") && options.overheadRuns > 0;
  const doNspawn = options.parts.has("nspawn") && options.nspawnBoots > 0;
  const poolBoots =
    (doLatency ? options.paths.filter((p) => p !== "snapshot").length * options.boots : 0) +
    (doNspawn ? options.nspawnBoots * 2 : 0);
  let nspawn: Awaited<ReturnType<typeof nspawnJoinPart>> | undefined;
  let stopSwarm: () => Promise<void> = async () => undefined;
  const lab = await startLab({
    name: "bootlat",
    delays: { createMs: 0, attachMs: 0, detachMs: 0, snapshotMs: 0 },
    deviceDelayMs: 0,
    ...(options.ebsModel ? { coldSnapshots: labTimingOf(options.ebsModel.model).coldSnapshots } : {}),
    log,
  });
  try {
    const bundle = await bundleAgent(temp);
    // What a process phase 2 would add to the in-process one: node loading the bundle.
    for (let i = 0; i < 5; i++) nodeStarts.push((await runCli(bundle, ["--help"])).wallMs);
    nodeStartMs = percentile(nodeStarts, 50)!;
    say(
      `boot-latency bench: node start of the bundle (\`node <bundle> --help\`) p50 ${sec(nodeStartMs)} s of ` +
        `${nodeStarts.map(sec).join(" ")}`,
    );

    const t = now();
    const golden = await buildGoldenSnapshot(lab, { pool: POOL, imageSet: IMAGE_SET, images: IMAGES, log });
    // The overhead runs and the pool boots take one pool volume each; the snapshot boots find the
    // pool used up and create theirs.
    await createPoolVolumes(lab, golden, {
      pool: POOL,
      imageSet: IMAGE_SET,
      count: (doOverhead ? options.overheadRuns : 0) + poolBoots,
    });
    say(
      `prepared golden snapshot ${golden.snapshotId} and ${(doOverhead ? options.overheadRuns : 0) + poolBoots} ` +
        `pool volumes in ${sec(ms(t))} s`,
    );

    if (doOverhead) {
      say(
        `\n== overhead: ${options.overheadRuns} one-shot boots at zero EC2 delay, each beside its floor (mount + ` +
          `dockerd start, same host and volume)${options.dropCaches ? ", page cache dropped before each" : ""}`,
      );
      for (let i = 0; i < options.overheadRuns; i++) {
        const r = await overheadRun(lab, log, options.dropCaches);
        overheadRuns.push(r);
        say(
          r.error
            ? `  run ${i + 1} FAILED: ${r.error}`
            : `  run ${i + 1}: agent ${sec(r.agentMs)} s, floor ${sec(r.floorMs)} s (mount ${sec(r.floorMountMs)} ` +
                `+ dockerd ${sec(r.floorDockerMs)}), over ${sec(r.overMs)} s; ` +
                (`identify ${sec(r.identifyMs)} observe ${sec(r.observeMs)} | ` +
                  `${r.timeline!.map((s) => `${s.step} ${sec(s.ms)}`).join(", ")} (load ${r.loadAvg1}); `) +
                (`then record ${sec(r.recordMs)} s; ${r.work!.spawns} spawns, CPU ${sec(r.work!.cpuSelfMs)} s in ` +
                  `process + ${sec(r.work!.cpuChildrenMs)} s children`),
        );
      }
    }

    if (doNspawn) {
      say(
        `\n== nspawn: ${options.nspawnBoots} machines per variant (before: phase 2 a oneshot; after: Type=notify), ` +
          `alternating; ms from the machine's start`,
      );
      nspawn = await nspawnJoinPart(lab, { boots: options.nspawnBoots, pool: POOL, imageSet: IMAGE_SET, say });
      const { before, after } = nspawn.summary;
      const row = (name: string, key: keyof typeof before) =>
        `  ${name.padEnd(44)} ${sec(before[key]).padStart(7)} ${sec(after[key]).padStart(7)} ` +
        `${before[key] && after[key] ? (after[key] / before[key]).toFixed(2) : "-"}`;
      say(`  ${"p50 (s)".padEnd(44)}  before   after after/before`);
      say(row("launch -> docker started", "dockerStarted"));
      say(row("launch -> phase 2 started (the join waits)", "readyUnitStarted"));
      say(row("launch -> joined", "joined"));
      say(row("launch -> ready published", "readyLabel"));
      say(row("launch -> phase 2 done", "agentDone"));
      say(row("docker started -> joined", "joinedAfterDocker"));
      say(row("docker started -> ready published", "readyLabelAfterDocker"));
    }

    if (doLatency) {
      const swarm = await startOsparcSwarm(join(lab.root, "osparc"));
      stopSwarm = () => swarm.stop();
      // A generator of its own: the EC2 latencies above draw as they always did for a seed.
      const startRandom = seededRandom(options.seed + 1);
      const between = ([lo, hi]: readonly [number, number]) => Math.round(lo + (hi - lo) * startRandom());
      for (const path of options.paths) {
        say(
          `\n== latency, ${path}: ${options.boots} boots, ` +
            (options.zeroLatency
              ? "every EC2 delay 0"
              : (options.ebsModel
                  ? `attach → device ${attachDelayMsOf(options.ebsModel.model)} ms (--ebs-model), `
                  : `attach ${RANGES.attachMs.join("–")} ms, device ${RANGES.deviceDelayMs.join("–")} ms, `) +
                `create ${RANGES.createMs.join("–")} ms, API ${RANGES.apiMs.join("–")} ms per action`),
        );
        for (let i = 0; i < options.boots; i++) {
          const latencies = options.zeroLatency ? ZERO : draw(random, options.ebsModel?.model);
          const ec2StartMs = between(EC2_START_RANGES.pendingToRunningMs) + between(EC2_START_RANGES.runningToUnitsMs);
          const b = await latencyBoot(lab, path, latencies, bundle, nodeStartMs, log, { swarm, ec2StartMs });
          latencyBoots.push(b);
          const drawn =
            `attach ${latencies.attachMs} device ` +
            `${latencies.deviceDelayMs}${path === "snapshot" ? ` create ${latencies.createMs}` : ""}`;
          say(
            b.error
              ? `  boot ${i + 1} (${drawn}) FAILED after prepared ${sec(b.preparedMs)} s: ${b.error}`
              : `  boot ${i + 1} (${drawn}): ${b.source}, prepared ${sec(b.preparedMs)} s, ` +
                  `dockerd ${sec(b.dockerStartMs)} s, ` +
                  `phase 2 ${sec(b.phase2Ms)} s (join point ${sec(b.phase2ToFinalMs)} s), ready ${sec(b.readyMs)} s, ` +
                  `join ${sec(b.joinMs)} s; launch → joined ${sec(b.launchToJoinedMs)} s with EC2's start ` +
                  `${sec(b.ec2StartMs)} s (load ${b.loadAvg1})`,
          );
        }
      }
    }
  } finally {
    await stopSwarm().catch(() => undefined);
    await lab.close();
    await rm(temp, { recursive: true, force: true });
  }

  // ---- Summary
  const summary: Record<string, unknown> = { nodeStartMs, nodeStarts };
  if (latencyBoots.length > 0) {
    say(
      `\n${options.zeroLatency ? "every EC2 delay 0" : "with EC2 latencies"} (nearest-rank percentiles; ready = ` +
        `prepared + dockerd start + phase 2 + node start ${sec(nodeStartMs)} s):`,
    );
    say(
      `  path       boots  ok  prepared p50  p95    ready p50  p95    budget 40 s kept  prepared minus the drawn ` +
        `transitions p50/p95`,
    );
    for (const path of options.paths) {
      const boots = latencyBoots.filter((b) => b.path === path);
      const ok = boots.filter((b) => !b.error && b.bootSource === EXPECTED_SOURCE[path]);
      const prepared = stats(ok.map((b) => b.preparedMs!));
      const ready = stats(ok.map((b) => b.readyMs!));
      const inBudget = boots.filter((b) => b.preparedMs !== undefined && b.preparedMs <= 40_000).length;
      // What phase 1 adds to EC2's transitions it waits for (the drawn attach, device, create):
      // node's start, the API round trips, the agent's own steps.
      const transitions = (b: LatencyBoot) =>
        b.latencies.attachMs + b.latencies.deviceDelayMs + (path === "snapshot" ? b.latencies.createMs : 0);
      const preparedOverTransitions = stats(ok.map((b) => b.preparedMs! - transitions(b)));
      const launchToJoined = stats(ok.map((b) => b.launchToJoinedMs!));
      const joinOnly = stats(ok.map((b) => b.joinMs!));
      summary[path] = {
        prepared,
        ready,
        preparedOverTransitions,
        launchToJoined,
        join: joinOnly,
        boots: boots.length,
        ok: ok.length,
        inBudget,
        sources: boots.map((b) => b.source ?? "?"),
        bootSources: boots.map((b) => b.bootSource ?? "?"),
      };
      say(
        `  ${path.padEnd(9)}  ${String(boots.length).padStart(5)}  ${String(ok.length).padStart(2)}  ` +
          `${sec(prepared.p50).padStart(12)}  ${sec(prepared.p95).padStart(5)}  ${sec(ready.p50).padStart(9)}  ` +
          `${sec(ready.p95).padStart(5)}  ${`${inBudget}/${boots.length}`.padEnd(16)}  ` +
          `${sec(preparedOverTransitions.p50)} / ${sec(preparedOverTransitions.p95)}`,
      );
      say(
        `  ${path.padEnd(9)}  launch → joined (EC2's start drawn ` +
          `${EC2_START_RANGES.pendingToRunningMs.join("–")} + ` +
          `${EC2_START_RANGES.runningToUnitsMs.join("–")} ms, phase 2 to its join point, the join ` +
          `${sec(joinOnly.p50)} s p50): p50 ${sec(launchToJoined.p50)} s, p95 ${sec(launchToJoined.p95)} s, ` +
          `against osparc's 60 s`,
      );
    }
  }
  if (overheadRuns.length > 0) {
    const ok = overheadRuns.filter((r) => !r.error);
    const agent = stats(ok.map((r) => r.agentMs!));
    const floor = stats(ok.map((r) => r.floorMs!));
    const over = stats(ok.map((r) => r.overMs!));
    const steps = stepMedians(ok.map((r) => r.timeline!));
    const identify = percentile(
      ok.map((r) => r.identifyMs ?? 0),
      50,
    );
    const observe = percentile(
      ok.map((r) => r.observeMs ?? 0),
      50,
    );
    const spawns = percentile(
      ok.map((r) => r.work!.spawns),
      50,
    );
    const cpuSelf = percentile(
      ok.map((r) => r.work!.cpuSelfMs),
      50,
    );
    const cpuChildren = percentile(
      ok.map((r) => r.work!.cpuChildrenMs),
      50,
    );
    const commands = commandMedians(ok.map((r) => r.work!.commands));
    const record = percentile(
      ok.map((r) => r.recordMs!),
      50,
    );
    const toReady = ok.filter((r) => r.toReady).map((r) => r.toReady!);
    const readyWork = {
      spawnsP50: percentile(
        toReady.map((w) => w.spawns),
        50,
      ),
      commandsP50: commandMedians(toReady.map((w) => w.commands)),
      cpuSelfMsP50: percentile(
        toReady.map((w) => w.cpuSelfMs),
        50,
      ),
      cpuChildrenMsP50: percentile(
        toReady.map((w) => w.cpuChildrenMs),
        50,
      ),
      cpuTotalMsP50: percentile(
        toReady.map((w) => w.cpuSelfMs + w.cpuChildrenMs),
        50,
      ),
    };
    summary.overhead = {
      agent,
      floor,
      over,
      identifyP50: identify,
      observeP50: observe,
      steps,
      floorMountP50: percentile(
        ok.map((r) => r.floorMountMs!),
        50,
      ),
      floorDockerP50: percentile(
        ok.map((r) => r.floorDockerMs!),
        50,
      ),
      recordP50: record,
      toReady: readyWork,
      spawnsP50: spawns,
      commandsP50: commands,
      cpuSelfMsP50: cpuSelf,
      cpuChildrenMsP50: cpuChildren,
    };
    say(
      `\nzero EC2 delay, ${ok.length}/${overheadRuns.length} runs: agent p50 ${sec(agent.p50)} s (p95 ` +
        `${sec(agent.p95)}), floor p50 ${sec(floor.p50)} s (p95 ${sec(floor.p95)}), agent over floor p50 ` +
        `${sec(over.p50)} s (p95 ${sec(over.p95)}); target ≤ 0.50 s over`,
    );
    say(
      `  step medians: identify ${sec(identify)}, observe+plan ${sec(observe)}, ` +
        `${steps.map((s) => `${s.step} ${sec(s.p50)}`).join(", ")}`,
    );
    say(`  after ready (status record, metrics, host facts; not counted above) p50 ${sec(record)} s`);
    say(
      `  per boot to ready (medians): ${readyWork.spawnsP50} processes spawned (${Object.entries(readyWork.commandsP50)
        .map(([name, n]) => `${name} ${n}`)
        .join(", ")}), ` +
        (`CPU ${sec(readyWork.cpuTotalMsP50)} s (${sec(readyWork.cpuSelfMsP50)} s in process + ` +
          `${sec(readyWork.cpuChildrenMsP50)} s of exited children)`),
    );
    say(
      `  per boot, record included (medians): ${spawns} processes spawned (${Object.entries(commands)
        .map(([name, n]) => `${name} ${n}`)
        .join(", ")}), CPU ${sec(cpuSelf)} s in process + ${sec(cpuChildren)} s of exited children`,
    );
  }

  const docker = await run("docker", ["--version"], { check: false }).catch(() => ({ stdout: "" }));
  const report = {
    bench: "boot-latency",
    startedAt: started.toISOString(),
    finishedAt: new Date().toISOString(),
    command: `npx tsx bench/boot-latency.ts ${process.argv.slice(2).join(" ")}`.trim(),
    options: { ...options, parts: [...options.parts], outDir: relative(REPO, options.outDir) || "." },
    ranges: RANGES,
    machine: {
      kernel: release(),
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model,
      memoryGiB: Math.round((totalmem() / 1024 ** 3) * 100) / 100,
      node: process.version,
      docker: docker.stdout.trim(),
    },
    timing: {
      prepared: "`node <bundle> boot --no-docker --json` (docker.control none): spawn → exit",
      ready:
        "prepared + dockerd start on the volume (the lab's private dockerd, API polled every 100 ms) + `boot " +
        "--no-claim` in this process + the bundle's node start (nodeStartMs)",
      overhead:
        "one-shot boot in this process (boot start → `boot.ready` logged, the labels published) vs, on the same " +
        "host and volume, mount + dockerd start; spawns and CPU from boot start to runBoot's return (the " +
        "after-ready record included)",
    },
    summary,
    latencyBoots,
    overheadRuns,
    ...(nspawn ? { nspawn } : {}),
  };
  await mkdir(options.outDir, { recursive: true });
  const stamp = started.toISOString().replace(/\..*$/, "").replace(/:/g, "-");
  const file = join(options.outDir, `boot-latency-${stamp}.json`);
  await writeFile(file, JSON.stringify(report, null, 2) + "\n");
  say(`\nwrote ${file}`);
  if (latencyBoots.some((b) => b.error) || overheadRuns.some((r) => r.error) || nspawn?.boots.some((b) => b.error))
    process.exitCode = 1;
}

try {
  await main();
} catch (error) {
  process.stderr.write(`bench failed: ${describeError(error)}\n`);
  process.exitCode = 1;
}
