/**
 * The systemd units (systemd/) and their installer (scripts/install.sh): `systemd-analyze
 * verify` accepts the units as installed into a scratch root (no running systemd needed), the
 * units say what the two-phase boot and the release at shutdown need (docs/operations.md), the
 * commands they run exist in the bundle, and install.sh is idempotent and never overwrites an
 * operator's config.
 */
import t, { type Test } from "tap";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import {
  chmod,
  copyFile,
  link,
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  readlink,
  rm,
  symlink,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { validateConfig } from "../../src/config/index.ts";
import { run } from "../../src/exec.ts";
import { NODE_BINARY, REPO, buildBundle, childEnv } from "../fixtures/lab/nspawn.ts";

const UNITS = [
  "ebs-cache-agent.service",
  "ebs-cache-agent-ready.service",
  "ebs-cache-agent-prewarm.service",
  "ebs-cache-agent-release.service",
  "ebs-cache-agent-gc.service",
  "ebs-cache-agent-gc.timer",
  "ebs-cache-agent-keeper.service",
  "ebs-cache-agent-keeper.timer",
  "ebs-cache-agent-prune.service",
  "ebs-cache-agent-prune.timer",
];
const NODE = "/usr/bin/node";
const BUNDLE = "/opt/ebs-cache-agent/ebs-cache-agent.mjs";
/**
 * Options that give a unit a mount namespace of its own (or a device policy): mounts made by the agent would not reach
 * docker.
 */
const NAMESPACING = [
  "PrivateMounts",
  "PrivateTmp",
  "PrivateDevices",
  "PrivateNetwork",
  "ProtectSystem",
  "ProtectHome",
  "ProtectKernelTunables",
  "ProtectKernelModules",
  "ProtectKernelLogs",
  "ProtectControlGroups",
  "ProtectHostname",
  "ProtectClock",
  "ProtectProc",
  "ProcSubset",
  "ReadOnlyPaths",
  "ReadWritePaths",
  "InaccessiblePaths",
  "ExecPaths",
  "NoExecPaths",
  "BindPaths",
  "BindReadOnlyPaths",
  "TemporaryFileSystem",
  "MountFlags",
  "RootDirectory",
  "RootImage",
  "DevicePolicy",
  "DeviceAllow",
  "MountAPIVFS",
];
/** Sandboxing keys that must each come with a comment saying why. */
const SANDBOX_KEYS = new RegExp(
  String.raw`^(NoNewPrivileges|LockPersonality|RestrictRealtime|RestrictSUIDSGID|RestrictName` +
    String.raw`spaces|RestrictAddressFamilies|SystemCallArchitectures|SystemCallFilter|Capabili` +
    String.raw`tyBoundingSet|MemoryDenyWriteExecute|UMask)=`,
);

type Unit = Record<string, Record<string, string[]>>;

/** A unit file as section -> key -> values (repeated keys keep every value, in order). */
function parseUnit(text: string): Unit {
  const unit: Unit = {};
  let section = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) continue;
    const header = /^\[(.+)\]$/.exec(line);
    if (header) {
      section = header[1]!;
      unit[section] ??= {};
      continue;
    }
    const eq = line.indexOf("=");
    const key = line.slice(0, eq).trim();
    (unit[section]![key] ??= []).push(line.slice(eq + 1).trim());
  }
  return unit;
}
const words = (unit: Unit, section: string, key: string): string[] =>
  (unit[section]?.[key] ?? []).flatMap((v) => v.split(/\s+/)).filter(Boolean);
const last = (unit: Unit, section: string, key: string): string | undefined => unit[section]?.[key]?.at(-1);

async function readUnit(name: string): Promise<{ text: string; unit: Unit }> {
  const text = await readFile(join("systemd", name), "utf8");
  return { text, unit: parseUnit(text) };
}

/** Builds the bundle once per test file (into a folder of its own: `dist/` belongs to other tests). */
let bundlePromise: Promise<string> | undefined;
function bundle(): Promise<string> {
  bundlePromise ??= (async () => {
    const dir = await mkdtemp(join(tmpdir(), "ebs-cache-systemd-bundle-"));
    t.teardown(() => rm(dir, { recursive: true, force: true })); // the file's, not a subtest's
    return buildBundle(dir);
  })();
  return bundlePromise;
}

async function install(
  root: string,
  bundlePath: string,
): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  return run("bash", [join(REPO, "scripts/install.sh"), "--bundle", bundlePath, root], {
    check: false,
    env: childEnv(),
  });
}

