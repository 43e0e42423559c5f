/**
 * AWS failures in the agent's words. `classifyEc2Error` turns whatever the SDK threw into a
 * `Ec2Fault` kind (the sentinel the domain code branches on, cause kept); what cannot be
 * handled is raised once, at the boundary of `ec2.ts` / `imds.ts`, as one of the typed errors
 * below, each with a remediation sentence.
 *
 * | EC2 code / condition                                  | kind                 | ec2.ts does                      |
 * | ----------------------------------------------------- | -------------------- | -------------------------------- |
 * | InvalidVolume.NotFound, InvalidSnapshot.NotFound,     | not-found            | describe: undefined; claim:      |
 * |   InvalidInstanceID.NotFound, InvalidVolumeID.*       |                      |   taken; detach: success; else   |
 * |                                                       |                      |   Ec2CallError                   |
 * | InvalidAttachment.NotFound                            | attachment-not-found | detach: success                  |
 * | VolumeInUse                                           | volume-in-use        | claim: describe, here = claimed, |
 * |                                                       |                      |   else taken                     |
 * | IncorrectState                                        | incorrect-state      | claim: as VolumeInUse; detach:   |
 * |                                                       |                      |   success unless still attached  |
 * |                                                       |                      |   here                           |
 * | InvalidVolume.ZoneMismatch                            | zone-mismatch        | claim: as VolumeInUse (taken)    |
 * | InvalidParameterValue "… is already in use"           | device-in-use        | claim: next name of              |
 * |                                                       |                      |   /dev/sdf…/dev/sdp              |
 * | InvalidParameterValue "… not a valid EBS device name" | invalid-device       | DeviceNameError                  |
 * | AttachmentLimitExceeded                               | attachment-limit     | AttachmentLimitError             |
 * | IncorrectInstanceState                                | instance-state       | Ec2CallError                     |
 * | RequestLimitExceeded and the SDK's throttling codes   | throttled            | SDK retries; then as server      |
 * | RequestExpired, RequestInTheFuture,                   | clock                | the SDK corrects its clock from  |
 * |   RequestTimeTooSkewed (a signature's time > 5 min    |                      |   the answer's Date and retries; |
 * |   off EC2's)                                          |                      |   then Ec2CallError (transient)  |
 * | UnauthorizedOperation, AuthFailure, Blocked, …        | unauthorized         | Ec2CallError (names the IAM      |
 * |                                                       |                      |   action)                        |
 * | no credentials to sign with: CredentialsProviderError,| credentials-         | Ec2CallError (IMDS / instance    |
 * |   ProviderError (IMDS timeout, refused, 5xx), "Could  |   unavailable        |   profile hint); boot degrades   |
 * |   not load credentials…", CredentialsUnavailableError |                      |   (transient)                    |
 * | InternalError, Unavailable, any 5xx                   | server               | SDK retries; claim/detach:       |
 * |                                                       |                      |   describe, decide               |
 * | no HTTP answer (reset, refused, timeout)              | network              | as server                        |
 * | any other 4xx                                         | invalid-request      | Ec2CallError                     |
 */
import { AgentError, describeError } from "../errors.ts";

export type Ec2Fault =
  | "not-found"
  | "attachment-not-found"
  | "volume-in-use"
  | "incorrect-state"
  | "zone-mismatch"
  | "device-in-use"
  | "invalid-device"
  | "attachment-limit"
  | "instance-state"
  | "throttled"
  | "clock"
  | "unauthorized"
  | "credentials-unavailable"
  | "server"
  | "network"
  | "invalid-request";

/** What an EC2 call failed with. */
export interface Ec2Failure {
  kind: Ec2Fault;
  /** The EC2 error code (the SDK exception's name), or the Node error code for network failures. */
  code: string;
  /** HTTP status, when EC2 answered. */
  status: number | undefined;
  message: string;
}

const NOT_FOUND = new Set([
  "InvalidVolume.NotFound",
  "InvalidSnapshot.NotFound",
  "InvalidInstanceID.NotFound",
  "InvalidVolumeID.Malformed",
  "InvalidVolumeID.NotFound",
]);
const THROTTLED = new Set([
  "RequestLimitExceeded",
  "Throttling",
  "ThrottlingException",
  "RequestThrottled",
  "RequestThrottledException",
  "EC2ThrottledException",
  "TooManyRequestsException",
]);
const UNAUTHORIZED = new Set([
  "UnauthorizedOperation",
  "AuthFailure",
  "Blocked",
  "OptInRequired",
  "InvalidClientTokenId",
  "SignatureDoesNotMatch",
  "ExpiredToken",
  "AccessDenied",
]);
/**
 * Errors of the SDK's credential providers and of the agent's own (credentials.ts): the request
 * was never signed nor sent, so EC2 never judged the permissions.
 */
