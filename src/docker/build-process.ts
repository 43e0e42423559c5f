/**
 * Stopping a daemon a build started itself (its private dockerd, its private containerd): SIGTERM,
 * a wait for the exit, SIGKILL past the wait. Shared by build-dockerd.ts and build-containerd.ts.
 */
import { readFile } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { AgentError } from "../errors.ts";
import type { Logger } from "../log.ts";

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
async function waitGone(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined);
    if (stat === undefined || /\) [ZX] /.test(stat)) return true;
    await sleep(50);
  }
  return false;
}
