/**
 * Where the EC2 client's credentials come from: static ones (the lab, tests), else the
 * environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY), else the instance profile through
 * IMDS — the agent runs on EC2 under systemd, so the rest of the SDK's default chain (shared
 * files, SSO, containers) is not consulted.
 *
 * Why not the SDK's default chain as is: its IMDS link times out after 1 s and does not retry,
 * so under a fleet-wide boot (IMDS slow to hand out the role's first credentials) a node failed
 * with no EC2 call made. The SDK's own `fromInstanceMetadata` does the fetching here, with the
 * agent's per-request timeout; the agent's retry helper tries the whole fetch again (token
 * included, which the SDK never retries) with backoff until the IMDS budget is spent. Each
 * attempt gets a fresh SDK provider: after one token request is refused the SDK's provider
 * stops asking for tokens, and with IMDSv1 off every later attempt would fail.
 *
 * Caching is the SDK client's: a provider function given as `credentials` is memoized (one
 * fetch shared by concurrent calls) and refreshed 5 minutes before the credentials expire.
 */
import { fromEnv } from "@aws-sdk/credential-provider-env";
import { fromInstanceMetadata } from "@smithy/credential-provider-imds";
import type { AwsCredentialIdentity, AwsCredentialIdentityProvider, Logger as SdkLogger } from "@smithy/types";
import { describeError } from "../errors.ts";
import { createLogger, type Logger } from "../log.ts";
import { CredentialsUnavailableError } from "./errors.ts";
import { DEFAULT_IMDS_ENDPOINT } from "./imds.ts";
import { exponentialDelay, retry, RetryDeadlineError } from "./retry.ts";

/** How to reach the instance profile's credentials. */
export interface InstanceProfileOptions {
  /**
   * The IMDS endpoint the agent uses (config `imdsEndpoint`). The SDK's provider reads its
   * endpoint from AWS_EC2_METADATA_SERVICE_ENDPOINT only: `useImdsEndpoint` sets it, and a
   * mismatch is refused rather than fetching credentials from another IMDS than the identity.
   */
  endpoint: string;
  /** Timeout of one HTTP request to IMDS (config `timeouts.imdsRequestSeconds`). */
  requestTimeoutMs: number;
  /** How long one fetch (all its retries) may take (config `timeouts.imdsSeconds`). */
  budgetMs: number;
  /**
   * The pause after the n-th failed attempt (n from 1). Default: 250 ms doubling, capped at 5 s,
   * with jitter. Tests of what is retried, not of how long it pauses, pass a short one.
   */
  retryDelayMs?: (attempt: number) => number;
  log?: Logger;
}

/**
 * 250 ms doubling, capped at 5 s, jittered (half to all of it): IMDS handing out the role's first
 * credentials late in a boot storm is what this rides out, not a refused connection that clears in ms.
 */
function credentialsRetryDelay(attempt: number): number {
  return exponentialDelay(attempt, 250, 5000) * (0.5 + Math.random() / 2);
}

/** Static credentials, as the lab and tests pass them. */
export interface StaticCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
}

/** IMDS HTTP statuses after which asking again cannot help: IMDS answered, with a no. */
const FINAL_STATUSES = new Set([400, 403, 404, 405]);

/**
 * Points the SDK's instance-profile provider at the agent's IMDS endpoint. Process-wide (the
 * SDK reads the environment): called once, by the command-line entry, before any EC2 client.
 */
export function useImdsEndpoint(endpoint: string | null | undefined): void {
  if (endpoint) process.env.AWS_EC2_METADATA_SERVICE_ENDPOINT = endpoint;
}

/** The endpoint the SDK's instance-profile provider will use. */
function sdkImdsEndpoint(): string {
  return process.env.AWS_EC2_METADATA_SERVICE_ENDPOINT ?? DEFAULT_IMDS_ENDPOINT;
}

/**
 * Instance-profile credentials from IMDS (IMDSv2 only), retried with backoff within the budget.
 * Fails with CredentialsUnavailableError, saying what was tried and the last answer.
 */
