/**
 * The host's adapters, as src/cli/wiring.ts builds them (or a lab host's, or the port fakes of
 * the unit tests): no settings and no agent code. Each use case's `run<X>()` resolves its settings
 * and composes its own parts (the reporter's labels, the preflight, the pre-warm) from these.
 */
import type { DaemonJson } from "../docker/daemon-json.ts";
import type { HostStore } from "../docker/image-store.ts";
import type { DockerdCommand } from "../docker/dockerd-flags.ts";
import type { LabelModeSetting } from "../docker/labels.ts";
import type { Logger } from "../log.ts";
import type { ReadinessState } from "../tags.ts";
import type { DataRootPorts } from "./boot/activation-marker.ts";
import type { BootReport, OutcomeRecorder } from "./outcomes.ts";
import type {
  CloudVolumes,
  ContainerdRoot,
  DaemonConfig,
  DockerEngine,
  DockerImages,
  DockerService,
  FilesystemFill,
  HostStorage,
  Identity,
  ImagePuller,
  LabelWithdrawer,
  MountTable,
  PrewarmFromMount,
  PrewarmReader,
  ReleaseDaemonConfig,
  SpotInstanceAction,
} from "./ports.ts";

/** The readiness labels of a run, under its prefix and mode (src/docker/readiness-labels.ts). */
export interface ReadinessLabels {
  /** Publishes and reads back; throws when they did not take. */
  report(state: ReadinessState, details: Record<string, string>): Promise<void>;
  withdraw: LabelWithdrawer;
}

export interface LabelTarget {
  prefix: string;
  mode: LabelModeSetting;
  /** Told the labels each report published (the boot's record keeps the last). */
  onPublished?: (labels: Record<string, string>) => void;
}

/** What a host offers every use case: EC2, IMDS, its disks, docker, its records. */
export interface HostAdapters {
  log: Logger;
  /** The instance (IMDS, its tags from EC2 when IMDS serves none); `fresh`: tags read again. */
  identify(options?: { fresh?: boolean }): Promise<Identity>;
  /** EC2's LaunchTime of the instance (its DescribeInstances, shared with the boot's own). */
  launchTime?(identity: Identity): Promise<string | undefined>;
  /** This boot of the machine (/proc/sys/kernel/random/boot_id). */
  bootId?: string;
  /** EC2 in a region. */
  cloudFor(region: string): CloudVolumes;
  storage: HostStorage;
  mounts: MountTable;
  /** daemon.json, changed only in the agent's keys. */
  daemonConfig: DaemonConfig & ReleaseDaemonConfig & { read(): Promise<DaemonJson> };
  /**
   * docker's data-root without the agent (its recorded original, src/docker/original-data-root.ts, else the host's
   * default): what a release or a degraded boot puts back; undefined: docker's default.
   */
  dataRootToRestore(): Promise<string | undefined>;
  /** undefined when docker is left to systemd ordering (config docker.control = none). */
  docker: DockerService | undefined;
  engine: DockerEngine & { waitUntilReady(timeoutMs: number): Promise<void> };
  /** The docker API's images and the containers that use them: what a prune reads and removes. */
  images: DockerImages;
  /** The readiness labels under a prefix and mode. */
  labels(target: LabelTarget): ReadinessLabels;
  containerd?: ContainerdRoot;
  dataRoot: DataRootPorts;
  /** The installed dockerd's version (read once per run). */
  dockerVersion(): Promise<string | undefined>;
  /** dockerd's effective command line (read once per run). */
  dockerdCommand(): Promise<DockerdCommand>;
  /** The host's image store and engine version; absent: not observed (graphdriver). */
  hostStore?(): Promise<HostStore>;
  fill(mountPoint: string): Promise<FilesystemFill | undefined>;
  /** The pre-warm's reads (fio). */
  reader: PrewarmReader;
  puller: ImagePuller;
  /** Leaves each outcome for `status` and the metrics; absent: nothing is recorded. */
  recorder?: OutcomeRecorder;
  /** The last boot's result as its record holds it (src/status/records.ts); undefined when none is recorded. */
  lastBoot(): Promise<BootReport | undefined>;
  /** systemd's `STATUS=` under a unit that takes notifications (src/host/systemd-notify.ts); absent: none. */
  serviceStatus?(text: string): void;
  /** Starts the background pre-warm run; absent: a long initialization runs inline. */
  startPrewarm?(): Promise<void>;
  /** The pre-warm run begun at the mount, outliving the boot's first phase (a unit of its own); absent: none. */
  prewarmFromMount?: PrewarmFromMount;
  /** Starts the background refresh after `ready` (config refresh.enabled); absent: none. */
  startRefresh?(): Promise<void>;
  /** The spot interruption notice (IMDS); absent: not read. */
  spotInstanceAction?: SpotInstanceAction;
  /** Whether systemd is rebooting; absent: not asked. */
  rebootQueued?(): Promise<boolean>;
  /** EC2 polling interval (ms) while waiting for a state; absent: the adapter's default. */
  pollMs?: number;
}
