/**
 * The dockerd-flags corpus: a docker.service as systemd shows it (ExecStart, Environment=,
 * EnvironmentFiles, the unit's files), the files it names, daemon.json and the agent's label
 * mode and docker version → the problems the pre-claim check reports, by their remediation.
 * Each case goes through the whole pure path: systemctl's output parsed, `$VAR` expanded,
 * flags parsed, dockerd's conflict rule applied (moby daemon/config findConfigurationConflicts).
 */
import t from "tap";
import { effectiveDockerdCommand, parseSystemctlShow, type UnitFile } from "../../src/docker/dockerd-command.ts";
import {
  dockerdFlagProblems,
  parseDockerdFlags,
  configFileOf,
  DEFAULT_CONFIG_FILE,
} from "../../src/docker/dockerd-flags.ts";
import { agentKeysFor, plannedDaemonJson } from "../../src/agent/boot/preflight.ts";
import type { LabelModeSetting } from "../../src/docker/labels.ts";

const UNIT = "/lib/systemd/system/docker.service";
const DROPIN = "/etc/systemd/system/docker.service.d/x.conf";
const DEFAULTS = "/etc/default/docker";
const STOCK_ARGV = "/usr/sbin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock $DOCKER_OPTS";
/**
 * A unit in the style of Amazon Linux's docker package: $OPTIONS and friends from /etc/sysconfig files (written from
 * memory, not recorded).
 */
const AL2023_ARGV =
  "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock $OPTIONS $DOCKER_STORAGE_OPTIONS " +
  "$DOCKER_ADD_RUNTIMES";
const AL2023_SYSCONFIG =
  "# The max number of open files for the daemon itself, and all\n# running " +
  'containers.\nOPTIONS="--default-ulimit nofile=32768:65536"\n';

interface Case {
  name: string;
  /** argv[] of the ExecStart in force (systemd's unexpanded form). */
  argv?: string;
  /** The file holding that ExecStart= (default the unit's fragment). */
  execStartIn?: string;
  /** Environment= of the unit (as `systemctl show` prints it) and the file that sets it. */
  environment?: string;
  /** EnvironmentFile= entries: path → text (undefined: missing); `-` prefix = optional. */
  envFiles?: Record<string, string | undefined>;
  loadState?: string;
  daemonJson?: Record<string, unknown>;
  daemonJsonPath?: string;
  mode?: LabelModeSetting;
  engineVersion?: string;
  /** The remediations expected, in order. */
  expect: string[];
}

const ownedBy = (flag: string, origin: string, key: string) =>
  `remove ${flag} from ${origin}: the agent owns "${key}" in /etc/docker/daemon.json`;
const eitherOr = (flag: string, origin: string, key: string) =>
  `remove ${flag} from ${origin}, or "${key}" from /etc/docker/daemon.json (dockerd takes one or the other, ` +
  `never both)`;
const fromDefaults = (name = "DOCKER_OPTS") => `${name} in ${DEFAULTS} (EnvironmentFile of docker.service)`;
const inUnit = `ExecStart in ${UNIT}`;
const inDropin = `ExecStart in ${DROPIN}`;

