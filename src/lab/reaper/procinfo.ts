/**
 * Processes as /proc shows them. Identity for the lab's ownership records: a pid alone is not an
 * identity, pids are recycled, so a lab would be "owned" by whatever process later gets the same
 * number. The pair (pid, start time in clock ticks since boot) plus the boot id is unique for the
 * machine's life. And the process table (every process with its parent and command line), from
 * which cleanup finds what a crashed lab left running.
 */
import { readdir, readFile } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";

/** Who a process is: enough to tell it from a later process that reuses its pid. */
export interface ProcessIdentity {
  pid: number;
  /** Field 22 of /proc/<pid>/stat: clock ticks after boot when the process started. */
  startTime: number;
  /** /proc/sys/kernel/random/boot_id: a reboot makes every recorded identity stale. */
  bootId: string;
}

interface ProcStat {
  /** One-letter state (R, S, D, Z…). */
  state: string;
  ppid: number;
  startTime: number;
}

/** Parses the text of /proc/<pid>/stat; undefined when it is malformed. */
function parseProcStat(text: string): ProcStat | undefined {
  // The command name (field 2) may hold spaces and parentheses: fields resume after its last ")".
  const rest = text.slice(text.lastIndexOf(")") + 2).split(" ");
  const state = rest[0];
  const ppid = Number(rest[1]);
  const startTime = Number(rest[19]);
  if (!state || !Number.isInteger(ppid) || !Number.isFinite(startTime)) return undefined;
  return { state, ppid, startTime };
}

/** Reads /proc/<pid>/stat; undefined when the process is gone. */
async function readProcStat(pid: number): Promise<ProcStat | undefined> {
  try {
    return parseProcStat(await readFile(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return undefined;
  }
}

let cachedBootId: string | undefined;

/** The kernel's boot id (changes on every boot). */
export async function bootId(): Promise<string> {
  cachedBootId ??= (await readFile("/proc/sys/kernel/random/boot_id", "utf8")).trim();
  return cachedBootId;
}

/** The identity of a running process (the caller itself by default); undefined if it is gone. */
export async function processIdentity(pid: number = process.pid): Promise<ProcessIdentity | undefined> {
  const stat = await readProcStat(pid);
  if (!stat || isDeadState(stat.state)) return undefined;
  return { pid, startTime: stat.startTime, bootId: await bootId() };
}

/** Zombies (Z) and dying tasks (X) have exited; only their parent has not collected them yet. */
export function isDeadState(state: string): boolean {
  return state === "Z" || state === "X";
}

/** Whether some process runs as `pid` and is not a zombie (a zombie holds nothing; its parent reaps it when it can). */
export async function isPidAlive(pid: number): Promise<boolean> {
  const stat = await readProcStat(pid);
  return stat !== undefined && !isDeadState(stat.state);
}

/** Whether the very process recorded in `identity` still runs (not a recycled pid, not a zombie). */
export async function isProcessAlive(identity: ProcessIdentity): Promise<boolean> {
  if (identity.bootId !== (await bootId())) return false;
  const stat = await readProcStat(identity.pid);
  return stat !== undefined && !isDeadState(stat.state) && stat.startTime === identity.startTime;
}

/** Parses a stored identity, rejecting anything malformed (a hand-edited or truncated file). */
export function parseIdentity(value: unknown): ProcessIdentity | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const { pid, startTime, bootId: boot } = value as Record<string, unknown>;
  if (!Number.isInteger(pid) || (pid as number) <= 0) return undefined;
  if (!Number.isInteger(startTime) || typeof boot !== "string") return undefined;
  return { pid: pid as number, startTime: startTime as number, bootId: boot };
}

/** Wall-clock time (ms since epoch) at which a running process started; undefined if gone. */
export async function processStartedAtMs(pid: number): Promise<number | undefined> {
  const stat = await readProcStat(pid);
  if (!stat || isDeadState(stat.state)) return undefined;
  const procStat = await readFile("/proc/stat", "utf8");
  const btime = Number(/^btime (\d+)$/m.exec(procStat)?.[1]);
  if (!Number.isFinite(btime)) return undefined;
  // USER_HZ, the unit of /proc/<pid>/stat times, is 100 on every Linux architecture we run on.
  return btime * 1000 + stat.startTime * 10;
}

/** The command line of a process as one string (NULs as spaces); "" when unreadable. */
export async function processCommandLine(pid: number): Promise<string> {
  try {
    return (await readFile(`/proc/${pid}/cmdline`, "utf8")).replaceAll("\0", " ").trim();
  } catch {
    return "";
  }
}

/**
 * Stops a process: SIGTERM, then SIGKILL after `graceMs`. Resolves once it is gone (or a
 * zombie, which no longer holds mounts or devices). Returns false if it could not be stopped.
 */
export async function terminateProcess(identity: ProcessIdentity, graceMs = 10_000): Promise<boolean> {
  const signal = (name: NodeJS.Signals): void => {
    try {
      process.kill(identity.pid, name);
    } catch {
      // ESRCH: it exited between our check and the signal, which is what we want.
    }
  };
  if (!(await isProcessAlive(identity))) return true;
  signal("SIGTERM");
  if (await waitForExit(identity, graceMs)) return true;
  if (!(await isProcessAlive(identity))) return true;
  signal("SIGKILL");
  return waitForExit(identity, 5_000);
}

async function waitForExit(identity: ProcessIdentity, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!(await isProcessAlive(identity))) return true;
    await sleep(50);
  }
  return !(await isProcessAlive(identity));
}

