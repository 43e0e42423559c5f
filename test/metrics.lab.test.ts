/**
 * The textfile after real use cases on the lab: a pool boot, a degraded boot, a release and a
 * gc, each rendered by src/metrics and written with writeTextfile into a node_exporter-style
 * folder, read back by the strict parser; the cache filesystem's figures come from
 * src/host/facts.ts on the loop device the boot mounted, checked against statfs(2); the status
 * document of the booted host validates against the schema.
 */
import { mkdtemp, readdir, readFile, rm, statfs } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { Ajv } from "ajv";
import { run } from "../src/exec.ts";
import { writeLabConfig } from "../src/lab/agent.ts";
import { readCacheFilesystem, readHostContext } from "../src/host/facts.ts";
import { bootMetrics, bootSourceFrom } from "../src/metrics/boot.ts";
import { gcMetrics } from "../src/metrics/gc.ts";
import { cacheFilesystemMetrics, hostMetrics } from "../src/metrics/host.ts";
import { releaseMetrics } from "../src/metrics/release.ts";
import { writeTextfile } from "../src/metrics/textfile.ts";
import { buildStatus } from "../src/status/document.ts";
import { statusExitCode } from "../src/status/view.ts";
import type { GcOutcome } from "../src/agent/gc/apply.ts";
import { POOL, startBootLab } from "./fixtures/boot-lab.ts";
import { assertLabPrerequisites } from "./fixtures/lab-prereq.ts";
import { releaseHost } from "./fixtures/lifecycle-lab.ts";
import { parsePromText, sampleOf } from "./fixtures/prom-text.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-metrics", poolSize: 1 });
t.teardown(() => bl.close());
const textfiles = await mkdtemp(join(tmpdir(), "node-exporter-"));
t.teardown(() => rm(textfiles, { recursive: true, force: true }));
const read = async (useCase: string) => parsePromText(await readFile(join(textfiles, `ebs_cache_agent_${useCase}.prom`), "utf8"));

const host = await bl.addHost();

t.test("a pool boot: outcome, source, steps, the cache filesystem on its loop device, a valid status", async (tt) => {
  const booted = await bl.boot(host, { overrides: { pool: POOL } });
  const result = booted.result!;
  tt.equal(result.outcome, "ready", "the boot got its volume", result.outcome === "ready" ? {} : { log: booted.log.join("\n") });
  const fs = await readCacheFilesystem(result.mountPoint!);
  tt.ok(fs, "facts found the filesystem at the boot's mount point");
  const host_ = await readHostContext();
  await writeTextfile(textfiles, "boot", [
    ...bootMetrics({ result, source: bootSourceFrom(booted.plan.selection, result.outcome), finishedAt: new Date() }),
    ...cacheFilesystemMetrics(fs!),
    ...hostMetrics(host_),
  ]);
  const parsed = await read("boot");
  tt.comment(`ebs_cache_agent_boot.prom after a lab boot:\n${await readFile(join(textfiles, "ebs_cache_agent_boot.prom"), "utf8")}`);
  tt.same(sampleOf(parsed, "ebs_cache_agent_boot_info")?.labels, { outcome: "ready", source: "pool", volume_id: result.volumeId!, reason: "" });
  tt.equal(sampleOf(parsed, "ebs_cache_agent_boot_cache_hit_ratio")?.value, 1);
  for (const step of ["claim-volume", "wait-for-device", "mount", "switch-data-root", "start-docker"]) {
    tt.ok((sampleOf(parsed, "ebs_cache_agent_boot_step_duration_seconds", { step })?.value ?? -1) >= 0, `step ${step} timed`);
  }
  // The loop device the lab attached: df's figures are the kernel's (statfs), the device is the mount's source.
  const kernel = await statfs(result.mountPoint!);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_cache_filesystem_size_bytes")?.value, kernel.blocks * kernel.bsize, "size as statfs says");
  tt.equal(sampleOf(parsed, "ebs_cache_agent_cache_filesystem_used_bytes")?.labels.device, result.device, "the device the boot attached");
  const used = sampleOf(parsed, "ebs_cache_agent_cache_filesystem_used_ratio")!.value;
  tt.ok(used > 0 && used < 1, `a fill between 0 and 1 (${used})`);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_cache_device_info")?.labels.device, result.device);
  tt.ok(sampleOf(parsed, "ebs_cache_agent_host_memory_bytes")!.value > 0);
  tt.ok(sampleOf(parsed, "ebs_cache_agent_host_cpu_cores")!.value >= 1);

  const { stdout } = await run("findmnt", ["-n", "-o", "SOURCE", "--mountpoint", result.mountPoint!]);
  const doc = buildStatus({
    now: new Date(),
    boot: { version: 1, instanceId: host.instance.instanceId, finishedAt: new Date().toISOString(), source: "pool", result },
    filesystem: fs!,
    dockerDataRoot: result.dataRoot!,
  });
  tt.equal(fs!.device, stdout.trim(), "facts name the device findmnt names");
  const schema = JSON.parse(await readFile(new URL("../schema/status.schema.json", import.meta.url), "utf8")) as object;
  const validate = new Ajv({ allErrors: true }).compile(schema);
  tt.ok(validate(JSON.parse(JSON.stringify(doc))), `status valid: ${JSON.stringify(validate.errors)}`);
  tt.equal(statusExitCode(doc), 0, `healthy: ${doc.problems.join("; ")}`);
  tt.equal(doc.mount?.mounted, true);
});