/** Every path under `root` with its type, mode, link target and content hash. */
async function snapshot(root: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (dir: string) => {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      const rel = relative(root, path);
      const info = await lstat(path);
      const mode = (info.mode & 0o7777).toString(8);
      if (entry.isSymbolicLink()) out[rel] = `link -> ${await readlink(path)}`;
      else if (entry.isDirectory()) {
        out[rel] = `dir ${mode}`;
        await walk(path);
      } else
        out[rel] = `file ${mode} ${createHash("sha256")
          .update(await readFile(path))
          .digest("hex")}`;
    }
  };
  await walk(root);
  return out;
}

async function scratchRoot(t: Test, name: string): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), `ebs-cache-${name}-`));
  t.teardown(() => rm(root, { recursive: true, force: true }));
  return root;
}

/**
 * A root systemd-analyze can verify the installed units in: the host's system units (targets,
 * docker.service), Node at /usr/bin/node, and the agent as install.sh puts it.
 */
async function verifiableRoot(t: Test): Promise<string> {
  const root = await scratchRoot(t, "systemd-verify");
  const installed = await install(root, await bundle());
  if (installed.exitCode !== 0) throw new Error(`install.sh failed: ${installed.stderr}`);
  await mkdir(join(root, "usr/lib/systemd"), { recursive: true });
  await run("cp", ["-a", "/lib/systemd/system", join(root, "usr/lib/systemd/system")]);
  if (!existsSync(join(root, "usr/lib/systemd/system/docker.service"))) {
    // docker.io is not installed here: a stand-in with the names the units are ordered against.
    await writeFile(
      join(root, "usr/lib/systemd/system/docker.service"),
      "[Unit]\nDescription=docker stand-in\n\n[Service]\nExecStart=/bin/true\n",
    );
  }
  await mkdir(join(root, "usr/bin"), { recursive: true });
  await link(NODE_BINARY, join(root, NODE)).catch(() => copyFile(NODE_BINARY, join(root, NODE)));
  // The release unit's ExecStart=/bin/true (Debian is usr-merged: /bin -> usr/bin).
  await symlink("usr/bin", join(root, "bin"));
  await copyFile("/bin/true", join(root, "usr/bin/true"));
  await chmod(join(root, "usr/bin/true"), 0o755);
  return root;
}

async function verify(root: string, units: string[]) {
  const result = await run(
    "systemd-analyze",
    ["verify", `--root=${root}`, ...units.map((u) => `/etc/systemd/system/${u}`)],
    { check: false, timeoutMs: 60_000 },
  );
  // Findings about other units (the host's own) are not this test's business.
  const ours = (result.stdout + result.stderr).split("\n").filter((line) => /ebs-cache/.test(line));
  return { exitCode: result.exitCode, ours, all: result.stdout + result.stderr };
}

t.test("systemd-analyze verify accepts the installed units", async (t) => {
  const root = await verifiableRoot(t);
  const result = await verify(root, UNITS);
  t.equal(result.exitCode, 0, `systemd-analyze verify exits 0${result.exitCode ? `:\n${result.all}` : ""}`);
  t.same(result.ours, [], "and says nothing about them");

  // The check has teeth: a typo and a missing program are both found.
  const unit = join(root, "etc/systemd/system/ebs-cache-agent.service");
  const text = await readFile(unit, "utf8");
  await writeFile(unit, text.replace("RemainAfterExit=yes", "RemainAfterExitt=yes"));
  t.match(
    (await verify(root, ["ebs-cache-agent.service"])).ours.join("\n"),
    /RemainAfterExitt/,
    "an unknown key is reported",
  );
  await writeFile(unit, text.replace(`ExecStart=${NODE} `, "ExecStart=/usr/bin/no-such-node "));
  t.not((await verify(root, ["ebs-cache-agent.service"])).exitCode, 0, "a missing program fails verify");
});

/** Every sandboxing option of a unit comes with a comment (the line before it) saying why. */
function uncommentedSandboxing(text: string): string[] {
  const lines = text.split("\n");
  return lines.filter((line, i) => SANDBOX_KEYS.test(line) && !(lines[i - 1] ?? "").trimStart().startsWith("#"));
}