// --- The process table: enough to find and kill what a crashed lab left running ---

/** One process of the process table. */
export interface ProcessEntry {
  pid: number;
  ppid: number;
  /** One-letter state from /proc/<pid>/stat (R, S, D, Z…). */
  state: string;
  /** Field 22 of /proc/<pid>/stat, as in ProcessIdentity.startTime. */
  startTime: number;
  /** The command line's arguments (empty for kernel threads and zombies). */
  argv: string[];
}

/** Every process /proc shows, with its parent and command line; those that end meanwhile are left out. */
export async function listProcesses(): Promise<ProcessEntry[]> {
  const entries: ProcessEntry[] = [];
  for (const name of await readdir("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const [statText, cmdline] = await Promise.all([
        readFile(`/proc/${name}/stat`, "utf8"),
        readFile(`/proc/${name}/cmdline`, "utf8"),
      ]);
      const stat = parseProcStat(statText);
      if (!stat) continue;
      entries.push({ pid: Number(name), ...stat, argv: cmdline.split("\0").filter(Boolean) });
    } catch {
      // The process ended while we looked.
    }
  }
  return entries;
}

/** `roots` and every process below them in `all` (e.g. containers below their shims). */
export function withDescendants(all: readonly ProcessEntry[], roots: readonly ProcessEntry[]): ProcessEntry[] {
  const found = new Map(roots.map((entry) => [entry.pid, entry]));
  let grew = true;
  while (grew) {
    grew = false;
    for (const entry of all) {
      if (!found.has(entry.pid) && found.has(entry.ppid)) {
        found.set(entry.pid, entry);
        grew = true;
      }
    }
  }
  return [...found.values()];
}

/** The pids of the processes above `pid` in `all`, nearest first (its parent, its parent's parent…). */
export function ancestorsOf(all: readonly ProcessEntry[], pid: number): number[] {
  const byPid = new Map(all.map((entry) => [entry.pid, entry]));
  const ancestors: number[] = [];
  for (let ppid = byPid.get(pid)?.ppid; ppid && !ancestors.includes(ppid); ppid = byPid.get(ppid)?.ppid) {
    ancestors.push(ppid);
  }
  return ancestors;
}

/** The argument following `flag` in `argv` (`-id <id>`); undefined when the flag is absent. */
export function argAfter(argv: readonly string[], flag: string): string | undefined {
  const index = argv.indexOf(flag);
  return index >= 0 ? argv[index + 1] : undefined;
}
