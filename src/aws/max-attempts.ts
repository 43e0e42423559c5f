/**
 * How many attempts an AWS call of a host gets (the EC2 adapter's, the snapshot upload's EBS
 * puts'): a module of its own, so that a command reads it without importing an adapter.
 */
import { ConfigError } from "../errors.ts";

/** Attempts per EC2 call: enough to ride out throttling while a fleet boots at once (~1 min of backoff). */
export const DEFAULT_MAX_ATTEMPTS = 10;

/**
 * The attempts per EC2 call on a host: AWS_MAX_ATTEMPTS when set, else DEFAULT_MAX_ATTEMPTS. Every
 * AWS SDK and the aws CLI read that variable, but only when given no number: the agent always
 * gives the SDK one, so it reads the variable itself. Fewer attempts suit an EC2 whose 5xx are
 * permanent (an emulator lacking an action), where each call would wait out ~20 s of backoff.
 * Anything but a whole number from 1 to 100 is a configuration error.
 */
export function hostMaxAttempts(env: NodeJS.ProcessEnv = process.env): number {
  const value = env.AWS_MAX_ATTEMPTS;
  if (value === undefined) return DEFAULT_MAX_ATTEMPTS;
  const attempts = /^\d{1,3}$/.test(value.trim()) ? Number(value) : NaN;
  if (!(attempts >= 1 && attempts <= 100))
    throw new ConfigError(
      [`environment variable AWS_MAX_ATTEMPTS must be a whole number from 1 to 100, got ${JSON.stringify(value)}`],
      "unset AWS_MAX_ATTEMPTS for the agent's default of 10 attempts per EC2 call, or set it to a whole number",
    );
  return attempts;
}
