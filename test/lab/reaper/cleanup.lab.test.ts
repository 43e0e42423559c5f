import t from "tap";
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { lstat, mkdir, mkdtemp, readdir, readFile, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { run } from "../../../src/exec.ts";
import { mentionsPath, reapLab, reapStaleLabs, registerLabProcess } from "../../../src/lab/reaper/cleanup.ts";
import { parseLosetupJson, parseMountInfo } from "../../../src/lab/reaper/devices.ts";
import { createLabRoot, CREATING_PREFIX, OWNER_FILE, volumeImagePath } from "../../../src/lab/reaper/labdir.ts";
import { openLabRoot } from "../../../src/lab/reaper/labroot.ts";
import { createLoopVolumeBackend } from "../../../src/lab/volumes/loopdev.ts";
import { byIdDir, ebsByIdName, sysfsRoot } from "../../../src/lab/types.ts";
import {
  isProcessAlive,
  listProcesses,
  processIdentity,
  type ProcessEntry,
  type ProcessIdentity,
} from "../../../src/lab/reaper/procinfo.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { assertLabPrerequisites, childEnv, pollUntil } from "../../fixtures/lab/lab-prereq.ts";
import { loopInstance } from "../../fixtures/lab/loop-instance.ts";

await assertLabPrerequisites();

const log = createMemoryLogger();
// Every lab these tests make lives under this test's own lab root: whatever goes wrong, the
// janitor of this root cleans it, and the shared base's other labs are never in the way.
const outer = await openLabRoot({ name: "test-cleanup", log });
t.teardown(async () => {
  await outer.close();
});
let baseCount = 0;
async function privateBase(): Promise<string> {
  const base = join(outer.root, "bases", String(++baseCount));
  await mkdir(base, { recursive: true });
  return base;
}

/** What test/fixtures/lab/lab-owner.ts made before it was killed. */
interface OwnerReport {
  root: string;
  janitorPid: number;
  device: string;
  image: string;
  mounts: string[];
  registeredPid: number;
  pidfilePid: number;
}

/** What test/fixtures/lab/lab-dockerd-owner.ts made before it was killed. */
interface DockerdOwnerReport {
  root: string;
  janitorPid: number;
  dockerdPid: number;
  containerId: string;
  containerPid: number;
}

const ownerFixture = fileURLToPath(new URL("../../fixtures/lab/lab-owner.ts", import.meta.url));
const dockerdOwnerFixture = fileURLToPath(new URL("../../fixtures/lab/lab-dockerd-owner.ts", import.meta.url));

/** Starts the fixture owner and reads its report; the caller kills it. */
function startOwner(args: string[]): Promise<{ child: ChildProcess; report: OwnerReport }> {
  return startFixture<OwnerReport>(ownerFixture, args);
}

/** Starts a fixture and reads the JSON line it prints once it is set up; the caller kills it. */
async function startFixture<Report>(fixture: string, args: string[]): Promise<{ child: ChildProcess; report: Report }> {
  const child = spawn(process.execPath, [fixture, ...args], {
    env: childEnv(),
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = once(child, "exit").then(([code]) => {
    throw new Error(`lab-owner fixture exited early (${String(code)})`);
  });
  const lines = createInterface({ input: child.stdout! });
  const firstLine = once(lines, "line").then(([line]) => line as string);
  const line = await Promise.race([firstLine, exited]);
  exited.catch(() => undefined);
  return { child, report: JSON.parse(line) as Report };
}

async function killHard(child: ChildProcess): Promise<void> {
  const exited = once(child, "exit");
  child.kill("SIGKILL");
  await exited;
}

async function loopListing(): Promise<string> {
  return (await run("losetup", ["-a"])).stdout;
}
async function mountTargets(): Promise<string[]> {
  return (await run("findmnt", ["-rn", "-o", "TARGET"])).stdout.split("\n");
}
async function exists(path: string): Promise<boolean> {
  return lstat(path).then(
    () => true,
    () => false,
  );
}
/** Nothing of `root` is left: no loop device backed by it, no mount under it, no folder. */
async function leftovers(root: string, extraMounts: string[] = []): Promise<string[]> {
  const found: string[] = [];
  if ((await loopListing()).includes(root)) found.push("loop device");
  const targets = await mountTargets();
  if (targets.some((target) => target === root || target.startsWith(`${root}/`) || extraMounts.includes(target))) {
    found.push("mount");
  }
  if (await exists(root)) found.push("folder");
  return found;
}
/** Processes whose command line mentions `root` at all (a plain substring: stricter than the reaper). */
async function mentioning(root: string): Promise<ProcessEntry[]> {
  return (await listProcesses()).filter((entry) => entry.argv.some((arg) => arg.includes(root)));
}
async function identities(pids: number[]): Promise<ProcessIdentity[]> {
  const found = await Promise.all(pids.map((pid) => processIdentity(pid)));
  return found.filter((identity): identity is ProcessIdentity => identity !== undefined);
}

t.test("crash: the janitor reaps a SIGKILLed owner's lab", async (t) => {
  const base = await privateBase();
  const { child, report } = await startOwner([base, "janitor"]);
  t.ok(report.janitorPid > 0, "the owner has a janitor");
  t.match(await loopListing(), report.image, "the owner's loop device exists");
  t.ok((await mountTargets()).includes(report.mounts[0]!), "the owner's volume is mounted");
  const processes = await identities([report.registeredPid, report.pidfilePid]);
  t.equal(processes.length, 2, "the owner's stand-in processes run");

  await killHard(child);
  t.ok(await pollUntil(async () => (await leftovers(report.root)).length === 0, 120_000), "nothing left behind");
  t.same(await leftovers(report.root), []);
  for (const identity of processes) {
    t.ok(await pollUntil(async () => !(await isProcessAlive(identity))), `process ${identity.pid} stopped`);
  }
  t.ok(
    await pollUntil(async () => (await processIdentity(report.janitorPid)) === undefined, 60_000),
    "the janitor exited after reaping",
  );
});

t.test("crash: the janitor reaps a SIGKILLed owner's private dockerd, its shims and containers", async (t) => {
  const base = await privateBase();
  const { child, report } = await startFixture<DockerdOwnerReport>(dockerdOwnerFixture, [base]);
  t.ok(report.janitorPid > 0, "the owner has a janitor");
  const container = await processIdentity(report.containerPid);
  t.ok(container, "the container's sleep runs");
  const running = await mentioning(report.root);
  t.ok(
    running.some((entry) => entry.argv[0]?.includes("containerd-shim")),
    "a containerd-shim names the root (the container below it names nothing of the lab)",
  );
  t.notOk(
    running.some((entry) => entry.pid === report.containerPid),
    "the container's command line does not name the root",
  );

  await killHard(child);
  const reaped = async () =>
    (await mentioning(report.root)).length === 0 &&
    !(await isProcessAlive(container!)) &&
    (await leftovers(report.root)).length === 0;
  t.ok(await pollUntil(reaped, 300_000, 250), "the janitor reaped the lab");
  const describe = (entry: ProcessEntry) => `${entry.pid} ${entry.argv.join(" ")}`;
  t.same((await mentioning(report.root)).map(describe), [], "no process mentions the root");
  t.notOk(await isProcessAlive(container!), "the container's sleep is gone");
  t.same(await leftovers(report.root), [], "no mount, no loop device, no folder");
  const cgroupDirs = (await readdir("/sys/fs/cgroup")).flatMap((hierarchy) => [
    join("/sys/fs/cgroup", "docker", report.containerId),
    join("/sys/fs/cgroup", hierarchy, "docker", report.containerId),
  ]);
  t.same(
    cgroupDirs.filter((dir) => existsSync(dir)),
    [],
    "the killed container's cgroups are removed",
  );
  t.ok(
    await pollUntil(async () => (await processIdentity(report.janitorPid)) === undefined, 60_000),
    "the janitor exited after reaping",
  );
});

t.test("reaping kills processes naming a path under the root and all below them, not another root's", async (t) => {
  const root = await createLabRoot(await privateBase(), "argv");
  /** `sh` naming `arg`, with a `sleep` child that names nothing; in its own group, for the teardown. */
  const shell = (arg: string): number => {
    const child = spawn("sh", ["-c", "sleep 1000 & wait", "sh", arg], { stdio: "ignore", detached: true });
    t.teardown(() => {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        // Already gone.
      }
    });
    return child.pid!;
  };
  const named = [shell(join(root, "d", "1")), shell(`unix://${root}/docker.sock`), shell(`--exec-root=${root}/exec`)];
  const others = [shell(`${root}2/d/1`), shell(`/elsewhere${root}`), shell(`${root}-x`)];
  const childrenOf = async (pids: number[]) => (await listProcesses()).filter((entry) => pids.includes(entry.ppid));
  t.ok(
    await pollUntil(async () => (await childrenOf([...named, ...others])).length === named.length + others.length),
    "each shell started its sleep",
  );
  const namedIds = await identities([...named, ...(await childrenOf(named)).map((entry) => entry.pid)]);
  const otherIds = await identities([...others, ...(await childrenOf(others)).map((entry) => entry.pid)]);
  t.equal(namedIds.length, 6);
  t.equal(otherIds.length, 6);

  const report = await reapLab(root, { log, killGraceMs: 2_000 });
  t.same(
    [...report.killed].sort((a, b) => a - b),
    namedIds.map((identity) => identity.pid).sort((a, b) => a - b),
    "the shells naming the root and their children",
  );
  for (const identity of namedIds) t.notOk(await isProcessAlive(identity), `process ${identity.pid} stopped`);
  for (const identity of otherIds) t.ok(await isProcessAlive(identity), `process ${identity.pid} left alone`);
  t.notOk(await exists(root));
});

t.test("reapStaleLabs reaps dead owners' labs and leaves a live owner's lab alone", async (t) => {
  const base = await privateBase();
  const outside = join(outer.root, "outside-mount");
  const { child, report } = await startOwner([base, "no-janitor", outside]);
  t.equal(report.janitorPid, 0);
  await killHard(child);
  t.same(
    await leftovers(report.root, [outside]),
    ["loop device", "mount", "folder"],
    "without a janitor, all of it stays",
  );

  // Owned by this (live) process, with a mount to prove it is not touched.
  const live = await createLabRoot(base, "live");
  const liveMount = join(live, "tmpfs");
  await mkdir(liveMount);
  await run("mount", ["-t", "tmpfs", "lab-test", liveMount]);
  // Owner record naming this pid with another start time: a recycled pid, so its owner is dead.
  const recycled = await createLabRoot(base, "recycled");
  const record = JSON.parse(await readFile(join(recycled, OWNER_FILE), "utf8")) as { startTime: number };
  await writeFile(join(recycled, OWNER_FILE), JSON.stringify({ ...record, startTime: record.startTime - 1 }));
  // A root whose creator died before writing its owner record, recently (wait) and long ago (reap).
  const young = await mkdtemp(join(base, CREATING_PREFIX));
  const old = await mkdtemp(join(base, CREATING_PREFIX));
  await utimes(old, new Date(0), new Date(0));

  const reports = await reapStaleLabs(base, { log });
  t.same(reports.map((r) => r.root).sort(), [old, recycled, report.root].sort(), "exactly the stale labs were reaped");
  t.ok(reports.every((r) => r.removed && !r.skipped));
  const dead = reports.find((r) => r.root === report.root);
  t.same(dead?.unmounted.sort(), [...report.mounts].sort(), "both mounts of its device, inside and outside the root");
  t.same(dead?.detached, [report.device]);
  t.same(await leftovers(report.root, [outside]), [], "nothing left of the dead owner's lab");
  t.notOk(await exists(recycled));
  t.ok(await exists(young), "a root still being created is left to its creator");
  t.ok(await exists(join(live, OWNER_FILE)), "the live lab is untouched");
  t.ok((await mountTargets()).includes(liveMount), "the live lab's mount is untouched");

  const again = await reapStaleLabs(base, { log });
  t.same(again, [], "a second pass finds nothing");
  const liveReport = await reapLab(live, { log });
  t.same(liveReport.unmounted, [liveMount]);
  t.same(await leftovers(live), []);
});

t.test("reaping stops registered processes and pidfile processes, not a pid's later owner", async (t) => {
  const root = await createLabRoot(await privateBase(), "pids");
  const sleeper = () => {
    const child = spawn("sleep", ["1000"], { stdio: "ignore" });
    t.teardown(() => child.kill("SIGKILL"));
    return child.pid!;
  };
  const registered = sleeper();
  await registerLabProcess(root, "registered", registered);
  const fromPidfile = sleeper();
  await mkdir(join(root, "dockerd"));
  await writeFile(join(root, "dockerd", "docker.pid"), `${fromPidfile}\n`);
  // A pidfile written long before its pid's current process started: the pid was reused.
  const unrelated = sleeper();
  const stalePidfile = join(root, "dockerd", "stale.pid");
  await writeFile(stalePidfile, `${unrelated}\n`);
  await utimes(stalePidfile, new Date(Date.now() - 3_600_000), new Date(Date.now() - 3_600_000));
  const [registeredId, pidfileId, unrelatedId] = await identities([registered, fromPidfile, unrelated]);

  const report = await reapLab(root, { log });
  t.same(report.killed.sort(), [registered, fromPidfile].sort());
  t.notOk(await isProcessAlive(registeredId!), "registered process stopped");
  t.notOk(await isProcessAlive(pidfileId!), "pidfile process stopped");
  t.ok(await isProcessAlive(unrelatedId!), "the pid's later owner was left alone");
  t.notOk(await exists(root));
});

t.test("close() reaps the root and dismisses the janitor", async (t) => {
  const lab = await openLabRoot({ base: await privateBase(), name: "close", log });
  const janitor = await processIdentity(lab.janitorPid);
  t.ok(janitor, "the janitor runs");
  await writeFile(join(lab.root, "volumes", "vol-0closeclose.img"), "");
  const report = await lab.close();
  t.ok(report.removed);
  t.notOk(await exists(lab.root));
  t.ok(await pollUntil(async () => !(await isProcessAlive(janitor!))), "the janitor exited");
  t.equal(await lab.close(), report, "closing twice is harmless");
});

t.test("reapLab refuses a folder that is not a lab root", async (t) => {
  const folder = join(outer.root, "not-a-lab");
  await mkdir(folder);
  await writeFile(join(folder, "keep"), "precious");
  const report = await reapLab(folder, { log });
  t.match(report.skipped, /not a lab root/);
  t.equal(await readFile(join(folder, "keep"), "utf8"), "precious");
});

t.test("reaping an owner that never detached removes device entries outside the root too", async (t) => {
  const root = await createLabRoot(await privateBase(), "outside-host");
  const hostRoot = join(outer.root, "hosts-outside", "i-0outside");
  const backend = createLoopVolumeBackend({ root, log });
  const volumeId = "vol-0123123123123123a";
  await backend.createVolume(volumeId, 1);
  await backend.attach(volumeId, loopInstance("i-0outside", hostRoot));
  const device = await backend.deviceReady(volumeId);
  await backend.settled(); // The attachment record is on disk: a crash now loses only memory.
  const link = join(byIdDir(hostRoot), ebsByIdName(volumeId));
  const sysfsEntry = join(sysfsRoot(hostRoot), "class", "block", device.replace("/dev/", ""));
  t.ok(await exists(link));
  t.ok(await exists(sysfsEntry));

  const report = await reapLab(root, { log }); // As the janitor would, knowing nothing in memory.
  t.same(report.detached, [device]);
  t.notOk(await exists(link), "by-id link outside the root removed");
  t.notOk(await exists(sysfsEntry), "sysfs entry outside the root removed");
  t.notOk((await loopListing()).includes(volumeImagePath(root, volumeId)), "loop device detached");
  t.same(await leftovers(root), []);
});

t.test("mentionsPath compares path components", async (t) => {
  const root = "/var/tmp/ebs-cache-lab/a-1";
  for (const arg of [
    root,
    `${root}/`,
    `${root}/d/1/exec/containerd/containerd.sock`,
    `unix://${root}/d/1/docker.sock`,
    `--exec-root=${root}/d/1/exec`,
    `-v /data:${root}/x`,
    `${root}:/data`,
    `sh -c 'rm ${root}/x'`,
  ]) {
    t.ok(mentionsPath(arg, root), arg);
  }
  for (const arg of [`${root}2`, `${root}-b/x`, `/elsewhere${root}`, "/var/tmp/ebs-cache-lab", "a-1", ""]) {
    t.notOk(mentionsPath(arg, root), arg);
  }
  t.ok(mentionsPath(`${root}/x`, `${root}/`), "a root given with a trailing slash");
});

t.test("parsers: mountinfo escapes and deleted backing files", async (t) => {
  const mountinfo =
    "36 35 98:0 / /mnt/with\\040space rw,noatime master:1 - xfs /dev/loop3 rw,attr2\n" +
    "37 35 0:5 / /proc rw shared:2 shared:3 - proc proc rw\n";
  t.same(parseMountInfo(mountinfo), [
    { target: "/mnt/with space", source: "/dev/loop3", fsType: "xfs" },
    { target: "/proc", source: "proc", fsType: "proc" },
  ]);
  const losetup = JSON.stringify({
    loopdevices: [
      { name: "/dev/loop0", "back-file": "/var/tmp/ebs-cache-lab/x/volumes/vol-1.img (deleted)" },
      { name: "/dev/loop1", "back-file": null },
    ],
  });
  t.same(parseLosetupJson(losetup), [
    { device: "/dev/loop0", backingFile: "/var/tmp/ebs-cache-lab/x/volumes/vol-1.img" },
  ]);
  t.same(parseLosetupJson(""), [], "losetup prints nothing when no loop device exists");
});
