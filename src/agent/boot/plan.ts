/**
 * The boot planner: pure. From what was observed (identity, settings, volumes, snapshot) it
 * decides where the cache volume comes from and lists the steps that follow. apply() carries
 * the steps out; `boot --dry-run` prints them. Nothing here touches the world, so every branch
 * of the selection is unit-tested with plain objects.
 */
import { CONTENT_TAGS, VolumeKind, VolumeTag } from "../../tags.ts";
import type { Identity, SnapshotInfo, VolumeCreation, VolumeInfo, VolumeQuery } from "../ports.ts";
import type { PrewarmStrategy } from "../../config/index.ts";
import { describeWorkspace, volumeMatchesWorkspace, workspaceIdTags, type WorkspaceIds } from "../workspace-ids.ts";
import {
  attachedCacheVolume,
  candidateOrder,
  hostStoreOr,
  isClaimable,
  isQuarantined,
  poolSelector,
  storeFit,
  type ClaimContext,
  type HostStore,
} from "../volume-rules.ts";
import type { PreparedRecord } from "./prepared-record.ts";
import { recordedTtlHours, type VolumeIntent } from "../volume-intent.ts";

export type { WorkspaceIds };

/** What the planner needs of the configuration (already merged with env and instance tags). */
export interface BootSettings {
  enabled: boolean;
  pool: string;
  /**
   * The size of the pool's volumes (config `instanceTypePools`): a pool or workspace volume this
   * boot creates from the pool's snapshot is made this large (the grow step then grows its
   * filesystem). Absent: the snapshot's size.
   */
  poolSizeGiB?: number;
  imageSet: string | null;
  createFromSnapshot: boolean;
  volumeType: string;
  initializationRateMiBps: number | null;
  device: string;
  mountRoot: string;
  /**
   * The workspace ids (whichever of the configured keys osparc's labels carry, at least
   * `workspace.minimumKeys`), when the instance names a workspace.
   */
  workspace?: WorkspaceIds;
  /**
   * When the instance names a workspace and no volume of it is available (config
   * `workspace.create`): `snapshot` adopts a pool volume (one from the pool's newest snapshot
   * when the pool is empty), `blank` creates an empty one of `workspaceSizeGiB` (formatted by the
   * agent), `never` falls back to the pool.
   */
  workspaceCreate: "snapshot" | "blank" | "never";
  workspaceSizeGiB: number;
  /** config `workspace.requireEncrypted`: a workspace volume EBS does not encrypt is never attached. Absent: false. */
  requireEncryptedWorkspace?: boolean;
  /** Config `volumes`: what a volume this boot creates gets (encryption, …); absent: EC2's defaults. */
  volumeCreation?: VolumeCreation;
  /**
   * Whether this run starts and verifies docker and reports readiness. false in the first boot
   * phase, which runs before docker.service (it cannot start docker: that start job would wait
   * for the agent's own), or when docker.control is `none`.
   */
  withDocker: boolean;
  /**
   * Whether this run may claim or create a volume. false in the second boot phase (after
   * docker.service): by then the node may have joined the swarm on docker's default data-root,
   * and switching it to a newly claimed volume would lose that membership. It only reuses a
   * volume phase 1 attached.
   */
  mayClaim: boolean;
  /** config `prewarm.strategy` (default `check`): what the `prewarm` step does, see docs/prewarm.md. */
  prewarm?: PrewarmStrategy;
  /** config `claim`: page size, volumes and losses per boot, quarantine. */
  claim: ClaimSettings;
  /**
   * What the instance asks of its volume (keep, TTL): tag-claim writes it on the volume's tags,
   * so gc honours it should the instance die without a release (src/agent/volume-intent.ts).
   */
  intent: VolumeIntent;
}

export interface ClaimSettings {
  candidatesPerListing: number;
  maxVolumes: number;
  maxLosses: number;
  quarantineHours: number;
}

/** What observe() found. */
export interface BootObservation {
  identity: Identity;
  /** EC2's time when it was observed (CloudClock): quarantine and claims on their way are judged against it. */
  now?: Date;
  /** Managed volumes attached (or attaching) to this instance. */
  attached: VolumeInfo[];
  /** Available workspace volumes of this instance's ids, in its zone (one bounded page). */
  workspace: VolumeInfo[];
  /** Available pool volumes of the pool, in this zone and image set (one bounded page). */
  pool: VolumeInfo[];
  /** The pool's current snapshot (currentSnapshot), looked up only when the selection may need it. */
  snapshot?: SnapshotInfo;
  /**
   * The image store this host's dockerd is configured with (daemon.json) and its version: a
   * volume built with the other store would hide its images, so it is never selected. Absent:
   * the graphdriver store (what the agent pins when daemon.json does not ask for containerd).
   */
  hostStore?: HostStore;
  /** What the first phase of this boot (same boot id, same instance) prepared (prepared-record.ts). */
  prepared?: PreparedRecord;
}

