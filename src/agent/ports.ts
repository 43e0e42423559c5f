/**
 * The agent's view of the outside world: one small interface per external system. Real
 * implementations live in src/aws, src/host and src/docker and are built only in
 * src/cli/wiring.ts (for the CLI's commands and the lab); the planner never sees them (it
 * takes observed state), and apply() calls them.
 */

/** Who this instance is (IMDS), with its tags (IMDS, or DescribeInstances when IMDS tags are off). */
export interface Identity {
  instanceId: string;
  region: string;
  availabilityZone: string;
  tags: Record<string, string>;
  tagsSource: "imds" | "ec2";
  /** IMDS `instance-type` (`g4dn.8xlarge`); absent when IMDS did not serve one. */
  instanceType?: string;
}

export type VolumeState = "creating" | "available" | "in-use" | "deleting" | "deleted" | "error";
export type AttachmentState = "attaching" | "attached" | "detaching" | "detached" | "busy";

/** A volume as the agent needs to see it. */
export interface VolumeInfo {
  volumeId: string;
  availabilityZone: string;
  state: VolumeState;
  sizeGiB: number;
  snapshotId?: string;
  createTime?: Date;
  tags: Record<string, string>;
  /** The attachment (EC2 volumes here are never multi-attach). */
  attachment?: { instanceId: string; device: string; state: AttachmentState };
  /**
   * EBS volume type (`gp3`, `gp2`, `io2`, …), provisioned IOPS and throughput, as EC2 describes them: what the volume
   * costs.
   */
  volumeType?: string;
  iops?: number;
  throughputMiBps?: number;
  /**
   * Whether EBS encrypts it (config workspace.requireEncrypted refuses a workspace volume that is not), and with which
   * KMS key.
   */
  encrypted?: boolean;
  kmsKeyId?: string;
}

/**
 * What every volume the agent creates gets besides its own tags (config `volumes`): encryption,
 * gp3 performance and the operator's tags, as Karpenter's blockDeviceMappings and tags.
 */
export interface VolumeCreation {
  /** Ask for Encrypted=true; false asks nothing (the snapshot's or the account's default decides). */
  encrypted: boolean;
  kmsKeyId?: string;
  iops?: number;
  throughputMiBps?: number;
  /** The operator's tags (never in the agent's ebs-cache: namespace: the config refuses those). */
  tags: Record<string, string>;
}

/** A snapshot as the agent needs to see it. */
export interface SnapshotInfo {
  snapshotId: string;
  state: "pending" | "completed" | "error" | "recoverable" | "recovering";
  startTime?: Date;
  volumeSizeGiB: number;
  tags: Record<string, string>;
}

/** The instance as EC2 describes it, from one DescribeInstances. */
export interface InstanceInfo {
  instanceId: string;
  /** pending, running, stopping, stopped, shutting-down, terminated. */
  state: string;
  tags: Record<string, string>;
  /** EBS volumes mapped to it other than its root device, attaching or attached. */
  volumes: Array<{ volumeId: string; device: string; status: string }>;
  /**
   * EC2's LaunchTime (ISO 8601): the time the instance was last launched or started. A stop and
   * start changes it, a reboot does not: it names one activation (workspace-record.ts).
   */
  launchTime?: string;
  /**
   * EC2's StateTransitionReason: on a stopped instance `User initiated (2026-01-02 03:04:05 GMT)`
   * names when the stop was asked (src/agent/pool/stopped.ts reads it); empty while it runs.
   */
  stateTransitionReason?: string;
}

/**
 * Cancellation: systemd's SIGTERM (a stop, or TimeoutStartSec) aborts the signal, and the call in
 * flight stops (the HTTP request, a wait for a device, a poll).
 */
export interface Cancellable {
  signal?: AbortSignal;
}

/** createVolume's options: besides the stop, who is told the volume's state while it is awaited. */
export interface CreateOptions extends Cancellable {
  /** Called after each look at the volume still being created (undefined: not visible yet). */
  onWait?: (volume: VolumeInfo | undefined) => void;
}