t.test("ebs-cache-agent.service: phase 1, before docker; no release here", async (t) => {
  const { text, unit } = await readUnit("ebs-cache-agent.service");
  t.equal(last(unit, "Service", "Type"), "oneshot");
  t.equal(
    last(unit, "Service", "RemainAfterExit"),
    "yes",
    "stays active once done (docker and phase 2 are ordered after it)",
  );
  t.ok(words(unit, "Unit", "Before").includes("docker.service"), "Before=docker.service");
  t.ok(
    words(unit, "Unit", "Before").includes("containerd.service"),
    "Before=containerd.service: containerd starts on the root this phase set",
  );
  for (const after of ["network-online.target", "local-fs.target"])
    t.ok(words(unit, "Unit", "After").includes(after), `After=${after}`);
  t.ok(words(unit, "Unit", "Wants").includes("network-online.target"), "Wants=network-online.target");
  t.notOk(
    words(unit, "Unit", "Requires").includes("docker.service") ||
      words(unit, "Unit", "Wants").includes("docker.service"),
    "does not pull docker in (docker.service is ordered after it)",
  );
  t.equal(last(unit, "Service", "ExecStart"), `${NODE} ${BUNDLE} boot --no-docker`, "ExecStart: boot --no-docker");
  t.notOk(
    unit.Service?.ExecStop,
    "no ExecStop: a failed unit gets none; the release is ebs-cache-agent-release.service",
  );
  t.match(last(unit, "Service", "TimeoutStartSec") ?? "", /^\d+$/, "an explicit TimeoutStartSec");
  t.ok(words(unit, "Service", "SuccessExitStatus").includes("4"), "degraded (4) is not a failure");
  t.equal(last(unit, "Service", "SyslogIdentifier"), "ebs-cache-agent");
  t.ok(words(unit, "Install", "WantedBy").includes("multi-user.target"));
  for (const key of NAMESPACING) t.notOk(unit.Service?.[key], `no ${key}=: the mount must reach docker`);
  t.same(uncommentedSandboxing(text), [], "every sandboxing option comes with a comment saying why");
});

t.test("ebs-cache-agent-release.service: active from boot, releases at stop, after docker", async (t) => {
  const { text, unit } = await readUnit("ebs-cache-agent-release.service");
  const { text: phase1Text, unit: phase1 } = await readUnit("ebs-cache-agent.service");
  t.equal(last(unit, "Service", "Type"), "oneshot");
  t.equal(last(unit, "Service", "RemainAfterExit"), "yes", "stays active, so ExecStop runs at shutdown");
  t.equal(last(unit, "Service", "ExecStart"), "/bin/true", "ExecStart does nothing: active whatever the boot did");
  t.equal(last(unit, "Service", "ExecStop"), `${NODE} ${BUNDLE} release`, "ExecStop: release");
  t.notOk(
    words(unit, "Service", "SuccessExitStatus").length,
    "no SuccessExitStatus: a failed release shows as a failed unit",
  );
  t.ok(
    words(unit, "Unit", "Before").includes("docker.service"),
    "Before=docker.service: at shutdown it stops after docker has stopped",
  );
  t.ok(
    words(unit, "Unit", "Before").includes("ebs-cache-agent.service"),
    "Before=ebs-cache-agent.service: never overlaps phase 1",
  );
  t.ok(
    words(unit, "Unit", "Before").includes("containerd.service"),
    "Before=containerd.service: at shutdown it stops after containerd, which holds its metadata on the volume",
  );
  t.notOk(
    words(unit, "Unit", "After").includes("containerd.service"),
    "not After=containerd.service (an ordering cycle through phase 1)",
  );
  for (const after of ["network-online.target", "local-fs.target"])
    t.ok(words(unit, "Unit", "After").includes(after), `After=${after}: released while it is still up`);
  t.ok(words(unit, "Unit", "Wants").includes("network-online.target"), "Wants=network-online.target");
  for (const key of ["Requires", "Wants", "BindsTo", "PartOf", "Requisite"]) {
    t.notOk(
      words(unit, "Unit", key).some((u) => u === "docker.service" || u.startsWith("ebs-cache-agent")),
      `no ${key}= on docker or the boot units: ordering only`,
    );
  }
  t.notOk(
    words(unit, "Unit", "After").includes("docker.service"),
    "not After=docker.service (it would release before docker stops)",
  );
  t.match(last(unit, "Service", "TimeoutStopSec") ?? "", /^\d+$/, "an explicit TimeoutStopSec");
  t.equal(last(unit, "Service", "SyslogIdentifier"), "ebs-cache-agent");
  t.equal(last(unit, "Unit", "ConditionPathExists"), BUNDLE);
  t.ok(words(unit, "Install", "WantedBy").includes("multi-user.target"));
  for (const key of NAMESPACING) t.notOk(unit.Service?.[key], `no ${key}=: it unmounts the host's mount`);
  t.same(uncommentedSandboxing(text), [], "every sandboxing option comes with a comment saying why");
  // The same sandbox as phase 1.
  const sandbox = (u: Unit, unitText: string) =>
    Object.fromEntries(
      unitText
        .split("\n")
        .filter((line) => SANDBOX_KEYS.test(line))
        .map((line) => line.slice(0, line.indexOf("=")))
        .map((key) => [key, last(u, "Service", key)]),
    );
  t.same(sandbox(unit, text), sandbox(phase1, phase1Text), "the same sandboxing options as ebs-cache-agent.service");
});

