/**
 * The fleet commands off EC2, as an operator runs them from a workstation: `pool` and `gc
 * --dry-run` against the lab's EC2 emulator over HTTP with a profile in a temporary ~/.aws (its
 * keys, its region), and no IMDS (nothing answers at the link-local address in the lab's
 * namespace). Without any credentials they say so in one line and exit 1, never as a bug, and
 * never after the node's minute-long IMDS budget. The bound is loose and relative: a run that
 * finds credentials and asks EC2 (the same start-up, on the same machine) plus 20 s, a third of
 * that budget; the machine is shared, so no figure of its own speed is asserted.
 */
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { CreateVolumeCommand } from "@aws-sdk/client-ec2";
import { startLab } from "../../src/lab/lab.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { VolumeTag } from "../../src/tags.ts";
import { assertLabPrerequisites } from "../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const lab = await startLab({ name: "test-fleet-credentials", log: createMemoryLogger() });
t.teardown(() => lab.close());
const work = await mkdtemp(join(tmpdir(), "ebs-cache-fleet-"));
t.teardown(() => rm(work, { recursive: true, force: true }));

// An operator's ~/.aws: the keys in credentials (a management role: the agent's policy, of no
// instance, decided by the emulator), the region in config (profile "lab").
const operatorKeys = lab.credentials("agent");
const home = join(work, "home");
await mkdir(join(home, ".aws"), { recursive: true });
await writeFile(
  join(home, ".aws/credentials"),
  [
    "[lab]",
    `aws_access_key_id = ${operatorKeys.accessKeyId}`,
    `aws_secret_access_key = ${operatorKeys.secretAccessKey}`,
    "",
  ].join("\n"),
);
await writeFile(join(home, ".aws/config"), `[profile lab]\nregion = ${lab.region}\n`);
const emptyHome = join(work, "empty-home");
await mkdir(emptyHome);

// The agent's config as a management host has it: the pool and the EC2 endpoint, no region, no IMDS.
const config = join(work, "config.json");
await writeFile(
  config,
  JSON.stringify({
    pool: "fleet",
    keeper: { zones: [`${lab.region}a`] },
    ec2Endpoint: lab.ec2.endpoint,
    metrics: { textfileDir: null },
    paths: { stateDir: join(work, "state") },
  }),
);

const expired = (
  await lab.ec2Client().send(
    new CreateVolumeCommand({
      AvailabilityZone: `${lab.region}a`,
      Size: 1,
      TagSpecifications: [
        {
          ResourceType: "volume",
          Tags: Object.entries({
            [VolumeTag.managed]: "true",
            [VolumeTag.kind]: "pool",
            [VolumeTag.pool]: "fleet",
            [VolumeTag.expiresAt]: new Date(Date.now() - 3 * 3600_000).toISOString(),
          }).map(([Key, Value]) => ({ Key, Value })),
        },
      ],
    }),
  )
).VolumeId!;

interface Ran {
  code: number;
  stdout: string;
  stderr: string;
  seconds: number;
}

/** The agent's CLI with only PATH and HOME (and `env`) in its environment: no AWS_* of the test's. */
function agent(args: string[], env: Record<string, string>): Promise<Ran> {
  const started = performance.now();
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ["src/cli.ts", ...args, "--config", config],
      { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env }, timeout: 120_000 },
      (error, stdout, stderr) =>
        resolve({
          code: error ? (typeof error.code === "number" ? error.code : -1) : 0,
          stdout,
          stderr,
          seconds: (performance.now() - started) / 1000,
        }),
    );
  });
}

/** How long a run that finds its credentials takes, start-up included (set by the first test). */
let baselineSeconds = 0;
const SLACK_SECONDS = 20;

t.test("pool --profile: the profile's keys and region, the lab's EC2", async (t) => {
  const out = await agent(["pool", "--json", "--profile", "lab"], { HOME: home });
  baselineSeconds = out.seconds;
  t.equal(out.code, 0, out.stderr);
  const report = JSON.parse(out.stdout) as { volumes: Array<{ volumeId: string }> };
  t.ok(
    report.volumes.some((v) => v.volumeId === expired),
    "the pool's volume is listed",
  );
});

t.test("AWS_PROFILE names the profile as --profile does", async (t) => {
  const out = await agent(["pool", "--json"], { HOME: home, AWS_PROFILE: "lab" });
  t.equal(out.code, 0, out.stderr);
});

t.test("gc --dry-run --profile: would delete the expired volume, deletes nothing", async (t) => {
  const out = await agent(["gc", "--dry-run", "--profile", "lab"], { HOME: home });
  t.equal(out.code, 0, out.stderr);
  t.match(out.stdout, new RegExp(`${expired}\\s+delete`), "the expired volume's verdict");
  t.match(out.stdout, /would delete 1,/);
  const again = await agent(["pool", "--json", "--profile", "lab"], { HOME: home });
  t.match(again.stdout, expired, "still there");
});

t.test("no credentials anywhere: one line, exit 1, at once", async (t) => {
  for (const command of [["pool"], ["gc", "--dry-run"], ["pool", "fill", "--dry-run"]]) {
    const out = await agent([...command, "--region", lab.region], { HOME: emptyHome });
    const name = command.join(" ");
    t.equal(out.code, 1, `${name}: exit 1`);
    const lines = out.stderr.trim().split("\n");
    t.equal(lines.length, 1, `${name}: one line: ${out.stderr}`);
    t.match(lines[0], /no AWS credentials: .*give --profile NAME/, `${name}: says what to give`);
    t.notMatch(
      out.stderr,
      /report this as a bug|instance profile is attached/,
      `${name}: not a bug, not the node's story`,
    );
    t.equal(out.stdout, "", `${name}: nothing on stdout`);
    // The chain asks IMDS once, for 1 s at most; the node's budget would be 60 s.
    t.ok(
      out.seconds < baselineSeconds + SLACK_SECONDS,
      `${name}: told in ${out.seconds.toFixed(1)} s (a run with credentials: ${baselineSeconds.toFixed(1)} s)`,
    );
  }
});

t.test("a profile that does not exist: its own line, exit 1", async (t) => {
  const out = await agent(["pool", "--profile", "nosuch", "--region", lab.region], { HOME: home });
  t.equal(out.code, 1);
  t.match(out.stderr, /no AWS credentials from profile nosuch/);
  t.notMatch(out.stderr, /report this as a bug/);
});

t.test("no region anywhere and no IMDS: a configuration error, exit 3", async (t) => {
  const out = await agent(["pool"], { HOME: emptyHome, AWS_ACCESS_KEY_ID: "AKIAX", AWS_SECRET_ACCESS_KEY: "x" });
  t.equal(out.code, 3, out.stderr);
  t.match(out.stderr, /no region: .*give --region NAME/);
  t.ok(out.seconds < baselineSeconds + SLACK_SECONDS, `told in ${out.seconds.toFixed(1)} s`);
});