/** What a query for volumes filters on, server-side. */
export interface VolumeQuery {
  /** Only these volumes (DescribeVolumes by id, with the filters below applied too). */
  volumeIds?: string[];
  /** Every tag must match (value "*" = key present). */
  tags: Record<string, string>;
  availabilityZone?: string;
  status?: VolumeState[];
  attachedTo?: string;
}

/** The result of trying to claim (attach) a volume. */
export type ClaimOutcome =
  | { kind: "claimed" }
  /** Someone else holds it (VolumeInUse attached elsewhere, or IncorrectState): try the next. */
  | { kind: "taken"; reason: string };

/** What the caller of claimVolume knows. */
export interface ClaimOptions extends Cancellable {
  /** Created by this process a moment ago: NotFound is EC2's eventual consistency, retried for a while. */
  justCreated?: boolean;
  /**
   * Not attached to this instance before this call (a listed candidate, the instance holding no
   * managed volume): a refusal at the first attempt is another instance's claim, no describe needed.
   */
  notHeldHere?: boolean;
}

/**
 * EC2's clock, as EC2's own answers show it (src/aws/cloud-clock.ts): every time the agent
 * writes to EC2 (claimed-at, released-at, expires-at, initialized, last-error-at) or compares
 * with a time EC2 wrote (expires-at, claimed-at, a create time, a stop time) is reckoned in it,
 * never in the host's, whose clock may be days off. Durations the host measures itself
 * (timeouts, progress rates) stay on the host's clock.
 */
export interface CloudClock {
  /**
   * EC2's time now: its last answer's time plus what has elapsed since on the host's monotonic
   * clock. Throws CloudTimeUnknownError (src/aws/errors.ts) while no answer of EC2 has been seen:
   * a use case makes its first EC2 call before it asks.
   */
  now(): Date;
  /** How far EC2's clock is ahead of the host's (ms; negative: behind); undefined before EC2's first answer. */
  offsetMs(): number | undefined;
}

/** EC2, in the agent's words. */
export interface CloudVolumes {
  /** EC2's time, as this connection's answers show it. */
  readonly clock: CloudClock;
  /**
   * Server-side filtered DescribeVolumes. With `firstPage`, one call that returns at most that
   * many (a bounded page of candidates: the boot's cost does not grow with the pool); without,
   * every page (gc, pool, release).
   */
  findVolumes(query: VolumeQuery, options?: Cancellable & { firstPage?: number }): Promise<VolumeInfo[]>;
  describeVolume(volumeId: string, options?: Cancellable): Promise<VolumeInfo | undefined>;
  /** DescribeInstances of one instance: tags, state, its EBS volumes. */
  describeInstance(instanceId: string, options?: Cancellable & { fresh?: boolean }): Promise<InstanceInfo>;
  /** DescribeInstances of several instances (every page); one that EC2 no longer knows is left out. */
  describeInstances(instanceIds: readonly string[], options?: Cancellable): Promise<InstanceInfo[]>;
  /**
   * Every snapshot of this account carrying all the tags, in any state (the keeper orders volumes by their snapshot's
   * age). The pool's current one is currentSnapshot(findSnapshots(…)) of src/agent/volume-rules.ts, the one rule
   * every use case applies (the newest usable by generation: completed, not marked unverified).
   */
  findSnapshots(tags: Record<string, string>, options?: Cancellable): Promise<SnapshotInfo[]>;
  /** Creates a volume and waits until it is available. */
  createVolume(
    spec: {
      availabilityZone: string;
      snapshotId?: string;
      sizeGiB?: number;
      volumeType: string;
      tags: Record<string, string>;
      initializationRateMiBps?: number;
      /**
       * Config `volumes` (encryption, KMS key, IOPS, throughput, the operator's tags), given by the
       * caller so that its token covers them: the request is whole before it reaches EC2, and a
       * dry run shows it as sent. Absent: EC2's defaults and the spec's tags only.
       */
      creation?: VolumeCreation;
      /**
       * Idempotency token, sent as given: the same token makes no second volume (an SDK retry, a
       * rerun of the same boot). It must cover every field above (EC2 answers a repeated token
       * with the volume it made first).
       */
      clientToken?: string;
    },
    options?: CreateOptions,
  ): Promise<VolumeInfo>;
  /**
   * AttachVolume as a lock: `claimed` when this instance now holds it (also when the call failed
   * with a 5xx or VolumeInUse but the volume is in fact attached here), `taken` otherwise.
   */
  claimVolume(volumeId: string, instanceId: string, device: string, options?: ClaimOptions): Promise<ClaimOutcome>;
  /** Polls the attachment itself until it reaches `state` for this instance, or throws at the deadline. */
  waitForAttachment(
    volumeId: string,
    instanceId: string,
    state: "attached" | "detached",
    timeoutMs: number,
    options?: Cancellable,
  ): Promise<void>;
  /** DetachVolume, never forced. */
  detachVolume(volumeId: string, instanceId: string, options?: Cancellable): Promise<void>;
  /** DeleteVolume (EC2 refuses unless the volume is available); `gone` when it no longer exists. */
  deleteVolume(volumeId: string): Promise<"deleted" | "gone">;
  tagVolume(volumeId: string, tags: Record<string, string>, options?: Cancellable): Promise<void>;
  /**
   * DeleteTags. Keys as a list delete the tags whatever their values; as a record, each tag is
   * deleted only while it still has that value (EC2's conditional delete), so a tag another
   * instance has rewritten in the meantime (`claimed-by`) stays.
   */
  untagVolume(volumeId: string, keys: string[] | Record<string, string>, options?: Cancellable): Promise<void>;
  /**
   * DescribeVolumeStatus's initialization details of a volume made from a snapshot: `type`
   * (`default` lazy loading, `provisioned-rate` for VolumeInitializationRate, `volume-copy`),
   * progress 0-100 and EC2's estimate of the seconds left; undefined when EC2 gives none.
   */
  initializationStatus(volumeId: string): Promise<{ type: string; progress: number; etaSeconds?: number } | undefined>;
}

