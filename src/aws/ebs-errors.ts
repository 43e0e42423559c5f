/**
 * EBS direct failures in the builder's words, as errors.ts has them for EC2: `classifyEbsError`
 * turns whatever the SDK threw into a kind, and the one table below says, per kind, whether the
 * rerun of the same command resumes the upload (its manifest holds what was put), what to do,
 * and the exit code. Raised once, at the boundary of ebs.ts, as EbsCallError; an answer the API
 * does not allow (a string where it says integer, a block size other than 512 KiB) is
 * EbsAnswerError, raised before the answer is used.
 *
 * | EBS code / condition                                        | kind                    | rerun resumes |
 * | ----------------------------------------------------------- | ----------------------- | ------------- |
 * | ResourceNotFoundException, 404                              | not-found               | no            |
 * | ConflictException (ClientToken with other parameters), 409  | conflict                | no            |
 * | ValidationException, any other 4xx                          | invalid-request         | no            |
 * | AccessDeniedException, UnrecognizedClient…, 401, 403        | unauthorized            | once fixed    |
 * | no credentials to sign with (the SDK's providers)           | credentials-unavailable | once fixed    |
 * | RequestThrottledException, ConcurrentLimitExceeded…, 429    | throttled               | yes           |
 * | ServiceQuotaExceededException, 402                          | quota                   | once raised   |
 * | InternalServerException, any 5xx                            | server                  | yes           |
 * | no HTTP answer (reset, refused, timeout)                    | network                 | yes           |
 *
 * The SDK retries throttling, 5xx and network failures itself (ebs.ts: 10 attempts, adaptive):
 * what reaches this table has outlasted them. Every EBS failure exits 1 (the command's help).
 */
import { AgentError, ExitCode, describeError } from "../errors.ts";

/** The EBS direct calls the builder makes. */
export type EbsCall =
  "StartSnapshot" | "PutSnapshotBlock" | "CompleteSnapshot" | "ListSnapshotBlocks" | "GetSnapshotBlock";

export type EbsFault =
  | "not-found"
  | "conflict"
  | "invalid-request"
  | "unauthorized"
  | "credentials-unavailable"
  | "throttled"
  | "quota"
  | "server"
  | "network";

/** What an EBS direct call failed with. */
export interface EbsFailure {
  kind: EbsFault;
  /** The error's code (the SDK exception's name), or the Node error code without an answer. */
  code: string;
  /** EBS's `Reason` field (ValidationException's INVALID_BLOCK, …), when it gave one. */
  reason: string | undefined;
  /** HTTP status, when EBS answered. */
  status: number | undefined;
  message: string;
}

const THROTTLED = new Set([
  "RequestThrottledException",
  "ConcurrentLimitExceededException",
  "ThrottlingException",
  "Throttling",
  "TooManyRequestsException",
  "SlowDown",
]);
const UNAUTHORIZED = new Set([
  "AccessDeniedException",
  "AccessDenied",
  "UnrecognizedClientException",
  "InvalidSignatureException",
  "SignatureDoesNotMatch",
  "ExpiredTokenException",
  "ExpiredToken",
  "InvalidClientTokenId",
]);
const CREDENTIALS = new Set([
  "CredentialsProviderError",
  "ProviderError",
  "InstanceMetadataV1FallbackError",
  "CredentialsUnavailableError",
]);

/** Classifies anything an EBS SDK call threw (never throws itself). */
export function classifyEbsError(error: unknown): EbsFailure {
  const e = (typeof error === "object" && error !== null ? error : {}) as {
    name?: string;
    code?: string;
    message?: string;
    Reason?: unknown;
    $metadata?: { httpStatusCode?: number };
    $response?: { statusCode?: number };
  };
  const code = e.name && e.name !== "Error" ? e.name : (e.code ?? "Error");
  // An answer the SDK could not parse (an HTML error page) carries its status in $response.
  const status = e.$metadata?.httpStatusCode ?? e.$response?.statusCode;
  const message = e.message ?? describeError(error);
  const reason = typeof e.Reason === "string" ? e.Reason : undefined;
  const failure = (kind: EbsFault): EbsFailure => ({ kind, code, reason, status, message });

  if (
    CREDENTIALS.has(code) ||
    /could not load credentials|credential is missing|unable to (load|resolve) credentials/i.test(message)
  )
    return failure("credentials-unavailable");
  if (code === "ResourceNotFoundException" || status === 404) return failure("not-found");
  if (code === "ConflictException" || status === 409) return failure("conflict");
  if (THROTTLED.has(code) || status === 429) return failure("throttled");
  if (UNAUTHORIZED.has(code) || status === 401 || status === 403) return failure("unauthorized");
  if (code === "ServiceQuotaExceededException" || status === 402) return failure("quota");
  if (code === "InternalServerException" || (status !== undefined && status >= 500)) return failure("server");
  if (status === undefined) return failure("network");
  return failure("invalid-request");
}

/** One row of the table: whether a rerun resumes, what to do. */
interface EbsFaultRow {
  resumes: boolean;
  remediation: (call: EbsCall, failure: EbsFailure) => string;
}

