/**
 * A run that fails before its report still writes its metrics file: the time it failed and the
 * outcome `failed` with why, its counters carried from the last file. Each use case that writes
 * a run's figures (boot, release, gc, the keeper, the prune) runs as the production bundle, as a
 * process, with IMDS, EC2 and docker nowhere to be reached (a closed port, a socket that does not
 * exist), so each fails where a host cut off from them fails. A dry run of the keeper writes
 * nothing, failed or not. No root, no lab.
 */
import { execa } from "execa";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { writeBootRecord } from "../../src/status/records.ts";
import { agentBundle, withCompileCache } from "../fixtures/lab/agent-bundle.ts";
import { childEnv } from "../fixtures/lab/lab-prereq.ts";
import { parsePromText, sampleOf } from "../fixtures/oracles/prom-text.ts";
import { readyBoot } from "../fixtures/builders/use-case-results.ts";

const CLI = await agentBundle();
const dir = await mkdtemp(join(tmpdir(), "ebs-cache-failed-runs-"));
t.teardown(() => rm(dir, { recursive: true, force: true }));
const metrics = join(dir, "metrics");
const stateDir = join(dir, "state");
const config = join(dir, "config.json");
// Nothing listens on port 9 (discard) of the loopback: every connection is refused at once.
const NOWHERE = "http://127.0.0.1:9";
await writeFile(
  config,
  JSON.stringify({
    region: "us-east-1",
    ec2Endpoint: NOWHERE,
    imdsEndpoint: NOWHERE,
    timeouts: { imdsSeconds: 1, imdsRequestSeconds: 1 },
    keeper: { zones: ["us-east-1a"] },
    paths: {
      stateDir,
      mountRoot: join(dir, "mnt"),
      daemonJson: join(dir, "daemon.json"),
      byIdDir: join(dir, "by-id"),
      sysfsRoot: join(dir, "sys"),
      dockerHost: `unix://${join(dir, "no-docker.sock")}`,
    },
    metrics: { textfileDir: metrics },
  }),
);
// The last runs' files: counters to carry, and a time long past.
const LONG_AGO = 1_000_000_000;
await mkdir(metrics, { recursive: true });
const previous: Record<string, string> = {
  gc: `ebs_cache_agent_gc_deleted_volumes_total 7\nebs_cache_agent_gc_timestamp_seconds ${LONG_AGO}\n`,
  keeper:
    'ebs_cache_agent_keeper_actions_total{action="create",pool="default",outcome="done"} 5\n' +
    `ebs_cache_agent_keeper_timestamp_seconds ${LONG_AGO}\n`,
  prune: `ebs_cache_agent_prune_runs_total{trigger="manual"} 3\nebs_cache_agent_prune_timestamp_seconds ${LONG_AGO}\n`,
  release: `ebs_cache_agent_release_timestamp_seconds ${LONG_AGO}\n`,
  boot: `ebs_cache_agent_boot_timestamp_seconds ${LONG_AGO}\n`,
};
for (const [useCase, text] of Object.entries(previous))
  await writeFile(join(metrics, `ebs_cache_agent_${useCase}.prom`), text);
// A boot on a volume recorded here: the prune then asks docker (unreachable) about it.
await writeBootRecord(stateDir, {
  version: 1,
  instanceId: "i-0123456789abcdef0",
  phase: "single",
  finishedAt: new Date().toISOString(),
  result: readyBoot,
});
const env = {
  ...(await withCompileCache(childEnv())),
  AWS_ACCESS_KEY_ID: "AKIDLAB",
  AWS_SECRET_ACCESS_KEY: "lab",
  AWS_MAX_ATTEMPTS: "1",
};
const run = (args: string[]) =>
  execa(process.execPath, [CLI, ...args, "--config", config], { env, reject: false, extendEnv: false });
const read = async (useCase: string) =>
  parsePromText(await readFile(join(metrics, `ebs_cache_agent_${useCase}.prom`), "utf8"));

t.test("pool fill --dry-run that fails writes nothing (a dry run never does)", async (t) => {
  const ended = await run(["pool", "fill", "--dry-run"]);
  t.equal(ended.exitCode, 1, "failed", { stderr: ended.stderr });
  t.equal(await readFile(join(metrics, "ebs_cache_agent_keeper.prom"), "utf8"), previous.keeper, "file untouched");
});

const CASES = [
  { useCase: "boot", args: ["boot", "--no-docker"], says: /instance metadata service/, info: "outcome" },
  { useCase: "release", args: ["release"], says: /instance metadata service/, info: "outcome" },
  { useCase: "gc", args: ["gc"], says: /DescribeVolumes failed: ECONNREFUSED/, info: "outcome" },
  { useCase: "keeper", args: ["pool", "fill"], says: /DescribeVolumes failed: ECONNREFUSED/, info: "outcome" },
  { useCase: "prune", args: ["prune"], says: /docker API GET \/info: no answer/, info: "verdict" },
] as const;

for (const { useCase, args, says, info } of CASES) {
  t.test(`${args.join(" ")} that fails: its time and outcome failed, with why`, async (t) => {
    const started = Date.now() / 1000;
    const ended = await run([...args]);
    t.not(ended.exitCode, 0, `failed (exit ${ended.exitCode})`);
    t.match(ended.stderr, /<3>agent\.failed: /, "said once by the top-level handler");
    const parsed = await read(useCase);
    const labels = sampleOf(parsed, `ebs_cache_agent_${useCase}_info`)?.labels;
    t.equal(labels?.[info], "failed", `${useCase}_info says failed`);
    t.match(labels?.reason, says, "and why");
    t.ok(
      (sampleOf(parsed, `ebs_cache_agent_${useCase}_timestamp_seconds`)?.value ?? 0) >= Math.floor(started),
      "the time is this run's",
    );
  });
}

t.test("the counters go on from the last file", async (t) => {
  t.equal(sampleOf(await read("gc"), "ebs_cache_agent_gc_deleted_volumes_total")?.value, 7, "gc's deletions");
  t.equal(
    sampleOf(await read("keeper"), "ebs_cache_agent_keeper_actions_total", { action: "create" })?.value,
    5,
    "the keeper's creations",
  );
  t.equal(
    sampleOf(await read("prune"), "ebs_cache_agent_prune_runs_total", { trigger: "manual" })?.value,
    4,
    "the prune's runs, this failed one counted",
  );
  t.equal(await readFile(join(metrics, "ebs_cache_agent_fill.prom"), "utf8"), "", "a failed boot leaves no fill");
});
