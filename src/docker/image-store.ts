/**
 * The host's side of the image store: which store this host's dockerd uses (daemon.json) and the
 * tags that record how a volume's images were built. Whether a volume's images are visible to the
 * host, from those tags, is a volume rule (src/agent/volume-rules.ts `storeFit`): a data-root
 * built with the graphdriver store is empty to a dockerd using the containerd store, and the
 * reverse.
 */
import { VolumeTag } from "../tags.ts";
import type { ImageStore } from "./engine.ts";

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

/**
 * The host's store as a boot sees it before claiming: daemon.json's choice and the installed
 * engine's version, read side by side. A version that cannot be read is unknown (the selection
 * then takes no engine-major preference), never a failed boot.
 */
export async function readHostStore(sources: {
  daemonJson: () => Promise<Readonly<Record<string, unknown>>>;
  engineVersion: () => Promise<string | undefined>;
}): Promise<HostStore> {
  const [json, engineVersion] = await Promise.all([
    sources.daemonJson(),
    sources.engineVersion().catch(() => undefined),
  ]);
  return { store: configuredStore(json), ...(engineVersion ? { engineVersion } : {}) };
}

/** The tags that record how a volume's images were built (golden build, Packer pool volumes). */
export function storeTags(built: { store: ImageStore; engineVersion: string }): Record<string, string> {
  return { [VolumeTag.imageStore]: built.store, [VolumeTag.engineVersion]: built.engineVersion };
}
