/**
 * Typed errors. Each carries a `remediation` sentence telling the operator what to do next;
 * the CLI's single top-level handler maps them to exit codes and journald priorities.
 */

export const ExitCode = {
  ok: 0,
  failure: 1,
  usage: 2,
  config: 3,
  /** The node came up, but without a cached volume (docker on its default data-root). */
  degraded: 4,
} as const;

export class AgentError extends Error {
  readonly remediation: string;
  readonly exitCode: number;

  constructor(
    message: string,
    remediation: string,
    exitCode: number = ExitCode.failure,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.remediation = remediation;
    this.exitCode = exitCode;
    this.name = new.target.name;
  }
}

/** Bad configuration or tags: nothing was changed. */
export class ConfigError extends AgentError {
  readonly problems: string[];

  constructor(problems: string[], remediation = "fix the listed settings and run again") {
    super(`invalid configuration: ${problems.join("; ")}`, remediation, ExitCode.config);
    this.problems = problems;
  }
}

/** An external command failed to start or exited non-zero. */
export class CommandError extends AgentError {
  readonly command: string[];
  readonly exitCode_: number | undefined;
  readonly stderr: string;

  constructor(
    command: string[],
    exitCode_: number | undefined,
    stderr: string,
    remediation: string,
    options?: { cause?: unknown },
  ) {
    const how = exitCode_ === undefined ? "failed to start" : `exited with ${exitCode_}`;
    const detail = stderr.trim().split("\n").slice(-3).join(" | ");
    super(`${command.join(" ")} ${how}${detail ? `: ${detail}` : ""}`, remediation, ExitCode.failure, options);
    this.command = command;
    this.exitCode_ = exitCode_;
    this.stderr = stderr;
  }
}

/** The remediation an error carries (an AgentError's), or `fallback` for anything else. */
export function remediationOr(error: unknown, fallback: string): string {
  return error instanceof AgentError ? error.remediation : fallback;
}

/** Gives a printable message for anything thrown. */
export function describeError(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}

/**
 * The reason a command's stop aborts its signal with (src/cli/common.ts `stopSignal`): the signal
 * received, systemd's SIGTERM or a Ctrl-C's SIGINT, so that messages name the one that came.
 */
export class StopSignalReceived extends Error {
  readonly signalName: "SIGTERM" | "SIGINT";

  constructor(signalName: "SIGTERM" | "SIGINT") {
    super(`${signalName} received`);
    this.signalName = signalName;
    this.name = "StopSignalReceived";
  }
}

/** The signal that stopped a command, for its messages: its name, or "a signal (SIGTERM or SIGINT)". */
export function stopSignalName(signal: AbortSignal | undefined): string {
  const reason: unknown = signal?.reason;
  return reason instanceof StopSignalReceived ? reason.signalName : "a signal (SIGTERM or SIGINT)";
}
