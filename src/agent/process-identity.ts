/**
 * Whether the process that wrote a pid into a state or lock file still runs: a pid alone may name
 * another process by now (a SIGKILL or a power loss left the file behind, and the pid was reused),
 * so the writer records its start time too (field 22 of /proc/<pid>/stat, in clock ticks since
 * boot) and a reader trusts the pid only when the process under it started at that time.
 */
import { readFile } from "node:fs/promises";

/** The start time of a process (field 22 of /proc/<pid>/stat), or undefined when it is gone. */
export async function processStartTime(pid: number): Promise<string | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (fields[0] === "Z" || fields[0] === "X") return undefined;
    return fields[19];
  } catch {
    return undefined;
  }
}

/**
 * Whether the process that wrote (pid, start) still runs. Without a start (a file written before
 * it was recorded) a live pid is taken for the writer.
 */
export async function isAlive(pid: number | undefined, start: string | undefined): Promise<boolean> {
  if (!pid) return false;
  const now = await processStartTime(pid);
  return now !== undefined && (start === undefined || now === start);
}
