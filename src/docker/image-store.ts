/**
 * Whether a volume's images are visible to this host's dockerd, from the volume's tags alone
 * (pure: no EC2, no docker). A data-root built with the graphdriver store (`image/overlay2`,
 * `overlay2/`) is empty to a dockerd using the containerd store, and the reverse: the images
 * are there, docker does not see them, and every container start would pull. The volume records
 * the store and the engine it was built with (`ebs-cache:image-store`, `ebs-cache:engine-version`,
 * set by the golden build and the Packer pool-volume flow), so selection can prefer volumes that
 * fit and leave a mismatch alone before claiming it.
 *
 * Volumes made before these tags existed were all built with the graphdriver store (the only one
 * the golden build and Packer used): no tag means graphdriver.
 */
import { VolumeTag } from "../tags.ts";
import { engineMajorVersion, type ImageStore } from "./engine.ts";

export const IMAGE_STORES: readonly ImageStore[] = ["graphdriver", "containerd"];

/** The store a volume without an `ebs-cache:image-store` tag was built with. */
export const UNTAGGED_STORE: ImageStore = "graphdriver";

/** The host's dockerd: the store it uses (daemon.json `features.containerd-snapshotter`) and its version. */
export interface HostStore {
  store: ImageStore;
  /** `dockerd --version`'s version, e.g. `28.5.2`; undefined when unknown. */
  engineVersion?: string;
}

/**
 * The store the host's daemon.json asks for: containerd only with
 * `features.containerd-snapshotter: true`. Without the key, graphdriver on every engine, docker
 * 29 included: 29 chooses its default by what it finds in the data-root (graphdriver when images
 * from an older engine are there), and the agent changes the data-root under it, so the agent
 * does not guess: it pins graphdriver (DaemonConfig.setImageStore writes `false` on 29+), and a
 * host that wants the containerd store says so in daemon.json.
 */
export function configuredStore(daemonJson: Readonly<Record<string, unknown>>): ImageStore {
  const features = daemonJson.features;
  if (typeof features !== "object" || features === null || Array.isArray(features)) return "graphdriver";
  return (features as Record<string, unknown>)["containerd-snapshotter"] === true ? "containerd" : "graphdriver";
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
        `retag the volume with ${VolumeTag.imageStore}=graphdriver or containerd after checking how its images ` +
        `were built, or let gc retire it`,
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

/**
 * Candidates in selection order as far as the store goes: volumes that fit, those built by the
 * host's engine major first (stable: the caller's order otherwise); those that do not fit are
 * returned apart with their reason, never as candidates.
 */
export function orderByStore<T>(
  volumes: readonly T[],
  tagsOf: (volume: T) => Readonly<Record<string, string>>,
  host: HostStore,
): { fitting: T[]; mismatched: Array<{ volume: T; reason: string; remediation: string }> } {
  const same: T[] = [];
  const other: T[] = [];
  const mismatched: Array<{ volume: T; reason: string; remediation: string }> = [];
  for (const volume of volumes) {
    const fit = storeFit(tagsOf(volume), host);
    if (!fit.fits) mismatched.push({ volume, reason: fit.reason, remediation: fit.remediation });
    else (fit.sameEngine ? same : other).push(volume);
  }
  return { fitting: [...same, ...other], mismatched };
}

/** The tags that record how a volume's images were built (golden build, Packer pool volumes). */
export function storeTags(built: { store: ImageStore; engineVersion: string }): Record<string, string> {
  return { [VolumeTag.imageStore]: built.store, [VolumeTag.engineVersion]: built.engineVersion };
}
