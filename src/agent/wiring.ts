/**
 * Where the agent's adapters are built from the configuration: the one place that knows which
 * module implements which port. The CLI uses it with systemd's docker.service; the lab uses it
 * with a lab host's private dockerd and its own IMDS and EC2 endpoints.
 */
import type { EC2Client } from "@aws-sdk/client-ec2";
import { createCloudVolumes } from "../aws/ec2.ts";
import { createMetadataService, identifyInstance, type MetadataSource } from "../aws/imds.ts";
import type { AgentConfig } from "../config/index.ts";
import { createDaemonConfig } from "../docker/daemon-json.ts";
import { prepareDataRoot } from "../docker/data-root.ts";
import { createDockerEngine } from "../docker/engine.ts";
import { installedDockerdVersion } from "../docker/service.ts";
import { createHostStorage } from "../host/storage.ts";
import type { Logger } from "../log.ts";
import type { BootCommandDeps } from "./boot-command.ts";
import type { CloudVolumes, DockerService } from "./ports.ts";
import { prepareOncePerInstance } from "./prepare.ts";
import { createReporter } from "./report.ts";

export interface WiringOptions {
  config: AgentConfig;
  /** An EC2 client for a region (the region comes from IMDS unless the config names it). */
  ec2Client: (region: string) => EC2Client;
  /** Defaults to IMDS at config.imdsEndpoint (or the link-local address). */
  metadata?: MetadataSource;
  /** docker.service control; undefined leaves docker to systemd ordering. */
  docker: DockerService | undefined;
  defaultDataRoot?: string;
  log: Logger;
  /** EC2 polling interval (ms); the lab uses a short one. */
  pollMs?: number;
}

/** Builds everything `runBoot()` needs. */
export function wireBoot(options: WiringOptions): BootCommandDeps {
  const { config, log } = options;
  const clouds = new Map<string, CloudVolumes>();
  const cloudFor = (region: string): CloudVolumes => {
    let cloud = clouds.get(region);
    if (!cloud) {
      cloud = createCloudVolumes({ client: options.ec2Client(region), log, ...(options.pollMs ? { pollMs: options.pollMs } : {}) });
      clouds.set(region, cloud);
    }
    return cloud;
  };
  const metadata = options.metadata ?? createMetadataService(config.imdsEndpoint ? { endpoint: config.imdsEndpoint } : {});
  return {
    config,
    cloudFor,
    log,
    ...(options.defaultDataRoot ? { defaultDataRoot: options.defaultDataRoot } : {}),
    identify: () =>
      identifyInstance({
        metadata,
        ec2Tags: (instanceId, region) => cloudFor(config.region ?? region).instanceTags(instanceId),
        timeoutMs: config.timeouts.imdsSeconds * 1000,
        log,
      }),
    bootDeps: (settings, cloud) => {
      const daemonConfig = createDaemonConfig({ path: config.paths.daemonJson, log });
      const engine = createDockerEngine({ host: config.paths.dockerHost, log });
      return {
        cloud,
        storage: createHostStorage({ byIdDir: config.paths.byIdDir, sysfsRoot: config.paths.sysfsRoot, log }),
        daemonConfig,
        docker: options.docker,
        engine,
        prepareDataRoot: async (dataRoot, { kind, instanceId }) => {
          await prepareOncePerInstance(dataRoot, instanceId, async () => void (await prepareDataRoot(dataRoot, { kind, log })), log);
        },
        dockerVersion: () => installedDockerdVersion({ log }),
        report: createReporter({
          prefix: settings.effective.labels.prefix,
          mode: settings.effective.labels.mode,
          engine,
          daemonConfig,
          docker: options.docker,
          log,
        }),
        log,
      };
    },
  };
}
