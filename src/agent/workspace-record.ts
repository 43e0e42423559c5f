/**
 * What the first boot phase took from osparc's labels tag, kept in `<paths.stateDir>/workspace.json`:
 * the autoscaler deletes the tag once the node has joined, so the second phase (`boot --no-claim`),
 * a reboot and the release at shutdown read this record instead. Written atomically (temp, fsync,
 * rename); read back with the same checks as the tag, since a file is no more trusted than a tag.
 *
 * A record speaks for **one activation** of its instance only: a stopped instance started again
 * (an osparc warm buffer) is a new tenant until its current tags say who it serves. One
 * activation is one instance id and one EC2 `LaunchTime` (DescribeInstances: StartInstances sets
 * it, a reboot does not); where the launch time is not known on both sides, one kernel boot id
 * (`/proc/sys/kernel/random/boot_id`: phase 1, phase 2 and the release at shutdown of one boot).
 * Anything else — another instance, another launch, neither known — is an earlier activation.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { makeFolderFor, writeFileAtomic } from "../fs-atomic.ts";
import { quote, validateWorkspaceId } from "../inputs.ts";
import { WORKSPACE_KEYS, type WorkspaceKey } from "../tags.ts";
import type { WorkspaceIds } from "./workspace-ids.ts";

export const RECORD_FILE = "workspace.json";

export interface WorkspaceRecord {
  /** The instance it was written on: a record of another instance (a copied disk) is not used. */
  instanceId: string;
  /** The activation it was written in (see above); absent in records written before they were kept. */
  launchTime?: string;
  bootId?: string;
  recordedAt: string;
  /** The workspace phase 1 asked for; absent: none (the pool). */
  ids?: WorkspaceIds;
  /** `<labels.prefix>.keep` / `.enabled` from the labels tag, when it carried them. */
  keep?: boolean;
  enabled?: boolean;
  /** The volume the copy on a volume is on (volume-record.ts); absent in the state folder's. */
  volumeId?: string;
}

/** Which activation a run belongs to: its instance, EC2's LaunchTime and the kernel's boot id, as far as known. */
export interface Activation {
  instanceId: string;
  launchTime?: string | undefined;
  bootId?: string | undefined;
}

/**
 * Whether the record was written in this activation (the rule above): same instance, and the
 * same launch time when both are known, else the same boot id when both are known, else not.
 */
export function sameActivation(
  record: Pick<WorkspaceRecord, "instanceId" | "launchTime" | "bootId">,
  now: Activation,
): boolean {
  if (record.instanceId !== now.instanceId) return false;
  if (record.launchTime !== undefined && now.launchTime !== undefined) return record.launchTime === now.launchTime;
  if (record.bootId !== undefined && now.bootId !== undefined) return record.bootId === now.bootId;
  return false;
}

/** An EC2 instance id, as records and markers must name one. */
export const INSTANCE_ID = /^i-[0-9a-f]{8,17}$/;
/** An EBS volume id. */
export const VOLUME_ID = /^vol-[0-9a-f]{8,17}$/;

export function workspaceRecordPath(stateDir: string): string {
  return join(stateDir, RECORD_FILE);
}

/** Checks a parsed record; a problem sentence when it cannot be used. */
export function parseWorkspaceRecord(
  raw: unknown,
): { ok: true; record: WorkspaceRecord } | { ok: false; problem: string } {
  const bad = (problem: string) => ({ ok: false as const, problem: `${RECORD_FILE}: ${problem}` });
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) return bad("not a JSON object");
  const r = raw as Record<string, unknown>;
  if (typeof r.instanceId !== "string" || !INSTANCE_ID.test(r.instanceId)) return bad("no valid instanceId");
  if (typeof r.recordedAt !== "string") return bad("no recordedAt");
  const record: WorkspaceRecord = { instanceId: r.instanceId, recordedAt: r.recordedAt };
  if (r.volumeId !== undefined) {
    if (typeof r.volumeId !== "string" || !VOLUME_ID.test(r.volumeId)) return bad("volumeId is not a volume id");
    record.volumeId = r.volumeId;
  }
  for (const field of ["launchTime", "bootId"] as const) {
    if (r[field] === undefined) continue;
    if (typeof r[field] !== "string" || r[field] === "") return bad(`${field} is not a non-empty string`);
    record[field] = r[field];
  }
  for (const flag of ["keep", "enabled"] as const) {
    if (r[flag] === undefined) continue;
    if (typeof r[flag] !== "boolean") return bad(`${flag} is not a boolean`);
    record[flag] = r[flag];
  }
  if (r.ids !== undefined) {
    if (typeof r.ids !== "object" || r.ids === null || Array.isArray(r.ids)) return bad("ids is not an object");
    const ids: Partial<Record<WorkspaceKey, string>> = {};
    for (const [key, value] of Object.entries(r.ids)) {
      if (!(WORKSPACE_KEYS as readonly string[]).includes(key)) return bad(`unknown id key ${quote(key)}`);
      const check = validateWorkspaceId(value, key);
      if (!check.ok) return bad(check.problem);
      ids[key as WorkspaceKey] = check.value;
    }
    if (Object.keys(ids).length > 0) record.ids = ids;
  }
  return { ok: true, record };
}

/** The record, undefined when there is none; a problem when it is there but unusable. */
export async function readWorkspaceRecord(stateDir: string): Promise<{ record?: WorkspaceRecord; problem?: string }> {
  let text: string;
  try {
    text = await readFile(workspaceRecordPath(stateDir), "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return {};
    return { problem: `${RECORD_FILE} unreadable: ${(error as Error).message}` };
  }
  return workspaceRecordOf(text);
}

/** A record's text, checked (parseWorkspaceRecord); a problem when it cannot be used. */
export function workspaceRecordOf(text: string): { record?: WorkspaceRecord; problem?: string } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { problem: `${RECORD_FILE}: not valid JSON` };
  }
  const parsed = parseWorkspaceRecord(raw);
  return parsed.ok ? { record: parsed.record } : { problem: parsed.problem };
}

/** The record's text as the agent writes it, in the state folder and on the volume alike. */
export function workspaceRecordText(record: WorkspaceRecord): string {
  return `${JSON.stringify(record, null, 2)}\n`;
}

/** Replaces the record atomically: a reader sees the old one or the new one, never half of one. */
export async function writeWorkspaceRecord(stateDir: string, record: WorkspaceRecord): Promise<void> {
  await makeFolderFor(stateDir, RECORD_FILE);
  await writeFileAtomic(workspaceRecordPath(stateDir), workspaceRecordText(record));
}