/** What a device carries, from a signature probe (blkid / wipefs -n). */
export type DeviceContents =
  | { kind: "blank" }
  | { kind: "filesystem"; type: string; label?: string; uuid?: string }
  /** A signature that is not a filesystem (partition table, RAID member, LVM, …). */
  | { kind: "other"; signature: string };

/**
 * What identify() positively found on a volume's device. `cache`: the agent's own filesystem
 * (`fresh` when the agent formatted it and docker has not run on it yet); `blank`: a volume the
 * agent created, to be formatted. Anything else is refused (ForeignVolumeError), never returned.
 */
export type CacheIdentity =
  /** `dataBytes`: the filesystem's data size from its superblock, when read. */
  { kind: "cache"; fresh: boolean; dataBytes?: number } | { kind: "blank" };

/** Block devices and filesystems of this host. */
export interface HostStorage {
  /**
   * Waits (inotify on the by-id folder, not a sleep loop) for the volume's device, then confirms
   * its identity from the NVMe serial before returning the device path (`/dev/nvme1n1`).
   */
  waitForDevice(volumeId: string, timeoutMs: number, options?: Cancellable): Promise<string>;
  /** The verified device of a volume attached now, or undefined. */
  findDevice(volumeId: string): Promise<string | undefined>;
  /** Probes signatures; throws when the probe itself fails (then nothing may be formatted). */
  probe(device: string): Promise<DeviceContents>;
  /**
   * Identifies the agent's own cache filesystem without writing a byte (signatures, then a
   * read-only look at the layout that replays no log). Throws ForeignVolumeError for anything
   * else, a failed probe included.
   */
  identify(volume: { volumeId: string; createdByAgent: boolean }, device: string): Promise<CacheIdentity>;
  /** mkfs.xfs with ftype=1 and the label. Callers must have probed `blank` first. */
  format(device: string, label: string): Promise<void>;
  /** Where the device is mounted now, if anywhere. */
  mountPointOf(device: string): Promise<string | undefined>;
  /** Mounts read-write; refuses (ForeignVolumeError) a device without the agent's XFS label. */
  mount(device: string, mountPoint: string): Promise<void>;
  unmount(mountPoint: string): Promise<void>;
  /**
   * Where the device's filesystem is still mounted in any mount namespace of the host, not only
   * the agent's (src/host/mount-namespaces.ts): asked after the unmount, before a detach.
   */
  liveness(device: string): Promise<FilesystemLiveness>;
  /** Grows the filesystem to the device's size; true when it grew. Refuses like mount(). */
  grow(mountPoint: string): Promise<boolean>;
}

