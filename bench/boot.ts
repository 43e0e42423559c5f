/**
 * Boot benchmark: how long until a fresh node can run the golden image set, three ways.
 *
 *   (a) attach  the agent's real boot (`bootLabHost`) on a fresh lab host with a pool volume made
 *               from a golden snapshot holding the set, then a run check;
 *   (b) load    `docker load -i` of a `docker save` tar of the same images into a fresh dockerd
 *               with an empty data-root, then the run check;
 *   (c) pull    `docker pull` of each image from a local registry (Debian's docker-registry, on
 *               the loopback of the pulling dockerd's network namespace) into a fresh dockerd with
 *               an empty data-root, then the run check.
 *
 * The run check is `docker run --rm --network none <image> /bin/busybox true` for every image of
 * the set (the lab's images have no `true` applet link; see runCheck).
 * Besides, the agent runs once more as a child process (the esbuild bundle, docker.control=none)
 * for its own wall time and peak RSS. See bench/README.md for what is timed and why.
 *
 *   npx tsx bench/boot.ts [--sizes 0.5,1,2] [--runs 1] [--no-drop-caches] [--rss-tsx] [--verbose]
 *                         [--engines 20,28] [--stores graphdriver,containerd]
 *
 * With --engines / --stores, each engine and store is a dimension: the host's own dockerd where it
 * is that engine with the graphdriver store, otherwise every node (golden builder, attach, load,
 * pull) is an engine machine (src/lab/machines/nspawn*.ts: Debian with that docker under its own systemd).
 *
 * Needs root and the lab's Debian packages, plus docker-registry (and `time`, optionally).
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { cpus, loadavg, release, tmpdir, totalmem } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { AttachVolumeCommand, DescribeVolumesCommand } from "@aws-sdk/client-ec2";
import { buildAgent } from "../scripts/build.mjs";
import { describeError } from "../src/errors.ts";
import { run } from "../src/exec.ts";
import { DATA_ROOT_SUBDIR } from "../src/layout.ts";
import { createLogger, type Logger } from "../src/log.ts";
import { bootLabHost, writeLabConfig } from "../src/lab/machines/agent.ts";
import { mountPointsUnder } from "../src/lab/reaper/devices.ts";
import { DOCKER_CLI, type PrivateDockerd } from "../src/lab/docker/dockerd.ts";
import { buildGoldenSnapshot, createPoolVolumes, type GoldenImage } from "../src/lab/volumes/golden.ts";
import { BUSYBOX } from "../src/lab/docker/images.ts";
import { REGISTRY_BIN, freeLoopbackPort, startLabRegistry, type LabRegistry } from "../src/lab/docker/registry.ts";
import { startLab, type Lab, type LabHost } from "../src/lab/lab.ts";
import { labBase } from "../src/lab/reaper/labdir.ts";
import type { ImageStore } from "../src/docker/engine.ts";
import { DOCKERD } from "../src/lab/docker/dockerd.ts";
import {
  EngineChoiceError,
  chooseHostEngine,
  parseEngine,
  parseStore,
  type HostEngine,
} from "../src/lab/docker/engine-choice.ts";
import { dockerOnlyMachine, dockerOnVolume, inMachine, unitStarting } from "../src/lab/machines/nspawn-docker.ts";
import { buildEngineGoldenSnapshot } from "../src/lab/machines/nspawn-golden.ts";
import { READY_UNIT, machineStatus, startEngineHost, waitForReadyUnit } from "../src/lab/machines/nspawn-host.ts";
import type { Machine } from "../src/lab/machines/nspawn.ts";
import { ebsModelOption, labTimingOf, type EbsModelChoice } from "./ebs-model-option.ts";
import { ENGINES, cachedRootfs, nspawnProblems, type EngineName } from "../src/lab/machines/nspawn-rootfs.ts";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const GNU_TIME = "/usr/bin/time";
const POOL = "bench";
const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
/** Bounds a hung daemon, not a slow disk. */
const LONG_MS = 20 * 60_000;
/** The command of the run check (see runCheck). */
const RUN_CHECK = ["/bin/busybox", "true"];

// ---------------------------------------------------------------------------------------------
// Options

interface BenchOptions {
  sizes: number[];
  runs: number;
  dropCaches: boolean;
  rssTsx: boolean;
  verbose: boolean;
  bundle: string | undefined;
  outDir: string;
  /** The engines asked for (none: the host's dockerd only). */
  engines: EngineName[];
  stores: ImageStore[];
  /** `--ebs-model FILE`: the lab's attach time and cold layer from a calibration. */
  ebsModel?: EbsModelChoice | undefined;
}

/** The lab's delays: zero (the methods' own time), or the `--ebs-model` calibration's. */
function labTiming(options: BenchOptions) {
  if (options.ebsModel) return labTimingOf(options.ebsModel.model);
  return { delays: { createMs: 0, attachMs: 0, detachMs: 0, snapshotMs: 0 }, deviceDelayMs: 0 };
}

