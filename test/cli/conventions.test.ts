/**
 * Shell conventions, with every command run as a process: a usage error (an unknown option, a
 * missing option value, an extra argument, a bad choice or value) exits 2 with the command's
 * `Usage:` line on stderr, and names that error even when a required option is missing too;
 * `--help` and `--version` exit 0; a `--config` file that does not exist is a configuration
 * error (exit 3), never the defaults, and so is an AWS_MAX_ATTEMPTS that is not a whole number;
 * configuration warnings (an unknown EBS_CACHE_AGENT_* variable, a setting that has no effect)
 * are logged, never dropped.
 * None of it gets as far as EC2, docker or a disk: no root, no lab.
 */
import { execa } from "execa";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { ExitCode } from "../../src/errors.ts";
import { agentBundle, withCompileCache } from "../fixtures/lab/agent-bundle.ts";
import { childEnv } from "../fixtures/lab/lab-prereq.ts";
import { BUILD_COMMANDS, CONFIG_COMMANDS } from "../fixtures/builders/commands.ts";

/** The production build, as a host runs it: some fifty processes, each started by plain node, not tsx. */
const CLI = await agentBundle();
// The commands (test/fixtures/builders/commands.ts): a host's read the config; a build machine's take none
// and have required options, none given here: the usage errors below are still named as themselves.
/**
 * The command groups without an action of their own, as typed (the program itself too): named
 * alone, each is a usage error (src/cli.ts). `pool` is a group with one, the listing: a --config
 * case below shows it running, never its help.
 */
const GROUPS = [[], ["snapshot"]];
/** Usage errors every command has, whatever its options. */
const EVERY_COMMAND_ERRORS = [
  { kind: "unknown option", args: ["--no-such-option"], says: /unknown option '--no-such-option'/ },
  { kind: "extra argument", args: ["surplus"], says: /too many arguments/ },
];
/** Usage errors of the commands that read the config. */
const CONFIG_ERRORS = [
  { kind: "missing option value", args: ["--config"], says: /option '-c, --config <path>' argument missing/ },
];
/** Usage errors of one command's own options. */
const OWN_ERRORS = [
  {
    command: ["gc"],
    kind: "negative number",
    args: ["--max-deletes", "-1"],
    says: /argument '-1' is invalid\. expected a whole number, got "-1"/,
  },
  { command: ["gc"], kind: "not a number", args: ["--max-deletes", "ten"], says: /argument 'ten' is invalid/ },
  { command: ["gc"], kind: "missing number", args: ["--max-deletes"], says: /argument missing/ },
  {
    command: ["prewarm"],
    kind: "bad choice",
    args: ["--strategy", "fast"],
    says: /Allowed choices are off, check, files, device/,
  },
  {
    command: ["pool"],
    kind: "bad pool name",
    args: ["--pool", "a;b"],
    says: /pool name "a;b" contains the shell metacharacter ";"/,
  },
  {
    command: ["snapshot", "build"],
    kind: "missing option value",
    args: ["--image"],
    says: /option '--image <path>' argument missing/,
  },
  {
    command: ["snapshot", "upload"],
    kind: "missing option value",
    args: ["--manifest"],
    says: /option '--manifest <path>' argument missing/,
  },
  {
    command: ["snapshot", "strip"],
    kind: "missing option value",
    args: ["--volume"],
    says: /option '--volume <mount-point>' argument missing/,
  },
  {
    command: ["snapshot", "build"],
    kind: "missing required option",
    args: ["--images", "alpine:3"],
    says: /required option '--image <path>' not specified/,
  },
  {
    command: ["snapshot", "upload"],
    kind: "missing required option",
    args: ["--image", "set.img", "--manifest", "set.json", "--pool", "gpu", "--image-set", "s", "--images", "alpine:3"],
    says: /required option '--image-store <store>' not specified/,
  },
  { command: ["snapshot", "strip"], kind: "missing required option", args: [], says: /required option '--volume/ },
  { command: [], kind: "unknown command", args: ["lab"], says: /unknown command 'lab'/ },
  { command: [], kind: "unknown top-level option", args: ["--dryrun"], says: /unknown option '--dryrun'/ },
];

/** The environment of the agent's processes: no EBS_CACHE_AGENT_* variable of the caller's. */
function agentEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(childEnv()).filter(([name]) => !name.startsWith("EBS_CACHE_AGENT_")));
  return { ...env, ...extra };
}