t.test("ebs-cache-agent-ready.service: phase 2, after docker, even when docker failed", async (t) => {
  const { unit } = await readUnit("ebs-cache-agent-ready.service");
  t.equal(
    last(unit, "Service", "Type"),
    "notify",
    "notify: started (for multi-user.target, so for the swarm join) once docker is final, not at the run's end",
  );
  t.equal(last(unit, "Service", "NotifyAccess"), "all", "systemd-notify, a child process, may send READY=1");
  t.equal(last(unit, "Service", "RemainAfterExit"), "yes");
  t.ok(
    words(unit, "Unit", "Before").includes("cloud-final.service"),
    "Before=cloud-final.service: the join never races the switch where cloud-final is not after multi-user.target",
  );
  for (const after of ["docker.service", "ebs-cache-agent.service"])
    t.ok(words(unit, "Unit", "After").includes(after), `After=${after}`);
  t.ok(words(unit, "Unit", "Wants").includes("docker.service"), "Wants=docker.service");
  t.notOk(
    words(unit, "Unit", "Requires").includes("docker.service"),
    "not Requires=: a failed docker must still get a `degraded` report",
  );
  t.notOk(words(unit, "Unit", "BindsTo").includes("docker.service"), "not BindsTo= either");
  t.equal(
    last(unit, "Service", "ExecStart"),
    `${NODE} ${BUNDLE} boot --no-claim`,
    "ExecStart: the full boot, reusing only a volume already attached",
  );
  t.notOk(
    unit.Service?.ExecStop,
    "no ExecStop: the release is ebs-cache-agent-release.service, which stops after docker",
  );
  t.ok(words(unit, "Service", "SuccessExitStatus").includes("4"));
  t.match(last(unit, "Service", "TimeoutStartSec") ?? "", /^\d+$/);
  t.ok(words(unit, "Install", "WantedBy").includes("multi-user.target"));
  for (const key of NAMESPACING) t.notOk(unit.Service?.[key], `no ${key}=`);
});

t.test("ebs-cache-agent-prewarm.service: begun by phase 1, outlives it, stopped before the release", async (t) => {
  const { text, unit } = await readUnit("ebs-cache-agent-prewarm.service");
  t.equal(last(unit, "Service", "ExecStart"), `${NODE} ${BUNDLE} prewarm --from-mount`);
  t.not(last(unit, "Service", "Type"), "oneshot", "a long run: its start is not waited for");
  t.notOk(unit.Install, "no [Install]: phase 1 starts it, nothing else");
  t.ok(
    words(unit, "Unit", "After").includes("ebs-cache-agent-release.service"),
    "After= the release: stopped before the release unmounts at shutdown",
  );
  for (const key of ["After", "Before", "Requires", "Wants", "BindsTo", "PartOf"])
    for (const other of ["docker.service", "containerd.service", "ebs-cache-agent.service"])
      t.notOk(
        words(unit, "Unit", key).includes(other),
        `no ${key}=${other}: docker and phase 1 wait for nothing of it`,
      );
  t.equal(last(unit, "Service", "NotifyAccess"), "all", "its progress reaches systemctl status (STATUS=)");
  t.match(last(unit, "Service", "TimeoutStopSec") ?? "", /^\d+$/);
  const { stoppedExitCode } = await import("../../src/agent/prewarm/run.ts");
  const { StopSignalReceived } = await import("../../src/errors.ts");
  const byRelease = new AbortController();
  byRelease.abort(new StopSignalReceived("SIGTERM"));
  t.same(
    words(unit, "Service", "SuccessExitStatus"),
    [String(stoppedExitCode(byRelease.signal))],
    "a run stopped by SIGTERM (the release's stop) is a clean stop, and only that: a failed read (1) fails the unit",
  );
  for (const key of NAMESPACING) t.notOk(unit.Service?.[key], `no ${key}=: a copy of the mount would hold the detach`);
  t.same(uncommentedSandboxing(text), [], "every sandboxing option comes with a comment saying why");
  // Phase 1 starts it by name.
  const { createPrewarmUnit, PREWARM_UNIT } = await import("../../src/host/prewarm-unit.ts");
  t.equal(PREWARM_UNIT, "ebs-cache-agent-prewarm.service");
  t.ok(createPrewarmUnit());
});