/** The host's store as observed, graphdriver when not observed. */
export function hostStoreOf(observed: Pick<BootObservation, "hostStore">): HostStore {
  return hostStoreOr(observed.hostStore);
}

/** Where the volume comes from. */
export type Selection =
  | { source: "disabled"; reason: string }
  | { source: "attached"; volumeId: string; kind: string }
  | {
      source: "workspace" | "pool";
      candidates: string[];
      relist: VolumeQuery;
      fallback?: SnapshotFallback;
      /** Why a boot with workspace ids runs on the pool (its workspace is held elsewhere). */
      note?: string;
    }
  | { source: "snapshot"; create: CreateSpec }
  /**
   * A new workspace for this instance's ids: an initialized pool volume claimed and adopted
   * (`from: "pool"`), one created from the pool's snapshot only when no pool volume is in stock,
   * or a blank one (workspace.create `blank`).
   */
  | {
      source: "new-workspace";
      from: "pool";
      candidates: string[];
      relist: VolumeQuery;
      fallback?: SnapshotFallback;
      adopt: WorkspaceAdoption;
    }
  | { source: "new-workspace"; from: "snapshot" | "blank"; create: CreateSpec; adopt?: WorkspaceAdoption }
  | { source: "none"; reason: string };

/**
 * Making the pool volume this boot claimed the workspace of `ids`: its tags say workspace, the
 * ids and the keys they are for (workspaceIdTags), and no longer its image list (a workspace's
 * content is its user's business). Carried out right after the claim, before tag-claim, so that
 * the intent, the activation marker and the record on the volume are a workspace's.
 */
export interface WorkspaceAdoption {
  ids: WorkspaceIds;
  /** The tags that make it the workspace (CreateTags). */
  set: Record<string, string>;
  /** The pool's tags a workspace does not carry (DeleteTags). */
  remove: string[];
}

/** A volume to create when no existing one can be claimed: from a snapshot, or blank (`sizeGiB`). */
export interface CreateSpec {
  snapshotId?: string;
  /** The size of a blank volume, or of one from a snapshot when larger than the snapshot's (absent: the snapshot's). */
  sizeGiB?: number;
  availabilityZone: string;
  volumeType: string;
  initializationRateMiBps: number | null;
  tags: Record<string, string>;
  /** Config `volumes` (BootSettings.volumeCreation), sent with the spec and covered by its token. */
  creation?: VolumeCreation;
}

/**
 * Creating a pool volume from the pool's newest snapshot once every candidate is gone: the
 * snapshot is looked up only then, so a boot that claims a volume never pays for it.
 */
export interface SnapshotFallback {
  snapshotTags: Record<string, string>;
  /** The host's store: a snapshot built with the other one is not used. */
  hostStore?: HostStore;
  pool: string;
  /** `poolSizeGiB`: the pool's volume size, used when larger than the snapshot's. */
  sizeGiB?: number;
  availabilityZone: string;
  volumeType: string;
  initializationRateMiBps: number | null;
  creation?: VolumeCreation;
}

