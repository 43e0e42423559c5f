/**
 * Where the agent's adapters are built from the configuration: the one place that knows which
 * module implements which port, for `boot`, `prewarm` and `release`. The CLI uses it with systemd's
 * docker.service; the lab uses it with a lab host's private dockerd and its own IMDS and EC2
 * endpoints.
 */
import { readFileSync } from "node:fs";
import type { EC2Client } from "@aws-sdk/client-ec2";
import { useImdsEndpoint } from "../aws/credentials.ts";
import { createCloudVolumes, createEc2Client, hostMaxAttempts } from "../aws/ec2.ts";
import { DEFAULT_IMDS_ENDPOINT, createMetadataService, identifyInstance, type MetadataSource } from "../aws/imds.ts";
import { readSpotInstanceAction } from "../aws/spot-notice.ts";
import type { AgentConfig } from "../config/index.ts";
import type { EffectiveSettings } from "../config/overrides.ts";
import { createContainerdConfig, prepareContainerdRoot } from "../docker/containerd-store.ts";
import { createDaemonConfig } from "../docker/daemon-json.ts";
import { readHostStore } from "../docker/image-store.ts";
import { prepareDataRoot } from "../docker/data-root.ts";
import { createDockerEngine } from "../docker/engine.ts";
import { systemdRebootQueued } from "../host/reboot.ts";
import { createSystemdDockerService, installedDockerdVersion } from "../docker/service.ts";
import { createSystemdDockerdCommand } from "../docker/dockerd-command.ts";
import type { DockerdCommand } from "../docker/dockerd-flags.ts";
import { mountPointsOf, syncFilesystem } from "../host/mount.ts";
import { createHostStorage } from "../host/storage.ts";
import type { Logger } from "../log.ts";
import type { BootCommandDeps } from "../agent/boot/run.ts";
import type { CloudVolumes, ContainerdRoot, DockerService, Identity, PrewarmReader } from "../agent/ports.ts";
import { checkVolumeLayout } from "../host/volume-layout.ts";
import { beginPrewarmAtBoot } from "../agent/prewarm/apply.ts";
import { prewarmSettingsFrom } from "../agent/prewarm/plan.ts";
import { prewarmStatus, type PrewarmCommandDeps } from "../agent/prewarm/run.ts";
import { createFioReader } from "../host/volume-reads.ts";
import type { ReleaseCommandDeps } from "../agent/release/run.ts";
import type { RefreshCommandDeps } from "../agent/refresh/run.ts";
import { createImagePuller } from "../docker/pull.ts";
import { createLabelWithdrawer, createReporter } from "../docker/readiness-labels.ts";
import { createOutcomeRecorder, hostFacts } from "../status/recorder.ts";
import { readBootRecord } from "../status/records.ts";
import { readFilesystemFill } from "../host/fill.ts";
import type { PruneDeps } from "../agent/prune/run.ts";
import { preflightHost } from "../agent/boot/preflight.ts";
import { engineLabelsProblem } from "../docker/dockerd-flags.ts";
import type { OutcomeRecorder } from "../agent/outcomes.ts";

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