t.test("the units that read a cold volume give Node the pool its reads through the page cache need", async (t) => {
  const { READ_POOL_THREADS } = await import("../../src/host/cache-reads.ts");
  for (const name of ["ebs-cache-agent.service", "ebs-cache-agent-ready.service", "ebs-cache-agent-prewarm.service"]) {
    const { unit } = await readUnit(name);
    t.ok(
      words(unit, "Service", "Environment").includes(`UV_THREADPOOL_SIZE=${READ_POOL_THREADS}`),
      `${name}: UV_THREADPOOL_SIZE=${READ_POOL_THREADS}`,
    );
  }
});

t.test("gc service and timer", async (t) => {
  const { unit: service } = await readUnit("ebs-cache-agent-gc.service");
  t.equal(last(service, "Service", "Type"), "oneshot");
  t.equal(last(service, "Service", "ExecStart"), `${NODE} ${BUNDLE} gc`);
  t.notOk(service.Install, "started by its timer only");
  const { unit: timer } = await readUnit("ebs-cache-agent-gc.timer");
  t.ok(last(timer, "Timer", "OnCalendar"), "OnCalendar");
  t.ok(last(timer, "Timer", "RandomizedDelaySec"), "RandomizedDelaySec spreads the fleet");
  t.equal(last(timer, "Timer", "Persistent"), "true");
  t.ok(words(timer, "Install", "WantedBy").includes("timers.target"));
});

t.test("keeper service and timer", async (t) => {
  const { unit: service } = await readUnit("ebs-cache-agent-keeper.service");
  t.equal(last(service, "Service", "Type"), "oneshot");
  t.equal(last(service, "Service", "ExecStart"), `${NODE} ${BUNDLE} pool fill`);
  // A oneshot unit gets $NOTIFY_SOCKET only with NotifyAccess set; `all`: the sender is systemd-notify, a child.
  t.equal(last(service, "Service", "NotifyAccess"), "all", "the wait's progress reaches systemctl status (STATUS=)");
  t.notOk(service.Install, "started by its timer only");
  t.equal(last(service, "Service", "CapabilityBoundingSet"), "", "no capabilities: it only talks to EC2");
  const { unit: timer } = await readUnit("ebs-cache-agent-keeper.timer");
  t.ok(last(timer, "Timer", "OnCalendar"), "OnCalendar");
  t.ok(last(timer, "Timer", "RandomizedDelaySec"), "RandomizedDelaySec spreads the keepers");
  t.ok(words(timer, "Install", "WantedBy").includes("timers.target"));
});

/**
 * Each service's exposure as `systemd-analyze security --offline=yes` rates it (0 safest, 10 most
 * exposed), the most it may be: gc and the keeper share one strict sandbox (the keeper's 0.2 more is
 * NotifyAccess=all, its progress to `systemctl status`, as the ready unit's over phase 1's); the prune takes all of
 * it that needs no mount namespace (it reads the cache volume's mount as the host has it, and a
 * namespace's copy of that mount would hold the release's detach at shutdown); the boot and
 * release units share the host's mounts and devices by design (docs/operations.md, Sandboxing).
 */
const EXPOSURE_AT_MOST: Record<string, number> = {
  "ebs-cache-agent-gc.service": 2.2,
  "ebs-cache-agent-keeper.service": 2.4,
  "ebs-cache-agent-prune.service": 3.9,
  "ebs-cache-agent.service": 7.6,
  "ebs-cache-agent-release.service": 7.6,
  "ebs-cache-agent-ready.service": 7.8,
  "ebs-cache-agent-prewarm.service": 7.8,
};