/** One step of the boot, in order. Steps after the claim act on "the claimed volume". */
export type BootStep =
  | { step: "report-disabled"; reason: string }
  /**
   * A workspace volume attached here that this run's ids do not name (another tenant's, or no
   * ids at all): never mounted; unmounted if an earlier run of this boot mounted it, detached
   * (never forced) and tagged released with an expiry, as a release would, before the claim.
   */
  | { step: "hand-back-attached"; volumeId: string; keep: boolean; ttlHours: number; reason: string }
  | { step: "reuse-attached"; volumeId: string }
  /**
   * Candidates in this instance's order; after a loss to another instance, a fresh page of
   * `relist` (minus what was tried and what is quarantined) replaces them.
   */
  | {
      step: "claim-volume";
      family: "workspace" | "pool";
      candidates: string[];
      relist: VolumeQuery;
      maxVolumes: number;
      maxLosses: number;
      quarantineHours: number;
      pageSize: number;
      /** The host's store: a fresh page is filtered and ordered by it as the plan's list was. */
      hostStore?: HostStore;
      /** Workspace volumes EBS does not encrypt are left out of a fresh page too (workspace.requireEncrypted). */
      requireEncrypted?: boolean;
      fallback?: SnapshotFallback;
      /** Said in the log before the claim (the selection's note). */
      note?: string;
    }
  | { step: "create-and-claim"; create: CreateSpec }
  /**
   * The claimed pool volume becomes the workspace of these ids (WorkspaceAdoption) and gets the
   * instance's intent as a workspace's; then a listing of every volume of the ids checks that it
   * is the only one: when another boot's workspace of the same ids is there (two boots at once),
   * the adoption is undone and this node runs on the volume as a plain pool node (adopt.ts).
   * After prepare-data-root: the volume is cleaned as the pool volume it was (a previous tenant's
   * named volumes go), and one that fails before goes back to the pool, not as a workspace.
   */
  | { step: "adopt-workspace"; adopt: WorkspaceAdoption; intent: VolumeIntent }
  /**
   * Ensures the claim tags (claimed-by this instance, no release or error tags) and the
   * instance's intent (keep, TTL: src/agent/volume-intent.ts): every run, not assumed.
   */
  | { step: "tag-claim"; intent: VolumeIntent }
  | { step: "wait-for-device" }
  | { step: "check-filesystem" }
  | { step: "mount"; mountRoot: string }
  /**
   * The first phase's (no docker): starts the pre-warm run that reads a volume known cold from the mount on, while
   * docker starts, and outlives this phase (ebs-cache-agent-prewarm.service); the second phase takes it over at its
   * `prewarm` step. It publishes no label before the second phase has (prewarm/labels-gate.ts).
   */
  | { step: "begin-prewarm"; strategy: PrewarmStrategy }
  | { step: "grow-filesystem" }
  | { step: "prepare-data-root" }
  | { step: "switch-data-root" }
  /**
   * Instead of check-filesystem … switch-data-root, when the first phase of this boot prepared
   * this volume: it is confirmed mounted at `mountPoint` with daemon.json's data-root at
   * `dataRoot`, or else those steps run after all.
   */
  | { step: "resume-prepared"; mountRoot: string; mountPoint: string; dataRoot: string }
  | { step: "start-docker" }
  | { step: "verify-docker" }
  /** Verdict (and initialization) of a volume restored from a snapshot; see prewarm/apply.ts. */
  | { step: "prewarm"; strategy: PrewarmStrategy }
  | { step: "report-ready" }
  | { step: "degrade"; reason: string };

export interface BootPlan {
  instanceId: string;
  availabilityZone: string;
  selection: Selection;
  steps: BootStep[];
  /** The host's image store as observed: switch-data-root and verify-docker follow it. */
  hostStore?: HostStore;
}

/** The tags a pool volume created by the agent from the pool's snapshot carries. */
export function poolVolumeTags(settings: Pick<BootSettings, "pool">, snapshot: SnapshotInfo): Record<string, string> {
  const tags: Record<string, string> = {
    [VolumeTag.managed]: "true",
    [VolumeTag.kind]: VolumeKind.pool,
    [VolumeTag.pool]: settings.pool,
  };
  for (const key of CONTENT_TAGS) {
    const value = snapshot.tags[key];
    if (value !== undefined) tags[key] = value;
  }
  return tags;
}

/**
 * The tags of a new workspace volume: managed, kind `workspace`, the pool, the ids and the keys
 * they are for (`ebs-cache:workspace-keys`, see workspace-ids.ts); from a
 * snapshot also its image set (not its image list: once in use, what the volume holds is the
 * user's business, and `verify-docker` must not fail because they removed an image); a blank
 * one `created-by=agent`, the only mark that lets the agent format a volume.
 */
export function workspaceVolumeTags(
  settings: BootSettings,
  ids: WorkspaceIds,
  snapshot?: SnapshotInfo,
  host?: HostStore,
): Record<string, string> {
  const tags: Record<string, string> = {
    [VolumeTag.managed]: "true",
    [VolumeTag.kind]: VolumeKind.workspace,
    [VolumeTag.pool]: settings.pool,
    ...workspaceIdTags(ids),
  };
  for (const key of CONTENT_TAGS.filter((k) => k !== VolumeTag.images)) {
    const value = snapshot?.tags[key];
    if (value !== undefined) tags[key] = value;
  }
  if (!snapshot) {
    tags[VolumeTag.createdBy] = "agent";
    // This host's docker fills a blank volume, in this host's store: recorded, or the next
    // host would take the untagged volume for a graphdriver one.
    if (host) {
      tags[VolumeTag.imageStore] = host.store;
      if (host.engineVersion) tags[VolumeTag.engineVersion] = host.engineVersion;
    }
  }
  return tags;
}