/**
 * What the agent keeps beside the data-root on a mounted volume (src/host/volume-marker.ts): the
 * activation marker (src/agent/boot/activation-marker.ts decides what it means) and the data-root
 * folder itself. Reached without following a link: a folder linked to a host folder would have
 * the agent write there.
 */
export interface VolumeMarker {
  /** The marker's text (at most 1 KiB); undefined when there is none. */
  readMarker(volumeRoot: string): Promise<string | undefined>;
  /** Replaces the marker atomically, in the agent's folder on the volume (created when missing). */
  writeMarker(volumeRoot: string, text: string): Promise<void>;
  /** Whether docker has initialized the data-root (its `image/` folder is there). */
  dataRootInitialized(dataRoot: string): Promise<boolean>;
  /** Creates the empty data-root folder (0711), for docker to fill. */
  createDataRoot(dataRoot: string): Promise<void>;
}

/** dockerd's daemon.json, changed only in the keys the agent owns. */
export interface DaemonConfig {
  /** The current data-root (undefined = docker's default). Throws when the file does not parse. */
  dataRoot(): Promise<string | undefined>;
  /** Sets data-root (undefined removes the key), keeping every other key; atomic, with a backup. */
  setDataRoot(dataRoot: string | undefined): Promise<void>;
  /** Replaces the engine labels under the agent's prefix, keeping other labels. */
  setEngineLabels(prefix: string, labels: Record<string, string>): Promise<void>;
  /**
   * Keeps dockerd on the image store the host is configured with: for graphdriver (pool volumes
   * hold images in that layout) docker 29+'s default is turned off; containerd is left as
   * daemon.json asks for it.
   */
  setImageStore(store: "graphdriver" | "containerd", options: { engineVersion?: string }): Promise<void>;
  /** Restores the file as this process first found it (before its first change). */
  restoreBackup(): Promise<void>;
}

/** docker.service (systemd on a host, the private dockerd in the lab). */
export interface DockerService {
  start(): Promise<void>;
  stop(): Promise<void>;
  restart(): Promise<void>;
  /** SIGHUP: daemon.json labels apply without a restart. */
  reload(): Promise<void>;
  isActive(): Promise<boolean>;
}

/** The mount table and syncfs of this host (src/host/mount.ts). */
export interface MountTable {
  /** Every mount of the device's filesystem, plus `mountPoint` when mounted. */
  list(device: string | undefined, mountPoint: string): Promise<string[]>;
  sync(mountPoint: string): Promise<void>;
}

/** A process, as a refusal names it. */
export interface NamespaceProcess {
  pid: number;
  command: string;
}

/** A mount namespace in which a filesystem is still mounted: its processes and the mount points there. */
export interface NamespaceHolder {
  /** The namespace's identity (`mnt:[4026531841]`). */
  ns: string;
  processes: NamespaceProcess[];
  mountPoints: string[];
}

/** Where a filesystem is still live: the namespaces that mount it, and whether the kernel still holds it. */
export interface FilesystemLiveness {
  holders: NamespaceHolder[];
  /** /sys/fs/<type>/<device> exists: mounted somewhere, perhaps in a namespace no process is in. */
  superblock: boolean;
}

/** daemon.json as a release reads and resets it: its data-root and its `labels` entries (`key=value`, all of them). */
export type ReleaseDaemonConfig = Pick<DaemonConfig, "dataRoot" | "setDataRoot"> & {
  engineLabels(): Promise<string[]>;
};

/** What a release asks the docker API: only on which root docker runs (DockerEngine's info answers it). */
export interface DockerRootQuery {
  info(): Promise<{ dockerRootDir: string }>;
}

/**
 * The spot interruption notice's action (src/aws/spot-notice.ts): stop, hibernate, terminate; undefined when there is
 * none. One request, given up after `timeoutMs`.
 */
export type SpotInstanceAction = (call: { timeoutMs: number }) => Promise<string | undefined>;

/**
 * Removes the agent's readiness labels (src/docker/readiness-labels.ts createLabelWithdrawer); node labels only
 * with `node`.
 */
export type LabelWithdrawer = (options: { node: boolean }) => Promise<void>;

