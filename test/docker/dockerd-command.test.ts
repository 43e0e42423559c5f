/**
 * Reading dockerd's effective command line from systemd: the parser on `systemctl show` output
 * recorded from systemd 252 (test/fixtures/data/systemctl-show, see its README), the environment-file
 * rules, and the adapter end to end with a stand-in systemctl that prints a recording and real
 * unit and environment files on disk.
 */
import t from "tap";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  createSystemdDockerdCommand,
  effectiveDockerdCommand,
  parseEnvironmentFile,
  parseSystemctlShow,
  splitQuoted,
  traceUnitFiles,
} from "../../src/docker/dockerd-command.ts";
import { createMemoryLogger } from "../../src/log.ts";

const FIXTURES = fileURLToPath(new URL("../fixtures/data/systemctl-show", import.meta.url));
const recorded = (name: string) => readFile(join(FIXTURES, `${name}.txt`), "utf8");
const unitText = (relative: string) => readFile(join(FIXTURES, "units", relative), "utf8");
const SYSTEM = "/etc/systemd/system";

t.test("Debian's docker.service as systemd 252 shows it", async (t) => {
  const props = parseSystemctlShow(await recorded("debian-docker"));
  t.same(props, {
    loadState: "loaded",
    execStart: [
      {
        path: "/usr/sbin/dockerd",
        argv: ["/usr/sbin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock", "$DOCKER_OPTS"],
      },
    ],
    environment: [],
    environmentFiles: [{ path: "/etc/default/docker", optional: true }],
    fragmentPath: `${SYSTEM}/debian-docker.service`,
    dropInPaths: [],
  });
  const command = effectiveDockerdCommand({
    unit: "docker.service",
    props,
    environmentFiles: new Map([["/etc/default/docker", '# Debian\nDOCKER_OPTS="--dns 10.0.0.2  --dns 10.0.0.3"\n']]),
    unitFiles: [{ path: `${SYSTEM}/debian-docker.service`, text: await unitText("debian-docker.service") }],
  });
  t.same(command.problems, []);
  t.same(
    command.args.map((a) => `${a.value} <${a.origin}>`),
    [
      `-H <ExecStart in ${SYSTEM}/debian-docker.service>`,
      `fd:// <ExecStart in ${SYSTEM}/debian-docker.service>`,
      `--containerd=/run/containerd/containerd.sock <ExecStart in ${SYSTEM}/debian-docker.service>`,
      "--dns <DOCKER_OPTS in /etc/default/docker (EnvironmentFile of docker.service)>",
      "10.0.0.2 <DOCKER_OPTS in /etc/default/docker (EnvironmentFile of docker.service)>",
      "--dns <DOCKER_OPTS in /etc/default/docker (EnvironmentFile of docker.service)>",
      "10.0.0.3 <DOCKER_OPTS in /etc/default/docker (EnvironmentFile of docker.service)>",
    ],
    "$DOCKER_OPTS as a word of its own splits at whitespace",
  );
});

t.test("a drop-in that resets ExecStart, with Environment= and a required EnvironmentFile=", async (t) => {
  const props = parseSystemctlShow(await recorded("dropin-docker"));
  const dropIn = `${SYSTEM}/dropin-docker.service.d/10-data-root.conf`;
  t.same(props.dropInPaths, [dropIn]);
  t.same(props.environment, ["DOCKER_EXTRA=--label=from=environment", "PLAIN=1"], "Environment= words, quotes gone");
  t.same(props.environmentFiles, [
    { path: "/etc/default/docker", optional: true },
    { path: "/etc/ebs-cache-test/docker.env", optional: false },
  ]);
  t.same(
    props.execStart[0]?.argv,
    [
      "/usr/sbin/dockerd",
      "-H",
      "fd://",
      "--data-root=/srv/docker",
      "$DOCKER_EXTRA",
      "${PLAIN}",
      "--label=spaced=a",
      "b",
      "$$NOT_EXPANDED",
      "dropin-docker.service",
    ],
    "systemd joins argv[] unquoted: the spaced argument comes back split; %n is resolved already",
  );
  const unitFiles = [
    { path: `${SYSTEM}/dropin-docker.service`, text: await unitText("dropin-docker.service") },
    { path: dropIn, text: await unitText("dropin-docker.service.d/10-data-root.conf") },
  ];
  t.same(traceUnitFiles(unitFiles).execStart, dropIn, "the ExecStart in force is the drop-in's (after its reset)");

  const missing = effectiveDockerdCommand({ unit: "docker.service", props, environmentFiles: new Map(), unitFiles });
  t.same(
    missing.problems.map((p) => p.problem),
    [
      "docker.service reads EnvironmentFile=/etc/ebs-cache-test/docker.env, which is missing: systemd will not " +
        "start docker",
    ],
    "a missing required file is a problem, the optional /etc/default/docker is not",
  );
  t.same(
    missing.args.map((a) => `${a.value} <${a.origin}>`),
    [
      `-H <ExecStart in ${dropIn}>`,
      `fd:// <ExecStart in ${dropIn}>`,
      `--data-root=/srv/docker <ExecStart in ${dropIn}>`,
      `--label=from=environment <DOCKER_EXTRA in ${dropIn} (Environment= of docker.service)>`,
      `1 <PLAIN in ${dropIn} (Environment= of docker.service)>`,
      `--label=spaced=a <ExecStart in ${dropIn}>`,
      `b <ExecStart in ${dropIn}>`,
      `$NOT_EXPANDED <ExecStart in ${dropIn}>`,
      `dropin-docker.service <ExecStart in ${dropIn}>`,
    ],
  );
});

