/**
 * A reader that stops reading ends no command: `… --help | head -1`, `… --json | head`. Node
 * ignores SIGPIPE, so a write to a pipe nobody reads any more fails with EPIPE, and an `error`
 * event nobody handles ends the process with a stack trace. Both entry points (src/cli.ts, the
 * lab's src/lab/main.ts) install this first: output to a closed stdout or stderr is dropped, and
 * the command goes on to its end and exits with its own code (a release is not cut in half because
 * the reader of its log went away). Any other failure to write (ENOSPC under `--json > file`) is
 * output lost: one line on stderr while it still takes one, and the exit code is at least 1.
 */
import { formatLine } from "./log.ts";

/** Whether `error` says the other end of the stream is gone (the reader closed it). */
export function isClosedOutput(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === "EPIPE" || code === "ERR_STREAM_DESTROYED";
}

/**
 * Handles write errors of stdout and stderr for the rest of the process (see above); `area` names
 * the entry in the one line a lost output gets (`agent`, `lab`).
 */
export function tolerateClosedOutput(area: "agent" | "lab"): void {
  for (const [stream, name] of [
    [process.stdout, "stdout"],
    [process.stderr, "stderr"],
  ] as const) {
    stream.on("error", (error: NodeJS.ErrnoException) => {
      if (isClosedOutput(error)) return;
      if (!process.exitCode) process.exitCode = 1;
      if (stream === process.stderr || process.stderr.destroyed) return;
      process.stderr.write(
        formatLine("error", `${area}.output-lost`, `could not write to ${name}: ${error.message}`, {
          remediation: `check where ${name} goes (a full disk, a file that cannot grow), then run the command again`,
        }) + "\n",
      );
    });
  }
}
