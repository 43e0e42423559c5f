/**
 * Preparing a volume's data-root once per instance. The first boot on a machine drops the
 * state that must not travel between machines (swarm identity, containers, networks); a reboot
 * or a re-run on the same instance must keep it, since by then it is this node's own. A marker
 * on the volume, written after the cleanup, records for which instance it was done.
 *
 * The marker and the data-root are on the volume: they are reached through
 * src/host/volume-paths.ts, never through a link (a marker folder linked to a host folder would
 * have the agent write there).
 */
import { basename, dirname, join } from "node:path";
import type { Logger } from "../../log.ts";
import { writeFileAtomic } from "../../fs-atomic.ts";
import { AGENT_SUBDIR } from "../../host/volume-layout.ts";
import { mkdirBeneath, readFileBeneath, resolveBeneath } from "../../host/volume-paths.ts";

const MARKER = "prepared-for";

/** The marker's place: beside the data-root, on the volume, out of docker's sight. */
export function preparedMarkerPath(dataRoot: string): string {
  return join(dirname(dataRoot), AGENT_SUBDIR, MARKER);
}

/** Runs `clean` unless the volume was already prepared for this instance; then records it. */
export async function prepareOncePerInstance(
  dataRoot: string,
  instanceId: string,
  clean: () => Promise<void>,
  log: Logger,
): Promise<"prepared" | "already"> {
  const volumeRoot = dirname(dataRoot);
  const previous = (await readFileBeneath(volumeRoot, join(AGENT_SUBDIR, MARKER), 256)) ?? "";
  if (previous === instanceId) {
    log.info("boot.data-root", "data-root already prepared for this instance: keeping its node state", { dataRoot });
    return "already";
  }
  await clean();
  const folder = await mkdirBeneath(volumeRoot, AGENT_SUBDIR);
  await writeFileAtomic(join(folder, MARKER), `${instanceId}\n`);
  log.info("boot.data-root", "machine-local state removed from the data-root", { dataRoot, previousInstance: previous || undefined });
  return "prepared";
}

/**
 * On a volume the agent created blank and formatted: creates the empty data-root folder and
 * returns true while docker has never initialized it (no `image/` yet), since there is nothing
 * to clean and the pool-volume cleanup would refuse a folder that is not a data-root yet. Once
 * docker has run on it, false: it is cleaned like any other volume.
 */
export async function createFreshDataRoot(dataRoot: string, log: Logger): Promise<boolean> {
  const volumeRoot = dirname(dataRoot);
  const name = basename(dataRoot);
  const initialized = (await resolveBeneath(volumeRoot, join(name, "image"))).kind !== "missing";
  if (initialized) return false;
  await mkdirBeneath(volumeRoot, name, 0o711);
  log.info("boot.data-root", "empty data-root created on the blank volume: docker initializes it", { dataRoot });
  return true;
}