/** What the agent asks of the docker API. */
export interface DockerEngine {
  info(): Promise<{
    dockerRootDir: string;
    driver: string;
    imageStore: "graphdriver" | "containerd";
    swarm: { nodeId: string; controlAvailable: boolean; state: string };
    labels: string[];
  }>;
  /** `repo:tag` of every image. */
  images(): Promise<string[]>;
  /** Node labels through a manager's API (this node when it is a manager). */
  setNodeLabels(nodeId: string, add: Record<string, string>, remove: string[]): Promise<void>;
}

// ---- pre-warm ----

/** The device to read and where its filesystem is mounted. */
export interface ReadTarget {
  device: string;
  mountPoint: string;
}

/** The sample's bounds (config `prewarm.check`): random reads over the allocated data. */
export interface SampleBounds {
  /** Upper bound of the sample (fio --runtime). */
  seconds: number;
  /** Random reads in the sample. */
  reads: number;
  ioDepth: number;
  blockBytes: number;
}

/** The figures of a sample (fio's random reads over the allocated data). */
export interface CheckFigures {
  reads: number;
  seconds: number;
  iops: number;
  mibps: number;
  latencyMs: { mean?: number; p50?: number; p90?: number; p99?: number; max?: number };
}

/** Progress of a long read, as the reader reports it. */
export interface ReadProgress {
  /** Bytes of the whole job read (a resumed run starts above 0). */
  doneBytes: number;
  totalBytes: number;
  /** Every byte of the device below this offset has been read: the resume point. */
  cursor: number;
  /** Bytes read by this run. */
  runBytes: number;
}

/**
 * How the background run's reads give way to others' (config `prewarm.giveWay`): fio reads for
 * `runMs`, is stopped, and stays stopped while others read or write and `settleMs` after
 * (src/host/read-pace.ts decides).
 */
export interface GiveWaySettings {
  /** How long fio reads between two looks at the device. */
  runMs: number;
  /** How long one look lasts: while others read, fio stays stopped and the device is looked at again. */
  pauseMs: number;
  /** Stopped this long in a row, fio reads one `runMs` anyway. */
  maxPausedMs: number;
  /** Once stopped for others, fio stays stopped until they have been quiet this long in a row. */
  settleMs: number;
  /** Others' reads and writes per second up to which the device counts as quiet (0: any request of others is not). */
  quietIops: number;
}

export interface InitializeOptions {
  fromOffset: number;
  ioDepth: number;
  maxIoBytes: number;
  /**
   * files: the images the node is about to run, most wanted first: their files (the volume's
   * need list) are read before everything else. Absent or empty: device order only.
   */
  images?: readonly string[];
  /**
   * The background run's reads (set while services may be starting): the wanted images' files at
   * the fetch depth (src/host/read-phases.ts), stopped while others read the device only where
   * their queue holds others up (read-pace.ts, holdsOthersUp); everything after them at this depth,
   * stopped while others read the device (read-pace.ts). Absent: `ioDepth` throughout, never
   * stopped (inline, at boot).
   */
  yieldDepth?: number;
  /** How the reads at `yieldDepth` give way (config `prewarm.giveWay`); absent: read-pace.ts's defaults. */
  giveWay?: GiveWaySettings;
  onProgress(progress: ReadProgress): void;
  signal?: AbortSignal;
  /**
   * files: the wanted files' reads begun before this call (PrewarmReader.beginWanted): taken over when they read what
   * this call would read first (same device, images, read size and depth), else stopped and read afresh.
   */
  begun?: BegunReads;
}

/** What beginWanted reads: the wanted phase of an initialization yet to be decided. */
export type WantedReadOptions = Pick<
  InitializeOptions,
  "ioDepth" | "maxIoBytes" | "yieldDepth" | "giveWay" | "images" | "signal"
>;

/** Reads begun ahead of their run (PrewarmReader.beginWanted); opaque but for stop(). */
export interface BegunReads {
  /** Ends the reads (when no initialization took them over) and resolves once none is in flight. */
  stop(): Promise<void>;
}

export interface InitializeResult {
  totalBytes: number;
  readBytes: number;
}