const RERUN = "run the same command again: it resumes from the manifest";

/** The table (see the module comment), read by EbsCallError and docs/snapshot.md. */
export const EBS_FAULTS: Record<EbsFault, EbsFaultRow> = {
  "not-found": {
    resumes: false,
    remediation: (call) =>
      call === "StartSnapshot" || call === "ListSnapshotBlocks"
        ? "the parent snapshot named does not exist in this region and account, or is not completed: check " +
          "--parent / --parent-snapshot and --region"
        : "the snapshot being written is gone (deleted, or failed by EBS): start a new build with a new --manifest",
  },
  conflict: {
    resumes: false,
    remediation: () =>
      "the manifest's ClientToken was used with other parameters: run the interrupted upload again with the same " +
      "options (--built-at, --tag, --size-gib, --kms-key-arn), or start a new build with a new --manifest",
  },
  "invalid-request": {
    resumes: false,
    remediation: (_call, failure) =>
      failure.reason === "INVALID_CUSTOMER_KEY"
        ? "the KMS key cannot encrypt EBS snapshots: give a symmetric key of this region (--kms-key-arn)"
        : "EBS refused the request as invalid (its reason is in the message): check the options named there; " +
          "nothing of it was written",
  },
  unauthorized: {
    resumes: true,
    remediation: (call, failure) =>
      failure.reason === "DEPENDENCY_ACCESS_DENIED"
        ? "EBS was refused the KMS key: let the build role use it through EBS (kms:ViaService " +
          "ebs.<region>.amazonaws.com, iam/ebs-cache-snapshot-builder-policy.json); then " +
          RERUN
        : `grant the build role ebs:${call} on pool snapshots (iam/ebs-cache-snapshot-builder-policy.json), or fix ` +
          `the credentials; then ${RERUN}`,
  },
  "credentials-unavailable": {
    resumes: true,
    remediation: () =>
      "no AWS credentials were found to sign with (environment, profile, SSO, an instance role; nothing was " +
      `asked of EBS): provide them, then ${RERUN}`,
  },
  throttled: {
    resumes: true,
    remediation: () =>
      "EBS kept throttling after the SDK's retries (PutSnapshotBlock's rate is per snapshot and per account): " +
      `${RERUN}, with a lower --concurrency if it comes again`,
  },
  quota: {
    resumes: true,
    remediation: () =>
      "an EBS direct quota is reached (pending snapshots, or snapshots, per account and region): let the " +
      `pending uploads finish or raise the quota, then ${RERUN}`,
  },
  server: {
    resumes: true,
    remediation: () => `EBS failed after the SDK's retries: ${RERUN}`,
  },
  network: {
    resumes: true,
    remediation: () =>
      `EBS did not answer: check the route to the EBS direct endpoint (--endpoint, a VPC endpoint, DNS), then ${RERUN}`,
  },
};

/** An EBS direct call failed, past the SDK's retries. */
export class EbsCallError extends AgentError {
  readonly call: EbsCall;
  readonly snapshotId: string | undefined;
  readonly kind: EbsFault;
  readonly code: string;
  readonly reason: string | undefined;
  /** Whether the rerun of the same command resumes (the manifest holds what was put). */
  readonly resumes: boolean;
  constructor(call: EbsCall, snapshotId: string | undefined, failure: EbsFailure, cause: unknown) {
    const row = EBS_FAULTS[failure.kind];
    super(
      `EBS ${call}${snapshotId ? ` (${snapshotId})` : ""} failed: ${failure.code}` +
        `${failure.reason ? ` (${failure.reason})` : ""}: ${failure.message}`,
      row.remediation(call, failure),
      ExitCode.failure,
      { cause },
    );
    this.call = call;
    this.snapshotId = snapshotId;
    this.kind = failure.kind;
    this.code = failure.code;
    this.reason = failure.reason;
    this.resumes = row.resumes;
  }
}

/** Wraps whatever an EBS call threw (the agent's own typed errors pass through). */
export function ebsCallError(call: EbsCall, snapshotId: string | undefined, error: unknown): AgentError {
  if (error instanceof AgentError) return error;
  return new EbsCallError(call, snapshotId, classifyEbsError(error), error);
}

/**
 * EBS answered something its API does not allow (the model's types and documented values): the
 * answer is not used, so no plan or manifest is built on it. A rerun resumes once the endpoint
 * answers as EBS does.
 */
export class EbsAnswerError extends AgentError {
  readonly call: EbsCall;
  readonly snapshotId: string | undefined;
  readonly problem: string;
  readonly resumes = true;
  constructor(call: EbsCall, snapshotId: string | undefined, problem: string) {
    super(
      `EBS ${call}${snapshotId ? ` (${snapshotId})` : ""} answered ${problem}, which the EBS direct API does not ` +
        `allow: the answer was not used`,
      "check that the endpoint is EBS direct itself (--endpoint, the region's): nothing is uploaded through an " +
        `endpoint whose answers drift from the API; once it answers as EBS does, ${RERUN}`,
      ExitCode.failure,
    );
    this.call = call;
    this.snapshotId = snapshotId;
    this.problem = problem;
  }
}