const corpus: Case[] = [
  {
    name: "Debian's stock unit, empty /etc/default/docker, empty daemon.json",
    envFiles: { [`-${DEFAULTS}`]: "# nothing\n" },
    expect: [],
  },
  {
    name: "Debian's stock unit without /etc/default/docker (optional file)",
    envFiles: { [`-${DEFAULTS}`]: undefined },
    expect: [],
  },
  {
    name: "--data-root in DOCKER_OPTS of /etc/default/docker",
    envFiles: { [`-${DEFAULTS}`]: 'DOCKER_OPTS="--dns 10.0.0.2 --data-root /srv/docker"\n' },
    expect: [ownedBy("--data-root /srv/docker", fromDefaults(), "data-root")],
  },
  {
    name: "--data-root= in an ExecStart= of a drop-in (after the reset)",
    argv: "/usr/bin/dockerd -H fd:// --data-root=/srv/docker",
    execStartIn: DROPIN,
    expect: [ownedBy("--data-root=/srv/docker", inDropin, "data-root")],
  },
  {
    name: "legacy -g in ExecStart",
    argv: "/usr/bin/dockerd -g /srv/docker -H fd://",
    expect: [`remove -g /srv/docker from ${inUnit}: the agent sets "data-root" in /etc/docker/daemon.json`],
  },
  {
    name: "legacy --graph= in ExecStart",
    argv: "/usr/bin/dockerd --graph=/srv/docker",
    expect: [`remove --graph=/srv/docker from ${inUnit}: the agent sets "data-root" in /etc/docker/daemon.json`],
  },
  {
    name: "--label in ExecStart while the agent publishes engine labels (auto)",
    argv: "/usr/bin/dockerd -H fd:// --label rack=a1",
    expect: [ownedBy("--label rack=a1", inUnit, "labels")],
  },
  {
    name: "--label=… in ExecStart with labels.mode node and no labels in daemon.json: no conflict",
    argv: "/usr/bin/dockerd --label=rack=a1",
    mode: "node",
    expect: [],
  },
  {
    name: "--label with labels.mode node but the operator's labels in daemon.json",
    argv: "/usr/bin/dockerd --label=rack=a1",
    mode: "node",
    daemonJson: { labels: ["zone=b"] },
    expect: [eitherOr("--label=rack=a1", inUnit, "labels")],
  },
  {
    name: "--label from Environment= expanded as $DOCKER_EXTRA",
    argv: "/usr/bin/dockerd -H fd:// $DOCKER_EXTRA",
    environment: '"DOCKER_EXTRA=--label=team=x --debug"',
    expect: [ownedBy("--label=team=x", `DOCKER_EXTRA in ${DROPIN} (Environment= of docker.service)`, "labels")],
  },
  {
    name: "an EnvironmentFile= overrides Environment= for the same name",
    argv: "/usr/bin/dockerd $DOCKER_OPTS",
    environment: "DOCKER_OPTS=--debug",
    envFiles: { [`-${DEFAULTS}`]: "DOCKER_OPTS='--data-root /x'\n" },
    expect: [ownedBy("--data-root /x", fromDefaults(), "data-root")],
  },
  {
    name: "$$DOCKER_OPTS is a literal dollar: nothing expanded",
    argv: "/usr/bin/dockerd $$DOCKER_OPTS",
    envFiles: { [`-${DEFAULTS}`]: "DOCKER_OPTS=--data-root=/x\n" },
    expect: [],
  },
  {
    name: "${VAR} inside a word is replaced in place",
    argv: "/usr/bin/dockerd --data-root=${ROOT}",
    envFiles: { [DEFAULTS]: "ROOT=/srv/docker\n" },
    expect: [
      ownedBy("--data-root=/srv/docker", `ROOT in ${DEFAULTS} (EnvironmentFile of docker.service)`, "data-root"),
    ],
  },
  {
    name: "a required EnvironmentFile= that is missing: systemd would not start docker",
    envFiles: { [DEFAULTS]: undefined },
    expect: [`create ${DEFAULTS}, or write EnvironmentFile=-${DEFAULTS} (optional) in docker.service`],
  },
  {
    name: "-H fd:// with hosts in daemon.json (the classic refusal, the operator's key)",
    daemonJson: { hosts: ["unix:///var/run/docker.sock"] },
    expect: [eitherOr("-H fd://", inUnit, "hosts")],
  },
  {
    name: "--storage-driver and storage-driver",
    argv: "/usr/bin/dockerd --storage-driver overlay2",
    daemonJson: { "storage-driver": "overlay2" },
    expect: [eitherOr("--storage-driver overlay2", inUnit, "storage-driver")],
  },
  {
    name: "-s (shorthand) and storage-driver",
    argv: "/usr/bin/dockerd -s overlay2",
    daemonJson: { "storage-driver": "overlay2" },
    expect: [eitherOr("-s overlay2", inUnit, "storage-driver")],
  },
  {
    name: "a cluster of shorthands: -D (debug) then -H with its value",
    argv: "/usr/bin/dockerd -DH fd://",
    daemonJson: { debug: true, hosts: [] },
    expect: [eitherOr("-D", inUnit, "debug"), eitherOr("-H fd://", inUnit, "hosts")],
  },
  {
    name: "--add-runtime next to runtimes: the one pair dockerd merges",
    argv: "/usr/bin/dockerd --add-runtime crun=/usr/bin/crun",
    daemonJson: { runtimes: { runc: { path: "runc" } } },
    expect: [],
  },
  {
    name: "--http-proxy with proxies.http-proxy (dockerd flattens nested objects)",
    argv: "/usr/bin/dockerd --http-proxy http://proxy:3128",
    daemonJson: { proxies: { "http-proxy": "http://other:3128" } },
    expect: [eitherOr("--http-proxy http://proxy:3128", inUnit, "http-proxy")],
  },
  {
    name: "--log-opt with log-opts (a named option; log-opts is kept whole)",
    argv: "/usr/bin/dockerd --log-opt max-size=10m",
    daemonJson: { "log-opts": { "max-file": "3" } },
    expect: [eitherOr("--log-opt max-size=10m", inUnit, "log-opts")],
  },
  {
    name: "--feature on docker 29 (the agent writes features.containerd-snapshotter)",
    argv: "/usr/bin/dockerd --feature containerd-snapshotter=false",
    engineVersion: "29.0.1",
    expect: [ownedBy("--feature containerd-snapshotter=false", inUnit, "features")],
  },
  {
    name: "--feature on docker 27 with no features key: the agent leaves features alone",
    argv: "/usr/bin/dockerd --feature cdi",
    engineVersion: "27.5.1",
    expect: [],
  },
  {
    name: "--config-file elsewhere: dockerd would never see the agent's file",
    argv: "/usr/bin/dockerd --config-file /etc/docker/other.json",
    expect: [
      `remove --config-file /etc/docker/other.json from ${inUnit}, or set paths.daemonJson in the agent's config ` +
        `to /etc/docker/other.json`,
    ],
  },
  {
    name: "--config-file naming the agent's file",
    argv: "/usr/bin/dockerd --config-file=/etc/docker/daemon.json",
    expect: [],
  },
  {
    name: "no --config-file while the agent edits another file",
    daemonJsonPath: "/srv/etc/daemon.json",
    expect: [
      `set paths.daemonJson in the agent's config to ${DEFAULT_CONFIG_FILE}, or give dockerd --config-file ` +
        `/srv/etc/daemon.json`,
    ],
  },
  {
    name: "flags with no daemon.json counterpart the agent writes are fine",
    argv:
      "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock --iptables=false --debug --log-level " +
      "warn",
    expect: [],
  },
  {
    name: "an Amazon Linux-style unit: $OPTIONS from /etc/sysconfig/docker, an empty daemon.json",
    argv: AL2023_ARGV,
    envFiles: { "-/etc/sysconfig/docker": AL2023_SYSCONFIG, "-/etc/sysconfig/docker-storage": undefined },
    expect: [],
  },
  {
    name: "an Amazon Linux-style unit with default-ulimits also in daemon.json",
    argv: AL2023_ARGV,
    envFiles: { "-/etc/sysconfig/docker": AL2023_SYSCONFIG },
    daemonJson: { "default-ulimits": { nofile: { Name: "nofile", Soft: 1024, Hard: 4096 } } },
    expect: [
      eitherOr(
        "--default-ulimit nofile=32768:65536",
        "OPTIONS in /etc/sysconfig/docker (EnvironmentFile of docker.service)",
        "default-ulimits",
      ),
    ],
  },
  {
    name: "a unit systemd does not know",
    loadState: "not-found",
    expect: ["install docker's unit, or set docker.unit in the agent's config to the unit that runs dockerd"],
  },
  {
    name: "an ExecStart that does not run dockerd",
    argv: "/usr/local/bin/start-docker.sh --fast",
    expect: [
      "make docker.service's ExecStart run dockerd itself, or set docker.unit in the agent's config to the unit " +
        "that does",
    ],
  },
];