/** A unit file's overall exposure, read offline (no running systemd needed). */
async function exposure(path: string): Promise<number> {
  const result = await run("systemd-analyze", ["security", "--offline=yes", path], { check: false, timeoutMs: 60_000 });
  const figure = /Overall exposure level for \S+: (\d+\.\d+)/.exec(result.stdout + result.stderr);
  if (!figure)
    throw new Error(`systemd-analyze security gave no figure for ${path}:\n${result.stdout}${result.stderr}`);
  return Number(figure[1]);
}

t.test("systemd-analyze security: every unit within its exposure; gc and keeper alike but for STATUS=", async (t) => {
  const services = UNITS.filter((unit) => unit.endsWith(".service"));
  t.same(Object.keys(EXPOSURE_AT_MOST).sort(), [...services].sort(), "every service has a figure");
  const figures: Record<string, number> = {};
  for (const unit of services) {
    figures[unit] = await exposure(join("systemd", unit));
    t.ok(figures[unit] <= EXPOSURE_AT_MOST[unit]!, `${unit}: ${figures[unit]} <= ${EXPOSURE_AT_MOST[unit]}`);
  }
  t.equal(
    Math.round((figures["ebs-cache-agent-keeper.service"]! - figures["ebs-cache-agent-gc.service"]!) * 10) / 10,
    0.2,
    "keeper as gc, but for NotifyAccess=all (rated 0.2)",
  );
  t.equal(
    Math.round((figures["ebs-cache-agent-ready.service"]! - figures["ebs-cache-agent.service"]!) * 10) / 10,
    0.2,
    "the ready unit as phase 1, but for NotifyAccess=all (rated 0.2)",
  );
  t.equal(figures["ebs-cache-agent-release.service"], figures["ebs-cache-agent.service"], "the release as phase 1");

  // The check has teeth: the prune without its sandbox rates worse.
  const dir = await scratchRoot(t, "systemd-security");
  const text = await readFile("systemd/ebs-cache-agent-prune.service", "utf8");
  const loose = join(dir, "ebs-cache-agent-prune.service");
  await writeFile(loose, text.replace(/^(SystemCallFilter|CapabilityBoundingSet|RestrictAddressFamilies)=.*$/gm, ""));
  t.ok((await exposure(loose)) > EXPOSURE_AT_MOST["ebs-cache-agent-prune.service"]!, "a loosened unit rates worse");
});

t.test("the commands the units run exist in the bundle", async (t) => {
  const bundlePath = await bundle();
  const boot = await run(process.execPath, [bundlePath, "boot", "--help"], { check: false, env: childEnv() });
  t.match(boot.stdout, /--no-docker/, "boot --no-docker");
  t.match(boot.stdout, /--no-claim/, "boot --no-claim");
  for (const command of ["release", "gc"]) {
    const help = await run(process.execPath, [bundlePath, command, "--help"], { check: false, env: childEnv() });
    // (`<unknown> --help` prints the program's help and exits 0: look at the usage line.)
    t.match(help.stdout, new RegExp(`^Usage: ebs-cache-agent ${command} `), `\`${command}\` is a command of the agent`);
  }
  const fill = await run(process.execPath, [bundlePath, "pool", "fill", "--help"], { check: false, env: childEnv() });
  t.match(fill.stdout, /^Usage: ebs-cache-agent pool fill /, "`pool fill` is a command of the agent");
});

