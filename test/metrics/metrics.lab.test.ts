/**
 * What the use cases leave for operators, on the lab: a pool boot, a two-phase boot, a degraded
 * boot, a release and gc, each run by the agent's own wiring (in-process through the lab, or as
 * a CLI process), write their textfiles into the host's node_exporter folder (its own root,
 * never the machine's) and their status records; every file parses with the strict parser and
 * no series is in two files (node_exporter would refuse the scrape). `ebs-cache-agent status
 * --json`, run as a process, validates against schema/status.schema.json and its exit code is
 * the health check: 0 after a boot, 4 after a degraded one, 1 after a release.
 */
import { mkdir, readdir, readFile, stat, statfs, writeFile } from "node:fs/promises";
import { join } from "node:path";
import t, { type Test } from "tap";
import { Ajv } from "ajv";
import { execa } from "execa";
import { bootLabHost, writeLabConfig } from "../../src/lab/machines/agent.ts";
import type { LabHost } from "../../src/lab/lab.ts";
import { createMemoryLogger } from "../../src/log.ts";
import type { StatusDocument } from "../../src/status/document.ts";
import type { BootRecord } from "../../src/status/records.ts";
import { VolumeTag } from "../../src/tags.ts";
import { agentBundle, withCompileCache } from "../fixtures/lab/agent-bundle.ts";
import { POOL, startBootLab } from "../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites, childEnv } from "../fixtures/lab/lab-prereq.ts";
import { releaseHost } from "../fixtures/lab/lifecycle-lab.ts";
import { parsePromText, sampleOf, type ParsedFamily } from "../fixtures/oracles/prom-text.ts";
import type { GcReport } from "../../src/agent/outcomes.ts";

await assertLabPrerequisites();

const REPO = new URL("../..", import.meta.url).pathname;
const bl = await startBootLab({ name: "test-metrics", poolSize: 3 });
t.teardown(() => bl.close());

const schema = JSON.parse(
  await readFile(new URL("../../schema/status.schema.json", import.meta.url), "utf8"),
) as object;
const validate = new Ajv({ allErrors: true, strict: true }).compile(schema);

/** The host's node_exporter folder, as src/lab/machines/agent.ts configures it. */
const textfileDir = (host: LabHost) => join(host.paths.hostRoot, "var/lib/prometheus/node-exporter");
const stateDir = (host: LabHost) => join(host.paths.hostRoot, "var/lib/ebs-cache-agent");
const readProm = async (host: LabHost, useCase: string) =>
  parsePromText(await readFile(join(textfileDir(host), `ebs_cache_agent_${useCase}.prom`), "utf8"));

/** Every `.prom` of the host's folder parses, and no family is in two files (the collector merges them). */
async function assertFolder(tt: Test, host: LabHost): Promise<Map<string, Map<string, ParsedFamily>>> {
  const files = (await readdir(textfileDir(host))).filter((f) => f.endsWith(".prom")).sort();
  const byFile = new Map<string, Map<string, ParsedFamily>>();
  const owner = new Map<string, string>();
  for (const file of files) {
    const parsed = parsePromText(await readFile(join(textfileDir(host), file), "utf8"));
    byFile.set(file, parsed);
    for (const name of parsed.keys()) {
      tt.notOk(owner.has(name), `${name} only in ${file}${owner.has(name) ? ` (also in ${owner.get(name)})` : ""}`);
      owner.set(name, file);
    }
  }
  tt.same(
    (await readdir(textfileDir(host))).filter((f) => !f.endsWith(".prom")),
    [],
    "no temp file left behind",
  );
  return byFile;
}

// The agent's bundle: this file starts the CLI seven times (fixtures/lab/agent-bundle.ts).
const CLI = await agentBundle();
const CLI_ENV = await withCompileCache(childEnv());

/** `ebs-cache-agent <args> --config <config>` as a process; its exit code, not a throw, when it fails. */
function agentRun(args: string[], config: string) {
  return execa(process.execPath, [CLI, ...args, "--config", config], {
    cwd: REPO,
    env: CLI_ENV,
    extendEnv: false,
    reject: false,
    stdin: "ignore",
    timeout: 60_000,
  });
}

/** `ebs-cache-agent status` (with --json: the document) as a process, against the host's config. */
async function status(
  host: LabHost,
  json: boolean,
): Promise<{ exitCode: number; stdout: string; doc?: StatusDocument }> {
  const config = await writeLabConfig(bl.lab, host, { pool: POOL });
  const result = await agentRun(["status", ...(json ? ["--json"] : [])], config);
  const stdout = String(result.stdout);
  return { exitCode: result.exitCode ?? -1, stdout, ...(json ? { doc: JSON.parse(stdout) as StatusDocument } : {}) };
}

