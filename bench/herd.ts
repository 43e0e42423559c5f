/**
 * Herd and cost benchmark: what the agent's EC2 traffic costs, counted by the lab's emulator.
 *
 *   herd   `--agents` real `ebs-cache-agent boot` processes start at once on `--volumes` pool
 *          volumes with `--throttle` of EC2 requests answered RequestLimitExceeded: claims,
 *          exit codes, AttachVolume handled per agent (≤ 1.5) and per successful claim (whose
 *          floor is agents ÷ volumes when the herd lists together, see test/agent/boot/herd.lab.test.ts), EC2
 *          requests per agent, double claims (must be 0), wall time;
 *   calls  EC2 calls of one pool boot (a CLI agent) at pool sizes `--sizes` (goal: ≤ 5 and the
 *          same at every size). Big pools are cheap: one real volume, the rest sharing its
 *          image (test/fixtures/lab/cheap-pool.ts).
 *
 *   npx tsx bench/herd.ts [--agents 50] [--volumes 20] [--throttle 0.2] [--sizes 1,100,1000] [--no-herd] [--no-calls]
 * [--out DIR]
 *
 * Needs root and the lab's Debian packages (scripts/setup.sh); each agent is a node process
 * (tsx, ~150 MB). Shares its code with test/agent/boot/herd.lab.test.ts and test/agent/boot/calls.lab.test.ts.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { cpus, loadavg, release, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { POOL, startBootLab } from "../test/fixtures/lab/boot-lab.ts";
import { herdSummary, measureBootCalls, runHerd, type BootCalls, type HerdFigures } from "../test/fixtures/lab/herd.ts";
import { earlierRelease } from "../test/fixtures/kill/kill-matrix.ts";
import { assertLabPrerequisites } from "../test/fixtures/lab/lab-prereq.ts";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const USAGE =
  "npx tsx bench/herd.ts [--agents 50] [--volumes 20] [--throttle 0.2] [--sizes 1,100,1000] [--no-herd] " +
  "[--no-calls] [--out DIR]\n";

const { values } = parseArgs({
  options: {
    agents: { type: "string", default: "50" },
    volumes: { type: "string", default: "20" },
    throttle: { type: "string", default: "0.2" },
    sizes: { type: "string", default: "1,100,1000" },
    "no-herd": { type: "boolean", default: false },
    "no-calls": { type: "boolean", default: false },
    out: { type: "string", default: join(REPO, "bench", "results") },
    help: { type: "boolean", default: false },
  },
});
if (values.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const agents = Number(values.agents);
const volumes = Number(values.volumes);
const throttleRate = Number(values.throttle);
const sizes = values.sizes.split(",").map(Number);
const problems = [
  ...(Number.isInteger(agents) && agents > 0 ? [] : ["--agents must be a positive integer"]),
  ...(Number.isInteger(volumes) && volumes > 0 ? [] : ["--volumes must be a positive integer"]),
  ...(throttleRate >= 0 && throttleRate < 1 ? [] : ["--throttle must be in [0, 1)"]),
  ...(sizes.every((s) => Number.isInteger(s) && s > 0) ? [] : ["--sizes must be positive integers, comma-separated"]),
];
if (problems.length > 0) {
  process.stderr.write(`${problems.join("\n")}\n${USAGE}`);
  process.exit(2);
}
await assertLabPrerequisites();

const say = (line: string) => process.stdout.write(line + "\n");
let herd: HerdFigures | undefined;
const calls: BootCalls[] = [];

if (!values["no-herd"]) {
  const bl = await startBootLab({ name: "bench-herd", poolSize: volumes });
  try {
    say(`herd: ${agents} agents on ${volumes} pool volumes, throttle ${throttleRate * 100} % (lab ${bl.lab.root})`);
    herd = await runHerd(bl, { agents, pool: POOL, volumes, throttleRate });
    say(herdSummary(herd));
  } finally {
    await bl.close();
  }
}

if (!values["no-calls"]) {
  const bl = await startBootLab({ name: "bench-calls" });
  try {
    for (const size of sizes) {
      const measured = await measureBootCalls(bl, size, earlierRelease());
      calls.push(measured);
      say(
        `calls: pool of ${size}: ${measured.calls} EC2 calls ${JSON.stringify(measured.byAction)} (exit ` +
          `${measured.exitCode}, ${measured.outcome ?? "?"})`,
      );
    }
  } finally {
    await bl.close();
  }
}

const date = new Date().toISOString();
const result = {
  date,
  machine: { cpus: cpus().length, memGiB: Math.round(totalmem() / 2 ** 30), kernel: release(), loadavg: loadavg() },
  settings: { agents, volumes, throttleRate, sizes },
  herd: herd && { ...herd, attachPerClaim: Number.isFinite(herd.attachPerClaim) ? herd.attachPerClaim : null },
  calls,
  targets: {
    ...(herd
      ? {
          attachPerAgentAtMost1_5: herd.attachHandled / herd.perAgent.length <= 1.5,
          noDoubleClaim: herd.doubleClaims.length === 0,
          exitCodes0or4: Object.keys(herd.exitCodes).every((c) => c === "0" || c === "4"),
        }
      : {}),
    ...(calls.length > 0
      ? { callsAtMost5: calls.every((c) => c.calls <= 5), callsFlat: calls.every((c) => c.calls === calls[0]!.calls) }
      : {}),
  },
};
say(
  `targets: ${Object.entries(result.targets)
    .map(([k, v]) => `${k} ${v ? "met" : "MISSED"}`)
    .join(", ")}`,
);
await mkdir(values.out, { recursive: true });
const file = join(values.out, `herd-${date.replace(/[:.]/g, "-").slice(0, 19)}.json`);
await writeFile(file, JSON.stringify(result, null, 2) + "\n");
say(`written to ${file}`);
