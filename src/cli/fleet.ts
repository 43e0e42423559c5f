/**
 * What every fleet command (`pool`, `pool fill`, `gc`) does first: load the config, and build EC2
 * with the SDK's standard credential chain and a region that need no instance (src/aws/
 * fleet-credentials.ts). Run on a node, the chain ends in the instance profile, as before; run on
 * a workstation or in a CI job, it takes the operator's profile, SSO or environment.
 */
import { Option } from "commander";
import type { CloudVolumes } from "../agent/ports.ts";
import type { OutcomeRecorder } from "../agent/outcomes.ts";
import { useImdsEndpoint } from "../aws/credentials.ts";
import { createCloudVolumes, createEc2Client } from "../aws/ec2.ts";
import { hostMaxAttempts } from "../aws/max-attempts.ts";
import { fleetCredentials, fleetRegion, IMDS_PROBE_TIMEOUT_MS, type FleetAccess } from "../aws/fleet-credentials.ts";
import { createMetadataService } from "../aws/imds.ts";
import type { AgentConfig } from "../config/index.ts";
import { ConfigError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { loadCommandConfig } from "./load-config.ts";
import { wireRecorder } from "./wiring.ts";

export interface FleetContext {
  config: AgentConfig;
  log: Logger;
  /** EC2 in the fleet's region, signed with the chain's credentials. */
  cloud(): Promise<CloudVolumes>;
  /** The status records and metrics textfiles. */
  recorder: OutcomeRecorder;
}

/** `--profile` and `--region`, the fleet commands' (and `snapshot upload`'s) options. */
export function fleetOptions(
  regionDefault = "the config's region, $AWS_REGION, the profile's region, this instance's",
): [Option, Option] {
  return [
    new Option(
      "--profile <name>",
      "AWS profile of ~/.aws/config (SSO included; default $AWS_PROFILE, else the SDK's chain: environment, " +
        "default profile, instance profile last)",
    ),
    new Option("--region <region>", `AWS region (default: ${regionDefault})`),
  ];
}

/** `--profile` and `--region` as given (an option not given is left out). */
export function fleetAccess(opts: { profile?: string; region?: string }): FleetAccess {
  return {
    ...(opts.profile !== undefined ? { profile: opts.profile } : {}),
    ...(opts.region !== undefined ? { region: opts.region } : {}),
  };
}

/** Loads the config and wires EC2 for a fleet command. */
export async function fleetContext(configPath: string | undefined, access: FleetAccess): Promise<FleetContext> {
  const { config, log } = await loadCommandConfig(configPath);
  // The chain's IMDS link reads its endpoint from the environment, as the node's does.
  useImdsEndpoint(config.imdsEndpoint);
  const maxAttempts = hostMaxAttempts();
  const credentialChain = fleetCredentials({ ...(access.profile ? { profile: access.profile } : {}), log });
  let cloud: Promise<CloudVolumes> | undefined;
  return {
    config,
    log,
    recorder: wireRecorder({ config, log }),
    cloud: () =>
      (cloud ??= (async () => {
        const region = (await fleetRegion(access, config.region)) ?? (await instanceRegion(config));
        const client = createEc2Client({
          region,
          credentialChain,
          maxAttempts,
          ...(config.ec2Endpoint ? { endpoint: config.ec2Endpoint } : {}),
        });
        return createCloudVolumes({ client, log });
      })()),
  };
}

/** This instance's region, asked of IMDS once with a short timeout; none off EC2 is a configuration error. */
async function instanceRegion(config: AgentConfig): Promise<string> {
  const metadata = createMetadataService({
    requestTimeoutMs: IMDS_PROBE_TIMEOUT_MS,
    ...(config.imdsEndpoint ? { endpoint: config.imdsEndpoint } : {}),
  });
  try {
    return (await metadata.request("/latest/meta-data/placement/region", {})).trim();
  } catch {
    throw new ConfigError(
      ["no region: no --region, no config region, no AWS_REGION, no region in the profile, and not on EC2"],
      "give --region NAME, set AWS_REGION, or add `region` to the profile in ~/.aws/config",
    );
  }
}