function showText(c: Case): string {
  const argv = c.argv ?? STOCK_ARGV;
  const lines = [
    `ExecStart={ path=${argv.split(" ")[0]} ; argv[]=${argv} ; ignore_errors=no ; start_time=[n/a] ; ` +
      `stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }`,
    `Environment=${c.environment ?? ""}`,
    ...Object.keys(c.envFiles ?? {}).map(
      (path) => `EnvironmentFiles=${path.replace(/^-/, "")} (ignore_errors=${path.startsWith("-") ? "yes" : "no"})`,
    ),
    `LoadState=${c.loadState ?? "loaded"}`,
    `FragmentPath=${c.loadState === "not-found" ? "" : UNIT}`,
    `DropInPaths=${c.execStartIn === DROPIN || c.environment ? DROPIN : ""}`,
  ];
  return lines.join("\n") + "\n";
}

function unitFiles(c: Case): UnitFile[] {
  const argv = c.argv ?? STOCK_ARGV;
  const files: UnitFile[] = [
    { path: UNIT, text: `[Service]\nExecStart=${c.execStartIn === DROPIN ? STOCK_ARGV : argv}\n` },
  ];
  if (c.execStartIn === DROPIN || c.environment) {
    const env = c.environment ? `Environment=${c.environment}\n` : "";
    files.push({
      path: DROPIN,
      text: `[Service]\n${env}${c.execStartIn === DROPIN ? `ExecStart=\nExecStart=${argv}\n` : ""}`,
    });
  }
  return files;
}