async function agent(args: readonly string[], env: Record<string, string> = {}) {
  const result = await execa(process.execPath, [CLI, ...args], {
    env: await withCompileCache(agentEnv(env)),
    extendEnv: false,
    reject: false,
    stdin: "ignore",
    timeout: 120_000,
  });
  return { exitCode: result.exitCode, stdout: String(result.stdout), stderr: String(result.stderr) };
}

/** Runs `jobs` a few at a time: the processes are independent, and the machine may be small. */
async function inBatches<T>(jobs: Array<() => Promise<T>>, size = 3): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < jobs.length; i += size)
    out.push(...(await Promise.all(jobs.slice(i, i + size).map((job) => job()))));
  return out;
}

const usageLine = (command: readonly string[]) =>
  new RegExp(`^Usage: ${["ebs-cache-agent", ...command].join(" ")} \\[options\\]`, "m");

t.test("a usage error exits 2 with the command's usage line, in every command", async (t) => {
  const cases = [
    ...[...CONFIG_COMMANDS, ...BUILD_COMMANDS].flatMap((command) =>
      EVERY_COMMAND_ERRORS.map((error) => ({ command, ...error })),
    ),
    ...CONFIG_COMMANDS.flatMap((command) => CONFIG_ERRORS.map((error) => ({ command, ...error }))),
    ...OWN_ERRORS,
  ];
  const runs = await inBatches(cases.map((c) => () => agent([...c.command, ...c.args])));
  for (const [i, c] of cases.entries()) {
    const run = runs[i]!;
    const what = `ebs-cache-agent ${[...c.command, ...c.args].join(" ")} (${c.kind})`;
    t.equal(run.exitCode, ExitCode.usage, `${what}: exit 2`, { stderr: run.stderr });
    t.match(run.stderr, c.says, `${what}: says what is wrong`);
    // `pool` parses its own --config wherever it stands (src/cli/pool.ts): `pool fill --config` is pool's error.
    const shownBy = c.kind === "missing option value" && c.command.join(" ") === "pool fill" ? ["pool"] : c.command;
    t.match(run.stderr, usageLine(shownBy), `${what}: and the usage line`);
    t.notMatch(run.stderr, /report this as a bug/, `${what}: never a bug`);
    t.equal(run.stdout, "", `${what}: nothing on stdout`);
  }
});

t.test("a group named without a subcommand: its help on stderr, nothing on stdout, exit 2, every group", async (t) => {
  const runs = await inBatches(GROUPS.map((group) => () => agent(group)));
  for (const [i, group] of GROUPS.entries()) {
    const run = runs[i]!;
    const what = ["ebs-cache-agent", ...group].join(" ");
    t.equal(run.exitCode, ExitCode.usage, `${what}: exit 2`, { stderr: run.stderr });
    t.match(run.stderr, new RegExp(`^Usage: ${what} \\[options\\] \\[command\\]`), `${what}: the usage line`);
    t.match(run.stderr, /^Commands:$/m, `${what}: and its subcommands`);
    t.equal(run.stdout, "", `${what}: nothing on stdout`);
  }
});

t.test("--help exits 0 in every command and lists exit code 2; --version prints the package's version", async (t) => {
  const commands = [...CONFIG_COMMANDS, ...BUILD_COMMANDS];
  const runs = await inBatches(commands.map((command) => () => agent([...command, "--help"])));
  for (const [i, command] of commands.entries()) {
    const run = runs[i]!;
    t.equal(run.exitCode, 0, `${command.join(" ")} --help: exit 0`, { stderr: run.stderr });
    t.match(run.stdout, usageLine(command), `${command.join(" ")} --help: the usage line`);
    t.match(run.stdout, /Exit codes:.*2 usage/s, `${command.join(" ")} --help: lists exit code 2`);
  }
  const { version } = JSON.parse(await readFile("package.json", "utf8")) as { version: string };
  for (const flag of ["--version", "-V"]) {
    const run = await agent([flag]);
    t.equal(run.exitCode, 0, `${flag}: exit 0`);
    t.equal(run.stdout.trim(), version, `${flag}: the package's version`);
  }
});

