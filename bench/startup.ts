/**
 * The agent process's start-up: wall time and peak RSS of `node <bundle> …` as a host runs it,
 * without and with Node's compile cache (warmed as packer/scripts/ami-setup.sh warms it: each
 * command's `--help` once). See bench/README.md.
 *
 *   npx tsx bench/startup.ts                  # --help only (no root needed)
 *   sudo npx tsx bench/startup.ts --lab       # also `pool` and `boot` against a lab
 *   npx tsx bench/startup.ts --bundle OLD.mjs --bundle build   # compare with an older build
 */
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { buildAgent } from "../scripts/build.mjs";
import { run } from "../src/exec.ts";
import { createMemoryLogger } from "../src/log.ts";
import { writeLabConfig } from "../src/lab/machines/agent.ts";
import { mountPointsUnder } from "../src/lab/reaper/devices.ts";
import { buildGoldenSnapshot, createPoolVolumes } from "../src/lab/volumes/golden.ts";
import { startLab, type Lab, type LabHost } from "../src/lab/lab.ts";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const GNU_TIME = "/usr/bin/time";
const COMMANDS = ["boot", "release", "prewarm", "status", "gc", "pool"];

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "5" },
    bundle: { type: "string", multiple: true },
    lab: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (values.help) {
  process.stdout.write(
    [
      "usage: npx tsx bench/startup.ts [--runs N] [--bundle FILE|build]... [--lab]",
      "  --runs N       runs per case (default 5); the median is reported",
      "  --bundle FILE  an agent entry to measure; repeat it to compare builds, run in turn",
      "                 (`build`, the default: scripts/build.mjs afresh into a temp folder)",
      "  --lab          also `pool --json` and `boot --json` (docker.control none) against a lab (root)",
      "",
    ].join("\n"),
  );
  process.exit(0);
}
if (!existsSync(GNU_TIME))
  throw new Error(`${GNU_TIME} is missing: install Debian's \`time\` package (GNU time measures the peak RSS)`);
const runs = Number(values.runs);
if (!Number.isSafeInteger(runs) || runs < 1)
  throw new Error(`--runs: expected a whole number >= 1, got ${values.runs}`);

interface Sample {
  wallMs: number;
  /**
   * user + system CPU time of node (and the commands it waited for): less sensitive to the machine's load than wall
   * time.
   */
  cpuMs: number;
  maxRssKiB: number;
  /** boot --json: the sum of its timeline's steps (the work; the rest is node's start and loading). */
  stepsMs?: number;
}

/**
 * The sum of the steps of `boot --json`'s timeline, if that is what `stdout` holds; throws when
 * that boot did not end `prepared` (docker.control none) or `ready`: a degraded boot does less work.
 */
function stepsMs(stdout: string): number | undefined {
  let parsed: { result?: { outcome?: string; timeline?: Array<{ ms: number }> } | null };
  try {
    parsed = JSON.parse(stdout) as typeof parsed;
  } catch {
    return undefined;
  }
  const result = parsed.result;
  if (!result?.timeline) return undefined;
  if (result.outcome !== "prepared" && result.outcome !== "ready")
    throw new Error(`boot ended ${result.outcome ?? "?"}, not prepared`);
  return result.timeline.reduce((sum, step) => sum + step.ms, 0);
}

/** One run under GNU time: wall time around the process, ru_maxrss as wait4 reports it. */
async function measure(args: string[], env: Record<string, string>, scratch: string): Promise<Sample> {
  const timeFile = join(scratch, "time.txt");
  const t0 = performance.now();
  const result = await run(GNU_TIME, ["-f", "%M %U %S", "-o", timeFile, process.execPath, ...args], {
    env,
    check: false,
  });
  const wallMs = performance.now() - t0;
  // boot exits 4 (degraded) or 0; anything else means the figure measured a failure.
  if (result.exitCode !== 0 && result.exitCode !== 4)
    throw new Error(`${args.join(" ")} exited ${result.exitCode}: ${result.stderr.split("\n").slice(-3).join(" | ")}`);
  const steps = stepsMs(result.stdout);
  const [rss, user, system] = ((await readFile(timeFile, "utf8")).trim().split("\n").pop() ?? "")
    .split(" ")
    .map(Number);
  return {
    wallMs,
    cpuMs: ((user ?? NaN) + (system ?? NaN)) * 1000,
    maxRssKiB: rss ?? NaN,
    ...(steps === undefined ? {} : { stepsMs: steps }),
  };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)]!;
}

