/**
 * The record of a pre-warm run begun at the mount (`ebs-cache-agent prewarm --from-mount`), in
 * `<paths.stateDir>/prewarm-mount.json`: this boot of the machine, the volume (with its tags as the first phase saw
 * them: the run reads before it asks EC2, read-first.ts), and whether the boot has published the node yet (the run's
 * labels' gate).
 *
 * The run reads from the first phase's mount on, before docker starts, but publishes no label until the boot has
 * published the node (the second phase's `ready` or `warming`): a label before that would announce a node that has
 * not joined yet, and the boot's own publication would then overwrite the run's. The first phase writes the record
 * closed before it starts the run; the second phase finds it (a run to take over: no reads of its own, the run
 * stopped if the boot fails) and opens it once its labels are out. A record of another boot or volume says nothing.
 */
import { watch } from "node:fs";
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { makeFolderFor, writeFileAtomic } from "../../fs-atomic.ts";

export const MOUNT_RUN_FILE = "prewarm-mount.json";

/** Which run: this boot of the machine (/proc/sys/kernel/random/boot_id), this volume. */
export interface MountRunKey {
  bootId?: string;
  volumeId: string;
}

/** The key of the run on this volume in this boot of the machine (no boot id known: any boot's record matches). */
export function mountRunKey(volumeId: string, bootId: string | undefined): MountRunKey {
  return { volumeId, ...(bootId ? { bootId } : {}) };
}

interface MountRunRecord extends MountRunKey {
  /** The boot has published the node: the run publishes from now on. */
  published: boolean;
  at: string;
  /** The volume's tags as the first phase saw them: the run knows its images before it asks EC2 (read-first.ts). */
  volumeTags?: Record<string, string>;
}

const pathOf = (stateDir: string) => join(stateDir, MOUNT_RUN_FILE);

async function write(
  stateDir: string,
  key: MountRunKey,
  published: boolean,
  volumeTags: Record<string, string> | undefined,
): Promise<void> {
  await makeFolderFor(stateDir, MOUNT_RUN_FILE);
  const record: MountRunRecord = {
    ...key,
    published,
    at: new Date().toISOString(),
    ...(volumeTags ? { volumeTags } : {}),
  };
  await writeFileAtomic(pathOf(stateDir), JSON.stringify(record) + "\n");
}

async function readRecord(stateDir: string): Promise<Partial<MountRunRecord> | undefined> {
  try {
    const record = JSON.parse(await readFile(pathOf(stateDir), "utf8")) as Partial<MountRunRecord> | null;
    return typeof record === "object" && record !== null && !Array.isArray(record) ? record : undefined;
  } catch {
    return undefined;
  }
}

async function read(stateDir: string, key: MountRunKey): Promise<MountRunRecord | undefined> {
  const record = await readRecord(stateDir);
  const same = record?.volumeId === key.volumeId && (key.bootId === undefined || record.bootId === key.bootId);
  return same && typeof record.published === "boolean" ? (record as MountRunRecord) : undefined;
}

/** Tags as a record of strings, or undefined (a record written by hand, or by an older agent). */
function tagsOf(value: unknown): Record<string, string> | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const entries = Object.entries(value);
  return entries.every(([, v]) => typeof v === "string")
    ? (Object.fromEntries(entries) as Record<string, string>)
    : undefined;
}

/**
 * Records a run begun at the mount, its labels held (before the run is started), with the volume's tags as this phase
 * saw them.
 */
export function recordMountRun(stateDir: string, key: MountRunKey, volumeTags?: Record<string, string>): Promise<void> {
  return write(stateDir, key, false, volumeTags);
}

/**
 * The run begun at this boot's mount, as the first phase recorded it: its volume and that volume's tags. Undefined
 * without a boot id (a record could be another boot's), or for another boot's record, or one without tags.
 */
export async function mountRunOfBoot(
  stateDir: string,
  bootId: string | undefined,
): Promise<{ volumeId: string; volumeTags: Record<string, string> } | undefined> {
  if (bootId === undefined) return undefined;
  const record = await readRecord(stateDir);
  const volumeTags = tagsOf(record?.volumeTags);
  if (record?.bootId !== bootId || typeof record.volumeId !== "string" || !volumeTags) return undefined;
  return { volumeId: record.volumeId, volumeTags };
}

/** Whether a run was begun at this boot's mount of the volume. */
export async function mountRunBegun(stateDir: string, key: MountRunKey): Promise<boolean> {
  return (await read(stateDir, key)) !== undefined;
}

/** Opens the run's labels' gate: the boot has published the node. */
export async function openLabelsGate(stateDir: string, key: MountRunKey): Promise<void> {
  await write(stateDir, key, true, (await read(stateDir, key))?.volumeTags);
}

/** Whether the boot has published the node (a missing record, or another boot's, holds the labels). */
export async function labelsGateOpen(stateDir: string, key: MountRunKey): Promise<boolean> {
  return (await read(stateDir, key))?.published === true;
}

/**
 * Resolves once the gate is open for `key` (inotify on the state folder: no polling), or rejects with the signal's
 * reason when it is aborted first.
 */
export async function waitForLabelsGate(stateDir: string, key: MountRunKey, signal: AbortSignal): Promise<void> {
  await mkdir(stateDir, { recursive: true });
  signal.throwIfAborted();
  const watcher = watch(stateDir, { persistent: true });
  try {
    await new Promise<void>((resolve, reject) => {
      let checking = Promise.resolve();
      const check = () => {
        checking = checking.then(async () => {
          if (await labelsGateOpen(stateDir, key)) resolve();
        });
      };
      watcher.on("change", (_event, name) => {
        if (name === null || String(name) === MOUNT_RUN_FILE) check();
      });
      watcher.on("error", reject);
      signal.addEventListener("abort", () => reject(signal.reason as Error), { once: true });
      // The gate may have opened before the watch was in place.
      check();
    });
  } finally {
    watcher.close();
  }
}
