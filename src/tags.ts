/**
 * The EC2 tags the agent reads and writes. Every volume the agent manages carries
 * `ebs-cache:managed=true`; the IAM policy (iam/) conditions attach/detach/delete on it, and
 * gc never touches a volume without it.
 */
export const TAG_PREFIX = "ebs-cache:";

export const VolumeTag = {
  managed: `${TAG_PREFIX}managed`,
  /** `pool` (generic, reusable by any instance) or `workspace` (tied to user/project/node). */
  kind: `${TAG_PREFIX}kind`,
  pool: `${TAG_PREFIX}pool`,
  /** Names the image set the volume's data-root was built from. */
  imageSet: `${TAG_PREFIX}image-set`,
  /** Comma-separated image references the volume is expected to hold (checked after boot). */
  images: `${TAG_PREFIX}images`,
  /** Set only on volumes the agent created blank: the only ones it may format. */
  createdBy: `${TAG_PREFIX}created-by`,
  claimedBy: `${TAG_PREFIX}claimed-by`,
  claimedAt: `${TAG_PREFIX}claimed-at`,
  releasedAt: `${TAG_PREFIX}released-at`,
  expiresAt: `${TAG_PREFIX}expires-at`,
  keep: `${TAG_PREFIX}keep`,
  initialized: `${TAG_PREFIX}initialized`,
  /** Why the last instance that claimed the volume gave it back (boot failed on it). */
  lastError: `${TAG_PREFIX}last-error`,
  /** When `last-error` was written (ISO 8601): the volume is no candidate for `claim.quarantineHours`. */
  lastErrorAt: `${TAG_PREFIX}last-error-at`,
  /** The workspace ids, one tag per label key the workspace was made for (see src/agent/workspace-ids.ts). */
  userId: `${TAG_PREFIX}user-id`,
  projectId: `${TAG_PREFIX}project-id`,
  nodeId: `${TAG_PREFIX}node-id`,
  walletId: `${TAG_PREFIX}wallet-id`,
  productName: `${TAG_PREFIX}product-name`,
  /**
   * The label keys a workspace volume was made for, comma-separated in a fixed order
   * (`user-id,project-id`): a volume matches an instance only for exactly these keys.
   */
  workspaceKeys: `${TAG_PREFIX}workspace-keys`,
  /**
   * The image store the volume's data-root was built with: `graphdriver` or `containerd`
   * (features.containerd-snapshotter). No tag: graphdriver (see src/docker/image-store.ts).
   */
  imageStore: `${TAG_PREFIX}image-store`,
  /** The docker engine version that built the volume's images (`dockerd --version`, e.g. 28.5.2). */
  engineVersion: `${TAG_PREFIX}engine-version`,
} as const;

export const VolumeKind = { pool: "pool", workspace: "workspace" } as const;
export type VolumeKind = (typeof VolumeKind)[keyof typeof VolumeKind];

/** The instance tags that may override settings; any other `ebs-cache:*` instance tag is ignored with a warning. */
export const InstanceTag = {
  enabled: `${TAG_PREFIX}enabled`,
  pool: `${TAG_PREFIX}pool`,
  keep: `${TAG_PREFIX}keep`,
  ttlHours: `${TAG_PREFIX}ttl-hours`,
} as const;