const CREDENTIALS = new Set([
  "CredentialsProviderError",
  "ProviderError",
  "InstanceMetadataV1FallbackError",
  "CredentialsUnavailableError",
]);
/**
 * EC2's refusals of a signature whose time is more than 5 minutes off its own (EC2 answers
 * RequestExpired, HTTP 400). The SDK takes EC2's time from the answer's Date header and signs the
 * retry with it (its clock-skew correction), so one reaching the agent means it could not.
 */
const CLOCK = new Set(["RequestExpired", "RequestInTheFuture", "RequestTimeTooSkewed"]);
const SERVER = new Set(["InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"]);

/** Classifies anything an SDK call threw (never throws itself). */
export function classifyEc2Error(error: unknown): Ec2Failure {
  const e = (typeof error === "object" && error !== null ? error : {}) as {
    name?: string;
    code?: string;
    message?: string;
    $metadata?: { httpStatusCode?: number };
  };
  const code = e.name && e.name !== "Error" ? e.name : (e.code ?? "Error");
  const status = e.$metadata?.httpStatusCode;
  const message = e.message ?? describeError(error);
  const failure = (kind: Ec2Fault): Ec2Failure => ({ kind, code, status, message });

  if (
    CREDENTIALS.has(code) ||
    /could not load credentials|credential is missing|unable to (load|resolve) credentials/i.test(message)
  ) {
    return failure("credentials-unavailable");
  }
  if (NOT_FOUND.has(code)) return failure("not-found");
  if (code === "InvalidAttachment.NotFound") return failure("attachment-not-found");
  if (code === "VolumeInUse") return failure("volume-in-use");
  if (code === "IncorrectState") return failure("incorrect-state");
  if (code === "InvalidVolume.ZoneMismatch") return failure("zone-mismatch");
  if (code === "AttachmentLimitExceeded") return failure("attachment-limit");
  if (code === "IncorrectInstanceState") return failure("instance-state");
  if (code === "InvalidParameterValue" && /already in use/i.test(message)) return failure("device-in-use");
  if (code === "InvalidParameterValue" && /device name|parameter device|unixDevice/i.test(message))
    return failure("invalid-device");
  if (THROTTLED.has(code) || status === 429) return failure("throttled");
  if (CLOCK.has(code)) return failure("clock");
  if (UNAUTHORIZED.has(code) || status === 401 || status === 403) return failure("unauthorized");
  if (SERVER.has(code) || (status !== undefined && status >= 500)) return failure("server");
  if (status === undefined) return failure("network");
  return failure("invalid-request");
}

/**
 * Failures that may clear by themselves (a later boot, or the same one after waiting): the boot
 * degrades on them with exit 4 instead of failing. A permission or request problem does not clear.
 */
export function isTransientFailure(failure: Pick<Ec2Failure, "kind">): boolean {
  return ["credentials-unavailable", "throttled", "clock", "server", "network"].includes(failure.kind);
}

/**
 * The EC2 failure behind an error a CloudVolumes call threw (undefined for anything else: a bug,
 * a typed error of the agent's own), and whether it may clear by itself.
 */
export function cloudFailureOf(error: unknown): { kind: Ec2Fault; transient: boolean } | undefined {
  const kind =
    error instanceof Ec2CallError
      ? error.kind
      : error instanceof CredentialsUnavailableError || error instanceof NoFleetCredentialsError
        ? "credentials-unavailable"
        : error instanceof CloudTimeUnknownError
          ? "clock"
          : undefined;
  return kind && { kind, transient: isTransientFailure({ kind }) };
}

/** Failures after which the request may or may not have been applied by EC2. */
export function outcomeUnknown(failure: Ec2Failure): boolean {
  return failure.kind === "server" || failure.kind === "network" || failure.kind === "throttled";
}