async function parseOptions(argv: string[]): Promise<BenchOptions> {
  const { values } = parseArgs({
    args: argv,
    options: {
      sizes: { type: "string", default: "0.5,1,2" },
      runs: { type: "string", default: "1" },
      "no-drop-caches": { type: "boolean", default: false },
      "rss-tsx": { type: "boolean", default: false },
      verbose: { type: "boolean", default: false },
      bundle: { type: "string" },
      out: { type: "string", default: join(REPO, "bench", "results") },
      engines: { type: "string" },
      stores: { type: "string", default: "graphdriver" },
      "ebs-model": { type: "string" },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    process.stdout.write(
      [
        "usage: npx tsx bench/boot.ts [options]",
        "  --sizes 0.5,1,2     image-set sizes in GiB (default 0.5,1,2)",
        "  --runs N            timed runs per method and size; the median is reported (default 1)",
        "  --no-drop-caches    keep the page cache between preparation and the timed runs",
        "  --rss-tsx           also measure the agent process under the tsx loader (src/cli.ts)",
        "  --bundle PATH       agent bundle for the RSS run (default: bundle src/cli.ts afresh)",
        "  --out DIR           where the JSON goes (default bench/results)",
        "  --engines 20,26,28  docker engines to compare (default: this machine's dockerd); one other than the",
        "                      host's runs every node in a systemd-nspawn machine of its Debian release",
        "  --stores graphdriver,containerd  image stores to compare (default graphdriver; containerd needs 26 or 28)",
        "  --ebs-model FILE    the lab's EBS from a calibration (schema/ebs-model.schema.json): the model's attach",
        "                      time, volumes from a snapshot cold as it says (default: every EC2 delay 0, no cold",
        "                      layer: the methods' own time)",
        "  --verbose           stream the lab's and the agent's log lines to stderr",
        "",
      ].join("\n"),
    );
    process.exit(0);
  }
  const sizes = values.sizes.split(",").map((s) => Number(s.trim()));
  if (sizes.length === 0 || sizes.some((s) => !Number.isFinite(s) || s <= 0 || s > 16)) {
    throw new Error(`--sizes wants GiB values in (0, 16], comma-separated: ${values.sizes}`);
  }
  const runs = Number(values.runs);
  if (!Number.isInteger(runs) || runs < 1 || runs > 10) throw new Error(`--runs wants 1..10, not ${values.runs}`);
  return {
    sizes,
    runs,
    dropCaches: !values["no-drop-caches"],
    rssTsx: values["rss-tsx"],
    verbose: values.verbose,
    bundle: values.bundle ? resolve(values.bundle) : undefined,
    outDir: resolve(values.out),
    engines: values.engines ? values.engines.split(",").map(parseEngine) : [],
    stores: values.stores.split(",").map(parseStore),
    ebsModel: await ebsModelOption(values["ebs-model"]),
  };
}

// ---------------------------------------------------------------------------------------------
// Results

/** One timed run: its total and the parts it is made of (ms). */
interface Sample {
  totalMs: number;
  parts: Record<string, number>;
  /** Measured alongside but not part of totalMs (e.g. the fresh dockerd's start for load/pull). */
  excluded?: Record<string, number>;
  /** 1-minute load average when the run started (the bench's own preparation counts too). */
  loadAvg1?: number;
  /** Other labs up when the run started (tests running alongside: the numbers are skewed). */
  otherLabs?: string[];
  /** The agent's own step timeline (attach only). */
  timeline?: Array<{ step: string; ms: number }>;
}

interface MethodResult {
  samples: Sample[];
  medianMs?: number;
  error?: string;
}

interface AgentProcessResult {
  how: string;
  command: string[];
  exitCode: number;
  outcome?: string;
  wallMs: number;
  /** The node process's own peak (getrusage RUSAGE_SELF at exit). */
  peakRssKiB?: number;
  /** GNU time's ru_maxrss: the largest of node and the commands it ran. */
  peakRssWithChildrenKiB?: number;
  timeline?: Array<{ step: string; ms: number }>;
  error?: string;
}

interface SizeResult {
  sizeGiB: number;
  /** The docker engine and image store of the nodes. */
  engine: string;
  store: ImageStore;
  /** Where the nodes' docker ran: the host's dockerd, or engine machines. */
  nodes: "host" | "machine";
  images: Array<{ tag: string; payloadBytes: number }>;
  snapshotGiB: number;
  setup: Record<string, number>;
  attach: MethodResult;
  load: MethodResult;
  pull: MethodResult;
  agentProcess: AgentProcessResult[];
  ratios: { loadOverAttach?: number; pullOverAttach?: number };
  error?: string;
}

const emptyMethod = (): MethodResult => ({ samples: [] });

function median(values: number[]): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

// ---------------------------------------------------------------------------------------------
// Small helpers

const now = () => performance.now();
const ms = (from: number) => Math.round(now() - from);
const seconds = (value: number | undefined) => (value === undefined ? "-" : (value / 1000).toFixed(2));

/** A logger that keeps the last lines (printed when something fails) and optionally streams them. */
function benchLogger(verbose: boolean): Logger & { tail(n: number): string[] } {
  const lines: string[] = [];
  const logger = createLogger((line) => {
    lines.push(line);
    if (lines.length > 400) lines.splice(0, lines.length - 400);
    if (verbose) process.stderr.write(line + "\n");
  }, "info");
  return Object.assign(logger, { tail: (n: number) => lines.slice(-n) });
}

/** Sectors read + written so far and I/Os in flight, summed over the machine's disks (not loop/ram). */
async function diskActivity(): Promise<{ sectors: number; inFlight: number }> {
  let sectors = 0;
  let inFlight = 0;
  for (const line of (await readFile("/proc/diskstats", "utf8")).split("\n")) {
    const f = line.trim().split(/\s+/);
    if (f.length < 14 || /^(loop|ram|zram|dm-|md)/.test(f[2]!)) continue;
    sectors += Number(f[5]) + Number(f[9]);
    inFlight += Number(f[11]);
  }
  return { sectors, inFlight };
}

/**
 * Gets the machine ready for a timed run: writes back dirty pages, waits until the disks are
 * idle (the preparation writes GiBs that the virtual disk may still be flushing after `sync`
 * returns: up to 60 s, nothing in flight and under 1 MiB moved in half a second, twice in a row),
 * then empties the page cache so the run reads from disk. Returns how long it waited.
 */
async function quiesce(dropCaches: boolean): Promise<number> {
  const t = now();
  await run("sync", []);
  let previous = await diskActivity();
  let quiet = 0;
  while (quiet < 2 && now() - t < 60_000) {
    await sleep(500);
    const current = await diskActivity();
    quiet = current.inFlight === 0 && current.sectors - previous.sectors < 2048 ? quiet + 1 : 0;
    previous = current;
  }
  if (dropCaches) await writeFile("/proc/sys/vm/drop_caches", "3\n");
  return ms(t);
}

/**
 * `docker run --rm --network none <image> busybox true` for each image, one after the other. The
 * lab's images hold a static busybox with a few applet links, `true` not among them: the check
 * execs busybox itself (the same binary `true` would be).
 */
async function runCheck(dockerd: PrivateDockerd, refs: readonly string[]): Promise<void> {
  for (const ref of refs) {
    await dockerd.docker(["run", "--rm", "--network", "none", ref, ...RUN_CHECK], { timeoutMs: LONG_MS });
  }
}

/**
 * Unmounts the cache volumes mounted on a host. Needed between runs: every pool volume is a copy
 * of one snapshot, so all carry the same XFS UUID, and XFS refuses to mount a second filesystem
 * with a UUID already mounted. On EC2 each volume sits on its own machine; the lab has one kernel.
 */
async function unmountVolumes(host: LabHost): Promise<void> {
  for (const mountPoint of await mountPointsUnder(host.paths.mountRoot)) await run("umount", [mountPoint]);
}

async function setDaemonJson(host: LabHost, extra: Record<string, unknown>): Promise<void> {
  const current = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
  await writeFile(host.paths.daemonJson, JSON.stringify({ ...current, ...extra }, null, 2) + "\n");
}

/** The private dockerd's network namespace (see src/lab/docker/dockerd.ts: `<root>/net.ns`). */
const netnsOf = (host: LabHost) => join(host.paths.dockerdRoot, "net.ns");

async function duBytes(path: string): Promise<number> {
  const { stdout } = await run("du", ["-sb", path]);
  return Number(stdout.split(/\s/)[0]);
}

/** The image set for a size: 2 images up to 0.5 GiB, 3 up to 1 GiB, 4 above; whole MiB each. */
function imageSet(sizeGiB: number): GoldenImage[] {
  const count = sizeGiB <= 0.5 ? 2 : sizeGiB <= 1 ? 3 : 4;
  const each = Math.round((sizeGiB * GiB) / count / MiB) * MiB;
  return Array.from({ length: count }, (_, i) => ({ tag: `bench/app-${i}:1`, payloadBytes: each }));
}

// ---------------------------------------------------------------------------------------------
// The registry, run inside a dockerd's network namespace

/**
 * Registries come from src/lab/docker/registry.ts (startLabRegistry): the same docker-registry the refresh's lab test
 * runs.
 */
type Registry = LabRegistry;

/**
 * Starts docker-registry on 127.0.0.1:<port> inside `netns`, registered under the lab's root so its reaper stops it
 * too.
 */
async function startRegistry(
  lab: Lab,
  options: { dir: string; storage: string; netns: string; port: number; log: Logger },
): Promise<Registry> {
  return startLabRegistry({ labRoot: lab.root, ...options });
}

/** A docker CLI command on the source of the tar and the registry: the host's dockerd, or a machine's. */
type DockerCli = (args: string[], timeoutMs?: number) => Promise<unknown>;

/**
 * The set saved to a tar (`tarArg` as the source's docker names it, `tarFile` as this process
 * does) and pushed to a fresh registry (stopped after; its storage serves the pulls); the times
 * and sizes.
 */
async function prepareTarAndRegistry(
  lab: Lab,
  docker: DockerCli,
  tags: readonly string[],
  o: { tarArg: string; tarFile: string; work: string; storage: string; netns: string; port: number; log: Logger },
): Promise<{ saveMs: number; tarBytes: number; pushMs: number; registryBytes: number }> {
  let t = now();
  await docker(["save", "-o", o.tarArg, ...tags], LONG_MS);
  const saveMs = ms(t);
  const tarBytes = (await stat(o.tarFile)).size;
  let pushMs: number;
  const registry = await startRegistry(lab, {
    dir: o.work,
    storage: o.storage,
    netns: o.netns,
    port: o.port,
    log: o.log,
  });
  try {
    t = now();
    for (const tag of tags) {
      const remote = `127.0.0.1:${o.port}/${tag}`;
      await docker(["tag", tag, remote]);
      await docker(["push", remote], LONG_MS);
    }
    pushMs = ms(t);
  } finally {
    await registry.stop();
  }
  return { saveMs, tarBytes, pushMs, registryBytes: await duBytes(o.storage) };
}

// ---------------------------------------------------------------------------------------------
// The agent bundle for the RSS run

/** Builds the agent with scripts/build.mjs into `dir` (dist/ is left alone); returns its entry. */
async function bundleAgent(dir: string): Promise<string> {
  await buildAgent(dir, REPO);
  return join(dir, "ebs-cache-agent.mjs");
}

// ---------------------------------------------------------------------------------------------
// One size

interface Context {
  options: BenchOptions;
  /** Scratch folder outside the lab (bundle, RSS probe). */
  temp: string;
  log: Logger & { tail(n: number): string[] };
  bundle: string;
  /** `dockerd --version`'s version on this machine. */
  hostEngine: string;
  say(line: string): void;
}

/** An image set of one size, as every kind of node benches it. */
interface SizeSet {
  sizeGiB: number;
  images: ReturnType<typeof imageSet>;
  tags: string[];
  snapshotGiB: number;
  imageSetName: string;
}

/**
 * One size on one kind of node: the host's dockerd, or engine machines of one engine and store.
 * The same steps either way (prepare the golden snapshot, the tar and the registry; then attach,
 * load and pull, each `runs` times), each kind's own in benchOnHost and benchOnMachines.
 */
async function benchSize(choice: HostEngine, sizeGiB: number, ctx: Context): Promise<SizeResult> {
  const { log, say } = ctx;
  const images = imageSet(sizeGiB);
  const payload = images.reduce((sum, image) => sum + (image.payloadBytes ?? 0), 0);
  // The data-root holds the set once (extracted). Headroom as a pool volume needs it for
  // containers' writable layers; here `docker save` on the source host also stages a full copy
  // of the layers under <data-root>/tmp. Sparse files: unwritten space costs no disk.
  const snapshotGiB = Math.max(2, Math.ceil((payload / GiB) * 2.25 + 1));
  const set: SizeSet = {
    sizeGiB,
    images,
    tags: images.map((image) => image.tag),
    snapshotGiB,
    imageSetName: `bench-${sizeGiB}g`,
  };
  const engine = choice.kind === "machine" ? ENGINES[choice.engine] : undefined;
  const store = choice.kind === "machine" ? choice.store : "graphdriver";
  const result: SizeResult = {
    sizeGiB,
    engine: engine?.name ?? ctx.hostEngine,
    store,
    nodes: choice.kind,
    images: images.map((image) => ({ tag: image.tag, payloadBytes: image.payloadBytes ?? 0 })),
    snapshotGiB,
    setup: {},
    attach: emptyMethod(),
    load: emptyMethod(),
    pull: emptyMethod(),
    agentProcess: [],
    ratios: {},
  };
  say(
    `\n== ${engine ? `${engine.name}, ${store} store, ` : ""}image set ${sizeGiB} GiB: ${images.length} images x ` +
      `${((images[0]!.payloadBytes ?? 0) / MiB).toFixed(0)} MiB, golden snapshot ${snapshotGiB} GiB`,
  );
  let rootfs: Rootfs | undefined;
  if (engine) {
    const t = now();
    rootfs = await cachedRootfs(engine, say);
    result.setup.rootfsMs = ms(t);
    if (rootfs.built)
      say(`  built the root file system of ${engine.name} in ${seconds(rootfs.ms)} s (cached from now on)`);
  }

  const lab = await startLab({ name: "bench", ...labTiming(ctx.options), log });
  const machines: Machine[] = [];
  try {
    const work = join(lab.root, "bench");
    await mkdir(work, { recursive: true });
    if (choice.kind === "machine")
      await benchOnMachines({ lab, work, set, result, ctx }, { store: choice.store, rootfs: rootfs!, machines });
    else await benchOnHost({ lab, work, set, result, ctx });
  } catch (error) {
    result.error = describeError(error);
    say(`  FAILED: ${result.error}`);
    for (const line of log.tail(30)) say(`    | ${line}`);
  } finally {
    for (const m of machines.splice(0)) await m.destroy();
    await lab.close();
  }

  const attach = result.attach.medianMs;
  if (attach) {
    if (result.load.medianMs !== undefined) result.ratios.loadOverAttach = round2(result.load.medianMs / attach);
    if (result.pull.medianMs !== undefined) result.ratios.pullOverAttach = round2(result.pull.medianMs / attach);
  }
  return result;
}

/** What a size's bench on either kind of node works in: the lab, its work folder, the set, the result it fills. */
interface SizeBench {
  lab: Lab;
  work: string;
  set: SizeSet;
  result: SizeResult;
  ctx: Context;
}

type Rootfs = Awaited<ReturnType<typeof cachedRootfs>>;

/** The size on the host's dockerd: lab hosts for the source, attach (and the agent as a process), load and pull. */
async function benchOnHost({ lab, work, set, result, ctx }: SizeBench): Promise<void> {
  const { options, log, say } = ctx;
  const { images, tags, snapshotGiB, imageSetName } = set;
  // --- Preparation (not timed) -----------------------------------------------------------
  let t = now();
  const golden = await buildGoldenSnapshot(lab, {
    pool: POOL,
    imageSet: imageSetName,
    images,
    sizeGiB: snapshotGiB,
    log,
  });
  result.setup.goldenSnapshotMs = ms(t);
  say(`  prepared golden snapshot ${golden.snapshotId} in ${seconds(result.setup.goldenSnapshotMs)} s`);
  t = now();
  // One per attach run, one for the source of save/push, one (or two) for the agent process.
  const count = options.runs + 2 + (options.rssTsx ? 1 : 0);
  const volumes = await createPoolVolumes(lab, golden, { pool: POOL, imageSet: imageSetName, count });
  result.setup.poolVolumesMs = ms(t);

  // The source of the tar and the registry: a host running dockerd straight on a pool volume,
  // attached and mounted by hand (as the golden test does), so (b) and (c) do not depend on (a).
  const tar = join(work, "images.tar");
  const registryStorage = join(work, "registry");
  const port = await freeLoopbackPort();
  const remote = (tag: string) => `127.0.0.1:${port}/${tag}`;
  let prepared: Awaited<ReturnType<typeof prepareTarAndRegistry>>;
  const source = await lab.addHost({ tags: { Name: "bench-source" } });
  try {
    const sourceVolume = volumes.pop()!;
    const dataRoot = await attachAndMount(lab, source, sourceVolume);
    await setDaemonJson(source, { "data-root": dataRoot, "insecure-registries": [`127.0.0.1:${port}`] });
    const dockerd = await source.startDocker();
    await assertImages(dockerd, tags, dataRoot);
    const docker: DockerCli = (args, timeoutMs) => dockerd.docker(args, timeoutMs ? { timeoutMs } : {});
    prepared = await prepareTarAndRegistry(lab, docker, tags, {
      tarArg: tar,
      tarFile: tar,
      work,
      storage: registryStorage,
      netns: netnsOf(source),
      port,
      log,
    });
  } finally {
    await source.dockerd?.stop();
    await unmountVolumes(source);
  }
  Object.assign(result.setup, prepared);
  say(
    `  prepared tar (${(prepared.tarBytes / GiB).toFixed(2)} GiB, save ${seconds(prepared.saveMs)} s) and ` +
      `registry (${(prepared.registryBytes / GiB).toFixed(2)} GiB, push ${seconds(prepared.pushMs)} s)`,
  );

  // --- (a) attach: the agent's boot, then the run check ----------------------------------
  await method(result.attach, "attach", ctx, lab, async () => {
    const host = await lab.addHost({ tags: { Name: "bench-attach" } });
    try {
      const quiesceMs = await quiesce(options.dropCaches);
      const t0 = now();
      const booted = await bootLabHost(lab, host, { overrides: { pool: POOL, imageSet: imageSetName }, log });
      const agentMs = ms(t0);
      const outcome = booted.report?.outcome;
      if (outcome !== "ready" || !host.dockerd) {
        throw new Error(`agent boot ended ${outcome ?? "without a result"}: ${booted.report?.reason ?? "see the log"}`);
      }
      const t1 = now();
      await runCheck(host.dockerd, tags);
      const runCheckMs = ms(t1);
      return {
        totalMs: ms(t0),
        parts: { agentMs, runCheckMs },
        excluded: { quiesceMs },
        timeline: booted.report?.timeline ?? [],
      };
    } finally {
      // Frees the CPU for what follows, and the XFS UUID for the next mount (the volume stays
      // attached until the lab closes).
      await host.dockerd?.stop();
      await unmountVolumes(host);
    }
  });

  // --- The agent as a process: wall time and peak RSS -----------------------------------
  const processRuns: Array<[string, string[]]> = [["bundle", [ctx.bundle]]];
  if (options.rssTsx) processRuns.push(["tsx", ["--import", "tsx", join(REPO, "src/cli.ts")]]);
  const agentArgs = (config: string) => ["boot", "--config", config, "--json"];
  for (const [how, entry] of processRuns) {
    const host = await lab.addHost({ tags: { Name: `bench-rss-${how}` } });
    try {
      const config = await writeLabConfig(lab, host, {
        pool: POOL,
        imageSet: imageSetName,
        docker: { control: "none" },
      });
      await quiesce(options.dropCaches);
      const measured = await measureAgentProcess(entry, agentArgs(config), how, ctx.temp);
      result.agentProcess.push(measured);
      say(
        `  agent process (${how}): ${measured.outcome ?? "?"} in ${seconds(measured.wallMs)} s, ${rssText(measured)}`,
      );
    } catch (error) {
      result.agentProcess.push({ how, command: [], exitCode: -1, wallMs: 0, error: describeError(error) });
      say(`  agent process (${how}) FAILED: ${describeError(error)}`);
    } finally {
      await unmountVolumes(host);
    }
  }

  // --- (b) docker load into a fresh dockerd ----------------------------------------------
  await method(result.load, "load", ctx, lab, async () => {
    const host = await lab.addHost({ tags: { Name: "bench-load" } });
    try {
      const t = now();
      const dockerd = await host.startDocker();
      const dockerdStartMs = ms(t);
      const quiesceMs = await quiesce(options.dropCaches);
      const t0 = now();
      await dockerd.docker(["load", "-i", tar], { timeoutMs: LONG_MS });
      const loadMs = ms(t0);
      const t1 = now();
      await runCheck(dockerd, tags);
      const runCheckMs = ms(t1);
      return { totalMs: ms(t0), parts: { loadMs, runCheckMs }, excluded: { dockerdStartMs, quiesceMs } };
    } finally {
      await host.dockerd?.stop();
      await rm(host.paths.defaultDataRoot, { recursive: true, force: true });
    }
  });
  await rm(tar, { force: true });

  // --- (c) docker pull from the registry into a fresh dockerd ----------------------------
  await method(result.pull, "pull", ctx, lab, async () => {
    const host = await lab.addHost({ tags: { Name: "bench-pull" } });
    let registry: Registry | undefined;
    try {
      await setDaemonJson(host, { "insecure-registries": [`127.0.0.1:${port}`] });
      const t = now();
      const dockerd = await host.startDocker();
      const dockerdStartMs = ms(t);
      registry = await startRegistry(lab, { dir: work, storage: registryStorage, netns: netnsOf(host), port, log });
      const quiesceMs = await quiesce(options.dropCaches);
      const t0 = now();
      for (const tag of tags) await dockerd.docker(["pull", "--quiet", remote(tag)], { timeoutMs: LONG_MS });
      const pullMs = ms(t0);
      const t1 = now();
      await runCheck(dockerd, tags.map(remote));
      const runCheckMs = ms(t1);
      return { totalMs: ms(t0), parts: { pullMs, runCheckMs }, excluded: { dockerdStartMs, quiesceMs } };
    } finally {
      await registry?.stop();
      await host.dockerd?.stop();
      await rm(host.paths.defaultDataRoot, { recursive: true, force: true });
    }
  });
}

/**
 * The size on engine machines of one engine and store: the golden snapshot built by that docker
 * on that store (buildEngineGoldenSnapshot); attach = the agent under the machine's systemd; load
 * and pull in fresh machines. The same source volume feeds the tar and the registry (which
 * listens on this machine's loopback: the machines share its network). Every machine booted goes
 * in `machines` (benchSize destroys what is left).
 */
async function benchOnMachines(
  { lab, work, set, result, ctx }: SizeBench,
  { store, rootfs, machines }: { store: ImageStore; rootfs: Rootfs; machines: Machine[] },
): Promise<void> {
  const { options, log, say } = ctx;
  const { images, tags, snapshotGiB, imageSetName } = set;
  const keep = (m: Machine) => void machines.push(m);
  const destroyAll = async () => {
    for (const m of machines.splice(0)) await m.destroy();
  };
  const workBind = { from: work, to: IN_MACHINE_WORK };

  // --- Preparation (not timed) -----------------------------------------------------------
  const t = now();
  const golden = await buildEngineGoldenSnapshot(lab, {
    pool: POOL,
    imageSet: imageSetName,
    images,
    sizeGiB: snapshotGiB,
    rootfs: rootfs.dir,
    bundle: ctx.bundle,
    store,
    log,
  });
  result.setup.goldenSnapshotMs = ms(t);
  say(
    `  prepared golden snapshot ${golden.snapshotId} (docker ${golden.built.engineVersion}, ` +
      `${golden.built.store}) in ${seconds(result.setup.goldenSnapshotMs)} s`,
  );
  const volumes = await createPoolVolumes(lab, golden, {
    pool: POOL,
    imageSet: imageSetName,
    count: options.runs + 1,
  });

  const port = await freeLoopbackPort();
  const registryAt = `127.0.0.1:${port}`;
  const remote = (tag: string) => `${registryAt}/${tag}`;
  const registryStorage = join(work, "registry");
  const hostNetns = `/proc/${process.pid}/ns/net`;
  const insecure = { "insecure-registries": [registryAt] };
  let prepared: Awaited<ReturnType<typeof prepareTarAndRegistry>>;
  const source = await lab.addHost({ tags: { Name: "bench-source" } });
  try {
    const device = await attachDevice(lab, source, volumes.pop()!);
    const m = await dockerOnlyMachine({
      rootfs: rootfs.dir,
      bundle: ctx.bundle,
      store,
      onBooted: keep,
      binds: [workBind],
      daemonJson: insecure,
    });
    await inMachine(m, ["mkdir", "-p", "/mnt/source"]);
    await inMachine(m, ["mount", "-o", "noatime,nouuid", device, "/mnt/source"]);
    await dockerOnVolume(m, "/mnt/source", store);
    const docker: DockerCli = (args, timeoutMs) => inMachine(m, ["docker", ...args], timeoutMs);
    const tarArg = join(IN_MACHINE_WORK, "images.tar");
    prepared = await prepareTarAndRegistry(lab, docker, tags, {
      tarArg,
      tarFile: join(work, "images.tar"),
      work,
      storage: registryStorage,
      netns: hostNetns,
      port,
      log,
    });
  } finally {
    await destroyAll();
  }
  Object.assign(result.setup, prepared);
  say(
    `  prepared tar (${(prepared.tarBytes / GiB).toFixed(2)} GiB, save ${seconds(prepared.saveMs)} s) and ` +
      `registry (${(prepared.registryBytes / GiB).toFixed(2)} GiB, push ${seconds(prepared.pushMs)} s)`,
  );

  // --- (a) attach: the agent's phases under the machine's systemd, then the run check ------
  await method(result.attach, "attach", ctx, lab, async () => {
    try {
      const quiesceMs = await quiesce(options.dropCaches);
      const t0 = now();
      const { machine: m } = await startEngineHost(
        lab,
        {
          rootfs: rootfs.dir,
          bundle: ctx.bundle,
          store,
          name: "bench-attach",
          overrides: { pool: POOL, imageSet: imageSetName },
        },
        keep,
      );
      const journal = await waitForReadyUnit(m, LONG_MS);
      const machineMs = ms(t0);
      const agentStarting = unitStarting(journal, "ebs-cache-agent.service");
      // The end of phase 2's run (its last line): its unit has started earlier, at READY=1 (docker final).
      const readyDone = journal.find(
        (e) => e.identifier === "ebs-cache-agent" && e.systemdUnit === READY_UNIT && e.message.startsWith("boot.done:"),
      );
      if (!agentStarting || !readyDone)
        throw new Error("the machine's journal lacks the agent's start or the ready unit's end");
      const agentMs = Math.round((readyDone.realtimeUs - agentStarting.realtimeUs) / 1000);
      const status = await machineStatus(m);
      if (status.boot?.outcome !== "ready")
        throw new Error(
          `agent boot ended ${status.boot?.outcome ?? "without a result"}: ` +
            `${status.boot?.reason ?? "see the journal"}`,
        );
      const t1 = now();
      await machineRunCheck(m, tags);
      const runCheckMs = ms(t1);
      return {
        totalMs: agentMs + runCheckMs,
        parts: { agentMs, runCheckMs },
        excluded: { quiesceMs, machineBootUntilReadyMs: machineMs },
        timeline: status.boot.timeline.map((entry) => ({ step: entry.step, ms: Math.round(entry.seconds * 1000) })),
      };
    } finally {
      // Frees the CPU, and the XFS UUID (every pool volume is a clone) for the next mount.
      await destroyAll();
    }
  });

  // --- (b) docker load into a fresh machine's docker -------------------------------------
  await method(result.load, "load", ctx, lab, async () => {
    try {
      const t0 = now();
      const m = await dockerOnlyMachine({
        rootfs: rootfs.dir,
        bundle: ctx.bundle,
        store,
        onBooted: keep,
        binds: [{ ...workBind, readOnly: true }],
      });
      const dockerdStartMs = ms(t0);
      const quiesceMs = await quiesce(options.dropCaches);
      const t1 = now();
      await inMachine(m, ["docker", "load", "-i", join(IN_MACHINE_WORK, "images.tar")], LONG_MS);
      const loadMs = ms(t1);
      const t2 = now();
      await machineRunCheck(m, tags);
      const runCheckMs = ms(t2);
      return { totalMs: ms(t1), parts: { loadMs, runCheckMs }, excluded: { dockerdStartMs, quiesceMs } };
    } finally {
      await destroyAll();
    }
  });
  await rm(join(work, "images.tar"), { force: true });

  // --- (c) docker pull into a fresh machine's docker -------------------------------------
  await method(result.pull, "pull", ctx, lab, async () => {
    let registry: Registry | undefined;
    try {
      const t0 = now();
      const m = await dockerOnlyMachine({
        rootfs: rootfs.dir,
        bundle: ctx.bundle,
        store,
        onBooted: keep,
        daemonJson: insecure,
      });
      const dockerdStartMs = ms(t0);
      registry = await startRegistry(lab, { dir: work, storage: registryStorage, netns: hostNetns, port, log });
      const quiesceMs = await quiesce(options.dropCaches);
      const t1 = now();
      for (const tag of tags) await inMachine(m, ["docker", "pull", "--quiet", remote(tag)], LONG_MS);
      const pullMs = ms(t1);
      const t2 = now();
      await machineRunCheck(m, tags.map(remote));
      const runCheckMs = ms(t2);
      return { totalMs: ms(t1), parts: { pullMs, runCheckMs }, excluded: { dockerdStartMs, quiesceMs } };
    } finally {
      await registry?.stop();
      await destroyAll();
    }
  });
}

const round2 = (value: number) => Math.round(value * 100) / 100;

/** Runs one method `runs` times (each in its own try), recording samples or the first error. */
async function method(
  into: MethodResult,
  name: string,
  ctx: Context,
  lab: Lab,
  once: () => Promise<Sample>,
): Promise<void> {
  for (let i = 0; i < ctx.options.runs; i++) {
    try {
      const loadAvg1 = round2(loadavg()[0] ?? 0);
      const others = await otherLabs(lab);
      const sample: Sample = { ...(await once()), loadAvg1, ...(others.length > 0 ? { otherLabs: others } : {}) };
      into.samples.push(sample);
      const parts = Object.entries(sample.parts)
        .map(([key, value]) => `${key} ${seconds(value)}`)
        .join(", ");
      const excluded = Object.entries(sample.excluded ?? {})
        .map(([key, value]) => `${key} ${seconds(value)}`)
        .join(", ");
      ctx.say(
        `  ${name.padEnd(6)} run ${i + 1}: ${seconds(sample.totalMs)} s ` +
          `(${parts}${excluded ? `; not counted: ${excluded}` : ""}) load ` +
          `${sample.loadAvg1}${others.length > 0 ? ` — other labs up: ${others.join(" ")}` : ""}`,
      );
    } catch (error) {
      into.error ??= describeError(error);
      ctx.say(`  ${name.padEnd(6)} run ${i + 1} FAILED: ${describeError(error)}`);
      for (const line of ctx.log.tail(15)) ctx.say(`    | ${line}`);
    }
  }
  const m = median(into.samples.map((sample) => sample.totalMs));
  if (m !== undefined) into.medianMs = m;
}

/** Fails, with what docker and the data-root show, unless every tag is listed. */
async function assertImages(dockerd: PrivateDockerd, tags: readonly string[], dataRoot: string): Promise<void> {
  const listed = (await dockerd.docker(["image", "ls", "--format", "{{.Repository}}:{{.Tag}}"])).stdout.split("\n");
  const missing = tags.filter((tag) => !listed.includes(tag));
  if (missing.length === 0) return;
  const info = await dockerd.info();
  const repositories = await readFile(join(dataRoot, "image/overlay2/repositories.json"), "utf8").catch(
    (error: unknown) => describeError(error),
  );
  const mounted = await run("findmnt", ["-n", "-T", dataRoot], { check: false });
  throw new Error(
    `the source dockerd lacks ${missing.join(", ")}: it lists [${listed.join(" ")}], runs on ${info.DockerRootDir}; ` +
      `repositories.json: ${repositories.slice(0, 400)}; findmnt: ${mounted.stdout}`,
  );
}

/** Lab roots under the lab base other than `lab`'s (being created ones included). */
async function otherLabs(lab?: Lab): Promise<string[]> {
  const own = lab ? basename(lab.root) : undefined;
  return (await readdir(labBase()).catch(() => [] as string[])).filter((name) => name !== own);
}

/** Attaches a volume to a host and mounts it under the host's mount root; returns its data-root. */
async function attachAndMount(lab: Lab, host: LabHost, volumeId: string): Promise<string> {
  const device = await attachDevice(lab, host, volumeId);
  const mountPoint = join(host.paths.mountRoot, volumeId);
  await mkdir(mountPoint, { recursive: true });
  // nouuid: every clone of the snapshot carries the same XFS UUID (see unmountVolumes).
  await run("mount", ["-o", "noatime,nouuid", device, mountPoint]);
  return join(mountPoint, DATA_ROOT_SUBDIR);
}

/** Attaches a volume to a host; returns its device once it is there. */
async function attachDevice(lab: Lab, host: LabHost, volumeId: string): Promise<string> {
  const ec2 = lab.ec2Client();
  await ec2.send(
    new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: host.instance.instanceId, Device: "/dev/sdf" }),
  );
  const deadline = Date.now() + 60_000;
  while (
    (await ec2.send(new DescribeVolumesCommand({ VolumeIds: [volumeId] }))).Volumes?.[0]?.Attachments?.[0]?.State !==
    "attached"
  ) {
    if (Date.now() > deadline) throw new Error(`${volumeId} was not attached within 60 s`);
    await sleep(50);
  }
  return lab.backend.deviceReady(volumeId);
}