/** The pre-warm's reads of a cache volume (fio on a host: src/host/volume-reads.ts). */
export interface PrewarmReader {
  /** Bytes of data the filesystem holds (what `files` reads). */
  allocatedBytes(target: ReadTarget): Promise<number>;
  check(target: ReadTarget, bounds: SampleBounds): Promise<CheckFigures>;
  initialize(target: ReadTarget, mode: "files" | "device", options: InitializeOptions): Promise<InitializeResult>;
  /**
   * Begins the files initialization's first reads (the need list's files of `options.images`) before the run is
   * decided: the run at the mount reads while it asks EC2 (agent/prewarm/read-first.ts). Only reads; absent: the
   * reads begin with initialize().
   */
  beginWanted?(target: ReadTarget, options: WantedReadOptions): BegunReads;
}

/** EC2's view of a volume's initialization (DescribeVolumeStatus InitializationStatusDetails). */
export interface InitializationStatus {
  /** `default` (lazy loading), `provisioned-rate` (VolumeInitializationRate), `volume-copy`. */
  type: string;
  /** 0-100. */
  progress: number;
  etaSeconds?: number;
}

// ---- pool keeper ----

/** What `pool fill` asks of EC2 (src/agent/keeper/): the pool's volumes and snapshots, creates, tags and deletes. */
export type KeeperCloud = Pick<
  CloudVolumes,
  | "clock"
  | "findVolumes"
  | "describeVolume"
  | "findSnapshots"
  | "createVolume"
  | "tagVolume"
  | "deleteVolume"
  | "initializationStatus"
  | "describeInstance"
  | "describeInstances"
  | "detachVolume"
  | "waitForAttachment"
  | "untagVolume"
>;

// ---- what operators read ----

/** Which run of the boot: `first` (`boot --no-docker`), `second` (`boot --no-claim`), `single` (both in one run). */
export type BootPhase = "first" | "second" | "single";

// ---- the containerd image store ----

/**
 * containerd's config.toml root and containerd.service (src/docker/containerd-store.ts): with
 * the containerd image store the images are under containerd's root, which must be on the
 * cache volume beside docker's data-root.
 */
export interface ContainerdRoot {
  /** The root containerd uses (config.toml's, or its default). */
  root(): Promise<string>;
  /**
   * Sets config.toml's top-level root (undefined: removed); true when the file changed, and containerd must restart.
   */
  setRoot(root: string | undefined): Promise<boolean>;
  /** config.toml as the agent's first change found it. */
  restoreBackup(): Promise<void>;
  /** Creates the root on the volume (and drops containerd's machine-local state from it with `dropMachineState`). */
  prepareRoot(root: string, options: { dropMachineState: boolean }): Promise<void>;
  /** containerd.service; undefined when the agent does not control services (docker.control none). */
  service: DockerService | undefined;
}

// ---- refresh ----

/** Pulls images through the host's dockerd (src/docker/pull.ts), with docker's own registry credentials. */
export interface ImagePuller {
  /**
   * Pulls one image. Resolves with its size when docker tells it; throws when the pull fails,
   * outlasts `timeoutMs`, or is aborted (the pull in flight is stopped).
   */
  pull(image: string, options: { timeoutMs: number; signal?: AbortSignal }): Promise<{ bytes?: number }>;
}

/** What the refresh asks of EC2 (src/agent/refresh/): the attached volume, its pool's snapshots, a tag. */
export type RefreshCloud = Pick<CloudVolumes, "findVolumes" | "findSnapshots" | "describeVolume" | "tagVolume">;
// ---- prune (src/agent/prune/) ----

/**
 * A filesystem's fill from statfs(2): bytes as df counts them (blocks reserved for root are neither used nor
 * available), and inodes.
 */
export interface FilesystemFill {
  mountPoint: string;
  /** The mounted device (`/dev/nvme1n1`), from the mount table. */
  device: string;
  sizeBytes: number;
  usedBytes: number;
  availableBytes: number;
  /** used / (used + available), as df's Use% counts it. */
  usedRatio: number;
  inodes: number;
  freeInodes: number;
}

