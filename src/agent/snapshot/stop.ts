/** How the snapshot upload fails: its own error class, and its stop between blocks. */
import { AgentError, ExitCode } from "../../errors.ts";

/** An upload that cannot go on as asked: nothing more is put. */
export class SnapshotUploadError extends AgentError {
  constructor(message: string, remediation: string, exitCode: number = ExitCode.usage) {
    super(message, remediation, exitCode);
  }
}

/**
 * Stops between blocks once the signal (SIGTERM, Ctrl-C's SIGINT) is aborted: an error of its own
 * (exit 1, the manifest keeps what was put, the rerun resumes), not the abort's reason, which the
 * CLI would take for a bug.
 */
export function stopIfAborted(signal: AbortSignal | undefined): void {
  if (!signal?.aborted) return;
  const why = signal.reason instanceof Error ? signal.reason.message : String(signal.reason);
  throw new SnapshotUploadError(
    `the upload was stopped (${why}); the manifest keeps the blocks put so far`,
    "run the same command again: it resumes from the manifest",
    ExitCode.failure,
  );
}
