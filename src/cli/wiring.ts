/**
 * Where the host's adapters are built from the configuration: the one place that knows which
 * module implements which port (`wireAdapters`). It builds adapters only: each use case composes
 * its own parts from them. The CLI uses it with systemd's docker.service; the lab uses it with a
 * lab host's private dockerd and its own IMDS and EC2 endpoints.
 */
import { volumeMarker } from "../host/volume-marker.ts";
import { readFileSync } from "node:fs";
import type { EC2Client } from "@aws-sdk/client-ec2";
import { useImdsEndpoint } from "../aws/credentials.ts";
import { createCloudVolumes, createEc2Client } from "../aws/ec2.ts";
import { hostMaxAttempts } from "../aws/max-attempts.ts";
import { DEFAULT_IMDS_ENDPOINT, createMetadataService, identifyInstance, type MetadataSource } from "../aws/imds.ts";
import { readSpotInstanceAction } from "../aws/spot-notice.ts";
import type { AgentConfig } from "../config/index.ts";
import { createContainerdConfig, prepareContainerdRoot } from "../docker/containerd-store.ts";
import { createDaemonConfig } from "../docker/daemon-json.ts";
import { prepareDataRoot } from "../docker/data-root.ts";
import { createSystemdDockerdCommand } from "../docker/dockerd-command.ts";
import { engineLabelsProblem, type DockerdCommand } from "../docker/dockerd-flags.ts";
import { createDockerEngine } from "../docker/engine.ts";
import { readHostStore } from "../docker/image-store.ts";
import { dataRootToRestore } from "../docker/original-data-root.ts";
import { createImagePuller } from "../docker/pull.ts";
import { createLabelWithdrawer, createReporter } from "../docker/readiness-labels.ts";
import { createDockerdVersion, createSystemdDockerService } from "../docker/service.ts";
import { readFilesystemFill } from "../host/fill.ts";
import { mountPointsOf, syncFilesystem } from "../host/mount.ts";
import { systemdRebootQueued } from "../host/reboot.ts";
import { serviceStatusNotifier } from "../host/systemd-notify.ts";
import { createHostStorage } from "../host/storage.ts";
import { checkVolumeLayout } from "../host/volume-layout.ts";
import { createFioReader } from "../host/volume-reads.ts";
import type { Logger } from "../log.ts";
import { createOutcomeRecorder, hostFacts } from "../status/recorder.ts";
import { readBootRecord } from "../status/records.ts";
import type { HostAdapters } from "../agent/adapters.ts";
import { createPrewarmUnit } from "../host/prewarm-unit.ts";
import type { OutcomeRecorder } from "../agent/outcomes.ts";
import type { CloudVolumes, ContainerdRoot, DockerService, PrewarmFromMount } from "../agent/ports.ts";

export interface WiringOptions {
  config: AgentConfig;
  /** An EC2 client for a region (the region comes from IMDS unless the config names it). */
  ec2Client: (region: string) => EC2Client;
  /** Defaults to IMDS at config.imdsEndpoint (or the link-local address). */
  metadata?: MetadataSource;
  /** docker.service control; undefined leaves docker to systemd ordering. */
  docker: DockerService | undefined;
  /** Whether the host's systemd is rebooting (asked by the release on a real host only). */
  rebootQueued?: () => Promise<boolean>;
  /**
   * containerd.service control, for a host on the containerd image store (its root moves to the
   * volume); undefined leaves containerd to systemd ordering. The lab passes none: its dockerd
   * runs on the host's 20.10 with the graphdriver store.
   */
  containerd?: DockerService;
  defaultDataRoot?: string;
  log: Logger;
  /** EC2 polling interval (ms); the lab uses a short one. */
  pollMs?: number;
  /**
   * Starts the background pre-warm run (on a host: a detached `ebs-cache-agent prewarm
   * --background`). Absent: a long initialization runs inline, before `ready`.
   */
  startPrewarm?: () => Promise<void>;
  /** The pre-warm run begun at the mount (on a host: ebs-cache-agent-prewarm.service). Absent: none. */
  prewarmFromMount?: PrewarmFromMount;
  /** systemd's `STATUS=` (under a unit that takes notifications): the pre-warm's progress line. */
  serviceStatus?: (text: string) => void;
  /** The fio binary the pre-warm runs (default `fio` on PATH). */
  fio?: string;
  /**
   * dockerd's effective command line. Default: systemd's `docker.unit` (systemctl show, its
   * drop-ins and environment files); the lab passes its private dockerd's.
   */
  dockerdCommand?: () => Promise<DockerdCommand>;
  /**
   * Starts the background refresh after `ready` (on a host: a detached `ebs-cache-agent refresh
   * --background`); used only with config refresh.enabled. Absent: no refresh after boot.
   */
  startRefresh?: () => Promise<void>;
}