function remediationFor(action: string, failure: Ec2Failure): string {
  switch (failure.kind) {
    case "unauthorized":
      return (
        `grant the instance role ec2:${action} on the agent's volumes (see the policy in iam/), or fix the ` +
        `credentials`
      );
    case "credentials-unavailable":
      return CREDENTIALS_REMEDIATION;
    case "throttled":
      return (
        "EC2 kept throttling the account's API calls (many machines booting at once): re-run the agent (it is " +
        "idempotent), or raise its maxAttempts / stagger the launches"
      );
    case "clock":
      return CLOCK_REMEDIATION;
    case "server":
    case "network":
      return (
        "EC2 did not answer properly: check the route to the EC2 endpoint (VPC endpoint or NAT, DNS) and re-run " +
        "the agent (it is idempotent)"
      );
    case "not-found":
      return (
        "the resource named in the message no longer exists (deleted meanwhile?): " + "re-run the agent to pick another"
      );
    case "instance-state":
      return "the instance is not running (stopping or terminating): nothing to do";
    default:
      // A 4xx the table does not know: EC2 judged OUR request and said why (its code and message).
      // What it names came from the configuration or a tag, so that is what to correct: not a bug.
      return (
        `EC2 refused ${action} (${failure.code}) for the reason its message gives: correct the value it names ` +
        `(in the configuration, or in the instance's or volume's tags), then re-run the agent`
      );
  }
}

/** What to check when EC2's time cannot be had, or EC2 refuses the signature's time. */
const CLOCK_REMEDIATION =
  "check the host's clock (chrony or systemd-timesyncd, `timedatectl`) and that EC2's answers reach the agent " +
  "with their Date header (no proxy that strips it); then re-run the agent (it is idempotent)";

/**
 * EC2's time is not known: no answer of EC2 (with its Date header) has been seen yet. Nothing that
 * needs it (a deletion, an expiry) is done.
 */
export class CloudTimeUnknownError extends AgentError {
  constructor(what: string) {
    super(`EC2's time is not known yet (no answer of EC2 with a Date header seen): ${what}`, CLOCK_REMEDIATION);
  }
}

/** An EC2 call failed in a way the agent does not handle. */
export class Ec2CallError extends AgentError {
  readonly action: string;
  readonly kind: Ec2Fault;
  readonly code: string;
  constructor(action: string, failure: Ec2Failure, cause: unknown, remediation = remediationFor(action, failure)) {
    super(`EC2 ${action} failed: ${failure.code}: ${failure.message}`, remediation, undefined, { cause });
    this.action = action;
    this.kind = failure.kind;
    this.code = failure.code;
  }
}

/** Wraps whatever an EC2 call threw (already-typed agent errors pass through). */
export function ec2CallError(action: string, error: unknown): AgentError {
  if (error instanceof AgentError) return error;
  return new Ec2CallError(action, classifyEc2Error(error), error);
}

/** The instance has as many volumes attached as EC2 allows: no candidate can succeed. */
export class AttachmentLimitError extends AgentError {
  readonly instanceId: string;
  readonly volumeId: string;

  constructor(instanceId: string, volumeId: string, cause: unknown) {
    super(
      `cannot attach ${volumeId}: ${instanceId} has reached its limit of volume attachments`,
      "detach volumes this instance no longer needs, or use an instance type with more EBS attachments; the node " +
        "comes up without a cache volume meanwhile",
      undefined,
      { cause },
    );
    this.instanceId = instanceId;
    this.volumeId = volumeId;
  }
}

/** No device name could be used for the attachment (invalid, or all candidates taken). */
export class DeviceNameError extends AgentError {
  readonly instanceId: string;
  readonly volumeId: string;
  readonly tried: string[];

  constructor(instanceId: string, volumeId: string, tried: string[], cause: unknown) {
    super(
      `cannot attach ${volumeId} to ${instanceId}: no usable device name (tried ${tried.join(", ")})`,
      "set the agent's device to a free EBS name (/dev/sdf to /dev/sdp) and detach volumes this instance no " +
        "longer needs",
      undefined,
      { cause },
    );
    this.instanceId = instanceId;
    this.volumeId = volumeId;
    this.tried = tried;
  }
}

/** An attachment did not reach the wanted state before the deadline. */
export class AttachmentTimeoutError extends AgentError {
  readonly volumeId: string;
  readonly instanceId: string;
  readonly wanted: "attached" | "detached";
  /** What was seen last, e.g. `attaching to i-…` or `no attachment`. */
  readonly lastSeen: string;
  readonly timeoutMs: number;

