/**
 * Running external programs: argument arrays only (never a shell string), the command line
 * logged before it runs, "failed to start" told apart from "exited with N".
 */
import type { Readable } from "node:stream";
import { StringDecoder } from "node:string_decoder";
import { execa } from "execa";
import { CommandError } from "./errors.ts";
import type { Logger } from "./log.ts";

export interface RunResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  /** Throw a CommandError on a non-zero exit (default true). */
  check?: boolean;
  /** What the operator should do when this command fails. */
  remediation?: string;
  /** What the command reads on stdin (none: stdin is closed). */
  input?: string | Readable;
  env?: Record<string, string>;
  timeoutMs?: number;
  cwd?: string;
  log?: Logger;
  /** Called with stdout as it arrives (the whole of it is still returned). */
  onStdout?: (chunk: string) => void;
  /** Kills the command (SIGTERM) when aborted. */
  signal?: AbortSignal;
  /** Called with the command once started (to signal it while it runs). */
  onSpawn?: (command: RunningCommand) => void;
}

/** A command that runs, to signal while it runs. */
export interface RunningCommand {
  readonly pid: number;
  /**
   * Sends `signal` to the command; false once it has exited (nothing is sent then).
   *
   * Through the child's handle, never `process.kill(pid)`: a process id is free for reuse once
   * its exited process is reaped (waitpid), and Node drops the child's handle as libuv reaps it
   * (waitpid and the exit callback in one pass, before any timer or I/O callback runs), so a
   * signal sent from a timer afterwards finds no handle and goes nowhere. Until then the id is the
   * command's (a zombie at worst, whose id no new process can take). `process.kill(pid)` after the
   * reap could stop or continue whatever process got the id since.
   */
  signal(signal: NodeJS.Signals): boolean;
}

/** Runs `file args…` and collects its output. */
export async function run(file: string, args: readonly string[], options: RunOptions = {}): Promise<RunResult> {
  const argv = [file, ...args];
  options.log?.debug("exec.run", argv.join(" "));
  let result;
  try {
    const subprocess = execa(file, args, {
      reject: false,
      stripFinalNewline: true,
      ...(options.input !== undefined ? { input: options.input } : { stdin: "ignore" as const }),
      ...(options.env ? { env: options.env } : {}),
      ...(options.timeoutMs ? { timeout: options.timeoutMs } : {}),
      ...(options.cwd ? { cwd: options.cwd } : {}),
      ...(options.signal ? { cancelSignal: options.signal } : {}),
    });
    if (options.onSpawn && subprocess.pid !== undefined)
      options.onSpawn({ pid: subprocess.pid, signal: (signal) => subprocess.kill(signal) });
    if (options.onStdout) {
      const onStdout = options.onStdout;
      const decoder = new StringDecoder("utf8");
      subprocess.stdout?.on("data", (chunk: Buffer | string) =>
        onStdout(typeof chunk === "string" ? chunk : decoder.write(chunk)),
      );
    }
    result = await subprocess;
  } catch (cause) {
    throw new CommandError(argv, undefined, String(cause), options.remediation ?? `check that ${file} is installed`, {
      cause,
    });
  }
  const stdout = String(result.stdout ?? "");
  const stderr = String(result.stderr ?? "");
  if (result.failed && result.exitCode === undefined) {
    throw new CommandError(
      argv,
      undefined,
      result.shortMessage ?? stderr,
      options.remediation ?? `check that ${file} is installed`,
    );
  }
  const exitCode = result.exitCode ?? 1;
  if (exitCode !== 0 && options.check !== false) {
    throw new CommandError(argv, exitCode, stderr || stdout, options.remediation ?? `see the output of ${file}`);
  }
  return { exitCode, stdout, stderr };
}
