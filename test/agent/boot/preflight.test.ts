/**
 * The pre-claim host check (src/agent/boot/preflight.ts) as pure logic over in-memory ports: which
 * daemon.json keys it refuses, how a dockerd command line is judged, that a daemon.json that
 * does not parse is reported as before.
 */
import t from "tap";
import { mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DaemonJsonError, parseDaemonJson, type DaemonJson } from "../../../src/docker/daemon-json.ts";
import { engineLabelsProblem, type DockerdCommand } from "../../../src/docker/dockerd-flags.ts";
import { agentKeysFor, daemonJsonProblems, PreflightError, preflightHost } from "../../../src/agent/boot/preflight.ts";
import { createMemoryLogger } from "../../../src/log.ts";

const PATH = "/etc/docker/daemon.json";
const PREFIX = "io.simcore.ebs-cache";
const command = (...args: string[]): DockerdCommand => ({
  source: "docker.service",
  args: ["--config-file", PATH, ...args].map((value) => ({
    value,
    origin: "ExecStart in /lib/systemd/system/docker.service",
  })),
  problems: [],
});

function deps(
  config: DaemonJson | string,
  dockerd: DockerdCommand,
  options: { mode?: "auto" | "node" | "engine" | "off"; version?: string } = {},
) {
  const log = createMemoryLogger("debug");
  return {
    log,
    deps: {
      daemonJsonPath: PATH,
      readDaemonJson: async () => (typeof config === "string" ? parseDaemonJson(config, PATH) : config),
      dockerdCommand: async () => dockerd,
      dockerVersion: async () => options.version ?? "20.10.24",
      labels: { prefix: PREFIX, mode: options.mode ?? "auto" },
      log,
    },
  };
}

t.test("a host that takes the switch passes", async (t) => {
  const { deps: d, log } = deps(
    { "log-driver": "json-file", labels: ["zone=a", `${PREFIX}.state=ready`] },
    command("-H", "fd://", "--iptables=false"),
  );
  await preflightHost(d);
  t.ok(
    log.lines.some((line) => line.includes("boot.preflight")),
    "logged at debug",
  );
});

t.test(
  "a daemon.json that does not parse is reported as it always was (DaemonJsonError, nothing else checked)",
  async (t) => {
    const { deps: d } = deps('{ "data-root": "/x",, }', command("--data-root", "/y"));
    await t.rejects(preflightHost(d), DaemonJsonError);
    await t.rejects(preflightHost(d), /is not valid JSON.*left it unchanged/);
  },
);

t.test("every problem at once, each with its remediation", async (t) => {
  const { deps: d } = deps(
    { graph: "/srv/docker", labels: ["a=1", "a=2", "com.docker.x=1", "nokey"] },
    command("--label", "rack=1", "-g", "/srv"),
  );
  const error = (await preflightHost(d).catch((e: unknown) => e)) as PreflightError;
  t.type(error, PreflightError);
  t.same(
    error.problems.map((p) => p.remediation),
    [
      `rename "graph" to "data-root" in ${PATH}`,
      `keep one a in "labels" in ${PATH}`,
      `remove com.docker.x from "labels" in ${PATH}`,
      `fix "labels" in ${PATH}`,
      `remove --label rack=1 from ExecStart in /lib/systemd/system/docker.service: the agent owns "labels" in ${PATH}`,
      `remove -g /srv from ExecStart in /lib/systemd/system/docker.service: the agent sets "data-root" in ${PATH}`,
    ],
  );
  t.match(error.message, /^this host would refuse the data-root switch: /);
  t.notMatch(error.remediation, /override/i);
});

t.test("daemon.json keys the switch refuses", async (t) => {
  const problems = (config: DaemonJson) =>
    daemonJsonProblems(config, PATH, { agentKeys: ["data-root", "labels"], prefix: PREFIX }).map((p) => p.problem);
  t.same(problems({}), []);
  t.match(problems({ "data-root": 5 }), [/"data-root" is not a string/]);
  t.match(problems({ labels: "a=b" }), [/"labels" is not an array/]);
  t.match(problems({ features: [] }), [/"features" is not an object/]);
  t.same(
    problems({ labels: [`${PREFIX}.state=ready`, `${PREFIX}.state=degraded`] }),
    [],
    "the agent's own labels are replaced, not judged",
  );
});

t.test("which keys the agent writes", async (t) => {
  t.same(agentKeysFor("auto", "20.10.24"), ["data-root", "labels"]);
  t.same(agentKeysFor("node", "29.0.1"), ["data-root", "features"]);
  t.same(agentKeysFor("off", undefined), ["data-root"]);
});

t.test("--config-file through a symlink to the agent's file is the same file", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "ebs-cache-preflight-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const real = join(dir, "daemon.json");
  await writeFile(real, "{}\n");
  await symlink(real, join(dir, "link.json"));
  const { deps: d } = deps(
    {},
    {
      source: "docker.service",
      args: [{ value: `--config-file=${join(dir, "link.json")}`, origin: "o" }],
      problems: [],
    },
  );
  await preflightHost({ ...d, daemonJsonPath: real });
  const { deps: other } = deps(
    {},
    {
      source: "docker.service",
      args: [{ value: `--config-file=${join(dir, "other.json")}`, origin: "o" }],
      problems: [],
    },
  );
  await t.rejects(preflightHost({ ...other, daemonJsonPath: real }), /dockerd reads .*other\.json/);
});

t.test("no systemd: flags unknown, a warning, daemon.json still checked", async (t) => {
  const unknown: DockerdCommand = {
    source: "docker.service",
    args: [],
    problems: [],
    unknown: "systemd does not run this host",
  };
  const { deps: d, log } = deps({}, unknown);
  await preflightHost(d);
  t.ok(
    log.lines.some((line) =>
      /<4>boot\.preflight: dockerd's flags not checked: systemd does not run this host/.test(line),
    ),
  );
  const { deps: bad } = deps({ graph: "/x" }, unknown);
  await t.rejects(preflightHost(bad), PreflightError);
});

t.test("the reporter's guard: a --label flag means no engine labels written", async (t) => {
  const dockerd = command("--label", "rack=1");
  const problem = await engineLabelsProblem({ dockerdCommand: async () => dockerd, daemonJsonPath: PATH });
  t.match(problem?.remediation, /remove --label rack=1 from ExecStart/);
  t.equal(
    await engineLabelsProblem({ dockerdCommand: async () => command("-H", "fd://"), daemonJsonPath: PATH }),
    undefined,
  );
});
