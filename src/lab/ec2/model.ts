/**
 * The emulator's whole state as plain JSON-able data: what the state file holds, what
 * `GET /_lab/state` returns and what tests read through `snapshotState()`.
 */

/** Volume states; `error` is what EC2 shows when creation failed (here: the backend failed). */
export type VolumeState = "creating" | "available" | "in-use" | "deleting" | "error";
/**
 * `busy`: a (not forced) detach waits because the volume is still in use on the instance (EC2:
 * "If the volume is mounted … the volume can get stuck in the busy state while detaching");
 * it completes once the volume is unmounted, or with a forced detach.
 */
export type AttachmentState = "attaching" | "attached" | "detaching" | "busy";
export type SnapshotState = "pending" | "completed" | "error";
/**
 * EC2's instance states. `stopping` and `shutting-down` last while the instance's OS shuts down
 * (its systemd stop jobs run then: the agent's release asks which of the two it is).
 */
export type InstanceState = "pending" | "running" | "stopping" | "stopped" | "shutting-down" | "terminated";

/** The numeric codes EC2 pairs with instance state names (the low byte of `InstanceState.Code`). */
export const INSTANCE_STATE_CODE: Readonly<Record<InstanceState, number>> = {
  pending: 0,
  running: 16,
  "shutting-down": 32,
  terminated: 48,
  stopping: 64,
  stopped: 80,
};

export interface AttachmentRecord {
  instanceId: string;
  device: string;
  state: AttachmentState;
  attachTime: string;
  /** Tells this attachment from a later one of the same volume, so a stale timer does nothing. */
  token: number;
  /** Whether backend.attach was called for this attachment, so detaching must remove a device. */
  deviceUp?: boolean;
  /** Parked by the stuckAttach fault: stays `attaching` until the fault is lifted. */
  stuck?: boolean;
  /** Set when the backend failed to attach or detach; the attachment then stays where it was. */
  error?: string;
  /** A DetachVolume with Force=true was asked for: the detach does not wait for a busy device. */
  forced?: boolean;
  /**
   * EC2 deletes the volume when the instance terminates. AttachVolume always attaches with
   * false (as on EC2: only ModifyInstanceAttribute changes it); a test may set it in the model.
   */
  deleteOnTermination?: boolean;
}

export interface VolumeRecord {
  volumeId: string;
  /** Creation order: listing order and pagination position. */
  seq: number;
  sizeGiB: number;
  snapshotId: string | null;
  /** Size of the snapshot it was made from: what initialization has to fetch. */
  sourceSizeGiB: number | null;
  availabilityZone: string;
  state: VolumeState;
  createTime: string;
  volumeType: string;
  iops: number | null;
  throughput: number | null;
  encrypted: boolean;
  /** The KMS key's ARN when encrypted (absent in state written before the emulator knew keys). */
  kmsKeyId?: string | null;
  /** MiB/s given as VolumeInitializationRate (provisioned-rate initialization), else null. */
  initializationRate: number | null;
  tags: Record<string, string>;
  attachment: AttachmentRecord | null;
  /** How many DetachVolume calls with Force=true this volume got (the agent must never force). */
  forceDetachCount: number;
  /** Why the volume is in `error`, or the last backend failure. */
  error: string | null;
  /** The backend has made the image (a restart while `creating` does not make it again). */
  imageReady?: boolean;
}

export interface SnapshotRecord {
  snapshotId: string;
  seq: number;
  volumeId: string;
  volumeSize: number;
  state: SnapshotState;
  startTime: string;
  completionTime: string | null;
  description: string;
  tags: Record<string, string>;
  /** A snapshot of an encrypted volume is encrypted with its key (absent: not encrypted). */
  encrypted?: boolean;
  kmsKeyId?: string | null;
  error: string | null;
  /** The backend has copied the volume (a restart while `pending` does not copy it again). */
  imageReady?: boolean;
}

export interface InstanceRecord {
  instanceId: string;
  seq: number;
  reservationId: string;
  region: string;
  availabilityZone: string;
  tags: Record<string, string>;
  metadataTags: boolean;
  hostRoot: string;
  /** Absent: LAB_INSTANCE_TYPE (src/lab/types.ts). */
  instanceType?: string;
  state: InstanceState;
  launchTime: string;
  /**
   * EC2's StateTransitionReason: set when a stop or a termination is asked (`User initiated
   * (2026-01-02 03:04:05 GMT)`), empty again once the instance runs.
   */
  stateTransitionReason?: string;
  /** RunInstances' UserData as sent (base64), for the instance's cloud-init; absent for a registered instance. */
  userData?: string;
  /** RunInstances' ImageId; absent for a registered instance. */
  imageId?: string;
}

/**
 * The primary network interface RunInstances makes with each instance (device index 0): what its
 * `network-interface` TagSpecification tags. It goes with its instance (DeleteOnTermination).
 */
export interface NetworkInterfaceRecord {
  networkInterfaceId: string;
  seq: number;
  availabilityZone: string;
  instanceId: string;
  tags: Record<string, string>;
}

/** Things tests want to assert happened (or never happened) besides the current state. */
export interface LabEvent {
  at: string;
  kind:
    | "force-detach"
    | "backend-error"
    | "instance-terminated"
    | "instance-stopped"
    | "instance-started"
    | "apply-then-500"
    | "stuck-attach"
    | "stuck-create"
    | "detach-busy"
    | "idempotent-replay";
  volumeId?: string;
  snapshotId?: string;
  instanceId?: string;
  detail?: string;
}

/** A CreateVolume ClientToken seen before: what it made, and with which parameters. */
export interface ClientTokenRecord {
  volumeId: string;
  /** The request's parameters (all but ClientToken, Action, Version, DryRun), canonical JSON. */
  fingerprint: string;
  /** The volume as the first answer rendered it, answered again once the volume is gone. */
  response: Record<string, unknown>;
  at: string;
}

export interface Model {
  version: 1;
  /** The next sequence number to hand out (also the attachment tokens). */
  nextSeq: number;
  volumes: Record<string, VolumeRecord>;
  snapshots: Record<string, SnapshotRecord>;
  instances: Record<string, InstanceRecord>;
  events: LabEvent[];
  /** CreateVolume idempotency: ClientToken → what it made (absent in state files from before). */
  clientTokens?: Record<string, ClientTokenRecord>;
  /** The ENIs RunInstances made (absent in state files from before). */
  networkInterfaces?: Record<string, NetworkInterfaceRecord>;
}

/** A model with nothing in it. */
export function emptyModel(): Model {
  return {
    version: 1,
    nextSeq: 1,
    volumes: {},
    snapshots: {},
    instances: {},
    events: [],
    clientTokens: {},
    networkInterfaces: {},
  };
}

/** Checks that parsed JSON has the model's shape (enough to fail early on a foreign file). */
export function isModel(value: unknown): value is Model {
  if (typeof value !== "object" || value === null) return false;
  const m = value as Partial<Model>;
  return (
    m.version === 1 &&
    typeof m.nextSeq === "number" &&
    typeof m.volumes === "object" &&
    typeof m.snapshots === "object" &&
    typeof m.instances === "object" &&
    Array.isArray(m.events) &&
    (m.clientTokens === undefined || (typeof m.clientTokens === "object" && m.clientTokens !== null)) &&
    (m.networkInterfaces === undefined || (typeof m.networkInterfaces === "object" && m.networkInterfaces !== null))
  );
}