function verdict(c: Case): { problems: string[]; remediations: string[] } {
  const props = parseSystemctlShow(showText(c));
  const environmentFiles = new Map(
    Object.entries(c.envFiles ?? {}).map(([path, text]) => [path.replace(/^-/, ""), text]),
  );
  const command = effectiveDockerdCommand({ unit: "docker.service", props, environmentFiles, unitFiles: unitFiles(c) });
  const path = c.daemonJsonPath ?? "/etc/docker/daemon.json";
  const agentKeys = agentKeysFor(c.mode ?? "auto", c.engineVersion ?? "20.10.24");
  const flags = parseDockerdFlags(command.args);
  const problems = [
    ...command.problems,
    ...(command.problems.length > 0 && command.args.length === 0
      ? []
      : dockerdFlagProblems(flags, plannedDaemonJson(c.daemonJson ?? {}, agentKeys), {
          daemonJsonPath: path,
          readsAgentFile: configFileOf(flags).path === path,
          agentKeys,
          source: "docker.service",
        })),
  ];
  return { problems: problems.map((p) => p.problem), remediations: problems.map((p) => p.remediation) };
}

for (const c of corpus) {
  t.test(c.name, async (t) => {
    const { problems, remediations } = verdict(c);
    t.same(remediations, c.expect, "the remediations");
    for (const problem of problems.filter((p) => p.includes(' and "'))) {
      t.match(
        problem,
        /dockerd refuses to start when a directive is given both as a flag and in its configuration file/,
        "the problem states dockerd's rule",
      );
      t.notMatch(problem, /override/i, "and never says a flag overrides the file");
    }
  });
}

t.test("flag parsing: forms pflag accepts", async (t) => {
  const args = [
    "--data-root",
    "/a",
    "--label=x=y",
    "-H",
    "fd://",
    "-Hunix:///s",
    "-G=docker",
    "--debug",
    "--iptables=false",
    "-D",
    "--tls",
  ].map((value) => ({ value, origin: "o" }));
  t.same(
    parseDockerdFlags(args).map((f) => [f.name, f.value ?? null]),
    [
      ["data-root", "/a"],
      ["label", "x=y"],
      ["host", "fd://"],
      ["host", "unix:///s"],
      ["group", "docker"],
      ["debug", null],
      ["iptables", "false"],
      ["debug", null],
      ["tls", null],
    ],
  );
});
