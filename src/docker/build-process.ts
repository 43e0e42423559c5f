/**
 * The daemons a build starts itself (its private dockerd, its private containerd): started
 * detached with their output in a log file, waited for until their socket answers, stopped with
 * SIGTERM and a wait for the exit, SIGKILL past the wait. Shared by build-dockerd.ts and
 * build-containerd.ts.
 */
import { spawn } from "node:child_process";
import { open, readFile } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { AgentError, describeError } from "../errors.ts";
import type { Logger } from "../log.ts";

/** A daemon started by spawnDaemon. */
export interface SpawnedDaemon {
  readonly pid: number | undefined;
  /** How it ended (exit code, signal or spawn error), or undefined while it runs. */
  exited(): string | undefined;
  /**
   * Resolves when its end is known (exited() says how). The child is unref'd: wait on a timer beside it, or node may
   * exit first.
   */
  readonly ended: Promise<void>;
}

/** Starts `program` detached from this process, its output appended to `logFile`. */
export async function spawnDaemon(program: string, args: readonly string[], logFile: string): Promise<SpawnedDaemon> {
  const logHandle = await open(logFile, "a");
  const child = spawn(program, args, { detached: true, stdio: ["ignore", logHandle.fd, logHandle.fd] });
  // Listened to before anything is awaited: a daemon that fails at once (a refused daemon.json) may exit while the
  // log's handle closes, and an exit event with no listener yet is not told again.
  let exited: string | undefined;
  const ended = new Promise<void>((resolve) => {
    child.once("exit", (code, signal) => {
      exited = String(code ?? signal);
      resolve();
    });
    child.once("error", (error) => {
      exited = describeError(error);
      resolve();
    });
  });
  child.unref();
  await logHandle.close();
  return { pid: child.pid, exited: () => exited, ended };
}

/**
 * Waits until `answers` says the daemon serves; when it exits or the time is up, runs `stop`
 * and throws, pointing at its log (`detail`, when given, is read before the stop and ends the message: e.g. the
 * log's last lines).
 */
export async function waitUntilServing(
  daemon: SpawnedDaemon,
  answers: () => Promise<boolean>,
  options: {
    what: string;
    logFile: string;
    timeoutMs: number;
    stop: () => Promise<void>;
    detail?: () => Promise<string>;
  },
): Promise<void> {
  const deadline = Date.now() + options.timeoutMs;
  while (!(await answers())) {
    if (daemon.exited() !== undefined || Date.now() > deadline) {
      const exited = await exitedMeanwhile(daemon);
      const detail = options.detail ? `: ${await options.detail()}` : "";
      await options.stop();
      throw new AgentError(
        `${options.what} ${exited !== undefined ? `exited (${exited})` : "did not answer in time"}${detail}`,
        `see ${options.logFile}`,
      );
    }
    await sleep(100);
  }
}

/**
 * How the daemon ended, or undefined while it runs. On a loaded machine the deadline and the daemon's exit come
 * together: the exit event may not be in yet when the process is already a zombie (or reaped), and a daemon that
 * failed on its own is then told as that exit, with its status, not as a timeout.
 */
async function exitedMeanwhile(daemon: SpawnedDaemon): Promise<string | undefined> {
  if (daemon.exited() !== undefined || daemon.pid === undefined || !(await isGone(daemon.pid))) return daemon.exited();
  // The timer holds the process while the exit is awaited (the daemon's child handle is unref'd: alone, it would let
  // the process end here with the wait unsettled), and is cleared once the exit is in.
  const exitSeen = new AbortController();
  try {
    await Promise.race([daemon.ended, sleep(5000, undefined, { signal: exitSeen.signal }).catch(() => undefined)]);
  } finally {
    exitSeen.abort();
  }
  return daemon.exited() ?? "with a status not known";
}

/** Stops `pid` (`what` names it in the log and the error); throws when even SIGKILL leaves it running. */
export async function stopProcess(pid: number, what: string, timeoutMs: number, log?: Logger): Promise<void> {
  signal(pid, "SIGTERM");
  if (await waitGone(pid, timeoutMs)) return;
  log?.warning("docker.build-daemon-kill", `${what} ignored SIGTERM: killing it`, { pid });
  signal(pid, "SIGKILL");
  if (!(await waitGone(pid, 10_000)))
    throw new AgentError(`${what} (${pid}) survived SIGKILL`, "look for it in D state (ps -o stat)");
}

/**
 * The pid a killed build's pidfile names, when that process still runs with `argument` on its
 * command line (its own socket): a reused pid is never signalled.
 */
export async function leftoverPid(pidFile: string, argument: string): Promise<number | undefined> {
  const pid = Number((await readFile(pidFile, "utf8").catch(() => "")).trim());
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
  return cmdline.split("\0").includes(argument) ? pid : undefined;
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ESRCH") throw error;
  }
}

/** Gone: no such process, or a zombie nobody reaped yet (the unref'd child of this process). */
async function isGone(pid: number): Promise<boolean> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined);
  return stat === undefined || /\) [ZX] /.test(stat);
}

async function waitGone(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await isGone(pid)) return true;
    await sleep(50);
  }
  return false;
}