/**
 * A module preloaded (`--import`) into the agent's process: at exit it writes the process's own
 * peak RSS (getrusage RUSAGE_SELF, so without the commands it ran) to $BENCH_RSS_FILE.
 */
const RSS_PROBE = `import { writeFileSync } from "node:fs";
process.on("exit", () => {
  try {
    writeFileSync(process.env.BENCH_RSS_FILE, JSON.stringify({ maxRssKiB: process.resourceUsage().maxRSS }));
  } catch {}
});
`;

/**
 * Runs the agent CLI (`node [loader] <entry> boot …`) as a child process and measures its wall
 * time and peak RSS twice: the node process alone (the probe above), and, when GNU time is
 * installed, ru_maxrss as wait4 reports it (the largest of node and the commands it waited for,
 * e.g. `dockerd --version`).
 */
async function measureAgentProcess(
  nodeArgs: string[],
  agentArgs: string[],
  how: string,
  temp: string,
): Promise<AgentProcessResult> {
  const probe = join(temp, "rss-probe.mjs");
  await writeFile(probe, RSS_PROBE);
  const rssFile = join(temp, `rss-${how}-${Date.now()}.json`);
  const command = [process.execPath, "--import", pathToFileURL(probe).href, ...nodeArgs, ...agentArgs];
  const useTime = existsSync(GNU_TIME);
  const argv = useTime ? [GNU_TIME, "-v", ...command] : command;
  const child = spawn(argv[0]!, argv.slice(1), {
    stdio: ["ignore", "pipe", "pipe"],
    cwd: REPO,
    env: { ...process.env, BENCH_RSS_FILE: rssFile },
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
  const t0 = now();
  const exitCode = await new Promise<number>((done, reject) => {
    child.once("error", reject);
    child.once("close", (code) => done(code ?? -1));
  });
  const wallMs = ms(t0);
  const own = await readFile(rssFile, "utf8")
    .then((text) => (JSON.parse(text) as { maxRssKiB?: number }).maxRssKiB)
    .catch(() => undefined);
  const withChildren = useTime ? Number(/Maximum resident set size \(kbytes\): (\d+)/.exec(stderr)?.[1]) : undefined;
  let outcome: string | undefined;
  let timeline: AgentProcessResult["timeline"];
  try {
    const parsed = JSON.parse(stdout) as {
      result?: { outcome?: string; timeline?: AgentProcessResult["timeline"] } | null;
    };
    outcome = parsed.result?.outcome;
    timeline = parsed.result?.timeline;
  } catch {
    // Reported through exitCode and error below.
  }
  const measured: AgentProcessResult = {
    how,
    command,
    exitCode,
    wallMs,
    ...(own ? { peakRssKiB: own } : {}),
    ...(withChildren && Number.isFinite(withChildren) ? { peakRssWithChildrenKiB: withChildren } : {}),
    ...(outcome ? { outcome } : {}),
    ...(timeline ? { timeline } : {}),
  };
  // `prepared`: with docker.control=none the agent leaves docker (and the ready label) to systemd.
  if (exitCode !== 0 || (outcome !== "ready" && outcome !== "prepared")) {
    const agentLines = stderr.split("\n").filter((line) => line.startsWith("<"));
    measured.error = `exit ${exitCode}, outcome ${outcome ?? "?"}: ${agentLines.slice(-3).join(" | ")}`;
  }
  return measured;
}

// ---------------------------------------------------------------------------------------------
// Engines and stores (engine machines)

/**
 * Every engine × store asked for, as where its nodes run; a combination the lab cannot run
 * (containerd on 20.10) is said and left out.
 */
function engineChoices(options: BenchOptions, hostEngine: string, say: (line: string) => void): HostEngine[] {
  if (options.engines.length === 0 && options.stores.length === 1 && options.stores[0] === "graphdriver")
    return [{ kind: "host" }];
  const engines: Array<EngineName | undefined> = options.engines.length > 0 ? options.engines : [undefined];
  const choices: HostEngine[] = [];
  for (const engine of engines) {
    for (const store of options.stores) {
      try {
        choices.push(chooseHostEngine({ ...(engine ? { engine } : {}), store }, hostEngine));
      } catch (error) {
        if (!(error instanceof EngineChoiceError)) throw error;
        say(`skipped: docker ${engine ?? hostEngine} with the ${store} store: ${error.message}`);
      }
    }
  }
  return choices;
}

/** Where the bench's work folder (tar) is bound in the engine machines. */
const IN_MACHINE_WORK = "/bench";

/** The run check inside an engine machine, with its own docker CLI. */
async function machineRunCheck(m: Machine, refs: readonly string[]): Promise<void> {
  for (const ref of refs)
    await inMachine(m, ["docker", "run", "--rm", "--pull=never", "--network", "none", ref, ...RUN_CHECK], LONG_MS);
}

// ---------------------------------------------------------------------------------------------
// Report

const mib = (kib: number | undefined) => (kib ? (kib / 1024).toFixed(1) : "?");
function rssText(p: AgentProcessResult): string {
  const withChildren = p.peakRssWithChildrenKiB
    ? `, ${mib(p.peakRssWithChildrenKiB)} MiB with the commands it ran (GNU time)`
    : "";
  return `peak RSS ${mib(p.peakRssKiB)} MiB (node process)${withChildren}`;
}

function summaryTable(results: SizeResult[]): string[] {
  const header = [
    "engine",
    "store",
    "set GiB",
    "images",
    "attach s",
    "load s",
    "pull s",
    "load/attach",
    "pull/attach",
    "agent s",
    "agent proc s",
    "agent RSS MiB",
  ];
  const rows = results.map((r) => {
    const bundle = r.agentProcess.find((p) => p.how === "bundle");
    const agent = median(r.attach.samples.map((s) => s.parts.agentMs ?? 0));
    return [
      `${r.engine}${r.nodes === "machine" ? " (nspawn)" : " (host)"}`,
      r.store,
      String(r.sizeGiB),
      String(r.images.length),
      r.attach.error && r.attach.medianMs === undefined ? "failed" : seconds(r.attach.medianMs),
      r.load.error && r.load.medianMs === undefined ? "failed" : seconds(r.load.medianMs),
      r.pull.error && r.pull.medianMs === undefined ? "failed" : seconds(r.pull.medianMs),
      r.ratios.loadOverAttach === undefined ? "-" : `${r.ratios.loadOverAttach.toFixed(1)}x`,
      r.ratios.pullOverAttach === undefined ? "-" : `${r.ratios.pullOverAttach.toFixed(1)}x`,
      seconds(agent),
      bundle && !bundle.error ? seconds(bundle.wallMs) : "-",
      bundle?.peakRssKiB ? (bundle.peakRssKiB / 1024).toFixed(1) : "-",
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) =>
    cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join("  ");
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)];
}

function sizeTable(r: SizeResult): string[] {
  const attach = r.attach.medianMs;
  const ratio = (value: number | undefined) => (value === undefined ? "" : `${value.toFixed(1)}x attach`);
  const medianPart = (m: MethodResult, key: string) => median(m.samples.map((s) => s.parts[key] ?? 0));
  const medianExcluded = (m: MethodResult, key: string) => median(m.samples.map((s) => s.excluded?.[key] ?? 0));
  const failed = (m: MethodResult) => (m.medianMs === undefined ? `failed: ${m.error ?? "?"}` : "");
  return [
    `  ${"method".padEnd(8)} ${"seconds".padStart(8)}  ${"ratio".padEnd(15)} breakdown (median of ` +
      `${r.attach.samples.length || "-"}/${r.load.samples.length || "-"}/${r.pull.samples.length || "-"} runs)`,
    `  ${"attach".padEnd(8)} ${seconds(attach).padStart(8)}  ${"1.0x".padEnd(15)} agent boot ` +
      `${seconds(medianPart(r.attach, "agentMs"))} + run check ${seconds(medianPart(r.attach, "runCheckMs"))} ` +
      `${failed(r.attach)}`,
    `  ${"load".padEnd(8)} ${seconds(r.load.medianMs).padStart(8)}  ${ratio(r.ratios.loadOverAttach).padEnd(15)} ` +
      `docker load ${seconds(medianPart(r.load, "loadMs"))} + run check ` +
      `${seconds(medianPart(r.load, "runCheckMs"))} (dockerd start ` +
      `${seconds(medianExcluded(r.load, "dockerdStartMs"))} not counted) ${failed(r.load)}`,
    `  ${"pull".padEnd(8)} ${seconds(r.pull.medianMs).padStart(8)}  ${ratio(r.ratios.pullOverAttach).padEnd(15)} ` +
      `docker pull ${seconds(medianPart(r.pull, "pullMs"))} + run check ` +
      `${seconds(medianPart(r.pull, "runCheckMs"))} (dockerd start ` +
      `${seconds(medianExcluded(r.pull, "dockerdStartMs"))} not counted) ${failed(r.pull)}`,
    ...r.agentProcess.map(
      (p) =>
        `  agent process (${p.how}, docker.control=none): ` +
        `${p.error ? `FAILED ${p.error}` : `${seconds(p.wallMs)} s wall, ${rssText(p)}`}`,
    ),
  ];
}

// ---------------------------------------------------------------------------------------------
// Main

async function main(): Promise<void> {
  const options = await parseOptions(process.argv.slice(2));
  if (process.getuid?.() !== 0) throw new Error("the lab needs root: run it with sudo");
  for (const binary of [REGISTRY_BIN, DOCKER_CLI, BUSYBOX, "/usr/bin/nsenter"]) {
    if (!existsSync(binary))
      throw new Error(`${binary} is missing: apt-get install -y docker-registry docker.io busybox-static util-linux`);
  }
  const say = (line: string) => process.stdout.write(line + "\n");
  say(`lab: ${options.ebsModel?.description ?? "every EC2 delay 0, no cold layer (no --ebs-model)"}`);
  const log = benchLogger(options.verbose);
  const started = new Date();
  const temp = await mkdtemp(join(tmpdir(), "ebs-bench-"));
  const results: SizeResult[] = [];
  try {
    const bundle = options.bundle ?? (await bundleAgent(temp));
    const hostEngine =
      /version ([0-9][^\s,]*)/.exec((await run(DOCKERD, ["--version"], { check: false })).stdout)?.[1] ?? "unknown";
    const ctx: Context = { options, temp, log, bundle, hostEngine, say };
    const choices = engineChoices(options, hostEngine, say);
    if (choices.some((c) => c.kind === "machine")) {
      const problems = await nspawnProblems();
      if (problems.length > 0) throw new Error(`engine machines cannot run here: ${problems.join("; ")}`);
    }
    const others = await otherLabs();
    if (others.length > 0)
      say(`warning: other labs are up (${others.join(" ")}): tests running alongside skew the timings`);
    say(
      `boot bench: sizes ${options.sizes.join(", ")} GiB, ${options.runs} run(s) each, page cache ` +
        `${options.dropCaches ? "dropped before each timed run" : "kept"}`,
    );
    say(
      `agent bundle for the process run: ${options.bundle ? bundle : "src/cli.ts built afresh with scripts/build.mjs"}`,
    );
    for (const choice of choices) {
      for (const size of options.sizes) results.push(await benchSize(choice, size, ctx));
    }
  } finally {
    await rm(temp, { recursive: true, force: true });
  }

  for (const r of results) {
    say(
      `\n${r.engine} (${r.nodes}), ${r.store} store: image set ${r.sizeGiB} GiB (${r.images.length} x ` +
        `${(r.images[0]!.payloadBytes / MiB).toFixed(0)} MiB)${r.error ? ` — incomplete: ${r.error}` : ""}`,
    );
    for (const line of sizeTable(r)) say(line);
  }
  say(
    `\nsummary (seconds until every image of the set ran \`docker run --rm --network none <image> ` +
      `${RUN_CHECK.join(" ")}\`):`,
  );
  for (const line of summaryTable(results)) say(line);

  const docker = await run(DOCKER_CLI, ["--version"], { check: false });
  const report = {
    bench: "boot",
    startedAt: started.toISOString(),
    finishedAt: new Date().toISOString(),
    command: `npx tsx bench/boot.ts ${process.argv.slice(2).join(" ")}`.trim(),
    options: {
      sizes: options.sizes,
      runs: options.runs,
      dropCaches: options.dropCaches,
      rssTsx: options.rssTsx,
      ebsModel: options.ebsModel ? { file: options.ebsModel.file, ...options.ebsModel.model } : null,
      engines: options.engines,
      stores: options.stores,
    },
    machine: {
      kernel: release(),
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model,
      memoryGiB: round2(totalmem() / GiB),
      node: process.version,
      docker: docker.stdout.trim(),
    },
    timing: {
      attach:
        "agent boot (bootLabHost: identify, select, claim, attach, device, mount, switch data-root, start " +
        "dockerd, verify images, labels) + run check",
      load: "docker load -i <tar> + run check; the fresh dockerd's start is measured but not counted",
      pull:
        "docker pull of each image (loopback registry) + run check; the fresh dockerd's start is measured but not " +
        "counted",
      runCheck: `docker run --rm --network none <image> ${RUN_CHECK.join(" ")}, each image in turn`,
      lab: options.ebsModel?.description ?? "EC2 emulator delays 0, device delay 0, no cold layer",
      machine:
        "engine machines: attach = the agent's phases under the machine's systemd (ebs-cache-agent.service " +
        "starting -> ebs-cache-agent-ready.service done, from the machine's journal; docker.service's start " +
        "between them included) + run check; the machine's own boot up to the agent is measured but not counted; " +
        "load and pull as on the host, in a fresh machine whose docker.service has started (its boot not counted)",
    },
    results,
  };
  await mkdir(options.outDir, { recursive: true });
  const stamp = started.toISOString().replace(/\..*$/, "").replace(/:/g, "").replace("T", "-");
  const file = join(options.outDir, `boot-${stamp}.json`);
  await writeFile(file, JSON.stringify(report, null, 2) + "\n");
  say(`\nwrote ${file}`);
  if (
    results.some(
      (r) => r.error || r.attach.error || r.load.error || r.pull.error || r.agentProcess.some((p) => p.error),
    )
  )
    process.exitCode = 1;
}

try {
  await main();
} catch (error) {
  process.stderr.write(`bench failed: ${describeError(error)}\n`);
  process.exitCode = 1;
}
