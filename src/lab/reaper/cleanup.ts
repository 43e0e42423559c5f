/**
 * Reaping labs: "nothing is left behind when the lab stops, even after a crash: no loop devices,
 * no mounts, no temp folders, no processes". Everything is found from what the kernel reports
 * (the process table, mountinfo, losetup's list of backing files) plus the pidfiles under the
 * root, so a reaper that knows nothing of the lab's in-memory state (the janitor, another test
 * run) can still clean it.
 */
import { lstat, mkdir, readdir, readFile, realpath, rm, rmdir, stat, unlink, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { describeError } from "../../errors.ts";
import { writeFileAtomic } from "../../fs-atomic.ts";
import { run } from "../../exec.ts";
import type { Logger } from "../../log.ts";
import { detachLoop, isUnder, listLoopDevices, listMounts, type MountEntry } from "./devices.ts";
import { removeKilledContainerCgroups } from "../docker/dockerd.ts";
import { CREATING_PREFIX, labPaths, OWNER_FILE, readLabOwner } from "./labdir.ts";
import { readAttachmentRecords, removeDeviceEntries } from "../volumes/loopstate.ts";
import {
  ancestorsOf,
  bootId,
  isDeadState,
  isProcessAlive,
  listProcesses,
  parseIdentity,
  processCommandLine,
  processIdentity,
  processStartedAtMs,
  terminateProcess,
  withDescendants,
  type ProcessEntry,
  type ProcessIdentity,
} from "./procinfo.ts";

/** Marks a root as being reaped, by whom; a second reaper leaves it to the first. */
const REAPER_FILE = "reaper.json";

/** What one reap did. */
export interface ReapReport {
  root: string;
  /** Set when the root was left alone, with the reason. */
  skipped?: string;
  killed: number[];
  unmounted: string[];
  detached: string[];
  removed: boolean;
}

/** Options shared by the reap functions. */
export interface ReapOptions {
  log?: Logger;
  /** How long a lab process gets between SIGTERM and SIGKILL (default 10 s). */
  killGraceMs?: number;
  /**
   * Pids never to kill, besides the reaper itself, its ancestors and pid 1: e.g. the root's
   * janitor while its owner closes the lab (it must stay on watch in case the reap fails).
   */
  spare?: readonly number[];
}

/**
 * Registers a process the lab started (e.g. the private dockerd) under `<root>/pids/<name>.json`,
 * with its start time, so reaping kills exactly that process and never a later one reusing the pid.
 */
export async function registerLabProcess(root: string, name: string, pid: number): Promise<void> {
  if (!/^[0-9A-Za-z_.-]+$/.test(name) || name.startsWith("."))
    throw new Error(`invalid process name ${JSON.stringify(name)}`);
  const identity = await processIdentity(pid);
  if (!identity) throw new Error(`process ${pid} (${name}) is not running`);
  const dir = labPaths(root).pids;
  await mkdir(dir, { recursive: true });
  await writeFileAtomic(join(dir, `${name}.json`), JSON.stringify({ name, ...identity }) + "\n");
}

/** Forgets a registered process (after it was stopped normally). */
export async function unregisterLabProcess(root: string, name: string): Promise<void> {
  await rm(join(labPaths(root).pids, `${name}.json`), { force: true });
}

/**
 * Reaps one lab root: kills its processes (see killLabProcesses), unmounts every mount under it
 * or of a loop device backed by a file under it (deepest first, lazy as a last resort), detaches
 * those loop devices, then removes the root. Safe to repeat and to run after a crash. Refuses a
 * folder without an owner record unless `force` (never reap by mistake).
 */
export async function reapLab(root: string, options: ReapOptions & { force?: boolean } = {}): Promise<ReapReport> {
  const { log } = options;
  const report: ReapReport = { root: resolve(root), killed: [], unmounted: [], detached: [], removed: false };
  const givenRoot = report.root;
  try {
    report.root = await realpath(root);
  } catch {
    report.removed = true; // Nothing there: already reaped.
    return report;
  }
  root = report.root;
  if (root.split("/").filter(Boolean).length < 2) throw new Error(`refusing to reap ${root}: too close to /`);
  if (!options.force && !(await readLabOwner(root))) {
    report.skipped = "no owner record: not a lab root";
    return report;
  }
  const lock = await acquireReaperLock(root);
  if (lock !== "acquired") {
    report.skipped = lock;
    return report;
  }
  log?.info("lab.reap", "reaping lab", { root });
  try {
    report.killed = await killLabProcesses(root, [...new Set([root, givenRoot])], options);
    const loops = (await listLoopDevices(log)).filter((loop) => isUnder(loop.backingFile, root));
    const loopDevices = new Set(loops.map((loop) => loop.device));
    const belongs = (mount: MountEntry) => isUnder(mount.target, root) || loopDevices.has(mount.source);
    report.unmounted = await unmountAll(belongs, log);
    for (const record of await readAttachmentRecords(root)) await removeDeviceEntries(record);
    for (const loop of loops) if ((await detachLoop(loop, log)) === "detached") report.detached.push(loop.device);
    const leftover = (await listMounts()).filter((mount) => isUnder(mount.target, root));
    if (leftover.length > 0) {
      // Removing files under a live mount would delete the mounted filesystem's contents.
      throw new Error(`mounts remain under ${root}: ${leftover.map((m) => m.target).join(", ")}`);
    }
    await removeRoot(root);
    report.removed = true;
    log?.info("lab.reap", "lab reaped", {
      root,
      killed: report.killed.length,
      unmounted: report.unmounted.length,
      detached: report.detached.length,
    });
    return report;
  } finally {
    if (!report.removed) await rm(join(root, REAPER_FILE), { force: true });
  }
}

/**
 * Reaps every lab root under `base` whose owner is dead (pid gone, or reused: its start time
 * differs, or the machine rebooted). A lab whose owner is alive is never touched, whoever calls.
 */
export async function reapStaleLabs(
  base: string,
  options: ReapOptions & { creatingGraceMs?: number } = {},
): Promise<ReapReport[]> {
  const { log } = options;
  let entries;
  try {
    entries = await readdir(base, { withFileTypes: true });
  } catch {
    return [];
  }
  const reports: ReapReport[] = [];
  for (const entry of entries) {
    if (!entry.isDirectory()) continue;
    const root = join(base, entry.name);
    const owner = await readLabOwner(root);
    if (owner) {
      if (await isProcessAlive(owner)) continue;
      log?.info("lab.reap", "lab owner is gone", { root, pid: owner.pid });
      reports.push(await reapOne(root, options));
    } else if (entry.name.startsWith(CREATING_PREFIX)) {
      // Its creator crashed before writing the owner record (or is writing it right now: wait).
      const age = Date.now() - ((await stat(root).catch(() => undefined))?.mtimeMs ?? Date.now());
      if (age > (options.creatingGraceMs ?? 60_000)) reports.push(await reapOne(root, { ...options, force: true }));
    } else {
      // A reap that crashed after deleting the owner record leaves an empty folder at most.
      await rmdir(root).catch(() => log?.warning("lab.reap", "folder without owner record left alone", { root }));
    }
  }
  return reports;
}

/** One stale lab failing to reap must not keep the others from being reaped. */
async function reapOne(root: string, options: ReapOptions & { force?: boolean }): Promise<ReapReport> {
  try {
    return await reapLab(root, options);
  } catch (error) {
    options.log?.error("lab.reap", "reaping failed", { root, error: describeError(error) });
    return {
      root,
      skipped: `failed: ${describeError(error)}`,
      killed: [],
      unmounted: [],
      detached: [],
      removed: false,
    };
  }
}

/** Takes `<root>/reaper.json`; a dead reaper's lock is taken over, a live one's is respected. */
async function acquireReaperLock(root: string): Promise<"acquired" | string> {
  const me = await processIdentity();
  if (!me) throw new Error("cannot read this process's identity from /proc");
  const path = join(root, REAPER_FILE);
  try {
    await writeFile(path, JSON.stringify(me) + "\n", { flag: "wx" });
    return "acquired";
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
  let holder: ProcessIdentity | undefined;
  try {
    holder = parseIdentity(JSON.parse(await readFile(path, "utf8")));
  } catch {
    holder = undefined;
  }
  if (holder && (await isProcessAlive(holder))) return `being reaped by process ${holder.pid}`;
  await writeFileAtomic(path, JSON.stringify(me) + "\n");
  return "acquired";
}

/**
 * Kills the lab's processes: registered ones (`pids/*.json`), those named by `*.pid` files under
 * the root, every process whose command line mentions a path under the root (see mentionsPath;
 * `paths` is the root as given and as resolved), and every process below any of those: a crashed
 * lab's private dockerd leaves containerd-shims (whose command lines name its exec-root) and,
 * below them, containers that name nothing of the lab. Never the reaper, its ancestors, pid 1 or
 * `options.spare`. SIGTERM, then SIGKILL after the grace period; then looks again, a few rounds,
 * for processes started meanwhile (a dying dockerd may still start runc or containerd).
 */
async function killLabProcesses(root: string, paths: readonly string[], options: ReapOptions): Promise<number[]> {
  const boot = await bootId();
  const attempted = new Map<number, ProcessIdentity>();
  const wasAttempted = (identity: ProcessIdentity) => attempted.get(identity.pid)?.startTime === identity.startTime;
  const stopped: ProcessEntry[] = [];
  for (let round = 0; round < 5; round++) {
    const targets = new Map<number, ProcessIdentity>();
    const pidsDir = labPaths(root).pids;
    for (const name of await readdir(pidsDir).catch(() => [] as string[])) {
      if (!name.endsWith(".json")) continue;
      const identity = parseIdentity(await readJson(join(pidsDir, name)));
      if (identity && (await isProcessAlive(identity))) targets.set(identity.pid, identity);
    }
    for (const pidfile of await findPidfiles(root)) {
      const identity = await pidfileProcess(paths, pidfile);
      if (identity && !targets.has(identity.pid)) targets.set(identity.pid, identity);
    }
    const all = await listProcesses();
    const spared = new Set([process.pid, process.ppid, ...ancestorsOf(all, process.pid), 1, ...(options.spare ?? [])]);
    const seeds = all.filter(
      (entry) =>
        targets.get(entry.pid)?.startTime === entry.startTime ||
        entry.argv.some((arg) => paths.some((path) => mentionsPath(arg, path))),
    );
    const victims = withDescendants(all, seeds).filter((entry) => !spared.has(entry.pid) && !isDeadState(entry.state));
    const identities = new Map<number, ProcessIdentity>();
    for (const { pid, startTime } of victims) identities.set(pid, { pid, startTime, bootId: boot });
    // A registered or pidfile process missing from the listing (it raced it) still goes.
    for (const identity of targets.values()) {
      if (!spared.has(identity.pid) && !identities.has(identity.pid)) identities.set(identity.pid, identity);
    }
    // One try per process: one that survives SIGKILL (stuck in D state) would only stall each round.
    const fresh = [...identities.values()].filter((identity) => !wasAttempted(identity));
    if (fresh.length === 0) break;
    for (const identity of fresh) {
      const command = victims
        .find((entry) => entry.pid === identity.pid)
        ?.argv.join(" ")
        .slice(0, 200);
      options.log?.info("lab.reap", "stopping lab process", { pid: identity.pid, command });
      attempted.set(identity.pid, identity);
    }
    await Promise.all(fresh.map((identity) => terminateProcess(identity, options.killGraceMs)));
    stopped.push(...victims.filter((entry) => fresh.some((identity) => identity.pid === entry.pid)));
  }
  await removeKilledContainerCgroups(stopped);
  return [...attempted.keys()];
}

/**
 * Whether `arg` (one argument, or a whole command line) names `dir` or a path below it, compared
 * by path components: `/lab/a` matches `/lab/a` and `/lab/a/x`, not `/lab/ab` nor `/x/lab/a`.
 * The path may stand alone or after `=`, `:`, `,`, `;`, a quote, a blank or a URL scheme
 * (`--exec-root=/lab/a/exec`, `-v /x:/lab/a`, `unix:///lab/a/docker.sock`).
 */
export function mentionsPath(arg: string, dir: string): boolean {
  const path = dir.replace(/\/+$/, "");
  if (!path.startsWith("/")) return false;
  for (let at = arg.indexOf(path); at >= 0; at = arg.indexOf(path, at + 1)) {
    const before = arg.slice(0, at);
    const after = arg.slice(at + path.length);
    const starts = before === "" || /[\s=:,;'"]$/.test(before) || before.endsWith("://");
    const ends = after === "" || /^[/\s:,;'"]/.test(after);
    if (starts && ends) return true;
  }
  return false;
}

/**
 * The process a plain pidfile (as dockerd writes it) names, if it is plausibly the lab's: its
 * command line mentions the root (one of `paths`), or it started before the pidfile was written
 * (a process that reused the pid later would have started after).
 */
async function pidfileProcess(paths: readonly string[], pidfile: string): Promise<ProcessIdentity | undefined> {
  const pid = Number((await readFile(pidfile, "utf8").catch(() => "")).trim());
  if (!Number.isInteger(pid) || pid <= 1) return undefined;
  const identity = await processIdentity(pid);
  if (!identity) return undefined;
  const commandLine = await processCommandLine(pid);
  if (paths.some((path) => mentionsPath(commandLine, path))) return identity;
  const startedAt = await processStartedAtMs(pid);
  const writtenAt = (await stat(pidfile).catch(() => undefined))?.mtimeMs;
  // 1 s of slack: boot time in /proc/stat has whole-second resolution.
  if (startedAt !== undefined && writtenAt !== undefined && startedAt <= writtenAt + 1000) return identity;
  return undefined;
}

/** `*.pid` files under the root, not descending into other filesystems (mounted volumes) or images. */
async function findPidfiles(root: string, maxDepth = 8): Promise<string[]> {
  const rootDev = (await lstat(root)).dev;
  const skip = new Set([labPaths(root).volumes, labPaths(root).snapshots]);
  const found: string[] = [];
  const walk = async (dir: string, depth: number): Promise<void> => {
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const entry of entries) {
      const path = join(dir, entry.name);
      if (entry.isFile() && entry.name.endsWith(".pid")) found.push(path);
      else if (entry.isDirectory() && depth < maxDepth && !skip.has(path)) {
        const info = await lstat(path).catch(() => undefined);
        if (info?.dev === rootDev) await walk(path, depth + 1);
      }
    }
  };
  await walk(root, 0);
  return found;
}

/**
 * Unmounts every mount `belongs` selects, deepest first, a few rounds (a mount may be busy for a
 * moment while a killed process exits), then lazily as a last resort. Returns the targets.
 */
async function unmountAll(belongs: (mount: MountEntry) => boolean, log?: Logger): Promise<string[]> {
  const unmounted: string[] = [];
  const depth = (path: string) => path.split("/").length;
  for (let round = 0; round < 6; round++) {
    const mounts = (await listMounts()).filter(belongs).sort((a, b) => depth(b.target) - depth(a.target));
    if (mounts.length === 0) return unmounted;
    const lazy = round === 5;
    for (const mount of mounts) {
      const args = lazy ? ["-l", mount.target] : [mount.target];
      const result = await run("umount", args, { log, check: false });
      if (result.exitCode === 0) unmounted.push(mount.target);
      else if (lazy) log?.warning("lab.reap", "lazy unmount failed", { target: mount.target, error: result.stderr });
    }
    await sleep(100 * (round + 1));
  }
  return unmounted;
}

/**
 * Removes the root, owner record last: a reap interrupted half-way still leaves a folder that
 * says it is a lab, so the next reaper finishes the job.
 */
async function removeRoot(root: string): Promise<void> {
  const keep = new Set([OWNER_FILE, REAPER_FILE]);
  for (const name of await readdir(root)) {
    if (!keep.has(name)) await rm(join(root, name), { recursive: true, force: true, maxRetries: 3 });
  }
  await unlink(join(root, REAPER_FILE)).catch(() => undefined);
  await unlink(join(root, OWNER_FILE)).catch(() => undefined);
  await rm(root, { recursive: true, force: true, maxRetries: 3 });
}

async function readJson(path: string): Promise<unknown> {
  try {
    return JSON.parse(await readFile(path, "utf8"));
  } catch {
    return undefined;
  }
}