function report(name: string, samples: Sample[]): void {
  const wall = samples.map((s) => s.wallMs);
  const rss = samples.map((s) => s.maxRssKiB);
  const steps = samples.flatMap((s) => (s.stepsMs === undefined ? [] : [s.stepsMs]));
  process.stdout.write(
    `${name.padEnd(40)} ${(median(wall) / 1000).toFixed(2)} s  cpu ` +
      `${(median(samples.map((s) => s.cpuMs)) / 1000).toFixed(2)} s  ` +
      `${(median(rss) / 1024).toFixed(0).padStart(4)} MiB` +
      (`   (wall ${(Math.min(...wall) / 1000).toFixed(2)}..${(Math.max(...wall) / 1000).toFixed(2)} s, ` +
        `${samples.length} runs`) +
      (steps.length === samples.length
        ? `; wall - boot steps (node, loading, observe) ` +
          `${(median(samples.map((s) => s.wallMs - s.stepsMs!)) / 1000).toFixed(2)} s`
        : "") +
      ")\n",
  );
}

const scratch = await mkdtemp(join(tmpdir(), "ebs-cache-startup-"));
let lab: Lab | undefined;
try {
  const bundles: string[] = [];
  for (const given of values.bundle?.length ? values.bundle : ["build"]) {
    if (given !== "build") bundles.push(resolve(given));
    else {
      await buildAgent(scratch, REPO);
      bundles.push(join(scratch, "ebs-cache-agent.mjs"));
    }
  }
  const caches: Array<[string, (bundle: number) => Record<string, string>]> = [
    ["no compile cache", () => ({ NODE_COMPILE_CACHE: "" })],
    ["compile cache", (bundle) => ({ NODE_COMPILE_CACHE: join(scratch, `compile-cache-${bundle}`) })],
  ];
  // The AMI build's warm-up (packer/scripts/ami-setup.sh).
  for (const [b, bundle] of bundles.entries()) {
    for (const command of COMMANDS) await run(process.execPath, [bundle, command, "--help"], { env: caches[1]![1](b) });
  }
  process.stdout.write(
    `node ${process.version}, median of ${runs}; bundles (run in turn, so they share the machine's load):\n`,
  );
  for (const [b, bundle] of bundles.entries()) process.stdout.write(`  [${b}] ${bundle}\n`);

  /** Runs `args(bundle)` `runs` times per bundle and cache mode, the bundles in turn, and reports. */
  const measureCase = async (
    name: string,
    args: (bundle: string) => Promise<string[]>,
    after?: () => Promise<void>,
  ) => {
    for (const [how, env] of caches) {
      const samples: Sample[][] = bundles.map(() => []);
      for (let i = 0; i < runs; i++) {
        for (const [b, bundle] of bundles.entries()) {
          try {
            samples[b]!.push(await measure(await args(bundle), env(b), scratch));
          } finally {
            await after?.();
          }
        }
      }
      for (const b of bundles.keys()) report(`[${b}] ${name}, ${how}`, samples[b]!);
    }
  };

  await measureCase("--help", async (bundle) => [bundle, "--help"]);
  await measureCase("boot --help", async (bundle) => [bundle, "boot", "--help"]);

  if (values.lab) {
    const log = createMemoryLogger();
    const created = await startLab({
      name: "startup",
      delays: { createMs: 0, attachMs: 0, detachMs: 0, snapshotMs: 0 },
      deviceDelayMs: 0,
      log,
    });
    lab = created;
    const golden = await buildGoldenSnapshot(created, {
      pool: "startup",
      imageSet: "startup-set",
      images: [{ tag: "startup/app:1" }],
      log,
    });
    await createPoolVolumes(created, golden, {
      pool: "startup",
      imageSet: "startup-set",
      count: runs * caches.length * bundles.length,
    });
    const host = await created.addHost({ tags: { Name: "startup-pool" } });
    const poolConfig = await writeLabConfig(created, host, { pool: "startup" });
    await measureCase("pool --json (lab)", async (bundle) => [bundle, "pool", "--json", "--config", poolConfig]);

    // A fresh host per boot, each claiming a pool volume of its own (as bench/boot.ts's agent process).
    let booted: LabHost | undefined;
    await measureCase(
      "boot --json (lab)",
      async (bundle) => {
        booted = await created.addHost({ tags: { Name: "startup-boot" } });
        const config = await writeLabConfig(created, booted, {
          pool: "startup",
          imageSet: "startup-set",
          docker: { control: "none" },
        });
        return [bundle, "boot", "--config", config, "--json"];
      },
      // Every clone of the snapshot has the same XFS UUID: one mounted at a time.
      async () => {
        for (const mountPoint of await mountPointsUnder(booted!.paths.mountRoot)) await run("umount", [mountPoint]);
      },
    );
  }
} finally {
  await lab?.close();
  await rm(scratch, { recursive: true, force: true });
}
