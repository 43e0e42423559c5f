/**
 * The activation marker and the data-root folder on a mounted volume (the VolumeMarker port):
 * read and written through volume-paths.ts, never through a link, the marker replaced
 * atomically so that a kill leaves the old one or the new one.
 */
import { basename, dirname, join } from "node:path";
import type { VolumeMarker } from "../agent/ports.ts";
import { writeFileAtomic } from "../fs-atomic.ts";
import { AGENT_SUBDIR } from "../layout.ts";
import { mkdirBeneath, readFileBeneath, resolveBeneath } from "./volume-paths.ts";

/** The marker's file in the agent's folder on the volume. */
export const MARKER_FILE = "prepared-for";
/** A marker is one line of JSON: anything longer is not one. */
const MARKER_MAX_BYTES = 1024;

export const volumeMarker: VolumeMarker = {
  readMarker: (volumeRoot) => readFileBeneath(volumeRoot, join(AGENT_SUBDIR, MARKER_FILE), MARKER_MAX_BYTES),
  async writeMarker(volumeRoot, text) {
    const folder = await mkdirBeneath(volumeRoot, AGENT_SUBDIR);
    await writeFileAtomic(join(folder, MARKER_FILE), text);
  },
  async dataRootInitialized(dataRoot) {
    return (await resolveBeneath(dirname(dataRoot), join(basename(dataRoot), "image"))).kind !== "missing";
  },
  async createDataRoot(dataRoot) {
    await mkdirBeneath(dirname(dataRoot), basename(dataRoot), 0o711);
  },
};