function assertValid(tt: Test, doc: StatusDocument | undefined) {
  const ok = validate(doc);
  tt.ok(ok, `status --json is valid against the schema${ok ? "" : `: ${JSON.stringify(validate.errors)}`}`);
}

const host = await bl.addHost();

t.test(
  "a pool boot: its textfile (source, steps, the cache filesystem), the pre-warm's, the record; status exits 0",
  async (tt) => {
    const booted = await bl.boot(host, { overrides: { pool: POOL } });
    const result = booted.report!;
    tt.equal(
      result.outcome,
      "ready",
      "the boot got its volume",
      result.outcome === "ready" ? {} : { log: booted.log.join("\n") },
    );
    tt.equal(result.source, "pool", "the result carries its source");
    const files = await assertFolder(tt, host);
    tt.same(
      [...files.keys()],
      ["ebs_cache_agent_boot.prom", "ebs_cache_agent_fill.prom", "ebs_cache_agent_prewarm.prom"],
    );
    const boot = await readProm(host, "boot");
    tt.comment(
      `ebs_cache_agent_boot.prom after a lab ` +
        `boot:\n${await readFile(join(textfileDir(host), "ebs_cache_agent_boot.prom"), "utf8")}`,
    );
    tt.same(sampleOf(boot, "ebs_cache_agent_boot_info")?.labels, {
      outcome: "ready",
      source: "pool",
      volume_id: result.volumeId!,
      reason: "",
    });
    tt.equal(sampleOf(boot, "ebs_cache_agent_boot_cache_hit_ratio")?.value, 1);
    for (const step of ["claim-volume", "wait-for-device", "mount", "switch-data-root", "start-docker"]) {
      tt.ok(
        (sampleOf(boot, "ebs_cache_agent_boot_step_duration_seconds", { step })?.value ?? -1) >= 0,
        `step ${step} timed`,
      );
    }
    // The loop device the lab attached: df's figures are the kernel's (statfs), the device is the mount's source.
    const kernel = await statfs(result.mountPoint!);
    const fill = await readProm(host, "fill");
    tt.equal(
      sampleOf(fill, "ebs_cache_agent_cache_filesystem_size_bytes")?.value,
      kernel.blocks * kernel.bsize,
      "size as statfs says",
    );
    tt.equal(
      sampleOf(fill, "ebs_cache_agent_cache_filesystem_used_bytes")?.labels.device,
      result.device,
      "the device the boot attached",
    );
    tt.ok((sampleOf(fill, "ebs_cache_agent_cache_filesystem_inodes")?.value ?? 0) > 0, "inodes from statfs");
    tt.equal(
      sampleOf(boot, "ebs_cache_agent_cache_device_info")?.labels.device,
      result.device,
      "the device's facts stay in the boot's file",
    );
    const used = sampleOf(fill, "ebs_cache_agent_cache_filesystem_used_ratio")!.value;
    tt.ok(used > 0 && used < 1, `a fill between 0 and 1 (${used})`);
    tt.ok(sampleOf(boot, "ebs_cache_agent_host_memory_bytes")!.value > 0);
    tt.ok(sampleOf(boot, "ebs_cache_agent_host_cpu_cores")!.value >= 1);

    const prewarm = await readProm(host, "prewarm");
    tt.equal(
      sampleOf(prewarm, "ebs_cache_agent_prewarm_info")?.labels.volume_id,
      result.volumeId,
      "the pre-warm's file, from its state file",
    );
    tt.equal(sampleOf(prewarm, "ebs_cache_agent_prewarm_info")?.labels.verdict, result.prewarm?.verdict);

    const record = JSON.parse(await readFile(join(stateDir(host), "last-boot.json"), "utf8")) as BootRecord;
    tt.equal(record.instanceId, host.instance.instanceId);
    tt.equal(record.result.source, "pool");
    tt.equal(record.labels?.["io.simcore.ebs-cache.state"], "ready", "the labels the boot published");

    const json = await status(host, true);
    assertValid(tt, json.doc);
    tt.equal(json.exitCode, 0, `healthy: ${json.doc?.problems.join("; ")}`);
    tt.equal(json.doc?.boot?.source, "pool");
    tt.equal(json.doc?.mount?.mounted, true);
    tt.equal(json.doc?.dataRoot?.matches, true);
    tt.same(
      json.doc?.warnings.filter((w) => w.startsWith("label ")),
      [],
      "docker shows the labels the boot published",
    );
    const human = await status(host, false);
    tt.comment(
      `ebs_cache_agent_prewarm.prom:\n` +
        `${await readFile(join(textfileDir(host), "ebs_cache_agent_prewarm.prom"), "utf8")}`,
    );
    tt.comment(`ebs-cache-agent status:\n${human.stdout}`);
    tt.equal(human.exitCode, 0);
    tt.match(human.stdout, /^health: {3}healthy$/m);
    tt.match(human.stdout, new RegExp(`boot: {5}ready from pool`));
  },
);