t.test("install.sh: layout, enabled units, idempotent, keeps an operator's config", async (t) => {
  const bundlePath = await bundle();
  const root = await scratchRoot(t, "install");
  const first = await install(root, bundlePath);
  t.equal(first.exitCode, 0, `install.sh exits 0${first.exitCode ? `: ${first.stderr}` : ""}`);
  t.match(first.stderr, /WARNING: .*usr\/bin\/node not found/, "warns that Node.js is missing from the root");
  const after1 = await snapshot(root);
  t.match(after1["opt/ebs-cache-agent/ebs-cache-agent.mjs"], /^file 644 /, "the bundle");
  t.equal(
    after1["opt/ebs-cache-agent/ebs-cache-agent.mjs"]?.split(" ")[2],
    createHash("sha256")
      .update(await readFile(bundlePath))
      .digest("hex"),
    "is the given bundle",
  );
  const chunks = await readdir(join(dirname(bundlePath), "chunks"));
  t.ok(chunks.length > 1, "the build has chunks");
  for (const chunk of chunks)
    t.match(after1[`opt/ebs-cache-agent/chunks/${chunk}`], /^file 644 /, `chunks/${chunk} beside the entry`);
  t.equal(after1["var/cache/ebs-cache-agent"], "dir 755", "the compile cache's folder");
  t.match(after1["usr/local/bin/ebs-cache-agent"], /^file 755 /, "the wrapper");
  t.match(
    await readFile(join(root, "usr/local/bin/ebs-cache-agent"), "utf8"),
    new RegExp(`exec ${NODE} ${BUNDLE} "\\$@"`),
  );
  t.equal(
    await readFile(join(root, "etc/ebs-cache-agent/config.json"), "utf8"),
    await readFile("config/config.json", "utf8"),
    "the default config",
  );
  t.equal(
    await readFile(join(root, "etc/ebs-cache-agent/config.schema.json"), "utf8"),
    await readFile("config/config.schema.json", "utf8"),
    "its JSON Schema beside it",
  );
  for (const unit of UNITS)
    t.equal(
      await readFile(join(root, "etc/systemd/system", unit), "utf8"),
      await readFile(join("systemd", unit), "utf8"),
      unit,
    );
  t.equal(
    after1["etc/systemd/system/multi-user.target.wants/ebs-cache-agent.service"],
    "link -> /etc/systemd/system/ebs-cache-agent.service",
  );
  t.equal(
    after1["etc/systemd/system/multi-user.target.wants/ebs-cache-agent-ready.service"],
    "link -> /etc/systemd/system/ebs-cache-agent-ready.service",
  );
  t.equal(
    after1["etc/systemd/system/multi-user.target.wants/ebs-cache-agent-release.service"],
    "link -> /etc/systemd/system/ebs-cache-agent-release.service",
  );
  t.equal(
    after1["etc/systemd/system/timers.target.wants/ebs-cache-agent-gc.timer"],
    "link -> /etc/systemd/system/ebs-cache-agent-gc.timer",
  );
  // systemctl agrees that the links enable them (offline, --root).
  for (const [unit, state] of [
    ["ebs-cache-agent.service", "enabled"],
    ["ebs-cache-agent-ready.service", "enabled"],
    ["ebs-cache-agent-release.service", "enabled"],
    ["ebs-cache-agent-prewarm.service", "static"],
    ["ebs-cache-agent-gc.timer", "enabled"],
    ["ebs-cache-agent-gc.service", "static"],
    ["ebs-cache-agent-keeper.timer", "disabled"],
    ["ebs-cache-agent-keeper.service", "static"],
    ["ebs-cache-agent-prune.timer", "enabled"],
    ["ebs-cache-agent-prune.service", "static"],
  ] as const) {
    const enabled = await run("systemctl", [`--root=${root}`, "is-enabled", unit], { check: false });
    t.equal(enabled.stdout.trim(), state, `systemctl --root is-enabled ${unit}: ${state}`);
  }

  // A chunk of an older build, which no entry names any more.
  await writeFile(join(root, "opt/ebs-cache-agent/chunks/chunk-OLDBUILD.mjs"), "export {};\n");
  const second = await install(root, bundlePath);
  t.equal(second.exitCode, 0);
  t.same(await snapshot(root), after1, "a second run leaves the same tree (an older build's chunk removed)");

  const operator = JSON.stringify({ pool: "operators-pool", logLevel: "debug" }, null, 2) + "\n";
  await writeFile(join(root, "etc/ebs-cache-agent/config.json"), operator);
  const third = await install(root, bundlePath);
  t.equal(third.exitCode, 0);
  t.match(third.stdout, /keeping the existing .*config\.json/);
  t.equal(
    await readFile(join(root, "etc/ebs-cache-agent/config.json"), "utf8"),
    operator,
    "an operator's config.json is never overwritten",
  );

  for (const [args, why] of [
    [["relative/root"], "a relative root"],
    [[join(root, "no-such-folder")], "a missing root"],
    [[], "no root"],
  ] as const) {
    const refused = await run("bash", [join(REPO, "scripts/install.sh"), "--bundle", bundlePath, ...args], {
      check: false,
      env: childEnv(),
    });
    t.equal(refused.exitCode, 2, `${why} is refused`);
  }
});

t.test("config/config.json is a valid configuration", async (t) => {
  const { problems } = validateConfig(JSON.parse(await readFile("config/config.json", "utf8")));
  t.same(problems, [], "no problems");
});
