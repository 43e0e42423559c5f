/**
 * One retry helper for the agent's own retries (the EC2 SDK retries its calls itself): only
 * what `isRetryable` accepts is tried again, with capped exponential backoff, until a deadline.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { AgentError, remediationOr } from "../errors.ts";

export interface RetryOptions {
  /** Errors for which another attempt can help; any other error is thrown at once. */
  isRetryable: (error: unknown) => boolean;
  /** Absolute time (ms since the epoch) after which no attempt starts. */
  deadline: number;
  /** Delay after the n-th failed attempt (n from 1); default 100 ms doubling, capped at 1 s. */
  delayMs?: (attempt: number) => number;
  /** Told about each retryable failure before the wait. */
  onRetry?: (error: unknown, attempt: number, delayMs: number) => void;
}

/**
 * Thrown when the deadline passed with the operation still failing; `cause` is the last error,
 * whose remediation (if it has one) is this one's: the last failure says what to fix.
 */
export class RetryDeadlineError extends AgentError {
  readonly attempts: number;
  readonly lastError: unknown;

  constructor(attempts: number, lastError: unknown) {
    super(
      `still failing after ${attempts} attempts`,
      remediationOr(lastError, "see the last error (the cause) and run the command again"),
      lastError instanceof AgentError ? lastError.exitCode : undefined,
      { cause: lastError },
    );
    this.attempts = attempts;
    this.lastError = lastError;
  }
}

/** The default backoff: 100, 200, 400, 800, 1000, 1000, … ms. */
export function exponentialDelay(attempt: number, baseMs = 100, capMs = 1000): number {
  return Math.min(capMs, baseMs * 2 ** (attempt - 1));
}

/**
 * Runs `operation` until it succeeds, a non-retryable error occurs (thrown as is), or the next
 * attempt would start after the deadline (RetryDeadlineError). The first attempt always runs.
 */
export async function retry<T>(operation: (attempt: number) => Promise<T>, options: RetryOptions): Promise<T> {
  const delayOf = options.delayMs ?? ((attempt: number) => exponentialDelay(attempt));
  for (let attempt = 1; ; attempt++) {
    try {
      return await operation(attempt);
    } catch (error) {
      if (!options.isRetryable(error)) throw error;
      const remaining = options.deadline - Date.now();
      if (remaining <= 0) throw new RetryDeadlineError(attempt, error);
      const delay = Math.min(delayOf(attempt), remaining);
      options.onRetry?.(error, attempt, delay);
      await sleep(delay);
    }
  }
}
