/**
 * The rules every use case applies to the agent's volumes and snapshots, from their tags, in one
 * place: how a tag's time reads, a volume's generation, quarantine, a volume on its way, what a
 * boot may claim, the tags that select a pool, whether a volume's image store fits the host, the
 * cache volume among those attached, and the order a boot tries candidates in. Boot, gc, the
 * keeper, the pool view, pre-warm, prune, refresh and release all ask here, so they cannot
 * disagree about a volume. Pure: no I/O; it reads only tags.ts, engine-version.ts and types.
 */
import { engineMajorVersion } from "../engine-version.ts";
import { createHash } from "node:crypto";
import type { ImageStore } from "../docker/engine.ts";
import type { HostStore } from "../docker/image-store.ts";
import { SnapshotTag, VolumeKind, VolumeTag } from "../tags.ts";
import type { SnapshotInfo, VolumeInfo } from "./ports.ts";

export type { HostStore };

// ---------------------------------------------------------------------------------------------
// Tag timestamps
// ---------------------------------------------------------------------------------------------

/**
 * Parses an ISO 8601 timestamp as the agent writes it; undefined when malformed. gc and the
 * generations read times this strictly: a time they cannot trust is reported (gc's `malformed`)
 * or taken as unknown (a generation's `built-at`), never guessed.
 */
export function parseTimestamp(text: string): Date | undefined {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(text)) return undefined;
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? undefined : date;
}

/**
 * A tag's time in milliseconds as JavaScript reads any date (`Date.parse`), undefined when it
 * reads none or the tag is absent. Quarantine, a volume on its way and the release's earlier
 * release time read times this leniently: each has its own answer for an unreadable time.
 */
export function tagTime(tags: Readonly<Record<string, string>>, key: string): number | undefined {
  const at = Date.parse(tags[key] ?? "");
  return Number.isNaN(at) ? undefined : at;
}

// ---------------------------------------------------------------------------------------------
// Generations
// ---------------------------------------------------------------------------------------------
//
// Image-set generations: which build of a pool's images a snapshot or volume holds, and which
// one is current. A generation is the image set's name and the time it was built
// (`ebs-cache:image-set`, `ebs-cache:built-at`); the pool's current generation is its newest
// completed snapshot's. A volume of an older generation is *superseded*: boots prefer current
// volumes, the keeper trims superseded ones first, gc retires them after a grace period.
//
// Snapshots and volumes made before `built-at` existed still have an order: a snapshot's start
// time stands in for its build time, and a volume without the tag takes the generation of the
// snapshot it was made from, when that snapshot is known. A volume whose build time cannot be
// learned at all is the oldest generation there is.

export interface Generation {
  imageSet: string | null;
  /** When the image set was built; null: unknown (the oldest of all). */
  builtAt: Date | null;
}

/** A stable name for a generation, for logs, labels and grouping: `platform-7@2026-12-01T10:00:00.000Z`. */
export function generationName(generation: Generation): string {
  return `${generation.imageSet ?? "-"}@${generation.builtAt?.toISOString() ?? "unknown"}`;
}

/** The build time a tag set records, if it parses (a malformed `built-at` counts as absent). */
function builtAtTag(tags: Readonly<Record<string, string>>): Date | null {
  const text = tags[VolumeTag.builtAt];
  return text === undefined ? null : (parseTimestamp(text) ?? null);
}

/** A snapshot's generation: its `built-at`, else its start time. */
export function snapshotGeneration(snapshot: Pick<SnapshotInfo, "tags" | "startTime">): Generation {
  return {
    imageSet: snapshot.tags[VolumeTag.imageSet] ?? null,
    builtAt: builtAtTag(snapshot.tags) ?? snapshot.startTime ?? null,
  };
}

/**
 * A volume's generation: its `built-at`, else that of the snapshot it was made from when that
 * snapshot is among `snapshots`, else unknown.
 */
export function volumeGeneration(
  volume: Pick<VolumeInfo, "tags" | "snapshotId">,
  snapshots: ReadonlyMap<string, Pick<SnapshotInfo, "tags" | "startTime">> = new Map(),
): Generation {
  const own = builtAtTag(volume.tags);
  const imageSet = volume.tags[VolumeTag.imageSet] ?? null;
  if (own) return { imageSet, builtAt: own };
  const source = volume.snapshotId === undefined ? undefined : snapshots.get(volume.snapshotId);
  return { imageSet, builtAt: source ? snapshotGeneration(source).builtAt : null };
}