t.test("a unit systemd does not know", async (t) => {
  const props = parseSystemctlShow(await recorded("missing-docker"));
  t.same(props.execStart, []);
  const command = effectiveDockerdCommand({
    unit: "docker.service",
    props,
    environmentFiles: new Map(),
    unitFiles: [],
  });
  t.match(command.problems[0]?.problem, /docker\.service is not-found to systemd/);
});

t.test("EnvironmentFile= syntax", async (t) => {
  const text = [
    "# comment",
    "; also a comment",
    'A="quoted value" ',
    "B='single $quoted'",
    "C=plain value   ",
    'D="escaped \\" quote"',
    "E=continued \\",
    "line",
    "not an assignment",
    "9BAD=x",
    "  F = spaced",
  ].join("\n");
  t.same(parseEnvironmentFile(text), [
    ["A", "quoted value"],
    ["B", "single $quoted"],
    ["C", "plain value"],
    ["D", 'escaped " quote'],
    ["E", "continued line"],
    ["F", "spaced"],
  ]);
  t.same(splitQuoted("A=1 \"B=x y\" 'C=z' D\\ E"), ["A=1", "B=x y", "C=z", "D E"]);
});

t.test("the adapter: systemctl show, then the unit's files and environment files from disk", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "ebs-cache-dockerd-command-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const unit = join(dir, "docker.service");
  const dropIn = join(dir, "docker.service.d", "x.conf");
  const envFile = join(dir, "default-docker");
  await mkdir(dirname(dropIn), { recursive: true });
  await writeFile(
    unit,
    "[Service]\nEnvironmentFile=-" + envFile + "\nExecStart=/usr/sbin/dockerd -H fd:// $DOCKER_OPTS\n",
  );
  await writeFile(dropIn, "[Service]\nExecStart=\nExecStart=/usr/sbin/dockerd --label=a=b $DOCKER_OPTS\n");
  await writeFile(envFile, "DOCKER_OPTS=--data-root=/srv\n");
  const show = [
    `ExecStart={ path=/usr/sbin/dockerd ; argv[]=/usr/sbin/dockerd --label=a=b $DOCKER_OPTS ; ignore_errors=no ; ` +
      `start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }`,
    "Environment=",
    `EnvironmentFiles=${envFile} (ignore_errors=yes)`,
    "LoadState=loaded",
    `FragmentPath=${unit}`,
    `DropInPaths=${dropIn}`,
  ].join("\n");
  await writeFile(join(dir, "show.txt"), show + "\n");
  const systemctl = join(dir, "systemctl");
  await writeFile(
    systemctl,
    ["#!/bin/sh", `echo "$*" > ${join(dir, "args")}`, `cat ${join(dir, "show.txt")}`].join("\n"),
  );
  await chmod(systemctl, 0o755);
  const runtimeDir = join(dir, "run-systemd-system");
  await mkdir(runtimeDir);

  const read = createSystemdDockerdCommand({
    unit: "docker.service",
    systemctl,
    systemdRuntimeDir: runtimeDir,
    log: createMemoryLogger(),
  });
  const command = await read();
  t.equal(
    (await readFile(join(dir, "args"), "utf8")).trim(),
    "show docker.service -p LoadState -p ExecStart -p Environment -p EnvironmentFiles -p FragmentPath -p DropInPaths",
  );
  t.same(command.args, [
    { value: "--label=a=b", origin: `ExecStart in ${dropIn}` },
    { value: "--data-root=/srv", origin: `DOCKER_OPTS in ${envFile} (EnvironmentFile of docker.service)` },
  ]);

  const noSystemd = await createSystemdDockerdCommand({ systemctl, systemdRuntimeDir: join(dir, "absent") })();
  t.match(
    noSystemd.unknown,
    /systemd does not run this host/,
    "without systemd there is no unit to read, and it says so",
  );
  t.same(noSystemd.args, []);

  const broken = await createSystemdDockerdCommand({ systemctl: join(dir, "nope"), systemdRuntimeDir: runtimeDir })();
  t.match(
    broken.problems[0]?.problem,
    /could not read docker\.service from systemd/,
    "a systemctl that does not run is a problem, not a pass",
  );
});
