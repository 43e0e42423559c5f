/**
 * What the first boot phase leaves for the second: `<paths.stateDir>/prepared.json`, the volume
 * it identified, mounted and switched daemon.json to, in this boot of the machine (the kernel's
 * boot id). The second phase, seconds later, finds the volume mounted there and daemon.json
 * pointing at it, and need not identify, mount, grow, clean and switch it again
 * (`resume-prepared`). Another boot id (a reboot), instance or volume makes the record say
 * nothing; anything not as recorded makes the second phase do every check.
 */
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { makeFolderFor, writeFileAtomic } from "../../fs-atomic.ts";

export const PREPARED_FILE = "prepared.json";

export interface PreparedRecord {
  version: 1;
  /** /proc/sys/kernel/random/boot_id when phase 1 prepared the volume. */
  bootId: string;
  instanceId: string;
  volumeId: string;
  device: string;
  mountPoint: string;
  dataRoot: string;
  preparedAt: string;
}

/** Pure: the record when it is this boot's and this instance's (the planner matches the volume). */
export function preparedInThisBoot(
  record: PreparedRecord | undefined,
  now: { bootId: string | undefined; instanceId: string },
): PreparedRecord | undefined {
  if (!record || now.bootId === undefined) return undefined;
  return record.bootId === now.bootId && record.instanceId === now.instanceId ? record : undefined;
}

/** The record, or undefined when there is none or it does not parse. */
export async function readPreparedRecord(stateDir: string): Promise<PreparedRecord | undefined> {
  try {
    const parsed = JSON.parse(await readFile(join(stateDir, PREPARED_FILE), "utf8")) as Partial<PreparedRecord> | null;
    const fields = ["bootId", "instanceId", "volumeId", "device", "mountPoint", "dataRoot"] as const;
    return parsed?.version === 1 && fields.every((key) => typeof parsed[key] === "string")
      ? (parsed as PreparedRecord)
      : undefined;
  } catch {
    return undefined;
  }
}

/** Writes the record atomically (src/fs-atomic.ts). */
export async function writePreparedRecord(stateDir: string, record: PreparedRecord): Promise<void> {
  await makeFolderFor(stateDir, PREPARED_FILE);
  await writeFileAtomic(join(stateDir, PREPARED_FILE), JSON.stringify(record, null, 2) + "\n");
}

/** Removes the record: a first phase starting over vouches for nothing until it is done. */
export async function removePreparedRecord(stateDir: string): Promise<void> {
  await rm(join(stateDir, PREPARED_FILE), { force: true });
}
