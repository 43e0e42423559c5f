/**
 * Who this instance is, from the instance metadata service (IMDSv2, through the SDK's
 * MetadataService). Early in boot IMDS may refuse connections or answer 503 for a few seconds:
 * every read is retried with backoff until one deadline for the whole identification.
 */
import { MetadataService } from "@aws-sdk/ec2-metadata-service";
import type { Identity } from "../agent/ports.ts";
import { describeError } from "../errors.ts";
import { createLogger, type Logger } from "../log.ts";
import { ImdsError, ImdsUnavailableError, shownAnswer } from "./errors.ts";
import { retry, RetryDeadlineError } from "./retry.ts";

/** What the agent needs of the metadata service: the SDK's MetadataService fits. */
export interface MetadataSource {
  request(path: string, options: { method?: string; headers?: Record<string, string> }): Promise<string>;
  /** Where it is, for error messages. */
  readonly endpoint?: string;
}

/** IMDS on EC2 (IPv4). */
export const DEFAULT_IMDS_ENDPOINT = "http://169.254.169.254";

export interface MetadataServiceOptions {
  /** Default: AWS_EC2_METADATA_SERVICE_ENDPOINT, else DEFAULT_IMDS_ENDPOINT. */
  endpoint?: string;
  /** Timeout of one HTTP request (default 1000 ms, as the SDK's own IMDS credential provider). */
  requestTimeoutMs?: number;
}

/** The metadata service over IMDSv2 only (token flow, no IMDSv1 fallback), without its own retries. */
export function createMetadataService(options: MetadataServiceOptions = {}): MetadataSource & { endpoint: string } {
  const endpoint = options.endpoint ?? process.env.AWS_EC2_METADATA_SERVICE_ENDPOINT ?? DEFAULT_IMDS_ENDPOINT;
  const timeout = options.requestTimeoutMs ?? 1000;
  return {
    endpoint,
    request(path, requestOptions) {
      // A fresh MetadataService per request: after one token request times out or is refused,
      // the SDK's instance stops asking for tokens for good, and with IMDSv1 off every later
      // request fails. Early in boot that must not stick. (It fetches a token per request anyway.)
      const service = new MetadataService({
        endpoint,
        ec2MetadataV1Disabled: true,
        retries: 0,
        httpOptions: { timeout },
      });
      return service.request(path, requestOptions);
    },
  };
}

export interface IdentifyOptions {
  metadata: MetadataSource;
  /** The instance's tags from EC2 (DescribeInstances), in its region: used when IMDS serves no tags. */
  ec2Tags: (instanceId: string, region: string) => Promise<Record<string, string>>;
  /** Deadline for the whole identification, retries included. */
  timeoutMs: number;
  log?: Logger;
}

const META = "/latest/meta-data";
/** What an EC2 instance type looks like (`m5.large`, `g4dn.8xlarge`, `u-6tb1.metal`). */
const INSTANCE_TYPE = /^[a-z0-9][a-z0-9.-]{0,63}$/;
const TAGS = `${META}/tags/instance`;

/** HTTP statuses after which asking again cannot help. */
const FINAL_STATUSES = new Set([400, 403, 404, 405]);

function statusOf(error: unknown): number | undefined {
  return (error as { $metadata?: { httpStatusCode?: number } } | undefined)?.$metadata?.httpStatusCode;
}

/**
 * EC2's rule for instance tag keys once tags are allowed in instance metadata: letters, digits
 * and `- _ + = , . @ :`, not `.`, `..` or `_index` (no spaces, no "/"). EC2 refuses the launch,
 * the CreateTags or the ModifyInstanceMetadataOptions that would break it, with this message
 * (InvalidParameterValue). Undefined for a key that follows it.
 */
export function imdsTagKeyProblem(key: string): string | undefined {
  if (/^[0-9a-zA-Z\-_+=,.@:]{1,255}$/.test(key) && key !== "." && key !== ".." && key !== "_index") return undefined;
  return (
    `'${key}' is not a valid tag key. Tag keys must match pattern ([0-9a-zA-Z\\-_+=,.@:]{1,255}), and must not be ` +
    `a reserved name ('.', '..', '_index')`
  );
}

/**
 * Reads instance id, zone, region and tags from IMDS. Tags come from IMDS when the instance
 * allows it (InstanceMetadataTags=enabled), else from `ec2Tags` (`tagsSource: "ec2"`).
 */
