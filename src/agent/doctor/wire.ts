/**
 * Doctor composed from the host's adapters: the boot's IMDS identity, the agent's EC2 client and
 * credentials, daemon.json and dockerd's command line as the boot reads them, STS when the EC2 is
 * AWS's (a stand-in EC2, `ec2Endpoint`, has no STS beside it).
 */
import { createEc2Client, createCloudVolumes } from "../../aws/ec2.ts";
import { hostMaxAttempts } from "../../aws/max-attempts.ts";
import { sdkEc2Api, type Ec2Api } from "../../aws/ec2-api.ts";
import { DEFAULT_IMDS_ENDPOINT, createMetadataService, identifyInstance, type MetadataSource } from "../../aws/imds.ts";
import { useImdsEndpoint } from "../../aws/credentials.ts";
import { createSts } from "../../aws/sts.ts";
import type { AgentConfig } from "../../config/index.ts";
import { createDaemonConfig } from "../../docker/daemon-json.ts";
import { createSystemdDockerdCommand } from "../../docker/dockerd-command.ts";
import type { DockerdCommand } from "../../docker/dockerd-flags.ts";
import { installedDockerdVersion } from "../../docker/service.ts";
import { describeError } from "../../errors.ts";
import { run } from "../../exec.ts";
import type { Logger } from "../../log.ts";
import type { CloudVolumes } from "../ports.ts";
import type { DoctorCloudDeps, DoctorDeps, DoctorHostDeps } from "./deps.ts";
import type { ToolFact } from "./plan.ts";

export interface DoctorWiring {
  config: AgentConfig;
  /** The configuration file and its problems (an invalid file: doctor goes on with the defaults). */
  configFile: { path: string; problems: string[] };
  log: Logger;
  hostOnly: boolean;
  /** Where the agent's units are installed (default: the config's `paths.unitsDir`). */
  unitsDir?: string;
  /** dockerd's command line (default: systemd's docker unit); the lab passes its private dockerd's. */
  dockerdCommand?: () => Promise<DockerdCommand>;
  /** The lab's static credentials; default: the environment's, else the instance profile. */
  credentials?: { accessKeyId: string; secretAccessKey: string };
  metadata?: MetadataSource;
}

const VERSION_FLAG = { fio: "--version", "mkfs.xfs": "-V", blkid: "-V" } as const;
/** The boot runs mkfs.xfs and blkid from the sbin folders, which a login shell of a user may not have. */
const TOOL_PATH = `${process.env.PATH ?? ""}:/usr/sbin:/usr/bin:/sbin:/bin`;

async function toolVersion(tool: keyof typeof VERSION_FLAG): Promise<ToolFact> {
  try {
    const result = await run(tool, [VERSION_FLAG[tool]], { check: false, env: { PATH: TOOL_PATH }, timeoutMs: 30_000 });
    const text = (result.stdout || result.stderr).trim().split("\n")[0] ?? "";
    return result.exitCode === 0 ? { version: text } : { missing: `${tool} exited ${result.exitCode}: ${text}` };
  } catch (error) {
    return { missing: `not found (${describeError(error)})` };
  }
}

export function wireDoctor(options: DoctorWiring): DoctorDeps {
  const { config, log } = options;
  const daemonConfig = createDaemonConfig({
    path: config.paths.daemonJson,
    log,
    original: { stateDir: config.paths.stateDir, mountRoot: config.paths.mountRoot },
  });
  let command: Promise<DockerdCommand> | undefined;
  const dockerdCommand = () =>
    (command ??= (
      options.dockerdCommand ??
      createSystemdDockerdCommand({ unit: config.docker.unit, systemdRuntimeDir: config.paths.systemdRunDir, log })
    )());
  const host: DoctorHostDeps = {
    nodeVersion: process.version,
    toolVersion,
    dockerVersion: () => installedDockerdVersion({ log }),
    preflight: {
      daemonJsonPath: config.paths.daemonJson,
      readDaemonJson: () => daemonConfig.read(),
      dockerdCommand,
      dockerVersion: () => installedDockerdVersion({ log }),
      labels: { prefix: config.labels.prefix, mode: config.labels.mode },
      log,
    },
    unitsDir: options.unitsDir ?? config.paths.unitsDir,
    config: options.configFile,
    log,
  };
  return options.hostOnly ? { host } : { host, cloud: wireDoctorCloud(options) };
}

function wireDoctorCloud(options: DoctorWiring): DoctorCloudDeps {
  const { config, log } = options;
  useImdsEndpoint(config.imdsEndpoint);
  const imdsEndpoint = config.imdsEndpoint ?? process.env.AWS_EC2_METADATA_SERVICE_ENDPOINT ?? DEFAULT_IMDS_ENDPOINT;
  const instanceProfile = {
    endpoint: imdsEndpoint,
    requestTimeoutMs: config.timeouts.imdsRequestSeconds * 1000,
    // doctor answers in seconds: a metadata service that does not answer is a line, not a wait.
    budgetMs: Math.min(config.timeouts.imdsSeconds, 15) * 1000,
    log,
  };
  const metadata =
    options.metadata ??
    createMetadataService({ endpoint: imdsEndpoint, requestTimeoutMs: config.timeouts.imdsRequestSeconds * 1000 });
  const clients = new Map<string, { ec2: Ec2Api; cloud: CloudVolumes }>();
  const clientsFor = (region: string) => {
    let pair = clients.get(region);
    if (!pair) {
      const client = createEc2Client({
        region,
        instanceProfile,
        // doctor asks once: EC2's answer, not the SDK's ride through a boot storm.
        maxAttempts: Math.min(hostMaxAttempts(), 3),
        ...(config.ec2Endpoint ? { endpoint: config.ec2Endpoint } : {}),
        ...(options.credentials ? { credentials: options.credentials } : {}),
      });
      pair = { ec2: sdkEc2Api(client), cloud: createCloudVolumes({ client, log }) };
      clients.set(region, pair);
    }
    return pair;
  };
  const regionOf = (region: string) => config.region ?? region;
  const sts = (region: string) => createSts({ region: regionOf(region), instanceProfile });
  const awsEc2 = !config.ec2Endpoint && !options.credentials;
  return {
    identify: () =>
      identifyInstance({
        metadata,
        ec2Tags: async (instanceId, region) =>
          (await clientsFor(regionOf(region)).cloud.describeInstance(instanceId)).tags,
        timeoutMs: Math.min(config.timeouts.imdsSeconds, 15) * 1000,
        log,
      }),
    async credentialsSource() {
      if (options.credentials) return "the lab's static keys";
      if (process.env.AWS_ACCESS_KEY_ID && process.env.AWS_SECRET_ACCESS_KEY)
        return "the environment (AWS_ACCESS_KEY_ID)";
      const roles = await metadata
        .request("/latest/meta-data/iam/security-credentials/", {})
        .catch((error: unknown) => {
          throw new Error(`no instance profile: IMDS lists no role (${describeError(error)})`);
        });
      const role = roles.split("\n")[0]?.trim();
      if (!role) throw new Error("no instance profile: IMDS lists no role");
      return `the instance profile, role ${role}`;
    },
    ...(awsEc2
      ? {
          callerArn: (region: string) => sts(region).callerArn(),
          decodeAuthorization: (region: string, encoded: string) => sts(region).decodeAuthorization(encoded),
        }
      : {}),
    cloud: (region) => clientsFor(regionOf(region)).cloud,
    ec2: (region) => clientsFor(regionOf(region)).ec2,
    pool: { pool: config.pool, imageSet: config.imageSet },
  };
}