/** The pool tags a workspace drops when it adopts a pool volume: its image list (workspaceVolumeTags). */
const ADOPTION_DROPS = [VolumeTag.images] as const;

/** Adopting a pool volume as the workspace of `ids` (WorkspaceAdoption). */
export function workspaceAdoption(ids: WorkspaceIds): WorkspaceAdoption {
  return {
    ids,
    set: { [VolumeTag.kind]: VolumeKind.workspace, ...workspaceIdTags(ids) },
    remove: [...ADOPTION_DROPS],
  };
}

/** A blank workspace volume for this instance's ids (workspace.create `blank`). */
function blankWorkspaceSpec(settings: BootSettings, observed: BootObservation, ids: WorkspaceIds): CreateSpec {
  return {
    availabilityZone: observed.identity.availabilityZone,
    volumeType: settings.volumeType,
    initializationRateMiBps: null,
    ...(settings.volumeCreation ? { creation: settings.volumeCreation } : {}),
    sizeGiB: settings.workspaceSizeGiB,
    tags: workspaceVolumeTags(settings, ids, undefined, hostStoreOf(observed)),
  };
}

/**
 * Workspace volumes of exactly these ids that another instance holds (attached to it, or on
 * their way to it): the ids' workspace is claimed, and at most one workspace serves them, so
 * this boot runs on the pool as a plain node. Quarantined volumes do not count: they serve nobody.
 */
export function workspaceHeldElsewhere(
  settings: Pick<BootSettings, "workspace" | "claim">,
  observed: Pick<BootObservation, "workspace" | "identity" | "now">,
): VolumeInfo | undefined {
  const ids = settings.workspace;
  if (!ids) return undefined;
  const me = observed.identity.instanceId;
  const now = observed.now ?? new Date(0);
  return observed.workspace.find(
    (v) =>
      volumeMatchesWorkspace(v.tags, ids) &&
      !isQuarantined(v, now, settings.claim.quarantineHours) &&
      ((v.attachment !== undefined && v.attachment.instanceId !== me && v.attachment.state !== "detached") ||
        (v.state !== "available" && v.attachment?.instanceId !== me)),
  );
}

/** The query a pool boot lists candidates with (and lists again after a loss). */
export function poolQuery(settings: Pick<BootSettings, "pool" | "imageSet">, zone: string): VolumeQuery {
  return { tags: poolSelector(settings), availabilityZone: zone, status: ["available"] };
}

/**
 * The query for this instance's workspace volumes: every id tag present and the keys tag, so
 * EC2 returns only volumes made for exactly these keys (a user-level volume and a project-level
 * one of the same user differ in `ebs-cache:workspace-keys`).
 */
export function workspaceQuery(ids: WorkspaceIds, zone: string): VolumeQuery {
  return { ...everyWorkspaceVolumeQuery(ids, zone), status: ["available"] };
}

/**
 * Every volume of these ids in the zone, whatever its state: what a boot observes (an available
 * one it may claim, one in use elsewhere that makes it a plain pool node) and what an adoption
 * checks it is alone against.
 */
export function everyWorkspaceVolumeQuery(ids: WorkspaceIds, zone: string): VolumeQuery {
  return {
    tags: {
      [VolumeTag.managed]: "true",
      [VolumeTag.kind]: VolumeKind.workspace,
      ...workspaceIdTags(ids),
    },
    availabilityZone: zone,
    status: ["creating", "available", "in-use"],
  };
}

/**
 * The listed volumes a boot may claim, per family, in this instance's order (isClaimable, then
 * candidateOrder): workspace volumes only of exactly this instance's ids (EC2 filtered on them
 * already; checked again so that only an exact match is ever claimed).
 */
export function claimCandidates(
  settings: Pick<BootSettings, "workspace" | "claim" | "requireEncryptedWorkspace">,
  observed: Pick<BootObservation, "workspace" | "pool" | "identity" | "now" | "hostStore">,
): Record<"workspace" | "pool", ReturnType<typeof candidateOrder>> & { unencrypted: string[] } {
  const { identity } = observed;
  const at: ClaimContext = {
    now: observed.now ?? new Date(0),
    availabilityZone: identity.availabilityZone,
    instanceId: identity.instanceId,
    quarantineHours: settings.claim.quarantineHours,
  };
  const ordered = (volumes: VolumeInfo[]) => candidateOrder(identity.instanceId, volumes, hostStoreOf(observed));
  const ids = settings.workspace;
  const ofIds = ids ? observed.workspace.filter((v) => isClaimable(v, at) && volumeMatchesWorkspace(v.tags, ids)) : [];
  // A workspace volume EBS does not encrypt is never claimed when the operator requires encryption.
  const refused = (v: VolumeInfo) => settings.requireEncryptedWorkspace === true && v.encrypted !== true;
  return {
    workspace: ids ? ordered(ofIds.filter((v) => !refused(v))) : { fitting: [], mismatched: [] },
    unencrypted: ofIds.filter(refused).map((v) => v.volumeId),
    pool: ordered(observed.pool.filter((v) => isClaimable(v, at))),
  };
}

