/**
 * The pre-warm in the boot, on the lab's cold pool volumes: with `files` in the background the
 * node is labelled `warming` (docker serving from the volume) and then `ready` + `prewarm=warm`,
 * docker never restarted; the volume is tagged initialized at the end and a later boot skips it;
 * with the default `check` a volume EBS says is cold is `warming`, initialized the same way; `status`
 * and `prewarm` as processes. Verdict thresholds come from the emulated delay, never from the machine's speed.
 */
import t from "tap";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { execa } from "execa";
import { readPrewarmState } from "../../../src/agent/prewarm/state.ts";
import { bootLabHost, prewarmLabHost, releaseLabHost, writeLabConfig } from "../../../src/lab/machines/agent.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import { createLogger, createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { GOLDEN_IMAGES, labelRecord, LABEL_PREFIX, POOL, startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites, childEnv } from "../../fixtures/lab/lab-prereq.ts";
import { COLD, COLD_IOPS_CEILING } from "../../fixtures/lab/prewarm-lab.ts";

await assertLabPrerequisites();

const REPO = fileURLToPath(new URL("../../..", import.meta.url));
const MAIN = join(REPO, "src/cli.ts");
const bl = await startBootLab({ name: "test-prewarm-boot", poolSize: 4, coldSnapshots: COLD });
t.teardown(() => bl.close());

const prewarm = (strategy: string, over: Record<string, unknown> = {}) => ({
  strategy,
  check: { seconds: 3, reads: 300 },
  thresholds: { minIops: COLD_IOPS_CEILING, maxMedianLatencyMs: null },
  initialize: { progressSeconds: 1 },
  ...over,
});
const stateDir = (host: LabHost) => join(host.paths.hostRoot, "var/lib/ebs-cache-agent");

async function engineLabels(host: LabHost): Promise<Record<string, string>> {
  const { stdout } = await host.dockerd!.docker(["info", "--format", "{{json .Labels}}"]);
  const all = labelRecord((JSON.parse(stdout) as string[] | null) ?? []);
  return Object.fromEntries(Object.entries(all).filter(([key]) => key.startsWith(`${LABEL_PREFIX}.`)));
}