/** Newer first; unknown build times last; ties by image-set name, so the order is total. */
export function compareGenerations(a: Generation, b: Generation): number {
  const time = (g: Generation) => g.builtAt?.getTime() ?? -Infinity;
  return time(b) - time(a) || (a.imageSet ?? "").localeCompare(b.imageSet ?? "") || 0;
}

/**
 * Whether a snapshot may carry a pool's generation: completed, and not marked unverified
 * (`ebs-cache:unverified`, whatever its value: `snapshot upload` removes the tag only once it
 * has read the snapshot back against the image, so one completed but not read back, or found
 * wrong, keeps it). A snapshot without the tag (Packer's flow, an upload older than the tag) is
 * usable as it always was.
 */
export function isUsableSnapshot(snapshot: Pick<SnapshotInfo, "state" | "tags">): boolean {
  return snapshot.state === "completed" && !Object.hasOwn(snapshot.tags, SnapshotTag.unverified);
}

/**
 * The snapshot of the pool's current generation: the newest usable one (completed, not marked
 * unverified: isUsableSnapshot) by `built-at` (else its start time), restricted to `imageSet`
 * when the configuration names one. New volumes (boot's cold path, the keeper) come from it;
 * gc, the refresh, the prune and the pool view read the current generation from it. Undefined
 * when the pool has no usable snapshot.
 */
export function currentSnapshot<S extends Pick<SnapshotInfo, "state" | "tags" | "startTime">>(
  snapshots: readonly S[],
  imageSet: string | null = null,
): S | undefined {
  const byStart = (s: S) => s.startTime?.getTime() ?? -Infinity;
  return (
    snapshots
      .filter((s) => isUsableSnapshot(s) && (imageSet === null || s.tags[VolumeTag.imageSet] === imageSet))
      // The same generation snapshotted twice: the later snapshot, as before generations existed.
      .sort((a, b) => compareGenerations(snapshotGeneration(a), snapshotGeneration(b)) || byStart(b) - byStart(a))[0]
  );
}

/**
 * The pool's current generation: its current snapshot's (currentSnapshot: the newest usable one,
 * restricted to `imageSet` when the configuration names one). Undefined when the pool has none.
 */
export function currentGeneration(
  snapshots: readonly Pick<SnapshotInfo, "state" | "tags" | "startTime">[],
  imageSet: string | null = null,
): Generation | undefined {
  const snapshot = currentSnapshot(snapshots, imageSet);
  return snapshot && snapshotGeneration(snapshot);
}

/**
 * Whether a generation is older than the current one. Nothing is superseded while the current
 * generation's build time is unknown (no order to judge by).
 */
export function isSuperseded(generation: Generation, current: Generation | undefined): boolean {
  if (!current?.builtAt) return false;
  return generation.builtAt === null || generation.builtAt.getTime() < current.builtAt.getTime();
}