/**
 * The managed volume attached here, split by whether this run may mount it. A stopped instance
 * keeps its volumes attached, and starts again as a new tenant: a workspace volume serves only
 * the ids this run has (the instance's current tags, or this activation's record: settings.ts),
 * and with other ids or none it is `foreign` — never mounted, handed back (hand-back-attached)
 * before the claim. A pool volume serves anyone.
 */
export function attachedHere(
  settings: Pick<BootSettings, "workspace">,
  observed: Pick<BootObservation, "attached" | "identity">,
): { mine?: VolumeInfo; foreign?: VolumeInfo } {
  const attached = attachedCacheVolume(observed.attached, observed.identity.instanceId);
  if (!attached) return {};
  const ids = settings.workspace;
  if (attached.tags[VolumeTag.kind] === VolumeKind.workspace && !(ids && volumeMatchesWorkspace(attached.tags, ids)))
    return { foreign: attached };
  return { mine: attached };
}

function foreignReason(settings: Pick<BootSettings, "workspace">, foreign: VolumeInfo): string {
  const whose = settings.workspace
    ? "was made for other ids than this instance's"
    : "belongs to a workspace and this instance's current tags name none";
  return `the workspace volume attached here (${foreign.volumeId}) ${whose}`;
}

/**
 * Chooses the volume's source. Only volumes whose image store fits the host's are candidates
 * (image-store.ts): a volume built with the other store would mount fine and start docker on
 * an empty image list, so a mismatch is left alone before the claim, never mounted as ready.
 */