export async function identifyInstance(options: IdentifyOptions): Promise<Identity> {
  const { metadata, timeoutMs } = options;
  const log = options.log ?? createLogger(() => undefined);
  const endpoint = metadata.endpoint ?? "(default endpoint)";
  const deadline = Date.now() + timeoutMs;
  let retries = 0;

  /** One path; undefined for a 404 when `optional`. */
  const read = async (path: string, optional = false): Promise<string | undefined> => {
    try {
      return await retry(() => metadata.request(path, {}), {
        isRetryable: (error) => !FINAL_STATUSES.has(statusOf(error) ?? 0),
        deadline,
        onRetry: (error, attempt, delayMs) => {
          retries++;
          log.debug("imds.retry", `IMDS not answering yet: ${describeError(error)}`, { path, attempt, delayMs });
        },
      });
    } catch (error) {
      if (error instanceof RetryDeadlineError)
        throw new ImdsUnavailableError(endpoint, path, timeoutMs, error.lastError);
      if (optional && statusOf(error) === 404) return undefined;
      throw new ImdsError(endpoint, path, { cause: error });
    }
  };
  const required = async (path: string): Promise<string> => ((await read(path)) ?? "").trim();

  const [instanceId, availabilityZone, region, typeRead] = await Promise.all([
    required(`${META}/instance-id`),
    required(`${META}/placement/availability-zone`),
    required(`${META}/placement/region`),
    // Picks the pool by config `instanceTypePools`; a metadata service without it picks none.
    read(`${META}/instance-type`, true),
  ]);
  const typeText = typeRead?.trim();
  const instanceType = typeText !== undefined && INSTANCE_TYPE.test(typeText) ? typeText : undefined;
  if (typeText !== undefined && instanceType === undefined)
    log.warning("identify.instance-type", "IMDS gave an instance type that is not one: not used", {
      instanceType: typeText.slice(0, 80),
    });

  if (!/^i-[0-9a-f]{8,17}$/.test(instanceId) || availabilityZone === "" || region === "") {
    throw new ImdsError(endpoint, META, {
      data:
        `instance ${shownAnswer(instanceId)}, zone ${shownAnswer(availabilityZone)}, ` +
        `region ${shownAnswer(region)}`,
      expected: "an instance id i-… and a zone and region",
    });
  }

  let tags: Record<string, string>;
  let tagsSource: Identity["tagsSource"];
  const listing = await read(TAGS, true);
  if (listing === undefined) {
    log.info(
      "identify.tags-from-ec2",
      "IMDS serves no instance tags (InstanceMetadataTags disabled): reading them from EC2 (DescribeInstances)",
      {
        instanceId,
      },
    );
    tags = await options.ec2Tags(instanceId, region);
    tagsSource = "ec2";
  } else {
    const keys = listing
      .split("\n")
      .map((key) => key.trim())
      .filter((key) => key !== "");
    const unservable = keys.filter((key) => imdsTagKeyProblem(key) !== undefined);
    if (unservable.length > 0) {
      // EC2 does not let such keys onto an instance with metadata tags; if one shows up anyway
      // it cannot be read as a path, and a partial tag set could hide a setting: ask EC2.
      log.warning(
        "identify.tags-from-ec2",
        "IMDS lists tag keys it cannot serve: reading the tags from EC2 (DescribeInstances)",
        {
          instanceId,
          keys: unservable.join(", "),
        },
      );
      tags = await options.ec2Tags(instanceId, region);
      tagsSource = "ec2";
    } else {
      // Every allowed character is valid in a URL path as it is: no encoding.
      const values = await Promise.all(keys.map((key) => read(`${TAGS}/${key}`, true)));
      tags = {};
      // A 404 for a listed key: the tag was removed in between.
      keys.forEach((key, i) => {
        const value = values[i];
        if (value !== undefined) tags[key] = value;
      });
      tagsSource = "imds";
    }
  }
  log.info("identify.instance", "instance identified", {
    instanceId,
    region,
    availabilityZone,
    tags: Object.keys(tags).length,
    tagsSource,
    imdsRetries: retries,
  });
  return { instanceId, region, availabilityZone, tags, tagsSource, ...(instanceType ? { instanceType } : {}) };
}
