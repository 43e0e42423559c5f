/**
 * What every host command does first: load the config (file < env), make the logger, and wire
 * the real adapters (EC2 of the instance's region, IMDS, systemd's docker.service).
 */
import type { BootCommandDeps } from "../agent/boot-command.ts";
import type { ReleaseCommandDeps } from "../agent/release-command.ts";
import { wireBoot, wireRelease, type WiringOptions } from "../agent/wiring.ts";
import type { CloudVolumes } from "../agent/ports.ts";
import { createEc2Client } from "../aws/ec2.ts";
import { loadConfig, type AgentConfig } from "../config/index.ts";
import { createSystemdDockerService } from "../docker/service.ts";
import { createLogger, type Level, type Logger } from "../log.ts";

export interface HostContext {
  config: AgentConfig;
  log: Logger;
  deps: BootCommandDeps;
  /** The same adapters, wired for `release`. */
  releaseDeps: ReleaseCommandDeps;
  /** EC2 in the configured region, or this instance's (from IMDS). */
  cloud(): Promise<CloudVolumes>;
}

/** Loads the config and wires the real adapters. */
export async function hostContext(configPath: string | undefined): Promise<HostContext> {
  const { config } = await loadConfig(configPath ? { path: configPath } : {});
  const log = createLogger(undefined, config.logLevel as Level);
  // The SDK's credential chain reads instance-profile credentials from the same IMDS.
  if (config.imdsEndpoint && !process.env.AWS_EC2_METADATA_SERVICE_ENDPOINT) {
    process.env.AWS_EC2_METADATA_SERVICE_ENDPOINT = config.imdsEndpoint;
  }
  const wiring: WiringOptions = {
    config,
    ec2Client: (region) => createEc2Client({ region, ...(config.ec2Endpoint ? { endpoint: config.ec2Endpoint } : {}) }),
    docker: config.docker.control === "systemd" ? createSystemdDockerService({ unit: config.docker.unit, log }) : undefined,
    log,
  };
  const deps = wireBoot(wiring);
  return {
    config,
    log,
    deps,
    releaseDeps: wireRelease(wiring),
    cloud: async () => deps.cloudFor(config.region ?? (await deps.identify()).region),
  };
}

/** Parses a whole number option (commander). */
export function wholeNumber(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`expected a whole number, got ${JSON.stringify(value)}`);
  return n;
}