/**
 * The host's adapters, once per command: EC2 per region (one DescribeInstances per instance for the
 * command's life), IMDS and the identity, the disks, daemon.json, docker, containerd, fio, the
 * records. No settings and no agent code: each use case composes its own parts from these.
 */
export function wireAdapters(options: WiringOptions): HostAdapters & { recorder: OutcomeRecorder } {
  const { config, log } = options;
  const clouds = new Map<string, CloudVolumes>();
  const cloudFor = (region: string): CloudVolumes => {
    let cloud = clouds.get(region);
    if (!cloud) {
      cloud = createCloudVolumes({
        client: options.ec2Client(region),
        log,
        shareDescribeInstance: true,
        ...(options.pollMs ? { pollMs: options.pollMs } : {}),
      });
      clouds.set(region, cloud);
    }
    return cloud;
  };
  const metadata =
    options.metadata ??
    createMetadataService({
      requestTimeoutMs: config.timeouts.imdsRequestSeconds * 1000,
      ...(config.imdsEndpoint ? { endpoint: config.imdsEndpoint } : {}),
    });
  const bootId = readBootId();
  const dockerVersion = createDockerdVersion({ log });
  const daemonConfig = createDaemonConfig({
    path: config.paths.daemonJson,
    log,
    original: {
      stateDir: config.paths.stateDir,
      mountRoot: config.paths.mountRoot,
      ...(options.defaultDataRoot ? { fallback: options.defaultDataRoot } : {}),
    },
  });
  const engine = createDockerEngine({ host: config.paths.dockerHost, log });
  // Read once per run: the unit does not change under a command, and every report checks it.
  let command: Promise<DockerdCommand> | undefined;
  const dockerdCommand = () =>
    (command ??= (
      options.dockerdCommand ??
      createSystemdDockerdCommand({ unit: config.docker.unit, systemdRuntimeDir: config.paths.systemdRunDir, log })
    )());
  return {
    log,
    ...(bootId ? { bootId } : {}),
    cloudFor,
    identify: (call?: { fresh?: boolean }) =>
      identifyInstance({
        metadata,
        ec2Tags: async (instanceId, region) =>
          (await cloudFor(config.region ?? region).describeInstance(instanceId, call?.fresh ? { fresh: true } : {}))
            .tags,
        timeoutMs: config.timeouts.imdsSeconds * 1000,
        log,
      }),
    launchTime: async (identity) =>
      (await cloudFor(config.region ?? identity.region).describeInstance(identity.instanceId)).launchTime,
    storage: createHostStorage({ byIdDir: config.paths.byIdDir, sysfsRoot: config.paths.sysfsRoot, log }),
    mounts: {
      list: (device, mountPoint) => mountPointsOf(device, mountPoint),
      sync: (mountPoint) => syncFilesystem(mountPoint, { log }),
    },
    daemonConfig,
    dataRootToRestore: () => dataRootToRestore(config.paths.stateDir, options.defaultDataRoot, log),
    docker: options.docker,
    engine,
    images: engine,
    labels: ({ prefix, mode, onPublished }) => {
      const reporter = {
        prefix,
        mode,
        engine,
        daemonConfig,
        docker: options.docker,
        log,
        engineLabelsProblem: () => engineLabelsProblem({ dockerdCommand, daemonJsonPath: config.paths.daemonJson }),
        ...(onPublished ? { onPublished } : {}),
      };
      return { report: createReporter(reporter), withdraw: createLabelWithdrawer(reporter) };
    },
    containerd: wireContainerd(options),
    dataRoot: {
      ...volumeMarker,
      checkLayout: (volumeRoot) => checkVolumeLayout(volumeRoot),
      clean: (dataRoot, { kind, imageStore }) =>
        prepareDataRoot(dataRoot, { kind, log, ...(imageStore ? { imageStore } : {}) }),
      cleanContainerdRoot: (root) => prepareContainerdRoot(root, { dropMachineState: true, log }),
    },
    dockerVersion,
    dockerdCommand,
    hostStore: () => readHostStore({ daemonJson: () => daemonConfig.read(), engineVersion: dockerVersion }),
    fill: (mountPoint) => readFilesystemFill(mountPoint),
    reader: createFioReader({ log, fio: options.fio }),
    puller: createImagePuller({ host: config.paths.dockerHost, log }),
    recorder: wireRecorder(options),
    lastBoot: async () => (await readBootRecord(config.paths.stateDir)).record?.result,
    ...(options.serviceStatus ? { serviceStatus: options.serviceStatus } : {}),
    ...(options.startPrewarm ? { startPrewarm: options.startPrewarm } : {}),
    ...(options.prewarmFromMount ? { prewarmFromMount: options.prewarmFromMount } : {}),
    ...(options.startRefresh ? { startRefresh: options.startRefresh } : {}),
    spotInstanceAction: (call) => readSpotInstanceAction(metadata, call),
    ...(options.rebootQueued ? { rebootQueued: options.rebootQueued } : {}),
    ...(options.pollMs ? { pollMs: options.pollMs } : {}),
  };
}