export function selectSource(settings: BootSettings, observed: BootObservation): Selection {
  if (!settings.enabled) return { source: "disabled", reason: "disabled by configuration or instance tag" };
  const { identity } = observed;
  const host = hostStoreOf(observed);

  // A volume already attached here (a reboot, or a re-run after a crash) is ours: reuse it —
  // unless it is a workspace volume this run's ids do not name (below).
  const { mine, foreign } = attachedHere(settings, observed);
  // A run that may not claim cannot take the pool instead: the node degrades, the volume stays
  // attached and unmounted, and the release gives it back.
  if (foreign && !settings.mayClaim)
    return { source: "none", reason: `${foreignReason(settings, foreign)}: not mounted` };
  if (
    mine &&
    settings.requireEncryptedWorkspace &&
    mine.tags[VolumeTag.kind] === VolumeKind.workspace &&
    mine.encrypted !== true
  ) {
    return { source: "none", reason: unencryptedWorkspace(mine.volumeId, "attached here") };
  }
  if (mine) {
    // The host's daemon.json changed its store since the claim: the same treatment, the volume
    // stays attached until the release.
    const fit = storeFit(mine.tags, host);
    if (!fit.fits)
      return {
        source: "none",
        reason:
          `the volume attached here (${mine.volumeId}) does not fit: ${fit.reason}; not mounted ` +
          `(${fit.remediation})`,
      };
    return { source: "attached", volumeId: mine.volumeId, kind: mine.tags[VolumeTag.kind] ?? "unknown" };
  }
  if (!settings.mayClaim)
    return { source: "none", reason: "no cache volume is attached, and this run may not claim one (boot --no-claim)" };

  const fallback = snapshotFallback(settings, observed);
  const mismatch = (family: string, first: { volume: string; reason: string; remediation: string }) =>
    `no ${family} volume fits this host's image store: ${first.volume} ` +
    `${first.reason.replace(/^the volume /, "")} (${first.remediation})`;

  const ids = settings.workspace;
  const { workspace, pool, unencrypted } = claimCandidates(settings, observed);
  if (ids && workspace.fitting.length > 0) {
    return {
      source: "workspace",
      candidates: workspace.fitting,
      relist: workspaceQuery(ids, identity.availabilityZone),
      ...(fallback ? { fallback } : {}),
    };
  }
  // This user's volumes exist but hold images this docker cannot see: a new workspace volume
  // would split their data, the pool would hand them someone else's cache. The node degrades.
  const firstWorkspace = workspace.mismatched[0];
  if (firstWorkspace) return { source: "none", reason: mismatch("workspace", firstWorkspace) };
  // The same for this user's volumes EBS does not encrypt when the operator requires it.
  const plain = unencrypted[0];
  if (plain) return { source: "none", reason: unencryptedWorkspace(plain, "of these ids") };
  // The ids' workspace is held by another instance (a second boot of one batch, osparc's
  // `_launch_instances`): at most one workspace per ids, so this node runs on the pool, plain.
  const held = workspaceHeldElsewhere(settings, observed);
  // No workspace volume of these ids yet: the pool's stock becomes one (unless `never`); only an
  // empty pool makes one from the snapshot.
  const adopt = ids && !held && settings.workspaceCreate === "snapshot" ? workspaceAdoption(ids) : undefined;
  if (ids && !held && settings.workspaceCreate === "blank")
    return { source: "new-workspace", from: "blank", create: blankWorkspaceSpec(settings, observed, ids) };
  const adoptFallback = adopt ? snapshotFallback({ ...settings, createFromSnapshot: true }, observed) : undefined;
  if (adopt && pool.fitting.length > 0) {
    return {
      source: "new-workspace",
      from: "pool",
      candidates: pool.fitting,
      relist: poolQuery(settings, identity.availabilityZone),
      ...(adoptFallback ? { fallback: adoptFallback } : {}),
      adopt,
    };
  }
  if (adopt && adoptFallback) {
    const create = createSpecFrom(adoptFallback, observed.snapshot);
    if (create) return { source: "new-workspace", from: "snapshot", create, adopt };
  }
  const note = held && ids ? heldNote(ids, held) : undefined;
  if (pool.fitting.length > 0) {
    return {
      source: "pool",
      candidates: pool.fitting,
      relist: poolQuery(settings, identity.availabilityZone),
      ...(fallback ? { fallback } : {}),
      ...(note ? { note } : {}),
    };
  }
  const create = createSpec(settings, observed);
  if (create) return { source: "snapshot", create };
  const firstPool = pool.mismatched[0];
  if (firstPool)
    return {
      source: "none",
      reason: `${mismatch("pool", firstPool)} (pool ${settings.pool}, zone ${identity.availabilityZone})`,
    };
  const snapshot = observed.snapshot;
  const snapshotFit =
    settings.createFromSnapshot && snapshot?.state === "completed" ? storeFit(snapshot.tags, host) : undefined;
  if (snapshot && snapshotFit && !snapshotFit.fits) {
    return {
      source: "none",
      reason:
        `no available volume in the pool and its snapshot ${snapshot.snapshotId} does not fit: ` +
        `${snapshotFit.reason.replace(/^the volume/, "it")} (${snapshotFit.remediation})`,
    };
  }
  const why = !settings.createFromSnapshot
    ? "no available volume in the pool and creating from the snapshot is off"
    : "no available volume in the pool and no completed snapshot for it";
  return { source: "none", reason: `${why} (pool ${settings.pool}, zone ${identity.availabilityZone})` };
}

/** What a boot whose ids' workspace is held elsewhere says before it claims a pool volume. */
function heldNote(ids: WorkspaceIds, held: VolumeInfo): string {
  const holder = held.attachment?.instanceId ?? held.tags[VolumeTag.claimedBy] ?? "another instance";
  return (
    `the workspace of ${describeWorkspace(ids)} (${held.volumeId}) is held by ${holder}: ` +
    "this node runs on a pool volume as a plain node, no second workspace"
  );
}

/** Why a workspace volume that EBS does not encrypt is not attached (config workspace.requireEncrypted). */
function unencryptedWorkspace(volumeId: string, where: string): string {
  return (
    `the workspace volume ${volumeId} ${where} is not encrypted and workspace.requireEncrypted is set: not attached ` +
    ("(encrypt it: snapshot it, copy the snapshot with encryption, make a volume of the copy with the same tags, " +
      "and delete the old one)")
  );
}

function snapshotFallback(settings: BootSettings, observed: BootObservation): SnapshotFallback | undefined {
  if (!settings.createFromSnapshot) return undefined;
  return {
    snapshotTags: poolSelector(settings),
    ...(observed.hostStore ? { hostStore: observed.hostStore } : {}),
    pool: settings.pool,
    ...(settings.poolSizeGiB !== undefined ? { sizeGiB: settings.poolSizeGiB } : {}),
    availabilityZone: observed.identity.availabilityZone,
    volumeType: settings.volumeType,
    initializationRateMiBps: settings.initializationRateMiBps,
    ...(settings.volumeCreation ? { creation: settings.volumeCreation } : {}),
  };
}