t.test(
  "a two-phase boot (--no-docker, then --no-claim): one record of both phases, source pool, not attached",
  async (tt) => {
    const two = await bl.addHost();
    const log = createMemoryLogger("debug");
    const first = await bootLabHost(bl.lab, two, { overrides: { pool: POOL }, log, withDocker: false });
    tt.equal(
      first.report?.outcome,
      "prepared",
      "phase 1 prepared",
      first.report?.outcome === "prepared" ? {} : { log: log.lines.join("\n") },
    );
    const second = await bootLabHost(bl.lab, two, { overrides: { pool: POOL }, log, mayClaim: false });
    tt.equal(
      second.report?.outcome,
      "ready",
      "phase 2 ready",
      second.report?.outcome === "ready" ? {} : { log: log.lines.join("\n") },
    );
    tt.equal(second.report?.source, "attached", "phase 2 alone only reused the attached volume");
    const record = JSON.parse(await readFile(join(stateDir(two), "last-boot.json"), "utf8")) as BootRecord;
    tt.equal(record.phase, "second");
    tt.equal(record.result.source, "pool", "the record keeps the first phase's source");
    tt.equal(
      record.result.timeline.length,
      first.report!.timeline.length + second.report!.timeline.length,
      "both phases' steps",
    );
    const boot = await readProm(two, "boot");
    tt.equal(sampleOf(boot, "ebs_cache_agent_boot_info")?.labels.source, "pool");
    tt.equal(sampleOf(boot, "ebs_cache_agent_boot_cache_hit_ratio")?.value, 1);
    const claim = first.report!.timeline.find((s) => s.step === "claim-volume")!.ms / 1000;
    tt.ok(
      (sampleOf(boot, "ebs_cache_agent_boot_step_duration_seconds", { step: "claim-volume" })?.value ?? 0) >= claim,
      "the first phase's claim is timed",
    );
    await assertFolder(tt, two);
    const json = await status(two, true);
    assertValid(tt, json.doc);
    tt.equal(json.exitCode, 0, `healthy: ${json.doc?.problems.join("; ")}`);
  },
);

t.test(
  "a metrics folder that cannot be written: a warning; the boot still ready, exit 0, its status record written",
  async (tt) => {
    const blocked = await bl.addHost();
    const file = join(blocked.paths.hostRoot, "not-a-folder");
    await mkdir(blocked.paths.hostRoot, { recursive: true });
    await writeFile(file, "a file where the metrics folder's parent should be\n");
    const booted = await bl.boot(blocked, {
      overrides: { pool: POOL, metrics: { textfileDir: join(file, "node-exporter") } },
    });
    tt.equal(
      booted.report?.outcome,
      "ready",
      "the outcome is the boot's",
      booted.report?.outcome === "ready" ? {} : { log: booted.log.join("\n") },
    );
    tt.equal(booted.exitCode, 0);
    tt.ok(
      booted.log.some((line) => /^<4>metrics.write-failed: could not write the boot metrics/.test(line)),
      "one warning says so",
    );
    tt.ok(
      (await stat(join(stateDir(blocked), "last-boot.json"))).isFile(),
      "the status record does not depend on the metrics",
    );
  },
);

t.test("the pool taken: a volume created from the snapshot, source snapshot, not a cache hit", async (tt) => {
  const late = await bl.addHost();
  const booted = await bl.boot(late, { overrides: { pool: POOL } });
  tt.equal(
    booted.report?.outcome,
    "ready",
    "ready on a new volume",
    booted.report?.outcome === "ready" ? {} : { log: booted.log.join("\n") },
  );
  tt.notOk(bl.poolVolumes.includes(booted.report!.volumeId!), "not one of the pool's volumes");
  tt.equal(booted.report?.source, "snapshot");
  const boot = await readProm(late, "boot");
  tt.equal(sampleOf(boot, "ebs_cache_agent_boot_info")?.labels.source, "snapshot");
  tt.equal(sampleOf(boot, "ebs_cache_agent_boot_cache_hit_ratio")?.value, 0);
});