t.test("a degraded boot: source degraded, the reason, no hit", async (tt) => {
  const other = await bl.addHost();
  const booted = await bl.boot(other, { overrides: { pool: "nothing-here" } });
  const result = booted.result!;
  tt.equal(result.outcome, "degraded");
  const dir = join(textfiles, "degraded");
  await writeTextfile(dir, "boot", bootMetrics({ result, source: bootSourceFrom(booted.plan.selection, result.outcome), finishedAt: new Date() }));
  const parsed = parsePromText(await readFile(join(dir, "ebs_cache_agent_boot.prom"), "utf8"));
  const info = sampleOf(parsed, "ebs_cache_agent_boot_info")!;
  tt.equal(info.labels.outcome, "degraded");
  tt.equal(info.labels.source, "degraded");
  tt.match(info.labels.reason, /no completed snapshot/);
  tt.equal(sampleOf(parsed, "ebs_cache_agent_boot_cache_hit_ratio")?.value, 0);
  tt.notOk(parsed.has("ebs_cache_agent_prewarm_info"), "no pre-warm without a volume");
});

t.test("a release: outcome released, its volume, its steps; the boot's file untouched", async (tt) => {
  const released = await releaseHost(bl, host);
  const result = released.result!;
  tt.equal(result.outcome, "released", "released", result.outcome === "released" ? {} : { log: released.log.join("\n") });
  const bootBefore = await readFile(join(textfiles, "ebs_cache_agent_boot.prom"), "utf8");
  await writeTextfile(textfiles, "release", releaseMetrics({ result, finishedAt: new Date() }));
  const parsed = await read("release");
  tt.same(sampleOf(parsed, "ebs_cache_agent_release_info")?.labels, { outcome: "released", reason: "" });
  tt.equal(sampleOf(parsed, "ebs_cache_agent_release_volumes", { disposition: "released" })?.value, 1);
  tt.ok(parsed.get("ebs_cache_agent_release_step_duration_seconds")!.samples.length >= 2, "its steps timed");
  tt.ok(sampleOf(parsed, "ebs_cache_agent_release_duration_seconds")!.value > 0);
  tt.equal(await readFile(join(textfiles, "ebs_cache_agent_boot.prom"), "utf8"), bootBefore, "the release did not touch the boot's file");
});

t.test("gc: the CLI's outcome as metrics, deletions counted over runs", async (tt) => {
  const gcHost = await bl.addHost();
  const config = await writeLabConfig(bl.lab, gcHost);
  const gc = async () => {
    const out = await run(process.execPath, ["--import", "tsx", "src/cli.ts", "gc", "--json", "--config", config], { check: false });
    tt.equal(out.exitCode, 0, "gc ran", out.exitCode === 0 ? {} : { stderr: out.stderr });
    return JSON.parse(out.stdout) as GcOutcome;
  };
  const first = await gc();
  await writeTextfile(textfiles, "gc", gcMetrics({ outcome: first, dryRun: false, finishedAt: new Date() }), { carry: true });
  const second = await gc();
  await writeTextfile(textfiles, "gc", gcMetrics({ outcome: second, dryRun: false, finishedAt: new Date() }), { carry: true });
  const parsed = await read("gc");
  const seen = parsed.get("ebs_cache_agent_gc_volumes")!.samples.reduce((sum, s) => sum + s.value, 0);
  tt.equal(seen, second.decisions.length, "every volume the last run saw, by verdict");
  tt.equal(sampleOf(parsed, "ebs_cache_agent_gc_deleted_volumes_total")?.value, first.deleted + second.deleted);
  tt.same((await readdir(textfiles)).filter((f) => f.endsWith(".prom")).sort(), ["ebs_cache_agent_boot.prom", "ebs_cache_agent_gc.prom", "ebs_cache_agent_release.prom"]);
});
