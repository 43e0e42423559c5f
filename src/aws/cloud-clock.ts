/**
 * EC2's clock (the CloudClock port), learned from EC2's own answers: every HTTP answer of EC2,
 * success or error, carries a `Date` header in EC2's time. The agent reckons every time it
 * writes to EC2 or compares with one EC2 wrote in that time, so a host whose clock is days off
 * (NTP broken, an RTC that drifted over a stop) neither deletes what EC2's time keeps nor writes
 * an expiry already past.
 *
 * Decisions written down:
 * - EC2's time is anchored on the host's monotonic clock: the last answer's time plus what has
 *   elapsed since (performance.now()), so a step of the host's wall clock in the middle of a run
 *   (NTP catching up) does not move EC2's time. The offset to the host's wall clock is kept only
 *   to say how far off the host is.
 * - A `Date` header names a whole second: EC2's time is taken as the middle of that second.
 * - Until an answer has been seen, `now()` throws CloudTimeUnknownError: a use case makes its
 *   first EC2 call before it asks, and nothing that needs the time (a deletion, an expiry) is
 *   done without it.
 * - Every answer refreshes it (the latest wins). An offset beyond SigV4's 5 minutes is logged once
 *   per clock, as one warning that names the host's clock; EC2 refuses such a host's signatures
 *   (RequestExpired) and the SDK then corrects the time it signs with from the same header (its
 *   `systemClockOffset`, @aws-sdk/core's AwsSdkSigV4Signer): that is the SDK's business, this
 *   clock only reads the headers.
 * - But the SDK (@aws-sdk/core 3.981's signer, @smithy/core 3.41's retry strategy) marks EVERY
 *   error answer `clockSkewCorrected` once the host is 4 minutes or more off: it recomputes the
 *   offset from each answer's `Date` to the millisecond, finds it "changed", and the retry
 *   strategy then retries the error as transient. On such a host every InvalidVolume.NotFound,
 *   VolumeInUse or IncorrectState would be sent again up to maxAttempts times (a boot's claim
 *   slowed by seconds of backoff per candidate, a refusal at the first attempt taken for a
 *   retried one). keepSkewRetriesToClockErrors leaves the mark only on the errors that say the
 *   signature's time was refused.
 */
import type { EC2Client, ServiceInputTypes, ServiceOutputTypes } from "@aws-sdk/client-ec2";
import type { FinalizeRequestMiddleware } from "@smithy/types";
import type { CloudClock } from "../agent/ports.ts";
import type { Logger } from "../log.ts";
import { CloudTimeUnknownError } from "./errors.ts";

/** How far a request's signature time may be off EC2's before EC2 refuses it (RequestExpired). */
export const SIGV4_SKEW_MS = 5 * 60_000;

/** A CloudClock that is told EC2's answers. */
export interface LearningCloudClock extends CloudClock {
  /** An answer's `Date` header (RFC 7231), received at `receivedAt` (the host's wall and monotonic clocks, ms). */
  observe(dateHeader: string | undefined, receivedAt?: { wallMs: number; monoMs: number }): void;
}

/** The host's clocks, injectable for tests. */
export interface HostClocks {
  /** The host's wall clock (ms since the epoch): Date.now. */
  wallMs(): number;
  /** A monotonic clock (ms): performance.now. */
  monoMs(): number;
}

const HOST_CLOCKS: HostClocks = { wallMs: () => Date.now(), monoMs: () => performance.now() };

/** A clock that learns EC2's time from the `Date` headers it is shown. */
export function createCloudClock(options: { log?: Logger; host?: HostClocks } = {}): LearningCloudClock {
  const host = options.host ?? HOST_CLOCKS;
  let anchor: { ec2Ms: number; monoMs: number; offsetMs: number } | undefined;
  let warned = false;
  return {
    now() {
      if (!anchor) throw new CloudTimeUnknownError("nothing that needs it is done");
      return new Date(anchor.ec2Ms + (host.monoMs() - anchor.monoMs));
    },
    offsetMs: () => anchor?.offsetMs,
    observe(dateHeader, receivedAt = { wallMs: host.wallMs(), monoMs: host.monoMs() }) {
      const stamped = Date.parse(dateHeader ?? "");
      if (Number.isNaN(stamped)) return;
      const ec2Ms = stamped + 500;
      anchor = { ec2Ms, monoMs: receivedAt.monoMs, offsetMs: ec2Ms - receivedAt.wallMs };
      if (!warned && Math.abs(anchor.offsetMs) > SIGV4_SKEW_MS) {
        warned = true;
        options.log?.warning(
          "ec2.clock-offset",
          `this host's clock is ${describeOffset(anchor.offsetMs)} EC2's: every time the agent writes to or ` +
            "compares with EC2 is reckoned in EC2's time (from the Date of its answers), and the AWS SDK corrects " +
            "the time it signs with; fix the host's clock (chrony or systemd-timesyncd, `timedatectl`)",
          { offsetSeconds: Math.round(anchor.offsetMs / 1000), ec2Time: new Date(ec2Ms).toISOString() },
        );
      }
    },
  };
}

