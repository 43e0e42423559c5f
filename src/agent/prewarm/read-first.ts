/**
 * The run begun at the mount (`prewarm --from-mount`) reads before it asks EC2. Its decision takes EC2's word
 * (DescribeVolumes, then the volume's initialization status): a few hundred milliseconds of a window that is only
 * docker's start long (1-1.5 s), in which a cold volume's first blocks are best fetched. So the node's images' files
 * are begun at once, on the volume the first phase recorded (mount-run.ts: this boot's record, with the volume's tags
 * as that phase saw them) and found mounted here, and the run's initialization takes those reads over when it reads
 * the same (host/volume-reads.ts); any other outcome (not cold after all, another volume, other images) stops them.
 * They only read: at worst a volume that turns out warm had a few of its blocks read once more.
 */
import { describeError } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import { VolumeTag } from "../../tags.ts";
import type { BegunReads, HostStorage, PrewarmReader } from "../ports.ts";
import { mountRunOfBoot } from "./mount-run.ts";
import { findMountedDevice } from "./observe.ts";
import { readDepths, type PrewarmSettings } from "./plan.ts";

export interface ReadFirstDeps {
  reader: PrewarmReader;
  storage: Pick<HostStorage, "findDevice" | "mountPointOf">;
  stateDir: string;
  /** This boot of the machine: a record of another boot says nothing. */
  bootId: string | undefined;
  log: Logger;
}

/**
 * Begins the wanted files' reads of the volume this boot's first phase mounted (undefined: no such record, the
 * volume is not mounted here, or the reader cannot begin reads ahead). `imagesOf`: the node's images, from the
 * volume's tags, as the run names them.
 */
export async function beginReadsAtMount(
  deps: ReadFirstDeps,
  settings: Pick<PrewarmSettings, "initialize" | "giveWay" | "strategy">,
  imagesOf: (volumeTags: Readonly<Record<string, string>>) => string[],
  signal: AbortSignal | undefined,
): Promise<BegunReads | undefined> {
  if (!deps.reader.beginWanted) return undefined;
  const recorded = await mountRunOfBoot(deps.stateDir, deps.bootId);
  // What the decision could not read at the mount whatever EC2 says: no reads ahead of it either.
  if (!recorded || settings.strategy === "off" || recorded.volumeTags[VolumeTag.initialized]) return undefined;
  const mounted = await findMountedDevice(deps.storage, recorded.volumeId).catch(() => undefined);
  if (!mounted) return undefined;
  // With the give-way settings: where the volume's throughput binds, the wanted reads give way as the others do.
  const depths = readDepths(settings, true);
  try {
    const begun = deps.reader.beginWanted(mounted, {
      ...depths,
      images: imagesOf(recorded.volumeTags),
      ...(signal ? { signal } : {}),
    });
    deps.log.info("prewarm.mount", "reading the node's images' files while EC2 is asked about the volume", {
      volume: recorded.volumeId,
      device: mounted.device,
    });
    return begun;
  } catch (error) {
    // Never the run's failure: it reads once it has decided, as without the record.
    deps.log.warning("prewarm.mount", `could not begin the reads before the decision: ${describeError(error)}`, {
      volume: recorded.volumeId,
    });
    return undefined;
  }
}

/** The reader whose initializations take `begun` over (when they read the same). */
export function takingOver(reader: PrewarmReader, begun: BegunReads | undefined): PrewarmReader {
  if (!begun) return reader;
  return {
    allocatedBytes: (target) => reader.allocatedBytes(target),
    check: (target, bounds) => reader.check(target, bounds),
    initialize: (target, mode, options) => reader.initialize(target, mode, { ...options, begun }),
  };
}