/** The image references a snapshot's or volume's `ebs-cache:images` tag lists (comma-separated), as written. */
export function imagesOf(tags: Readonly<Record<string, string>>): string[] {
  return (tags[VolumeTag.images] ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
}

export { withLatest } from "../image-ref.ts";

// ---------------------------------------------------------------------------------------------
// Quarantine, on its way, claimable
// ---------------------------------------------------------------------------------------------

/**
 * Whether a volume is in quarantine: an instance gave it back with `last-error` less than
 * `hours` ago. A `last-error` without a readable time (written before `last-error-at` existed)
 * counts as recent: a volume that failed once is not handed to the next machine on a guess.
 */
export function isQuarantined(volume: Pick<VolumeInfo, "tags">, now: Date, hours: number): boolean {
  if (hours <= 0 || volume.tags[VolumeTag.lastError] === undefined) return false;
  const at = tagTime(volume.tags, VolumeTag.lastErrorAt);
  if (at === undefined) return true;
  return now.getTime() - at < hours * 3600_000;
}

/**
 * How long a volume still available under another instance's claim counts as on its way (a
 * release between its detach and its tags, a boot between creating and attaching it) rather
 * than abandoned by an instance that died: far above a release's or a create's seconds.
 */
export const IN_TRANSIT_MINUTES = 15;

/**
 * Whether an available volume is another instance's, on its way: it carries that instance's
 * `claimed-by` (a release removes it with its tags; a boot that creates a volume sets it at
 * creation) from less than IN_TRANSIT_MINUTES ago. Neither a boot nor the keeper takes such a
 * volume: a boot would have the releasing instance tag it released under it, and the keeper
 * would delete it under the release or the boot that made it. Older claims are an instance that
 * died: gc gives those an expiry, and a boot may take them. Pool volumes only: a workspace
 * volume serves one set of ids, the keeper never touches it, and its next instance (after one
 * that died without a release) must get it at once, not a quarter of an hour later.
 */
export function isInTransit(volume: Pick<VolumeInfo, "tags" | "createTime">, now: Date, instanceId?: string): boolean {
  if (volume.tags[VolumeTag.kind] === VolumeKind.workspace) return false;
  const by = volume.tags[VolumeTag.claimedBy];
  if (by === undefined || by === instanceId) return false;
  // A boot's new volume carries claimed-by from its creation and claimed-at only once attached.
  const at = tagTime(volume.tags, VolumeTag.claimedAt) ?? volume.createTime?.getTime();
  return at !== undefined && now.getTime() - at < IN_TRANSIT_MINUTES * 60_000;
}

/**
 * What judging a listed volume as a claim candidate needs: when, and the quarantine. A boot also
 * gives its zone and instance (its own claim is not "on its way" to it); the keeper, which counts
 * every zone for whichever instance comes, gives neither.
 */
export interface ClaimContext {
  now: Date;
  quarantineHours: number;
  availabilityZone?: string;
  instanceId?: string;
}

/**
 * The one rule of what a boot may claim, for its selection, the lookups that feed it, its fresh
 * pages after a loss, and the keeper's count of stock: available and unattached, in the zone
 * (when one is given), not in quarantine, not another instance's on its way (isInTransit). The
 * image store is judged after it (candidateOrder sets misfits apart).
 */
export function isClaimable(volume: VolumeInfo, at: ClaimContext): boolean {
  return (
    volume.state === "available" &&
    !volume.attachment &&
    (at.availabilityZone === undefined || volume.availabilityZone === at.availabilityZone) &&
    !isQuarantined(volume, at.now, at.quarantineHours) &&
    !isInTransit(volume, at.now, at.instanceId)
  );
}

// ---------------------------------------------------------------------------------------------
// Selectors
// ---------------------------------------------------------------------------------------------

/** The tag every volume and snapshot the agent manages carries: what every listing filters on. */
export const MANAGED: Readonly<Record<string, string>> = { [VolumeTag.managed]: "true" };

/**
 * The tags that select a pool's volumes and snapshots, of one image set when one is named (a
 * boot's candidates and snapshot); with `imageSet` null, every image set of the pool (the
 * keeper: every volume counts toward its caps, every snapshot may be a volume's source).
 */
export function poolSelector(settings: { pool: string; imageSet: string | null }): Record<string, string> {
  return {
    ...MANAGED,
    [VolumeTag.kind]: VolumeKind.pool,
    [VolumeTag.pool]: settings.pool,
    ...(settings.imageSet ? { [VolumeTag.imageSet]: settings.imageSet } : {}),
  };
}

/** Whether tags carry every tag of a selector, as EC2's tag filters would match them. */
export function matchesSelector(
  tags: Readonly<Record<string, string>>,
  selector: Readonly<Record<string, string>>,
): boolean {
  return Object.entries(selector).every(([key, value]) => tags[key] === value);
}

// ---------------------------------------------------------------------------------------------
// The image store
// ---------------------------------------------------------------------------------------------
//
// Whether a volume's images are visible to this host's dockerd, from the volume's tags alone. A
// data-root built with the graphdriver store (`image/overlay2`, `overlay2/`) is empty to a
// dockerd using the containerd store, and the reverse: the images are there, docker does not see
// them, and every container start would pull. The volume records the store and the engine it
// was built with (`ebs-cache:image-store`, `ebs-cache:engine-version`, set by the golden build
// and the Packer pool-volume flow), so selection can prefer volumes that fit and leave a
// mismatch alone before claiming it.
//
// Volumes made before these tags existed were all built with the graphdriver store (the only one
// the golden build and Packer used): no tag means graphdriver.

export const IMAGE_STORES: readonly ImageStore[] = ["graphdriver", "containerd"];

/** The store a volume without an `ebs-cache:image-store` tag was built with. */
export const UNTAGGED_STORE: ImageStore = "graphdriver";

/**
 * The host's store as observed; graphdriver when not observed (what the agent pins when daemon.json does not ask for
 * containerd).
 */
export function hostStoreOr(host: HostStore | undefined): HostStore {
  return host ?? { store: "graphdriver" };
}

/** What the tags say about a volume's images. */
export type VolumeStore =
  | { known: true; store: ImageStore; recorded: boolean; engineVersion?: string }
  | { known: false; value: string; engineVersion?: string };

/** Whether a volume fits the host; when not, why and what to do (for the degraded reason and the log). */
export type StoreFit = { fits: true; sameEngine: boolean } | { fits: false; reason: string; remediation: string };

/** Reads `ebs-cache:image-store` and `ebs-cache:engine-version`. */
export function volumeStore(tags: Readonly<Record<string, string>>): VolumeStore {
  const engineVersion = tags[VolumeTag.engineVersion]?.trim() || undefined;
  const raw = tags[VolumeTag.imageStore];
  const version = engineVersion === undefined ? {} : { engineVersion };
  if (raw === undefined || raw.trim() === "")
    return { known: true, store: UNTAGGED_STORE, recorded: false, ...version };
  const value = raw.trim();
  const store = IMAGE_STORES.find((s) => s === value);
  return store ? { known: true, store, recorded: true, ...version } : { known: false, value, ...version };
}

/**
 * Whether the volume's images would be visible to the host's dockerd. The engine version only
 * orders volumes that fit (the same major first): overlay2's layout and containerd's content
 * store are read by newer and older engines alike, the store is what hides images.
 */
export function storeFit(tags: Readonly<Record<string, string>>, host: HostStore): StoreFit {
  const volume = volumeStore(tags);
  if (!volume.known) {
    return {
      fits: false,
      reason:
        `the volume is tagged ${VolumeTag.imageStore}=${volume.value}, a store this agent does not know ` +
        `(${IMAGE_STORES.join(", ")})`,
      remediation:
        `retag the volume with ${VolumeTag.imageStore}=graphdriver or containerd after checking how its ` +
        `images were built, or let gc retire it`,
    };
  }
  if (volume.store !== host.store) {
    const built = volume.recorded
      ? `was built with the ${volume.store} image store`
      : `has no ${VolumeTag.imageStore} tag, so it was built with the ${volume.store} image store`;
    return {
      fits: false,
      reason:
        `the volume ${built}${volume.engineVersion ? ` (docker ${volume.engineVersion})` : ""} and this host's ` +
        `dockerd uses the ${host.store} store: its images would be invisible`,
      remediation:
        host.store === "containerd"
          ? `build the pool's volumes with features.containerd-snapshotter=true (tag ` +
            `${VolumeTag.imageStore}=containerd), or set it to false in this host's daemon.json`
          : `build the pool's volumes with the graphdriver store (features.containerd-snapshotter=false), or give ` +
            `this host a pool of containerd-store volumes`,
    };
  }
  const hostMajor = engineMajorVersion(host.engineVersion);
  return { fits: true, sameEngine: hostMajor !== undefined && engineMajorVersion(volume.engineVersion) === hostMajor };
}

// ---------------------------------------------------------------------------------------------
// The cache volume attached here
// ---------------------------------------------------------------------------------------------

/**
 * Which of the managed volumes attached to `instanceId` is the agent's cache volume: a reboot, a
 * re-run after a crash, the pre-warm and the refresh find it this way. A workspace volume first
 * (a node given a workspace runs on it, whatever pool volume may also hang on the instance);
 * undefined when none is attached.
 */
export function attachedCacheVolume<V extends Pick<VolumeInfo, "tags" | "attachment">>(
  volumes: readonly V[],
  instanceId: string,
): V | undefined {
  const mine = volumes.filter((v) => v.attachment?.instanceId === instanceId);
  return mine.find((v) => v.tags[VolumeTag.kind] === VolumeKind.workspace) ?? mine[0];
}

// ---------------------------------------------------------------------------------------------
// The candidate order
// ---------------------------------------------------------------------------------------------

/** What the candidate order compares of one listed volume, worked out once per listing. */
export interface CandidateFacts {
  volumeId: string;
  /** The rank of its generation in the listing, 0 the newest (compareGenerations over the listing's generations). */
  generationRank: number;
  /** Tagged `ebs-cache:initialized`: EBS reported its blocks all loaded. */
  initialized: boolean;
  /** Built by this host's docker major version (storeFit); false for a volume that does not fit. */
  sameEngine: boolean;
  /** Its rendezvous score for this instance (orderCandidates). */
  score: string;
}

/** One criterion of the candidate order: negative when `a` is tried before `b`, 0 when it cannot tell. */
export interface CandidateComparator {
  name: string;
  compare(a: CandidateFacts, b: CandidateFacts): number;
}

/**
 * The order a boot tries its candidates in: each criterion decides only where those above it
 * tie. Changing the order is moving a line.
 */
export const CANDIDATE_ORDER: readonly CandidateComparator[] = [
  // First: a volume of the current image set while one is listed; a superseded one (old images, but warm) only when
  // none is left.
  { name: "newest-generation", compare: (a, b) => a.generationRank - b.generationRank },
  // Within a generation: initialized volumes, whose blocks are all loaded, so the node is ready without a pre-warm.
  { name: "initialized-first", compare: (a, b) => Number(b.initialized) - Number(a.initialized) },
  // Then those built by this host's docker major: either engine reads the store, the same one is the safer bet.
  { name: "same-engine-first", compare: (a, b) => Number(b.sameEngine) - Number(a.sameEngine) },
  // Last: this instance's own order, so that a herd of boots spreads over the pool; it never ties, so it must come
  // last.
  { name: "rendezvous", compare: (a, b) => (a.score < b.score ? -1 : a.score > b.score ? 1 : 0) },
];

/** The rendezvous score of a volume for an instance: sha256 of the two ids. */
function rendezvousScore(instanceId: string, volumeId: string): string {
  return createHash("sha256").update(`${instanceId}\0${volumeId}`).digest("hex");
}

/**
 * Orders candidates differently on every instance (rendezvous hashing on instance id + volume
 * id), so that machines booting together spread over the pool instead of all fighting for the
 * first volume, while one instance always tries the same order (a re-run is predictable).
 */
export function orderCandidates(instanceId: string, volumeIds: readonly string[]): string[] {
  const score = (volumeId: string) => rendezvousScore(instanceId, volumeId);
  return [...volumeIds].sort((a, b) => (score(a) < score(b) ? -1 : score(a) > score(b) ? 1 : 0));
}

/**
 * The claim order of a listing, CANDIDATE_ORDER's criteria in turn: the newest generation first
 * (`ebs-cache:built-at` of the image set; a volume without it is the oldest; a boot lists no
 * snapshots, so a volume's own built-at decides), then initialized ones (the pool keeper tags a
 * volume once EBS reports its initialization complete), then those built by this host's docker
 * major version, each in this instance's order (orderCandidates). Volumes whose image store would
 * hide their images from this host are set apart (`mismatched`, in the same order), never
 * candidates.
 */
export function candidateOrder(
  instanceId: string,
  volumes: readonly Pick<VolumeInfo, "volumeId" | "tags">[],
  host: HostStore,
): { fitting: string[]; mismatched: Array<{ volume: string; reason: string; remediation: string }> } {
  // Generations ranked once: equal names are one generation, and the sort of their first members is stable.
  const generations = new Map<string, Generation>();
  for (const v of volumes) {
    const generation = volumeGeneration(v);
    const name = generationName(generation);
    if (!generations.has(name)) generations.set(name, generation);
  }
  const rank = new Map(
    [...generations.entries()]
      .sort(([, a], [, b]) => compareGenerations(a, b))
      .map(([name], index) => [name, index] as const),
  );
  const judged = volumes.map((v) => {
    const fit = storeFit(v.tags, host);
    const facts: CandidateFacts = {
      volumeId: v.volumeId,
      generationRank: rank.get(generationName(volumeGeneration(v)))!,
      initialized: v.tags[VolumeTag.initialized] !== undefined,
      sameEngine: fit.fits && fit.sameEngine,
      score: rendezvousScore(instanceId, v.volumeId),
    };
    return { facts, fit };
  });
  const compare = (a: CandidateFacts, b: CandidateFacts) => {
    for (const criterion of CANDIDATE_ORDER) {
      const order = criterion.compare(a, b);
      if (order !== 0) return order;
    }
    return 0;
  };
  const ordered = judged.sort((a, b) => compare(a.facts, b.facts));
  const fitting: string[] = [];
  const mismatched: Array<{ volume: string; reason: string; remediation: string }> = [];
  for (const { facts, fit } of ordered) {
    if (fit.fits) fitting.push(facts.volumeId);
    else mismatched.push({ volume: facts.volumeId, reason: fit.reason, remediation: fit.remediation });
  }
  return { fitting, mismatched };
}