  constructor(
    volumeId: string,
    instanceId: string,
    wanted: "attached" | "detached",
    lastSeen: string,
    timeoutMs: number,
  ) {
    const remediation =
      wanted === "attached"
        ? `EC2 sometimes needs minutes to finish an attachment: re-run the agent later; if ${volumeId} stays ` +
          `'attaching', detach it (aws ec2 detach-volume --volume-id ${volumeId}) or stop and start the instance`
        : `make sure nothing on ${instanceId} still uses ${volumeId} (unmounted), then re-run the release; never ` +
          `force-detach a mounted volume`;
    super(
      `${volumeId} did not become ${wanted} on ${instanceId} within ${Math.round(timeoutMs / 1000)} s (last ` +
        `seen: ${lastSeen})`,
      remediation,
    );
    this.volumeId = volumeId;
    this.instanceId = instanceId;
    this.wanted = wanted;
    this.lastSeen = lastSeen;
    this.timeoutMs = timeoutMs;
  }
}

/** Waiting for an attachment to this instance, the volume turned out attached to another one. */
export class AttachmentLostError extends AgentError {
  readonly volumeId: string;
  readonly instanceId: string;
  readonly holder: string;

  constructor(volumeId: string, instanceId: string, holder: string) {
    super(
      `${volumeId} is attached to ${holder}, not to ${instanceId}`,
      "another agent holds this volume: re-run the agent, it picks another one",
    );
    this.volumeId = volumeId;
    this.instanceId = instanceId;
    this.holder = holder;
  }
}

/** A volume the agent created did not become available. */
export class VolumeCreateError extends AgentError {
  readonly volumeId: string;

  constructor(volumeId: string, reason: string) {
    super(
      `volume ${volumeId} did not become available: ${reason}`,
      `look at ${volumeId} in the EC2 console (its state message, the snapshot it came from) and delete it if it ` +
        `is in 'error'; the agent creates another on its next run`,
    );
    this.volumeId = volumeId;
  }
}

/**
 * CreateVolume's ClientToken answered a volume made by an earlier request, which is gone since
 * (deleted): EC2 remembers a token for a day at least and answers it with that volume. No volume
 * was made; the caller asks again with the token that replaces it (replacingToken).
 */
export class ClientTokenSpentError extends AgentError {
  readonly clientToken: string;
  readonly volumeId: string;

  constructor(clientToken: string, volumeId: string) {
    super(
      `CreateVolume's client token ${clientToken} answered ${volumeId}, made earlier and gone since: no volume made`,
      "run the agent again: it asks with the next token",
    );
    this.clientToken = clientToken;
    this.volumeId = volumeId;
  }
}

/** The instance metadata service did not answer in time. */
export class ImdsUnavailableError extends AgentError {
  readonly endpoint: string;
  readonly path: string;

  constructor(endpoint: string, path: string, timeoutMs: number, cause: unknown) {
    super(
      `the instance metadata service at ${endpoint} did not answer ${path} within ` +
        `${Math.round(timeoutMs / 1000)} s: ${describeError(cause)}`,
      "check that IMDS is enabled for the instance (HttpEndpoint=enabled) with IMDSv2 tokens reachable " +
        "(HttpPutResponseHopLimit), then re-run the agent",
      undefined,
      { cause },
    );
    this.endpoint = endpoint;
    this.path = path;
  }
}

/**
 * How IMDS failed a read: it refused it (an HTTP 4xx, or no connection at all), failed it (an HTTP
 * 5xx, a reset, no answer), or answered with data of another shape than the path's (a proxy's page,
 * a stand-in's odd answer): each is a different thing to check.
 */
export type ImdsFailureKind = "refused" | "failed" | "unexpected-data";

/** What IMDS answered: the request's failure, or the data that does not fit with what was expected. */
export type ImdsAnswer = { cause: unknown } | { data: string; expected: string };

/** The most of an odd answer a message shows (a page can be kilobytes). */
const SHOWN_CHARS = 80;

/** An answer as a message shows it: quoted, trimmed to its first SHOWN_CHARS characters. */
export function shownAnswer(data: string): string {
  return JSON.stringify(data.length > SHOWN_CHARS ? `${data.slice(0, SHOWN_CHARS)}…` : data);
}

function imdsStatusOf(error: unknown): number | undefined {
  return (error as { $metadata?: { httpStatusCode?: number } } | undefined)?.$metadata?.httpStatusCode;
}

