/**
 * The build's manifest: a local JSON file naming the ClientToken StartSnapshot is asked with
 * (written before it is asked), then the snapshot an upload writes and the blocks put to it so
 * far (a killed upload resumes from it), and once completed (read back and found to
 * hold the image), every block the image holds (the next generation's upload reads it as its
 * parent's content and puts only what differs). Pure: reading and writing the file is
 * src/host/snapshot-manifest.ts.
 */
import { AgentError, ExitCode } from "../../errors.ts";
import { EBS_BLOCK_BYTES, blocksOfVolume, type BlockHashes } from "./plan.ts";

/**
 * Still @1 since `starting` came: a status added, every manifest written before read as it was
 * (an older agent refuses a `starting` one by its status, naming it, and reads the rest).
 */
export const MANIFEST_FORMAT = "ebs-cache-agent/snapshot-manifest@1";

/** What every manifest holds, whatever its status. */
interface ManifestBody {
  format: typeof MANIFEST_FORMAT;
  /** The snapshot this one was started from (absent: a full upload). */
  parentSnapshotId?: string;
  /** StartSnapshot's ClientToken: a StartSnapshot repeated after a kill returns the same snapshot. */
  clientToken: string;
  volumeSizeGiB: number;
  blockSize: number;
  /** The image's size in bytes and its blocks holding data: index → base64 SHA-256. */
  imageBytes: number;
  blocks: Record<string, string>;
  /** Blocks put to this snapshot, index → the hash put (zeros included). */
  written: Record<string, string>;
  tags: Record<string, string>;
  /** The read-back check of a completed manifest: blocks EBS listed, and how many were read back and compared. */
  verified?: { listed: number; read: number; all: boolean };
}

/**
 * Written before StartSnapshot is asked, with the ClientToken it is asked with: a kill before its
 * answer is recorded leaves the token named, and the rerun asks it again (the same snapshot back,
 * or a first one if the request never reached EBS). No snapshot yet, so nothing written.
 */
export interface StartingManifest extends ManifestBody {
  status: "starting";
  snapshotId?: undefined;
}

/**
 * uploading: blocks are being put; completing: CompleteSnapshot was accepted, the read-back check
 * is what is left; completed: the snapshot was read back and holds the image (a parent for the
 * next); rejected: it was read back and does not hold the image (deleted, or left tagged
 * unverified): the same command run again uploads anew, never asking its ClientToken again.
 */
export interface StartedManifest extends ManifestBody {
  status: "uploading" | "completing" | "completed" | "rejected";
  snapshotId: string;
}

export type SnapshotManifest = StartingManifest | StartedManifest;

const STATUSES: readonly SnapshotManifest["status"][] = [
  "starting",
  "uploading",
  "completing",
  "completed",
  "rejected",
];

/** A manifest that cannot be read as one: nothing is uploaded. */
export class ManifestError extends AgentError {
  constructor(path: string, problem: string) {
    super(
      `snapshot manifest ${path}: ${problem}`,
      "give the manifest this command wrote (or a new path for a new build); a manifest is never repaired in place",
      ExitCode.usage,
    );
  }
}

const SNAPSHOT_ID = /^snap-[0-9a-f]{8,17}$/;
const SHA256_B64 = /^[A-Za-z0-9+/]{43}=$/;
const INDEX = /^(0|[1-9][0-9]{0,9})$/;

function hashes(value: unknown, field: string, problems: string[]): Record<string, string> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    problems.push(`${field} is not an object`);
    return {};
  }
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) {
    if (!INDEX.test(k) || typeof v !== "string" || !SHA256_B64.test(v)) {
      problems.push(`${field}.${k.slice(0, 20)} is not a block index with a base64 SHA-256`);
      break;
    }
    out[k] = v;
  }
  return out;
}

/** Checks parsed JSON; throws ManifestError naming the first problems. */
export function parseManifest(path: string, json: unknown): SnapshotManifest {
  const problems: string[] = [];
  const m = (typeof json === "object" && json !== null ? json : {}) as Record<string, unknown>;
  if (m.format !== MANIFEST_FORMAT) problems.push(`format is not ${MANIFEST_FORMAT}`);
  if (!STATUSES.includes(m.status as SnapshotManifest["status"]))
    problems.push(`status is none of ${STATUSES.join(", ")}`);
  const starting = m.status === "starting";
  // A starting manifest is written before StartSnapshot answers: a snapshot named, or blocks
  // recorded put, would be a record of something that cannot have happened yet.
  if (starting && m.snapshotId !== undefined)
    problems.push("a starting manifest names a snapshotId (only one StartSnapshot answered does)");
  else if (!starting && (typeof m.snapshotId !== "string" || !SNAPSHOT_ID.test(m.snapshotId)))
    problems.push("snapshotId is not snap-…");
  if (
    m.parentSnapshotId !== undefined &&
    (typeof m.parentSnapshotId !== "string" || !SNAPSHOT_ID.test(m.parentSnapshotId))
  )
    problems.push("parentSnapshotId is not snap-…");
  if (typeof m.clientToken !== "string" || m.clientToken.length === 0 || m.clientToken.length > 64)
    problems.push("clientToken is not a token");
  for (const key of ["volumeSizeGiB", "blockSize", "imageBytes"] as const) {
    if (!Number.isSafeInteger(m[key]) || (m[key] as number) <= 0) problems.push(`${key} is not a positive integer`);
  }
  const blocks = hashes(m.blocks, "blocks", problems);
  const written = hashes(m.written, "written", problems);
  // The counts must fit the volume the manifest names: its blocks, 512 KiB each.
  if (m.blockSize !== undefined && m.blockSize !== EBS_BLOCK_BYTES)
    problems.push(`blockSize is not ${EBS_BLOCK_BYTES}`);
  if (Number.isSafeInteger(m.volumeSizeGiB) && (m.volumeSizeGiB as number) > 0) {
    const volumeBlocks = blocksOfVolume(m.volumeSizeGiB as number);
    const outside = [...Object.keys(blocks), ...Object.keys(written)].find((k) => Number(k) >= volumeBlocks);
    if (outside !== undefined) problems.push(`block ${outside} is outside a volume of ${String(m.volumeSizeGiB)} GiB`);
    if (Number.isSafeInteger(m.imageBytes) && (m.imageBytes as number) > volumeBlocks * EBS_BLOCK_BYTES)
      problems.push(`imageBytes is more than a volume of ${String(m.volumeSizeGiB)} GiB holds`);
  }
  if (starting && Object.keys(written).length > 0)
    problems.push("a starting manifest records blocks written (none is put before StartSnapshot answered)");
  if (starting && m.verified !== undefined) problems.push("a starting manifest records a read-back check");
  const tags = m.tags;
  if (typeof tags !== "object" || tags === null || Object.values(tags).some((v) => typeof v !== "string"))
    problems.push("tags is not an object of strings");
  if (problems.length > 0) throw new ManifestError(path, problems.slice(0, 3).join("; "));
  return { ...(m as unknown as SnapshotManifest), blocks, written, tags: tags as Record<string, string> };
}

export function toMap(record: Record<string, string>): Map<number, string> {
  return new Map(Object.entries(record).map(([k, v]) => [Number(k), v]));
}

export function toRecord(map: BlockHashes): Record<string, string> {
  return Object.fromEntries([...map.entries()].sort(([a], [b]) => a - b).map(([k, v]) => [String(k), v]));
}
