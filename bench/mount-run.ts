/**
 * bench/mount-run.ts: how soon the run begun at the mount (`prewarm --from-mount`) reads, with EC2 answering after
 * a latency. On a lab host, phase 1 (`boot --no-docker`) claims a cold pool volume, mounts it and starts the run (in
 * this process); the emulator answers every EC2 request `--latency-ms` late from the run's start on. Two ways, side by
 * side per run:
 * - read-first: as the agent runs it, the node's images' files begun before the run asks EC2 (read-first.ts);
 * - decide-first: the same run given phase 1's record without the volume's tags (what an older phase 1 writes): it
 *   reads once its decision is made, as before.
 * Timed from the run's start (ms): fio for the wanted files spawned, their reads given to it, the decision made, and
 * the wanted files' phase done. Not in the figures: the unit's process start (node and the bundle, the same for both
 * ways), which the lab's in-process run does not have. A first case, not counted, loads the run's code.
 *
 *   sudo npx tsx bench/mount-run.ts [--latency-ms 0,100,300] [--runs 3] [--ebs-model FILE]
 */
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { MOUNT_RUN_FILE } from "../src/agent/prewarm/mount-run.ts";
import { bootLabHost, labConfig, prewarmLabHost } from "../src/lab/machines/agent.ts";
import type { LabHost } from "../src/lab/lab.ts";
import { createLogger } from "../src/log.ts";
import { coldSnapshotOptionsOf, DEFAULT_EBS_MODEL_FILE, readEbsModel } from "../src/lab/volumes/ebs-model.ts";
import { POOL, startBootLab } from "../test/fixtures/lab/boot-lab.ts";

const { values } = parseArgs({
  options: {
    "latency-ms": { type: "string", default: "0,100,300" },
    runs: { type: "string", default: "3" },
    "ebs-model": { type: "string" },
  },
});
const latencies = values["latency-ms"].split(",").map(Number);
const runs = Number(values.runs);
const model = await readEbsModel(values["ebs-model"] ?? DEFAULT_EBS_MODEL_FILE);
const WAYS = ["decide-first", "read-first"] as const;
type Way = (typeof WAYS)[number];

const bl = await startBootLab({
  name: "bench-mount-run",
  poolSize: latencies.length * runs * WAYS.length + 1,
  coldSnapshots: coldSnapshotOptionsOf(model),
});
const overrides = { pool: POOL, labels: { mode: "engine" }, prewarm: { strategy: "check" } };
// Where the run looks for phase 1's record: the lab agent's own config, not a path written out again here.
const stateDir = (host: LabHost) => labConfig(bl.lab, host, overrides).paths.stateDir;

/** Phase 1's record as an older agent wrote it: no volume tags. */
async function withoutTags(host: LabHost): Promise<void> {
  const path = join(stateDir(host), MOUNT_RUN_FILE);
  const record = JSON.parse(await readFile(path, "utf8")) as Record<string, unknown>;
  delete record.volumeTags;
  await writeFile(path, JSON.stringify(record) + "\n");
}

interface Row {
  latencyMs: number;
  way: Way;
  run: number;
  fioSpawnMs?: number;
  readsGivenMs?: number;
  decidedMs?: number;
  wantedDoneMs?: number;
}

async function oneCase(latencyMs: number, way: Way, run: number): Promise<Row> {
  const host = await bl.addHost();
  const lines: Array<{ at: number; text: string }> = [];
  const log = createLogger((text) => lines.push({ at: Date.now(), text }), "debug");
  const stop = new AbortController();
  let startAt = 0;
  let running: Promise<unknown> | undefined;
  const unit = {
    start: async () => {
      if (way === "decide-first") await withoutTags(host);
      bl.lab.ec2.setFaults({ latencyMs });
      startAt = Date.now();
      running ??= prewarmLabHost(bl.lab, host, { overrides, log, fromMount: true, signal: stop.signal });
    },
    stop: async () => {
      stop.abort(new Error("stopped"));
      await running;
    },
  };
  try {
    const phase1 = await bootLabHost(bl.lab, host, { overrides, log, withDocker: false, prewarmFromMount: unit });
    if (phase1.report?.outcome !== "prepared") throw new Error(`phase 1: ${phase1.report?.reason}`);
    if (!running) throw new Error("phase 1 began no run (the volume was not taken for cold)");
    const deadline = Date.now() + 120_000;
    const done = /prewarm\.read: prewarm-need: /;
    while (!lines.some((l) => done.test(l.text)) && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 50));
    const at = (pattern: RegExp) => {
      const line = lines.find((l) => l.at >= startAt && pattern.test(l.text));
      return line ? line.at - startAt : undefined;
    };
    const row: Row = { latencyMs, way, run };
    const figures: Array<[keyof Row, RegExp]> = [
      ["fioSpawnMs", /exec\.run.*--name=prewarm-need /],
      ["readsGivenMs", /prewarm\.need: \d+ reads of the wanted files given to fio/],
      ["decidedMs", /prewarm\.decide: /],
      ["wantedDoneMs", done],
    ];
    for (const [key, pattern] of figures) {
      const ms = at(pattern);
      if (ms !== undefined) (row as unknown as Record<string, number>)[key] = ms;
    }
    return row;
  } finally {
    bl.lab.ec2.setFaults({});
    await unit.stop();
  }
}

const rows: Row[] = [];
try {
  // The first case of a process also loads the run's code: one case first, left out.
  await oneCase(0, "read-first", 0);
  for (let run = 1; run <= runs; run++)
    for (const latencyMs of latencies)
      for (const way of run % 2 ? WAYS : [...WAYS].reverse()) {
        const row = await oneCase(latencyMs, way, run);
        rows.push(row);
        console.log(JSON.stringify(row));
      }
} finally {
  await bl.close();
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
console.log(
  "\nEC2 latency | way | fio spawned | reads given | decided | wanted files read (ms from the run's start, median)",
);
for (const latencyMs of latencies)
  for (const way of WAYS) {
    const of = rows.filter((r) => r.latencyMs === latencyMs && r.way === way);
    const m = (key: keyof Row) => median(of.flatMap((r) => (typeof r[key] === "number" ? [r[key]] : [])));
    console.log(
      `${latencyMs} ms | ${way} | ${m("fioSpawnMs")} | ${m("readsGivenMs")} | ${m("decidedMs")} | ${m("wantedDoneMs")}`,
    );
  }