t.test(
  "files in the background: warming (docker serving), then ready + warm; tagged at the end; skipped next time",
  async (t) => {
    const host = await bl.addHost();
    const overrides = { pool: POOL, labels: { mode: "engine" }, prewarm: prewarm("files") };
    const log = createMemoryLogger("debug");
    let background: Promise<unknown> | undefined;
    let handedOverAt = 0;
    const booted = await bootLabHost(bl.lab, host, {
      overrides,
      log,
      // What `ebs-cache-agent prewarm --background` does on a host, in this process.
      startPrewarm: async () => {
        handedOverAt = Date.now();
        background = prewarmLabHost(bl.lab, host, { overrides, log });
      },
    });
    t.equal(
      booted.report?.outcome,
      "warming",
      "boot done: warming",
      booted.report?.outcome === "warming" ? {} : { log: log.lines.join("\n") },
    );
    t.ok(background, "the initialization was handed to the background run");
    const volumeId = booted.report!.volumeId!;
    t.match(booted.report?.prewarm, { action: "initialize", verdict: "cold", phase: "pending" });
    t.ok(
      booted.plan.steps.some((s) => s.step === "prewarm"),
      "a prewarm step in the plan",
    );

    const warming = await engineLabels(host);
    t.equal(warming[`${LABEL_PREFIX}.volume-id`], volumeId);
    const pid = host.dockerd!.pid;
    // docker serves from the volume while it warms.
    const ran = await host.dockerd!.docker([
      "run",
      "--rm",
      "--network",
      "none",
      GOLDEN_IMAGES[0]!.tag,
      "/bin/busybox",
      "true",
    ]);
    t.equal(ran.exitCode, 0, "a container runs while the volume warms");
    const seen = new Set<string>();
    const watch = (async () => {
      while (background) {
        const labels = await engineLabels(host).catch(() => ({}) as Record<string, string>);
        seen.add(`${labels[`${LABEL_PREFIX}.state`]}:${labels[`${LABEL_PREFIX}.prewarm-progress`] ?? "-"}`);
        if (labels[`${LABEL_PREFIX}.state`] === "ready") return;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    })();
    await background;
    await watch;
    const ready = await engineLabels(host);
    t.same(
      ready,
      {
        [`${LABEL_PREFIX}.state`]: "ready",
        [`${LABEL_PREFIX}.prewarm`]: "warm",
        [`${LABEL_PREFIX}.volume-id`]: volumeId,
        [`${LABEL_PREFIX}.pool`]: POOL,
        [`${LABEL_PREFIX}.kind`]: "pool",
      },
      "ready + warm, progress gone",
    );
    t.ok(
      [...seen].some((s) => s.startsWith("warming:")),
      `warming was published (${[...seen].join(" ")})`,
    );
    t.equal(host.dockerd!.pid, pid, "docker was never restarted");
    const taggedAt = Date.parse((await bl.tags(volumeId))[VolumeTag.initialized] ?? "");
    t.ok(taggedAt >= handedOverAt - 1000, "tagged initialized, by the background run (not at boot)");
    const state = (await readPrewarmState(stateDir(host)))!;
    t.match(state, { phase: "done", verdict: "warm", progress: { percent: 100 } });
    // A pool volume made from the snapshot minutes ago is cold by what EBS says: no sample before the reads.
    t.equal(state.before, undefined, "no sample before the initialization of a known-cold volume");
    t.ok(state.after!.iops > 0, "a sample after it");

    // status, as a process.
    const config = await writeLabConfig(bl.lab, host, overrides);
    const status = await execa(process.execPath, [MAIN, "status", "--config", config], {
      cwd: REPO,
      env: childEnv(),
      extendEnv: false,
      reject: false,
    });
    t.equal(status.exitCode, 0, status.stderr);
    t.match(status.stdout, new RegExp(`volume: +${volumeId}`));
    t.match(status.stdout, /phase: +done/);
    t.match(status.stdout, /progress: 100\.0 %/);

    // A reboot: the volume is tagged, nothing is read again.
    const again = await bootLabHost(bl.lab, host, { overrides, log: createMemoryLogger("debug") });
    t.equal(again.report?.outcome, "ready");
    t.match(again.report?.prewarm, { action: "skip", verdict: "warm" });
  },
);

t.test("check (the default): a volume EBS says is cold is warmed by need in the background", async (t) => {
  const host = await bl.addHost();
  const overrides = { pool: POOL, labels: { mode: "engine" }, prewarm: prewarm("check") };
  let handedOver = 0;
  const booted = await bootLabHost(bl.lab, host, {
    overrides,
    log: createMemoryLogger("debug"),
    // The background run is started as a process below (`ebs-cache-agent prewarm`), as its unit would run it.
    startPrewarm: async () => {
      handedOver++;
    },
  });
  t.equal(booted.report?.outcome, "warming", "usable at once: warming");
  t.equal(handedOver, 1, "handed to the background run");
  t.match(
    booted.report?.prewarm,
    { action: "initialize", verdict: "cold", phase: "pending" },
    "EBS's lazy initialization under 100 %: no sample, the files initialization",
  );
  const labels = await engineLabels(host);
  t.equal(labels[`${LABEL_PREFIX}.state`], "warming");
  t.equal(labels[`${LABEL_PREFIX}.prewarm`], "cold");
  const volumeId = booted.report!.volumeId!;
  t.notOk((await bl.tags(volumeId))[VolumeTag.initialized], "not tagged before its reads");

  // `ebs-cache-agent prewarm` with the default strategy, as a process: the same decision, the reads, the tag.
  const config = await writeLabConfig(bl.lab, host, overrides);
  const run = await execa(process.execPath, [MAIN, "prewarm", "--config", config, "--json"], {
    cwd: REPO,
    env: childEnv(),
    extendEnv: false,
    reject: false,
  });
  t.equal(run.exitCode, 0, run.stderr);
  t.match(JSON.parse(run.stdout), {
    volumeId,
    outcome: { decision: { action: "initialize", mode: "files" }, verdict: "warm", phase: "done" },
  });
  // The process's docker.service is systemd's, absent in the lab: the labels are in daemon.json.
  const daemonJson = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as { labels?: string[] };
  t.ok(daemonJson.labels?.includes(`${LABEL_PREFIX}.prewarm=warm`), "labels updated by the command");
  t.ok((await bl.tags(volumeId))[VolumeTag.initialized]);
});

t.test("fio missing at boot: the node is still ready, prewarm=cold as EBS said, one clear error", async (t) => {
  const host = await bl.addHost();
  // An inline initialization: the reads need fio (a known-cold volume is not sampled).
  const overrides = { pool: POOL, labels: { mode: "engine" }, prewarm: prewarm("files", { background: false }) };
  const log = createMemoryLogger("debug");
  const booted = await bootLabHost(bl.lab, host, { overrides, log, fio: "/nonexistent/fio" });
  t.equal(
    booted.report?.outcome,
    "ready",
    "not blocked",
    booted.report?.outcome === "ready" ? {} : { log: log.lines.join("\n") },
  );
  t.match(booted.report?.prewarm, { verdict: "cold", phase: "failed" });
  t.equal((await engineLabels(host))[`${LABEL_PREFIX}.prewarm`], "cold");
  t.ok(
    log.lines.some((l) => /^<3>prewarm\.failed: .*remediation=/.test(l)),
    "an error line with the remedy",
  );
});

/** A logger that keeps its lines and resolves `until(pattern)` once a line matches (no polling). */
function watchedLogger() {
  const lines: string[] = [];
  const waiting: { pattern: RegExp; resolve(): void }[] = [];
  const log = createLogger((line) => {
    lines.push(line);
    for (const w of waiting.filter((w) => w.pattern.test(line))) w.resolve();
  }, "debug");
  const until = (pattern: RegExp) =>
    lines.some((l) => pattern.test(l))
      ? Promise.resolve()
      : new Promise<void>((resolve) => waiting.push({ pattern, resolve }));
  return { log, lines, until };
}

// Last: it releases its volume to the pool initialized, where another case would claim it.
t.test(
  "two phases: the run begun at phase 1's mount reads before docker starts, publishes nothing before phase 2, " +
    "which takes it over",
  async (t) => {
    const host = await bl.addHost();
    const overrides = { pool: POOL, labels: { mode: "engine" }, prewarm: prewarm("check") };
    const { log, lines, until } = watchedLogger();
    let run: Promise<unknown> | undefined;
    const stop = new AbortController();
    let handedOver = 0;
    // What ebs-cache-agent-prewarm.service runs on a host (`prewarm --from-mount`), in this process.
    const prewarmFromMount = {
      start: async () => {
        run ??= prewarmLabHost(bl.lab, host, { overrides, log, fromMount: true, signal: stop.signal });
      },
      stop: async () => {
        stop.abort(new Error("stopped"));
        await run;
        log.info("lab.prewarm-unit", "stopped");
      },
    };
    const phase1 = await bootLabHost(bl.lab, host, { overrides, log, withDocker: false, prewarmFromMount });
    t.equal(phase1.report?.outcome, "prepared", "phase 1 prepared the volume", { log: lines.join("\n") });
    t.ok(
      phase1.plan.steps.some((s) => s.step === "begin-prewarm"),
      "phase 1's plan begins the pre-warm run",
    );
    t.ok(run, "the run was started by phase 1");
    const volumeId = phase1.report!.volumeId!;
    // The run reads the need list from the mount on: its reads begin before docker starts (phase 2 starts it).
    await until(/prewarm\.initialize: reading the allocated data/);
    // It began the node's images' files before it asked EC2 (read-first.ts), and its initialization took them over.
    await until(/prewarm\.need: the wanted files' reads begun before the decision are taken over/);
    const begunAt = lines.findIndex((l) =>
      /prewarm\.mount: reading the node's images' files while EC2 is asked/.test(l),
    );
    const decidedAt = lines.findIndex((l) => /prewarm\.decide: /.test(l));
    t.ok(begunAt >= 0 && begunAt < decidedAt, "the run's reads began before its decision", { log: lines.join("\n") });
    t.notOk(
      lines.some((l) => /boot\.docker: (re)?starting docker/.test(l)),
      "the reads began before docker's start",
    );
    t.same(await engineLabels(host).catch(() => ({})), {}, "no label published while only phase 1 has run");
    const daemonJson = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as { labels?: string[] };
    t.notOk(
      (daemonJson.labels ?? []).some((l) => l.startsWith(`${LABEL_PREFIX}.`)),
      "none in daemon.json either, though the run has begun",
    );

    const phase2 = await bootLabHost(bl.lab, host, {
      overrides,
      log,
      mayClaim: false,
      prewarmFromMount,
      startPrewarm: async () => {
        handedOver++;
      },
    });
    t.equal(phase2.report?.outcome, "warming", "phase 2: usable at once, warming", { log: lines.join("\n") });
    t.equal(handedOver, 0, "phase 2 took the run over: no second run");
    t.notOk(
      lines.some((l) => /prewarm\.headstart/.test(l)),
      "and no reads of its own (no head start reading the same blocks)",
    );
    const dockerAt = lines.findIndex((l) => /boot\.docker: (re)?starting docker/.test(l));
    const readAt = lines.findIndex((l) => /prewarm\.initialize: reading the allocated data/.test(l));
    t.ok(readAt >= 0 && readAt < dockerAt, "read before docker's start, in the log's order");

    await run;
    const ready = await engineLabels(host);
    t.match(ready, { [`${LABEL_PREFIX}.state`]: "ready", [`${LABEL_PREFIX}.prewarm`]: "warm" }, "the run's ready");
    t.ok((await bl.tags(volumeId))[VolumeTag.initialized], "tagged initialized by the run");
    t.match(await readPrewarmState(stateDir(host)), { phase: "done", verdict: "warm" });

    // The release stops the run (systemctl stop on a host) before it unmounts; nothing of the run blocks it.
    const released = await releaseLabHost(bl.lab, host, { overrides, log, prewarmFromMount });
    t.equal(released.exitCode, 0, "released", { log: lines.join("\n") });
    const stoppedAt = lines.findIndex((l) => /lab\.prewarm-unit: stopped/.test(l));
    const unmountedAt = lines.findIndex((l) => /release\.unmount: unmounted/.test(l));
    t.ok(stoppedAt >= 0 && stoppedAt < unmountedAt, "the run was stopped before the unmount");
  },
);