/**
 * The size of a volume made from the pool's snapshot: the pool's (config `instanceTypePools`)
 * when larger than the snapshot's, else none (the snapshot's). EC2 refuses a volume smaller than
 * its snapshot: a pool size below it gives the snapshot's (a boot must not fail on it; the keeper
 * refuses to stock such a pool and says so).
 */
function poolSize(sizeGiB: number | undefined, snapshot: SnapshotInfo): { sizeGiB?: number } {
  return sizeGiB !== undefined && sizeGiB > snapshot.volumeSizeGiB ? { sizeGiB } : {};
}

/** The pool volume to create from the fallback's snapshot, once it has been looked up. */
export function createSpecFrom(fallback: SnapshotFallback, snapshot: SnapshotInfo | undefined): CreateSpec | undefined {
  if (!snapshot || snapshot.state !== "completed" || !storeFit(snapshot.tags, hostStoreOr(fallback.hostStore)).fits)
    return undefined;
  return {
    snapshotId: snapshot.snapshotId,
    ...poolSize(fallback.sizeGiB, snapshot),
    availabilityZone: fallback.availabilityZone,
    volumeType: fallback.volumeType,
    initializationRateMiBps: fallback.initializationRateMiBps,
    tags: poolVolumeTags(fallback, snapshot),
    ...(fallback.creation ? { creation: fallback.creation } : {}),
  };
}

/**
 * Which lookups the selection still needs after the attached volumes, for observe(): the
 * workspace page, the pool page, the snapshot. Asking only for these keeps a pool boot at one
 * DescribeVolumes.
 */
export function lookupsNeeded(
  settings: BootSettings,
  observed: Pick<BootObservation, "attached" | "workspace" | "pool" | "identity" | "now" | "hostStore">,
  stage: "workspace" | "pool" | "snapshot",
): boolean {
  if (!settings.enabled || !settings.mayClaim) return false;
  // A volume to reuse needs no lookup; one to hand back (attachedHere) leaves the claim to do.
  if (attachedHere(settings, observed).mine) return false;
  // The selection's own candidates decide: a volume it would reject (on its way, quarantined,
  // of the other image store) must not spare the snapshot it would then need.
  const { workspace, pool, unencrypted } = claimCandidates(settings, observed);
  // Workspace volumes of the ids, fitting or not: the selection ends with them (claimed, or degraded).
  const hasWorkspace =
    settings.workspace !== undefined && workspace.fitting.length + workspace.mismatched.length + unencrypted.length > 0;
  switch (stage) {
    case "workspace":
      return settings.workspace !== undefined;
    case "snapshot":
      if (hasWorkspace) return false;
      // A new workspace adopts a pool volume: the snapshot only for an empty pool, as without ids.
      if (settings.workspace && settings.workspaceCreate === "snapshot") return pool.fitting.length === 0;
      return settings.createFromSnapshot && pool.fitting.length === 0;
    case "pool":
      return !hasWorkspace;
  }
}

function createSpec(settings: BootSettings, observed: BootObservation): CreateSpec | undefined {
  const fallback = snapshotFallback(settings, observed);
  return fallback ? createSpecFrom(fallback, observed.snapshot) : undefined;
}

/** Steps that need docker running: left to the second phase when this run goes without docker. */
const DOCKER_STEPS = new Set<BootStep["step"]>(["start-docker", "verify-docker", "prewarm", "report-ready"]);
/**
 * Steps of the first phase alone: a single-phase boot begins its pre-warm at the mount in its own process and keeps
 * it to its `prewarm` step.
 */
const FIRST_PHASE_STEPS = new Set<BootStep["step"]>(["begin-prewarm"]);

/** The members of a step union that carry nothing but their name. */
type BareStep<S> = S extends unknown ? (keyof S extends "step" ? S : never) : never;

/** The steps that bring a volume (however selected) to a docker running on it. */
const AFTER_CLAIM: (BareStep<BootStep>["step"] | "tag-claim" | "mount" | "begin-prewarm" | "prewarm")[] = [
  "tag-claim",
  "wait-for-device",
  "check-filesystem",
  "mount",
  "begin-prewarm",
  "grow-filesystem",
  "prepare-data-root",
  "switch-data-root",
  "start-docker",
  "verify-docker",
  "prewarm",
  "report-ready",
];