/** What every command shares: EC2 per region and the instance's identity. */
function wireCommon(options: WiringOptions) {
  const { config, log } = options;
  const clouds = new Map<string, CloudVolumes>();
  const cloudFor = (region: string): CloudVolumes => {
    let cloud = clouds.get(region);
    if (!cloud) {
      cloud = sharingDescribeInstance(
        createCloudVolumes({
          client: options.ec2Client(region),
          log,
          ...(options.pollMs ? { pollMs: options.pollMs } : {}),
        }),
      );
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
  return {
    config,
    cloudFor,
    metadata,
    log,
    ...(options.defaultDataRoot ? { defaultDataRoot: options.defaultDataRoot } : {}),
    ...(bootId ? { bootId } : {}),
    identify: (options?: { fresh?: boolean }) =>
      identifyInstance({
        metadata,
        ec2Tags: async (instanceId, region) =>
          (await cloudFor(config.region ?? region).describeInstance(instanceId, options?.fresh ? { fresh: true } : {}))
            .tags,
        timeoutMs: config.timeouts.imdsSeconds * 1000,
        log,
      }),
    // The boot's own DescribeInstances (shared): no call of its own.
    launchTime: async (identity: Identity) =>
      (await cloudFor(config.region ?? identity.region).describeInstance(identity.instanceId)).launchTime,
  };
}

/**
 * One DescribeInstances per instance for the life of a command: identify (the instance's tags,
 * when IMDS serves none) and observe (its attached volumes) read the same answer, so a boot
 * pays for the call once. A failed call is not remembered.
 */
function sharingDescribeInstance(cloud: CloudVolumes): CloudVolumes {
  const answers = new Map<string, ReturnType<CloudVolumes["describeInstance"]>>();
  return {
    ...cloud,
    describeInstance(instanceId, call) {
      let answer = call?.fresh ? undefined : answers.get(instanceId);
      if (!answer) {
        answer = cloud.describeInstance(instanceId, call);
        answers.set(instanceId, answer);
        answer.catch(() => answers.delete(instanceId));
      }
      return answer;
    },
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

/**
 * The installed dockerd does not change during a run: `dockerd --version` once (it takes ~0.1 s),
 * for the host's store, the pre-claim check and the data-root switch alike. A failed read is
 * not remembered.
 */
function memoizedDockerVersion(log: Logger): () => Promise<string | undefined> {
  let version: Promise<string | undefined> | undefined;
  return () => {
    version ??= installedDockerdVersion({ log });
    version.catch(() => (version = undefined));
    return version;
  };
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

/** The host's adapters: storage, daemon.json, the docker API, and the label publisher over them. */
function wireHost(
  options: WiringOptions,
  labels: { prefix: string; mode: EffectiveSettings["labels"]["mode"] },
  dockerVersion: () => Promise<string | undefined> = memoizedDockerVersion(options.log),
) {
  const { config, log } = options;
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
  // Read once per run: the unit does not change under a boot, and every report checks it.
  let command: Promise<DockerdCommand> | undefined;
  const dockerdCommand = () =>
    (command ??= (options.dockerdCommand ?? createSystemdDockerdCommand({ unit: config.docker.unit, log }))());
  const reporterDeps = {
    prefix: labels.prefix,
    mode: labels.mode,
    engine,
    daemonConfig,
    docker: options.docker,
    log,
    engineLabelsProblem: () => engineLabelsProblem({ dockerdCommand, daemonJsonPath: config.paths.daemonJson }),
  };
  return {
    storage: createHostStorage({ byIdDir: config.paths.byIdDir, sysfsRoot: config.paths.sysfsRoot, log }),
    daemonConfig,
    engine,
    reporterDeps,
    dockerVersion,
    preflight: () =>
      preflightHost({
        daemonJsonPath: config.paths.daemonJson,
        readDaemonJson: () => daemonConfig.read(),
        dockerdCommand,
        dockerVersion,
        labels,
        log,
      }),
  };
}

/**
 * The records `status` reads and the metrics textfiles (`metrics.textfileDir`); `publishedLabels`
 * tells the boot's record which labels the run published.
 */
export function wireRecorder(
  options: WiringOptions,
  publishedLabels?: () => Record<string, string> | undefined,
): OutcomeRecorder {
  const { config, log } = options;
  return createOutcomeRecorder({
    stateDir: config.paths.stateDir,
    textfileDir: config.metrics.textfileDir,
    log,
    ...(publishedLabels ? { publishedLabels } : {}),
    facts: hostFacts(config.paths.sysfsRoot),
  });
}

/** Builds everything `runBoot()` needs. */
export function wireBoot(options: WiringOptions): BootCommandDeps {
  const { log } = options;
  const dockerVersion = memoizedDockerVersion(log);
  const containerd = wireContainerd(options);
  const hostDaemonConfig = createDaemonConfig({ path: options.config.paths.daemonJson, log });
  // The labels the last report of this run published (the reporter tells), for the boot's record.
  let published: Record<string, string> | undefined;
  const recorder = wireRecorder(options, () => published);
  return {
    ...wireCommon(options),
    recorder,
    hostStore: () => readHostStore({ daemonJson: () => hostDaemonConfig.read(), engineVersion: dockerVersion }),
    ...(options.startRefresh ? { startRefresh: options.startRefresh } : {}),
    bootDeps: (settings, cloud) => {
      const host = wireHost(options, settings.effective.labels, dockerVersion);
      const report = createReporter({ ...host.reporterDeps, onPublished: (labels) => (published = labels) });
      return {
        cloud,
        storage: host.storage,
        daemonConfig: host.daemonConfig,
        docker: options.docker,
        engine: host.engine,
        containerd,
        dataRoot: {
          checkLayout: (volumeRoot) => checkVolumeLayout(volumeRoot),
          clean: (dataRoot, { kind, imageStore }) =>
            prepareDataRoot(dataRoot, { kind, log, ...(imageStore ? { imageStore } : {}) }),
          cleanContainerdRoot: (root) => prepareContainerdRoot(root, { dropMachineState: true, log }),
        },
        dockerVersion: host.dockerVersion,
        report,
        preflight: host.preflight,
        fill: (mountPoint) => readFilesystemFill(mountPoint),
        prewarm: (target) =>
          beginPrewarmAtBoot(target, prewarmSettingsFrom(settings.effective), {
            reader: fioReader(options),
            initializationStatus: (volumeId) => cloud.initializationStatus(volumeId),
            tagVolume: (volumeId, tags) => cloud.tagVolume(volumeId, tags),
            clock: cloud.clock,
            report,
            stateDir: options.config.paths.stateDir,
            log,
            recorder,
            ...(options.startPrewarm ? { startBackground: options.startPrewarm } : {}),
          }),
        log,
      };
    },
  };
}

/** The pre-warm's reads: fio on this host. */
function fioReader(options: WiringOptions): PrewarmReader {
  return createFioReader({ log: options.log, ...(options.fio ? { fio: options.fio } : {}) });
}

/** Builds everything `runPrewarm()` needs. */
export function wirePrewarm(options: WiringOptions): PrewarmCommandDeps {
  return {
    ...wireCommon(options),
    recorder: wireRecorder(options),
    prewarmHost: (settings) => {
      const host = wireHost(options, settings.effective.labels);
      return { storage: host.storage, report: createReporter(host.reporterDeps), reader: fioReader(options) };
    },
  };
}

/** Builds everything `runRelease()` needs. */
export function wireRelease(options: WiringOptions): ReleaseCommandDeps {
  const { log, config } = options;
  const { metadata, ...common } = wireCommon(options);
  return {
    ...common,
    recorder: wireRecorder(options),
    releaseDeps: (settings, cloud) => {
      const host = wireHost(options, settings.effective.labels);
      return {
        cloud,
        storage: host.storage,
        mounts: {
          list: (device, mountPoint) => mountPointsOf(device, mountPoint),
          sync: (mountPoint) => syncFilesystem(mountPoint, { log }),
        },
        daemonConfig: host.daemonConfig,
        docker: options.docker,
        engine: host.engine,
        withdrawLabels: createLabelWithdrawer(host.reporterDeps),
        containerd: wireContainerd(options),
        log,
        ...(options.pollMs ? { pollMs: options.pollMs } : {}),
        spotInstanceAction: (call) => readSpotInstanceAction(metadata, call),
        imdsRequestSeconds: config.timeouts.imdsRequestSeconds,
        ...(options.rebootQueued ? { rebootQueued: options.rebootQueued } : {}),
      };
    },
  };
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
  };
}

/** Builds everything `runRefresh()` needs: EC2, the docker API's image list, `docker pull`. */
export function wireRefresh(options: WiringOptions): RefreshCommandDeps {
  const { config, log } = options;
  const { metadata: _metadata, ...common } = wireCommon(options);
  const recorder = wireRecorder(options);
  return {
    ...common,
    engine: createDockerEngine({ host: config.paths.dockerHost, log }),
    puller: createImagePuller({ host: config.paths.dockerHost, log }),
    writeMetrics: (state) => recorder.refreshStateWritten(state),
  };
}

/**
 * Builds everything `runPrune()` needs: the boot's record (which volume is mounted where), EC2 of
 * the instance's region, statfs, and the host's docker API.
 */
export function wirePrune(options: WiringOptions): PruneDeps {
  const { config, log } = options;
  const common = wireCommon(options);
  let cloud: CloudVolumes | undefined;
  const cloudNow = async () => (cloud ??= common.cloudFor(config.region ?? (await common.identify()).region));
  return {
    lastBoot: async () => (await readBootRecord(config.paths.stateDir)).record?.result,
    cloud: {
      describeVolume: async (volumeId, call) => (await cloudNow()).describeVolume(volumeId, call),
      findSnapshots: async (tags, call) => (await cloudNow()).findSnapshots(tags, call),
    },
    fill: (mountPoint) => readFilesystemFill(mountPoint),
    docker: createDockerEngine({ host: config.paths.dockerHost, log }),
    prewarm: async () => {
      const { state, running } = await prewarmStatus(config.paths.stateDir);
      return { phase: state?.phase, running };
    },
    log,
  };
}
