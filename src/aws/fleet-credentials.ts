/**
 * The credentials and region of the fleet commands (`pool`, `pool fill`, `gc`, `snapshot upload`):
 * run from an operator's workstation, a management host or a CI job as well as on a node, they take
 * the AWS SDK's standard chain — `--profile` (or AWS_PROFILE), the environment, SSO and the shared
 * config files, a web identity token, a container's endpoint, and IMDS last — as the AWS CLI does.
 * The host commands (boot, release, prewarm, refresh, prune) keep the instance profile only
 * (credentials.ts): a node has nothing else, and its IMDS is waited for through a boot storm.
 *
 * IMDS is the chain's last link and is asked once with a short timeout: off EC2 nothing answers
 * there, and a person at a terminal is told within a second or two what to give instead, not after
 * the node's minute-long budget. On an instance the one request is answered in milliseconds.
 */
import { EC2Client } from "@aws-sdk/client-ec2";
import { fromNodeProviderChain } from "@aws-sdk/credential-providers";
import type { AwsCredentialIdentityProvider } from "@smithy/types";
import { ConfigError, describeError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { sdkLogger } from "./credentials.ts";
import { NoFleetCredentialsError } from "./errors.ts";

/** How long the chain's one IMDS request (token, then credentials) may take. */
export const IMDS_PROBE_TIMEOUT_MS = 1_000;

/** What an operator may say on the command line about where the commands' AWS access comes from. */
export interface FleetAccess {
  /** `--profile`: a profile of the shared config files (else AWS_PROFILE, else `default`). */
  profile?: string;
  /** `--region` (else the config's `region`, AWS_REGION, the profile's region, this instance's). */
  region?: string;
}

/**
 * The SDK's standard chain, its IMDS link bounded to one short request; its final failure comes
 * out as NoFleetCredentialsError, one line that says what to give.
 */
export function fleetCredentials(options: { profile?: string; log: Logger }): AwsCredentialIdentityProvider {
  const chain = fromNodeProviderChain({
    ...(options.profile ? { profile: options.profile } : {}),
    timeout: IMDS_PROBE_TIMEOUT_MS,
    maxRetries: 0,
    // IMDSv2 only: no IMDSv1 request after a token request that nothing answered (a second wait).
    ec2MetadataV1Disabled: true,
    logger: sdkLogger(options.log),
  });
  return async (identity) => {
    try {
      return await chain(identity);
    } catch (error) {
      throw new NoFleetCredentialsError(options.profile ?? process.env.AWS_PROFILE, describeError(error), error);
    }
  };
}

const REGION = /^[a-z]{2}(-[a-z]+)+-\d+$/;

/**
 * The region a fleet command works in: `--region`, else the config's, else the SDK's (AWS_REGION,
 * AWS_DEFAULT_REGION is not the SDK's, the profile's `region`); undefined when none says it (the
 * caller may ask this instance's IMDS). A value that is not a region is a configuration error.
 */
export async function fleetRegion(access: FleetAccess, configRegion: string | null): Promise<string | undefined> {
  const region = access.region ?? configRegion ?? process.env.AWS_DEFAULT_REGION ?? (await sdkRegion(access.profile));
  if (region !== undefined && !REGION.test(region))
    throw new ConfigError([`region ${JSON.stringify(region)} is not an AWS region (e.g. eu-central-1)`]);
  return region;
}

/** The region the SDK resolves for `profile` (AWS_REGION, then the profile's), read without a call. */
async function sdkRegion(profile: string | undefined): Promise<string | undefined> {
  const client = new EC2Client(profile ? { profile } : {});
  try {
    return await client.config.region();
  } catch {
    return undefined;
  } finally {
    client.destroy();
  }
}