/** Plans the boot. */
export function planBoot(settings: BootSettings, observed: BootObservation): BootPlan {
  const selection = selectSource(settings, observed);
  const head: BootStep[] = [];
  const { foreign } = attachedHere(settings, observed);
  if (foreign && settings.mayClaim && selection.source !== "disabled") {
    head.push({
      step: "hand-back-attached",
      volumeId: foreign.volumeId,
      // Its owner's keep and TTL, as its claim recorded them on the volume: this instance's own
      // (a tag of its current tenant) only where the volume records none.
      keep: foreign.tags[VolumeTag.keep] === "true",
      ttlHours: ownerTtl(foreign) ?? settings.intent.ttlHours,
      reason: foreignReason(settings, foreign),
    });
  }
  switch (selection.source) {
    case "disabled":
      return { ...where(observed), selection, steps: [{ step: "report-disabled", reason: selection.reason }] };
    case "none":
      return { ...where(observed), selection, steps: [...head, { step: "degrade", reason: selection.reason }] };
    case "attached":
      head.push({ step: "reuse-attached", volumeId: selection.volumeId });
      break;
    case "workspace":
    case "pool":
    case "new-workspace":
      if (selection.source === "new-workspace" && selection.from !== "pool") {
        head.push({ step: "create-and-claim", create: selection.create });
        break;
      }
      head.push({
        step: "claim-volume",
        family: selection.source === "workspace" ? "workspace" : "pool",
        candidates: selection.candidates,
        relist: selection.relist,
        maxVolumes: settings.claim.maxVolumes,
        maxLosses: settings.claim.maxLosses,
        quarantineHours: settings.claim.quarantineHours,
        pageSize: settings.claim.candidatesPerListing,
        ...(observed.hostStore ? { hostStore: observed.hostStore } : {}),
        ...(selection.source === "workspace" && settings.requireEncryptedWorkspace ? { requireEncrypted: true } : {}),
        ...(selection.fallback ? { fallback: selection.fallback } : {}),
        ...("note" in selection && selection.note ? { note: selection.note } : {}),
      });
      break;
    case "snapshot":
      head.push({ step: "create-and-claim", create: selection.create });
      break;
  }
  const tail = AFTER_CLAIM.map((step): BootStep =>
    step === "mount"
      ? { step, mountRoot: settings.mountRoot }
      : step === "prewarm" || step === "begin-prewarm"
        ? { step, strategy: settings.prewarm ?? "check" }
        : step === "tag-claim"
          ? { step, intent: settings.intent }
          : { step },
  );
  // tag-claim stays for a reused attachment too: a boot killed between AttachVolume and its
  // tags (or between CreateTags and DeleteTags) is finished by the next run, not assumed done.
  const kept = tail.filter((s) =>
    settings.withDocker
      ? !FIRST_PHASE_STEPS.has(s.step)
      : !DOCKER_STEPS.has(s.step) && !(s.step === "begin-prewarm" && s.strategy === "off"),
  );
  const adopt = selection.source === "new-workspace" ? selection.adopt : undefined;
  const steps = adopt
    ? kept.flatMap((s): BootStep[] =>
        s.step === "prepare-data-root" ? [s, { step: "adopt-workspace", adopt, intent: settings.intent }] : [s],
      )
    : kept;
  const prepared =
    selection.source === "attached" && observed.prepared?.volumeId === selection.volumeId
      ? observed.prepared
      : undefined;
  return {
    ...where(observed),
    selection,
    steps: [...head, ...(prepared ? resumingPrepared(steps, settings, prepared) : steps)],
  };
}

/** The TTL a volume's claim recorded (`ebs-cache:ttl-hours`), when it reads as one. */
function ownerTtl(volume: VolumeInfo): number | undefined {
  const recorded = recordedTtlHours(volume.tags);
  return recorded.kind === "hours" ? recorded.hours : undefined;
}

/** What phase 1 of this boot did to the volume: confirmed in one step rather than done again. */
const PREPARING = new Set<BootStep["step"]>([
  "check-filesystem",
  "mount",
  "grow-filesystem",
  "prepare-data-root",
  "switch-data-root",
]);

function resumingPrepared(steps: BootStep[], settings: BootSettings, prepared: PreparedRecord): BootStep[] {
  const at = steps.findIndex((s) => PREPARING.has(s.step));
  if (at < 0) return steps;
  const resume: BootStep = {
    step: "resume-prepared",
    mountRoot: settings.mountRoot,
    mountPoint: prepared.mountPoint,
    dataRoot: prepared.dataRoot,
  };
  return [...steps.slice(0, at), resume, ...steps.slice(at).filter((s) => !PREPARING.has(s.step))];
}

function where(observed: BootObservation) {
  return {
    instanceId: observed.identity.instanceId,
    availabilityZone: observed.identity.availabilityZone,
    ...(observed.hostStore ? { hostStore: observed.hostStore } : {}),
  };
}