/** `3 d 4 h behind`, `12 min ahead of`: how the host stands to EC2 (the offset is EC2's minus the host's). */
export function describeOffset(offsetMs: number): string {
  const total = Math.round(Math.abs(offsetMs) / 60_000);
  const days = Math.floor(total / 1440);
  const hours = Math.floor((total % 1440) / 60);
  const minutes = total % 60;
  const parts = [
    days > 0 ? `${days} d` : "",
    hours > 0 ? `${hours} h` : "",
    minutes > 0 || total === 0 ? `${minutes} min` : "",
  ];
  return `${parts.filter((p) => p !== "").join(" ")} ${offsetMs > 0 ? "behind" : "ahead of"}`;
}

const CLOCKS = new WeakMap<EC2Client, LearningCloudClock>();

/**
 * The clock of an SDK client: one per client, fed by a middleware that reads the `Date` header of
 * every HTTP answer the client receives (each attempt, errors included), beneath the SDK's retries
 * and its parsing of the answer. The client's skew retries are kept to clock errors (see above).
 */
export function cloudClockOf(client: EC2Client, log?: Logger): CloudClock {
  const known = CLOCKS.get(client);
  if (known) return known;
  const clock = createCloudClock(log ? { log } : {});
  client.middlewareStack.add(
    (next) => async (args) => {
      const result = await next(args);
      clock.observe(headerOf(result.response, "date"));
      return result;
    },
    { step: "deserialize", priority: "low", name: "ebsCacheCloudClock" },
  );
  keepSkewRetriesToClockErrors(client);
  CLOCKS.set(client, clock);
  return clock;
}

/**
 * The error codes by which AWS refuses a signature's time or the signature itself (the SDK's own
 * list, @smithy/core's CLOCK_SKEW_ERROR_CODES): the errors a corrected clock may cure.
 */
export const CLOCK_ERROR_CODES: ReadonlySet<string> = new Set([
  "AuthFailure",
  "InvalidSignatureException",
  "RequestExpired",
  "RequestInTheFuture",
  "RequestTimeTooSkewed",
  "SignatureDoesNotMatch",
]);

/**
 * Between the SDK's retries and its signer: an error the signer marked `clockSkewCorrected` is
 * retried as such only when it is a refusal of the signature's time; any other (NotFound,
 * VolumeInUse …) is left to the retry strategy's own judgement, as on a host whose clock is right.
 */
export function keepSkewRetriesToClockErrors(client: EC2Client): void {
  const confine: FinalizeRequestMiddleware<ServiceInputTypes, ServiceOutputTypes> = (next) => async (args) => {
    try {
      return await next(args);
    } catch (error) {
      const e = error as { name?: string; $metadata?: { clockSkewCorrected?: boolean } } | undefined;
      if (e?.$metadata?.clockSkewCorrected && !CLOCK_ERROR_CODES.has(e.name ?? ""))
        e.$metadata.clockSkewCorrected = false;
      throw error;
    }
  };
  client.middlewareStack.addRelativeTo(confine, {
    relation: "before",
    toMiddleware: "httpSigningMiddleware",
    name: "ebsCacheSkewRetries",
  });
}

/** A header of a raw HTTP answer (the SDK's HttpResponse keeps names as received: lower case in Node). */
function headerOf(response: unknown, name: string): string | undefined {
  const headers = (response as { headers?: Record<string, string | undefined> } | undefined)?.headers;
  if (!headers) return undefined;
  return headers[name] ?? Object.entries(headers).find(([key]) => key.toLowerCase() === name)?.[1];
}