/** This boot of the machine, from the kernel; undefined where it cannot be read. */
function readBootId(): string | undefined {
  try {
    return readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim() || undefined;
  } catch {
    return undefined;
  }
}

/** containerd's config.toml and service, for a host on the containerd image store. */
function wireContainerd(options: WiringOptions): ContainerdRoot {
  const { config, log } = options;
  const file = createContainerdConfig({ path: config.paths.containerdConfig, log });
  return {
    root: () => file.root(),
    setRoot: (root) => file.setRoot(root),
    restoreBackup: () => file.restoreBackup(),
    prepareRoot: (root, { dropMachineState }) => prepareContainerdRoot(root, { dropMachineState, log }),
    service: options.containerd,
  };
}

/** The records `status` reads and the metrics textfiles (`metrics.textfileDir`). */
export function wireRecorder(options: Pick<WiringOptions, "config" | "log">): OutcomeRecorder {
  const { config, log } = options;
  return createOutcomeRecorder({
    stateDir: config.paths.stateDir,
    textfileDir: config.metrics.textfileDir,
    log,
    facts: hostFacts(config.paths.sysfsRoot),
  });
}

/**
 * The wiring of a host's commands: EC2 of the instance's region, with instance-profile
 * credentials from the same IMDS the identity comes from (the config's endpoint wins over the
 * environment, as for the identity), and systemd's docker.service unless `docker.control` is
 * none. The lab passes its own options instead.
 */
export function hostWiringOptions(config: AgentConfig, log: Logger, startPrewarm: () => Promise<void>): WiringOptions {
  useImdsEndpoint(config.imdsEndpoint);
  const instanceProfile = {
    endpoint: config.imdsEndpoint ?? process.env.AWS_EC2_METADATA_SERVICE_ENDPOINT ?? DEFAULT_IMDS_ENDPOINT,
    requestTimeoutMs: config.timeouts.imdsRequestSeconds * 1000,
    budgetMs: config.timeouts.imdsSeconds * 1000,
    log,
  };
  // Read before anything runs: a bad value is a configuration error that changed nothing.
  const maxAttempts = hostMaxAttempts();
  // Set under a unit that takes notifications (the ready unit, the background pre-warm in its cgroup).
  const serviceStatus = serviceStatusNotifier(log);
  return {
    config,
    ec2Client: (region) =>
      createEc2Client({
        region,
        instanceProfile,
        maxAttempts,
        ...(config.ec2Endpoint ? { endpoint: config.ec2Endpoint } : {}),
      }),
    docker:
      config.docker.control === "systemd" ? createSystemdDockerService({ unit: config.docker.unit, log }) : undefined,
    ...(config.docker.control === "systemd"
      ? { containerd: createSystemdDockerService({ unit: "containerd.service", log }) }
      : {}),
    // systemd runs the release at shutdown whatever docker.control says: ask it whether it reboots.
    rebootQueued: () => systemdRebootQueued(),
    log,
    startPrewarm,
    // Only where the agent is installed with its units: a bundle run by hand elsewhere has no unit to start.
    ...(config.docker.control === "systemd" ? { prewarmFromMount: createPrewarmUnit({ log }) } : {}),
    ...(serviceStatus ? { serviceStatus } : {}),
  };
}
