/**
 * The names the agent reads and writes outside itself, side by side: the EC2 tags of volumes and
 * instances, and the docker labels it publishes. Every volume the agent manages carries
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
  /**
   * When the image set was built (ISO 8601, UTC): with the image set, the volume's generation
   * (src/agent/volume-rules.ts). Set on the snapshot by the golden build and the Packer
   * pool-volume flow; volumes made from a snapshot copy it.
   */
  builtAt: `${TAG_PREFIX}built-at`,
  /** Comma-separated image references the volume is expected to hold (checked after boot). */
  images: `${TAG_PREFIX}images`,
  /** Set only on volumes the agent created blank: the only ones it may format. */
  createdBy: `${TAG_PREFIX}created-by`,
  claimedBy: `${TAG_PREFIX}claimed-by`,
  claimedAt: `${TAG_PREFIX}claimed-at`,
  releasedAt: `${TAG_PREFIX}released-at`,
  expiresAt: `${TAG_PREFIX}expires-at`,
  /** `true`: gc never deletes the volume (a workspace volume whose instance asked keep, or a person's mark). */
  keep: `${TAG_PREFIX}keep`,
  /**
   * The instance whose claim wrote `keep` (src/agent/volume-intent.ts): only that instance takes
   * it back, when it no longer asks keep. A `keep` without it (a release's, a person's, one whose
   * instance died holding the volume) stays until a person removes it.
   */
  keepBy: `${TAG_PREFIX}keep-by`,
  /**
   * The TTL in hours the claiming instance asked for (config `ttlHours`, or its
   * `ebs-cache:ttl-hours` instance tag), written at the claim: gc gives a volume whose instance
   * died without a release this TTL, as the release would have.
   */
  ttlHours: `${TAG_PREFIX}ttl-hours`,
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
   * (features.containerd-snapshotter). No tag: graphdriver (see storeFit, src/agent/volume-rules.ts).
   */
  imageStore: `${TAG_PREFIX}image-store`,
  /** The docker engine version that built the volume's images (`dockerd --version`, e.g. 28.5.2). */
  engineVersion: `${TAG_PREFIX}engine-version`,
} as const;

/**
 * Tags only a pool snapshot carries (never copied to its volumes, so no volume's tag budget pays
 * for them).
 */
export const SnapshotTag = {
  /**
   * `true` on a snapshot whose content nobody has checked yet: `snapshot upload` starts every
   * snapshot with it (StartSnapshot's tags) and removes it only once it has read the snapshot back
   * against the image. A snapshot carrying it, whatever its value, is never a pool's current
   * generation (src/agent/volume-rules.ts `isUsableSnapshot`): not while its upload completes and
   * reads it back, not after a read-back that found it wrong or a kill before one. A snapshot
   * without it (Packer's pool-volume flow, an upload older than the tag) is taken as before.
   */
  unverified: `${TAG_PREFIX}unverified`,
} as const;

/**
 * The tags that say what a volume's data-root holds: a volume made from a snapshot copies them
 * from it (a workspace volume all but `images`: once in use, what it holds is the user's).
 */
export const CONTENT_TAGS = [
  VolumeTag.imageSet,
  VolumeTag.builtAt,
  VolumeTag.images,
  VolumeTag.imageStore,
  VolumeTag.engineVersion,
] as const;

/** EC2's limit on a tag value, in characters: a value the agent stores as a tag must fit it. */
export const MAX_TAG_VALUE = 256;
/** EC2's limit on a tag key, in characters. */
export const MAX_TAG_KEY = 128;
/** EC2's limit on the tags of one resource (volume, snapshot). */
export const MAX_TAGS_PER_RESOURCE = 50;
/**
 * How many operator tags (config `volumes.tags`) a volume can take beside the agent's own: every
 * VolumeTag may be on one volume at once, so a new agent tag lowers this.
 */
export const MAX_OPERATOR_TAGS = MAX_TAGS_PER_RESOURCE - Object.keys(VolumeTag).length;

export const VolumeKind = { pool: "pool", workspace: "workspace" } as const;
export type VolumeKind = (typeof VolumeKind)[keyof typeof VolumeKind];

/**
 * The label keys that may identify a workspace (osparc's node labels), broadest first (also the
 * order of `ebs-cache:workspace-keys`). A volume records each id as a tag (WORKSPACE_ID_TAG) and a
 * node on it publishes each as the label `workspace.<key>` (workspaceLabel).
 */
export const WORKSPACE_KEYS = ["product-name", "wallet-id", "user-id", "project-id", "node-id"] as const;
export type WorkspaceKey = (typeof WORKSPACE_KEYS)[number];

/** The volume tag recording one workspace id. */
export const WORKSPACE_ID_TAG: Readonly<Record<WorkspaceKey, string>> = {
  "product-name": VolumeTag.productName,
  "wallet-id": VolumeTag.walletId,
  "user-id": VolumeTag.userId,
  "project-id": VolumeTag.projectId,
  "node-id": VolumeTag.nodeId,
};

/** The instance tags that may override settings; any other `ebs-cache:*` instance tag is ignored with a warning. */
export const InstanceTag = {
  enabled: `${TAG_PREFIX}enabled`,
  pool: `${TAG_PREFIX}pool`,
  keep: `${TAG_PREFIX}keep`,
  ttlHours: `${TAG_PREFIX}ttl-hours`,
} as const;

/**
 * The readiness labels the agent publishes, by name: each goes out as `<labels.prefix>.<name>`
 * (labelKey). docs/labels.md is the contract; `pool`, `kind` and the workspace ids carry the
 * volume's tags of the same meaning.
 */
export const Label = {
  state: "state",
  volumeId: "volume-id",
  pool: "pool",
  kind: "kind",
  prewarm: "prewarm",
  prewarmProgress: "prewarm-progress",
  /** Why the state is `degraded` or `disabled`. */
  reason: "reason",
} as const;

/**
 * The node's readiness as its `state` label says it; `warming`: docker runs on the cache volume, usable, while its
 * initialization runs in the background.
 */
export type ReadinessState = "ready" | "warming" | "degraded" | "disabled";

/** The label of one workspace id a volume records: `workspace.user-id`. */
export function workspaceLabel(key: WorkspaceKey): string {
  return `workspace.${key}`;
}

/**
 * Names under the prefix that are requests to the agent in osparc's labels tag
 * (`<prefix>.keep`, `<prefix>.enabled`), not labels the agent publishes.
 */
export const RequestLabel = { keep: "keep", enabled: "enabled" } as const;

/** The full key of a label name under the agent's prefix: `io.simcore.ebs-cache.state`. */
export function labelKey(prefix: string, name: string): string {
  return `${prefix}.${name}`;
}