/** An image as the docker API lists it (`GET /images/json`). */
export interface ImageEntry {
  /** `sha256:…` */
  id: string;
  /** `repo:tag` references (none: a dangling image). */
  repoTags: string[];
  /** `repo@sha256:…` references. */
  repoDigests: string[];
  /** The image it was built on (classic builds only; pulled images have none). */
  parentId?: string;
  /** Seconds since the epoch. */
  created: number;
  sizeBytes: number;
  /** Bytes no other image shares (Size − SharedSize), when docker computed it. */
  uniqueBytes?: number;
}

/**
 * What the prune asks of the host's dockerd: its root, its images, the images its containers use, and removal without
 * force.
 */
export interface DockerImages {
  info(): Promise<{ dockerRootDir: string }>;
  imageEntries(): Promise<ImageEntry[]>;
  /** The image id of every container, running or stopped. */
  containerImageIds(): Promise<string[]>;
  /**
   * `DELETE /images/<reference>` without force: docker refuses an image a container uses. Returns what docker deleted
   * (image and layer ids).
   */
  removeImage(reference: string): Promise<{ untagged: string[]; deleted: string[] }>;
}

/**
 * What the snapshot builder asks of the EBS direct APIs (src/aws/ebs.ts): a snapshot written block by block, from
 * anywhere. Every answer is checked against the API before it is returned (src/aws/ebs-answers.ts), and every
 * failure is typed (src/aws/ebs-errors.ts).
 */
export interface SnapshotBlockWriter {
  /**
   * StartSnapshot: a `pending` snapshot of 512 KiB blocks; the same clientToken again returns the same snapshot
   * (pending, or by now `completed` or `error`).
   */
  start(request: {
    volumeSizeGiB: number;
    parentSnapshotId?: string;
    clientToken: string;
    description: string;
    tags: Record<string, string>;
    encrypted: boolean;
    kmsKeyArn?: string;
    timeoutMinutes: number;
  }): Promise<{ snapshotId: string; status: "pending" | "completed" | "error" }>;
  /** PutSnapshotBlock with the block's base64 SHA-256 (EBS checks it). */
  putBlock(snapshotId: string, index: number, data: Uint8Array, sha256: string): Promise<void>;
  /** CompleteSnapshot with the count of blocks written and their LINEAR aggregate checksum. */
  complete(snapshotId: string, changedBlocks: number, aggregateSha256: string): Promise<string>;
}

/**
 * What `snapshot upload` asks of EC2 about a snapshot it made (src/aws/uploaded-snapshots.ts). StartSnapshot tags
 * every snapshot `ebs-cache:unverified` (src/tags.ts), which keeps it from being any pool's current generation
 * until the upload has read it back against the image.
 */
export interface UploadedSnapshots {
  /** Removes `ebs-cache:unverified` (DeleteTags; a snapshot without it stays as it is). */
  markVerified(snapshotId: string): Promise<void>;
  /** Deletes a snapshot found not to hold the image (DeleteSnapshot; one already gone counts as deleted). */
  discard(snapshotId: string): Promise<void>;
}

/**
 * What EBS says of a completed snapshot's blocks: which blocks hold data (ListSnapshotBlocks, cheap: one call per
 * 10,000 blocks) and a block's bytes (GetSnapshotBlock): a parent's content when its manifest is not at hand, and
 * the read-back check of a snapshot just uploaded.
 */
export interface SnapshotBlockReader {
  /** The blocks written (the snapshot's own and its parents'), with the tokens GetSnapshotBlock wants, and its size. */
  listBlocks(snapshotId: string): Promise<{ volumeSizeGiB: number; blocks: Map<number, string> }>;
  /** The block's bytes and their base64 SHA-256 (hashed here; a checksum EBS sends with them must agree). */
  getBlock(snapshotId: string, index: number, token: string): Promise<{ data: Uint8Array; sha256: string }>;
}

/**
 * The pre-warm run begun at the mount (`ebs-cache-agent prewarm --from-mount`): on a host the unit
 * ebs-cache-agent-prewarm.service, so that it outlives the first boot phase's oneshot (whose processes end with it).
 */
export interface PrewarmFromMount {
  /** Starts it without waiting for it (already running: nothing new). */
  start(): Promise<void>;
  /** Stops it and resolves once it has ended (its reads too); not running: nothing. */
  stop(): Promise<void>;
}