t.test("a degraded boot: source degraded, the reason, no hit, no cache figures; status exits 4", async (tt) => {
  const other = await bl.addHost();
  const booted = await bl.boot(other, { overrides: { pool: "nothing-here" } });
  tt.equal(booted.report?.outcome, "degraded");
  await assertFolder(tt, other);
  const boot = await readProm(other, "boot");
  const info = sampleOf(boot, "ebs_cache_agent_boot_info")!;
  tt.equal(info.labels.outcome, "degraded");
  tt.equal(info.labels.source, "degraded");
  tt.match(info.labels.reason, /no completed snapshot/);
  tt.equal(sampleOf(boot, "ebs_cache_agent_boot_cache_hit_ratio")?.value, 0);
  tt.notOk(
    (await readProm(other, "fill")).has("ebs_cache_agent_cache_filesystem_size_bytes"),
    "no cache filesystem without a volume",
  );
  const json = await status(other, true);
  assertValid(tt, json.doc);
  tt.equal(json.exitCode, 4, "exit 4: degraded");
  tt.equal(json.doc?.boot?.outcome, "degraded");
  tt.match(json.doc?.problems.join("\n") ?? "", /the boot degraded/);
});

t.test("a release: its textfile and record, the boot's file untouched; status then exits 1", async (tt) => {
  const bootBefore = await readFile(join(textfileDir(host), "ebs_cache_agent_boot.prom"), "utf8");
  const released = await releaseHost(bl, host);
  const result = released.report!;
  tt.equal(
    result.outcome,
    "released",
    "released",
    result.outcome === "released" ? {} : { log: released.log.join("\n") },
  );
  await assertFolder(tt, host);
  const release = await readProm(host, "release");
  tt.same(sampleOf(release, "ebs_cache_agent_release_info")?.labels, { outcome: "released", reason: "" });
  tt.equal(sampleOf(release, "ebs_cache_agent_release_volumes", { disposition: "released" })?.value, 1);
  tt.ok(release.get("ebs_cache_agent_release_step_duration_seconds")!.samples.length >= 2, "its steps timed");
  tt.ok(sampleOf(release, "ebs_cache_agent_release_duration_seconds")!.value > 0);
  tt.equal(
    await readFile(join(textfileDir(host), "ebs_cache_agent_boot.prom"), "utf8"),
    bootBefore,
    "the release did not touch the boot's file",
  );
  tt.ok((await stat(join(stateDir(host), "last-release.json"))).isFile(), "the release's record");
  const json = await status(host, true);
  assertValid(tt, json.doc);
  tt.equal(json.exitCode, 1, "exit 1: the node is off its cache volume");
  tt.equal(json.doc?.lastRelease?.outcome, "released");
  tt.equal(json.doc?.lastRelease?.afterBoot, true);
});

t.test("gc through the CLI: an expired volume deleted and counted, the counter carried over runs", async (tt) => {
  const gcHost = await bl.addHost();
  const expired = await bl.createBlankVolume({
    [VolumeTag.managed]: "true",
    [VolumeTag.kind]: "pool",
    [VolumeTag.pool]: "gc-metrics",
    [VolumeTag.expiresAt]: new Date(Date.now() - 3600_000).toISOString(),
  });
  const config = await writeLabConfig(bl.lab, gcHost);
  const gc = async () => {
    const out = await agentRun(["gc", "--json"], config);
    tt.equal(out.exitCode, 0, "gc ran", out.exitCode === 0 ? {} : { stderr: String(out.stderr) });
    return JSON.parse(String(out.stdout)) as GcReport;
  };
  const first = await gc();
  tt.ok(
    first.decisions.some((d) => d.volumeId === expired && d.done === "deleted"),
    "the expired volume was deleted",
  );
  const afterFirst = await readProm(gcHost, "gc");
  tt.equal(sampleOf(afterFirst, "ebs_cache_agent_gc_deleted_volumes_total")?.value, first.deleted);
  tt.ok(first.deleted >= 1, `a deletion counted (${first.deleted})`);
  const second = await gc();
  const parsed = await readProm(gcHost, "gc");
  tt.equal(
    sampleOf(parsed, "ebs_cache_agent_gc_deleted_volumes_total")?.value,
    first.deleted + second.deleted,
    "the counter carried over",
  );
  const seen = parsed.get("ebs_cache_agent_gc_volumes")!.samples.reduce((sum, s) => sum + s.value, 0);
  tt.equal(seen, second.decisions.length, "every volume the last run saw, by verdict");
  tt.same([...(await assertFolder(tt, gcHost)).keys()], ["ebs_cache_agent_gc.prom"]);
});