/** IMDS did not give what the agent needs of `path` (see ImdsFailureKind). */
export class ImdsError extends AgentError {
  readonly endpoint: string;
  readonly path: string;
  readonly kind: ImdsFailureKind;
  constructor(endpoint: string, path: string, answer: ImdsAnswer) {
    const service = `the instance metadata service at ${endpoint}`;
    let kind: ImdsFailureKind;
    let message: string;
    if ("data" in answer) {
      kind = "unexpected-data";
      message = `${service} answered ${path} with unexpected data (${answer.expected} expected): ${answer.data}`;
    } else {
      const status = imdsStatusOf(answer.cause);
      const why = describeError(answer.cause);
      // The SDK keeps no error code on a failed connection, only its words.
      if (status === undefined && /ECONNREFUSED/.test(why)) {
        kind = "refused";
        message = `${service} refused the connection for ${path}: ${why}`;
      } else if (status !== undefined && status < 500) {
        kind = "refused";
        message = `${service} refused ${path} (HTTP ${status}): ${why}`;
      } else {
        kind = "failed";
        message =
          status === undefined
            ? `${service} did not answer ${path}: ${why}`
            : `${service} failed ${path} (HTTP ${status}): ${why}`;
      }
    }
    const options = "the instance's metadata options (HttpEndpoint=enabled, HttpTokens, HttpPutResponseHopLimit)";
    super(
      message,
      kind === "unexpected-data"
        ? `something other than EC2's instance metadata service answers at ${endpoint} (a proxy, or the config's ` +
            "imdsEndpoint / AWS_EC2_METADATA_SERVICE_ENDPOINT pointing elsewhere): check what serves that address, " +
            "then re-run the agent"
        : kind === "failed"
          ? `IMDS failed on its side: re-run the agent (it is idempotent); if it keeps failing, check ${options}`
          : `this agent only runs on EC2 instances (or in the lab); check ${options}, then re-run the agent`,
      undefined,
      "cause" in answer ? { cause: answer.cause } : undefined,
    );
    this.endpoint = endpoint;
    this.path = path;
    this.kind = kind;
  }
}

/** What to check when the instance profile's credentials do not come (true for IMDS and for EC2's side of it). */
const CREDENTIALS_REMEDIATION =
  "the node could not get credentials to call EC2 (nothing was asked of EC2): check that IMDS is enabled " +
  "(HttpEndpoint=enabled) " +
  ("and answers IMDSv2 token requests on this host (HttpPutResponseHopLimit at least 1, 2 if the agent runs in a " +
    "container), ") +
  "that an instance profile with the agent's role is attached (aws ec2 describe-iam-instance-profile-associations), " +
  ("and re-run the agent (it is idempotent); raise timeouts.imdsSeconds / timeouts.imdsRequestSeconds if IMDS is " +
    "only slow");

/** The instance profile's credentials did not come from IMDS within the agent's budget. */
export class CredentialsUnavailableError extends AgentError {
  readonly endpoint: string;
  readonly attempts: number;
  readonly elapsedMs: number;

  constructor(endpoint: string, attempts: number, elapsedMs: number, cause: unknown) {
    super(
      `no instance-profile credentials from IMDS at ${endpoint} after ${attempts} ` +
        `attempt${attempts === 1 ? "" : "s"} in ${(elapsedMs / 1000).toFixed(1)} s: ${describeError(cause)}`,
      CREDENTIALS_REMEDIATION,
      undefined,
      { cause },
    );
    this.endpoint = endpoint;
    this.attempts = attempts;
    this.elapsedMs = elapsedMs;
  }
}

/**
 * A fleet command (fleet-credentials.ts) found no credentials anywhere in the SDK's chain: none in
 * the environment or the profile, and no IMDS answered at once (not on EC2). Nothing was asked of EC2.
 */
export class NoFleetCredentialsError extends AgentError {
  readonly profile: string | undefined;

  constructor(profile: string | undefined, detail: string, cause: unknown) {
    super(
      profile
        ? `no AWS credentials from profile ${profile}: ${detail}`
        : "no AWS credentials: none in the environment or ~/.aws, and no instance metadata service answered " +
            `(not on EC2): ${detail}`,
      profile
        ? `check the profile in ~/.aws/config and ~/.aws/credentials (for SSO: aws sso login --profile ${profile})`
        : "give --profile NAME (a profile of ~/.aws/config; for SSO first `aws sso login --profile NAME`), or set " +
            "AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run it on an instance with an instance " +
            "profile (docs/operations.md)",
      undefined,
      { cause },
    );
    this.profile = profile;
  }
}
