/**
 * The one top-level handler both entry points (the agent's CLI, src/cli.ts, and the lab's,
 * src/lab/main.ts) end in: every error maps to its exit code here, and only here.
 */
import { CommanderError } from "commander";
import { AgentError, ExitCode, describeError } from "./errors.ts";
import type { Logger } from "./log.ts";

/**
 * The exit code a command that threw `error` ends with: a usage error 2 (help and `--version`,
 * which commander ends by throwing too, 0), an AgentError its own code, anything else 1.
 */
export function exitCodeFor(error: unknown): number {
  if (error instanceof CommanderError) return error.exitCode === 0 ? ExitCode.ok : ExitCode.usage;
  if (error instanceof AgentError) return error.exitCode;
  return ExitCode.failure;
}

/** The log events of one entry point's last words: a literal pair so the event names stay greppable. */
export interface FatalEvents {
  failed: string;
  stack: string;
  /**
   * Whether an error that is no AgentError is a bug (the agent: every expected failure is typed)
   * or may be an ordinary failure told by its message (the lab's tools and test plumbing).
   */
  untypedIsBug: boolean;
}

/**
 * Logs an error that ended a command (once, with its remediation) and gives its exit code.
 * Commander has already printed its own usage message; anything not an AgentError is a bug, so
 * its stack goes to the debug log.
 */
export function reportFatal(error: unknown, log: Logger, events: FatalEvents): number {
  if (error instanceof CommanderError) return exitCodeFor(error);
  if (error instanceof AgentError) {
    log.error(events.failed, error.message, { remediation: error.remediation });
  } else if (events.untypedIsBug) {
    log.error(events.failed, `unexpected failure: ${describeError(error)}`, {
      remediation: "report this as a bug with the log above",
    });
    if (error instanceof Error && error.stack) log.debug(events.stack, error.stack);
  } else {
    log.error(events.failed, describeError(error));
    if (error instanceof Error && error.stack) log.debug(events.stack, error.stack);
  }
  return exitCodeFor(error);
}