export function instanceProfileCredentials(options: InstanceProfileOptions): AwsCredentialIdentityProvider {
  const log = options.log ?? createLogger(() => undefined);
  return async () => {
    const endpoint = sdkImdsEndpoint();
    if (stripSlash(endpoint) !== stripSlash(options.endpoint)) {
      throw new CredentialsUnavailableError(
        options.endpoint,
        0,
        0,
        new Error(`the SDK would ask ${endpoint} (AWS_EC2_METADATA_SERVICE_ENDPOINT), not the agent's IMDS`),
      );
    }
    const started = Date.now();
    let attempts = 0;
    try {
      const credentials = await retry(
        () => {
          attempts++;
          return fromInstanceMetadata({
            timeout: options.requestTimeoutMs,
            maxRetries: 0,
            ec2MetadataV1Disabled: true,
            logger: sdkLogger(log),
          })();
        },
        {
          isRetryable: (error) => !FINAL_STATUSES.has(imdsStatusOf(error) ?? 0),
          deadline: started + options.budgetMs,
          delayMs: options.retryDelayMs ?? credentialsRetryDelay,
          onRetry: (error, attempt, delayMs) =>
            log.debug("credentials.retry", `instance-profile credentials not there yet: ${credentialFailure(error)}`, {
              attempt,
              delayMs: Math.round(delayMs),
            }),
        },
      );
      log.info("credentials.imds", "instance-profile credentials from IMDS", {
        attempts,
        ms: Date.now() - started,
        ...(credentials.expiration ? { expires: credentials.expiration.toISOString() } : {}),
      });
      return credentials;
    } catch (error) {
      const last = error instanceof RetryDeadlineError ? error.lastError : error;
      throw new CredentialsUnavailableError(
        options.endpoint,
        attempts,
        Date.now() - started,
        new Error(credentialFailure(last), { cause: last }),
      );
    }
  };
}

/**
 * The agent's credentials: `static` when given; else the environment's; else the instance
 * profile. The SDK client memoizes the result (see the top of this file).
 */
export function agentCredentials(options: {
  static?: StaticCredentials;
  instanceProfile: InstanceProfileOptions;
}): AwsCredentialIdentityProvider {
  if (options.static) {
    const fixed: AwsCredentialIdentity = { ...options.static };
    return () => Promise.resolve(fixed);
  }
  const instanceProfile = instanceProfileCredentials(options.instanceProfile);
  return async () => {
    // Read at each fetch, as the SDK's chain does: a variable set later still counts.
    if (process.env.AWS_ACCESS_KEY_ID && process.env.AWS_SECRET_ACCESS_KEY) return fromEnv()();
    return instanceProfile();
  };
}

/**
 * The SDK provider's few messages (e.g. an expiry extended while IMDS is down) into the agent's log, not the console.
 */
export function sdkLogger(log: Logger): SdkLogger {
  const text = (parts: unknown[]) =>
    parts.map((part) => (typeof part === "string" ? part : describeError(part))).join(" ");
  return {
    debug: (...parts: unknown[]) => log.debug("credentials.sdk", text(parts)),
    info: (...parts: unknown[]) => log.debug("credentials.sdk", text(parts)),
    warn: (...parts: unknown[]) => log.warning("credentials.sdk", text(parts)),
    error: (...parts: unknown[]) => log.error("credentials.sdk", text(parts)),
  };
}

/** The IMDS HTTP status a provider error carries (the SDK attaches `statusCode`). */
function imdsStatusOf(error: unknown): number | undefined {
  const status = (error as { statusCode?: unknown } | undefined)?.statusCode;
  return typeof status === "number" ? status : undefined;
}

/** What went wrong, in words that do not hide the cause behind the SDK's IMDSv1 message. */
function credentialFailure(error: unknown): string {
  const e = (error ?? {}) as { name?: string; code?: string; statusCode?: number };
  // With IMDSv1 off, the SDK reports a failed token request as "v1 fallback blocked".
  if (e.name === "InstanceMetadataV1FallbackError")
    return "IMDS did not hand out an IMDSv2 session token (timed out, refused or failed)";
  const status = imdsStatusOf(error);
  if (status === 404)
    return "IMDS has no instance-profile credentials (404: no instance profile attached, or its role has none yet)";
  if (status !== undefined) return `IMDS answered ${status} for the instance-profile credentials`;
  const detail = describeError(error);
  return e.code ? `${detail} (${e.code})` : detail;
}

function stripSlash(url: string): string {
  return url.replace(/\/+$/, "");
}