t.test(
  "a --config file that does not exist is a configuration error (exit 3) in every host command, never the defaults",
  async (t) => {
    const dir = await mkdtemp(join(tmpdir(), "cli-conventions-"));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const missing = join(dir, "confg.json");
    const runs = await inBatches(CONFIG_COMMANDS.map((command) => () => agent([...command, "--config", missing])));
    for (const [i, command] of CONFIG_COMMANDS.entries()) {
      const run = runs[i]!;
      t.equal(run.exitCode, ExitCode.config, `${command.join(" ")}: exit 3`, { stderr: run.stderr });
      t.match(
        run.stderr,
        `<3>agent.failed: invalid configuration: ${missing}: no such file (named by --config)`,
        `${command.join(" ")}: names the file`,
      );
      t.match(
        run.stderr,
        /only the default \/etc\/ebs-cache-agent\/config\.json may be absent/,
        `${command.join(" ")}: and says what may be absent`,
      );
    }
    const viaEnv = await agent(["status"], { EBS_CACHE_AGENT_CONFIG: missing });
    t.equal(viaEnv.exitCode, ExitCode.config, "a file EBS_CACHE_AGENT_CONFIG names must exist too");
    t.match(viaEnv.stderr, `${missing}: no such file (named by EBS_CACHE_AGENT_CONFIG)`);
  },
);

t.test("configuration warnings are logged, never dropped", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "cli-conventions-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  // `status` reads only: a state folder of its own, no daemon.json, a docker that is not there.
  const paths = {
    stateDir: join(dir, "state"),
    daemonJson: join(dir, "daemon.json"),
    dockerHost: `unix://${join(dir, "docker.sock")}`,
    mountRoot: join(dir, "mnt"),
  };
  const config = join(dir, "config.json");
  await writeFile(
    config,
    JSON.stringify({
      paths,
      labels: { mode: "off" },
      initializationRateMiBps: 200,
      createFromSnapshot: false,
      workspace: { create: "blank" },
    }),
  );

  const run = await agent(["status", "--json", "--config", config], {
    EBS_CACHE_AGENT_POOOL: "gpu",
    EBS_CACHE_AGENT_LOG_LEVEL: "info",
  });
  t.equal(run.exitCode, ExitCode.failure, "status still runs: no boot recorded here (exit 1)", { stderr: run.stderr });
  t.ok(JSON.parse(run.stdout), "and prints its document");
  t.match(
    run.stderr,
    new RegExp(
      String.raw`^<4>agent\.config-warning: environment variable EBS_CACHE_AGENT_POOOL ` +
        String.raw`matches no setting and is ignored \(did you mean EBS_CACHE_AGENT_POOL\?\)$`,
      "m",
    ),
    "a typo'd variable is a warning naming the one meant",
  );
  t.match(
    run.stderr,
    /^<4>agent\.config-warning: initializationRateMiBps is set but no volume is ever created from a snapshot/m,
    "a setting without effect is a warning",
  );

  const quiet = await agent(["status", "--config", config], {
    EBS_CACHE_AGENT_POOOL: "gpu",
    EBS_CACHE_AGENT_LOG_LEVEL: "error",
  });
  t.equal(quiet.exitCode, ExitCode.failure);
  t.notMatch(
    quiet.stderr,
    /config-warning/,
    "logLevel error silences the warnings, as it does every other line below it",
  );
});

t.test(
  "an AWS_MAX_ATTEMPTS that is not a whole number is a configuration error (exit 3), before any call",
  async (t) => {
    const dir = await mkdtemp(join(tmpdir(), "cli-conventions-"));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const config = join(dir, "config.json");
    // Nothing listens on port 9: should the variable be ignored, the run fails fast at IMDS (exit 1), not exit 3.
    await writeFile(
      config,
      JSON.stringify({
        region: "us-east-1",
        ec2Endpoint: "http://127.0.0.1:9",
        imdsEndpoint: "http://127.0.0.1:9",
        timeouts: { imdsSeconds: 1, imdsRequestSeconds: 1 },
        paths: { stateDir: join(dir, "state"), mountRoot: join(dir, "mnt"), daemonJson: join(dir, "daemon.json") },
      }),
    );
    const run = await agent(["gc", "--dry-run", "--config", config], { AWS_MAX_ATTEMPTS: "ten" });
    t.equal(run.exitCode, ExitCode.config, "exit 3", { stderr: run.stderr });
    t.match(
      run.stderr,
      /^<3>agent\.failed: invalid configuration: environment variable AWS_MAX_ATTEMPTS must be a whole/m,
    );
    t.match(run.stderr, `got "ten"`, "names the value");
  },
);
