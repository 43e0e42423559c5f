/**
 * The workspace record on the volume itself: `.ebs-cache-agent/workspace.json`, beside the
 * activation marker, the same record the first boot phase keeps in the host's state folder
 * (workspace-record.ts) plus the volume's id. The state folder can fail (full, read-only, wiped);
 * the volume the record is about carries its own copy, so phase 2 and the release, which find it
 * mounted where phase 1 mounted it, still know what it was chosen for. Only a copy of this
 * activation, on a volume mounted below the mount root under its own id, is used.
 *
 * On the volume: reached through src/host/volume-paths.ts, never through a link.
 */
import { AGENT_SUBDIR } from "../layout.ts";
import { join } from "node:path";
import { writeFileAtomic } from "../fs-atomic.ts";
import { fileSystemOf, listBeneath, mkdirBeneath, readFileBeneath } from "../host/volume-paths.ts";
import {
  RECORD_FILE,
  sameActivation,
  VOLUME_ID,
  workspaceRecordOf,
  workspaceRecordText,
  type Activation,
  type WorkspaceRecord,
} from "./workspace-record.ts";

/** Writes the record on the volume mounted at `volumeRoot` (atomically), naming the volume. */
export async function writeVolumeRecord(volumeRoot: string, volumeId: string, record: WorkspaceRecord): Promise<void> {
  const folder = await mkdirBeneath(volumeRoot, AGENT_SUBDIR);
  await writeFileAtomic(join(folder, RECORD_FILE), workspaceRecordText({ ...record, volumeId }));
}

/**
 * The record of this activation on a volume mounted at `<mountRoot>/<volume id>`: none when no
 * mounted volume carries one; a problem when one is unreadable, or when two volumes each carry
 * one (which one the run is about cannot be told). Never throws.
 */
export async function findVolumeRecord(
  mountRoot: string,
  activation: Activation,
): Promise<{ record?: WorkspaceRecord; problem?: string }> {
  return recordsBelow(mountRoot, activation).catch((error: unknown) => ({
    problem: `the workspace records on the volumes below ${mountRoot}: ${(error as Error).message}`,
  }));
}

async function recordsBelow(
  mountRoot: string,
  activation: Activation,
): Promise<{ record?: WorkspaceRecord; problem?: string }> {
  const entries = await listBeneath(mountRoot, "");
  const hostDevice = await fileSystemOf(mountRoot);
  const found: WorkspaceRecord[] = [];
  const problems: string[] = [];
  for (const entry of entries) {
    if (!entry.isDirectory() || !VOLUME_ID.test(entry.name)) continue;
    const volumeRoot = join(mountRoot, entry.name);
    // A folder of the mount root's own filesystem is a mount point with nothing mounted.
    if ((await fileSystemOf(volumeRoot)) === hostDevice) continue;
    const text = await readFileBeneath(volumeRoot, join(AGENT_SUBDIR, RECORD_FILE), 64 * 1024).catch(
      (error: unknown) => {
        problems.push(`${entry.name}: ${RECORD_FILE} unreadable: ${(error as Error).message}`);
        return undefined;
      },
    );
    if (text === undefined) continue;
    const { record, problem } = workspaceRecordOf(text);
    if (problem) problems.push(`${entry.name}: ${problem}`);
    else if (record && record.volumeId === entry.name && sameActivation(record, activation)) found.push(record);
  }
  if (found.length > 1)
    return { problem: `${found.map((r) => r.volumeId).join(" and ")} each carry a record of this activation` };
  if (found[0]) return { record: found[0] };
  return problems.length > 0 ? { problem: problems.join("; ") } : {};
}
