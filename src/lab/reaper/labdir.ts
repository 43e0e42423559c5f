/**
 * Lab root folders. Every lab lives in its own folder under a base folder, and carries an owner
 * record naming the process that owns it, so that a lab whose owner died (crash, SIGKILL, a
 * killed test) can be told apart from one that is still in use by a test running in parallel.
 *
 * Layout of a root:
 *   owner.json                 the owner's identity (see procinfo.ts)
 *   volumes/<vol-id>.img       sparse volume images
 *   snapshots/<snap-id>.img    sparse snapshot images
 *   hosts/<instance-id>/       an instance's root: dev/disk/by-id/, sys/
 *   pids/<name>.json           processes the lab started, killed when it is reaped
 *   state/                     small state files (e.g. loop attachments) for cleanup after a crash
 * Other parts of the lab may add folders; the whole root is removed when the lab is reaped.
 */
import { mkdir, mkdtemp, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { parseIdentity, processIdentity, type ProcessIdentity } from "./procinfo.ts";

/** Where lab roots live unless `EBS_CACHE_LAB_BASE` says otherwise. */
export const DEFAULT_LAB_BASE = "/var/tmp/ebs-cache-lab";

/** The owner record's file name inside a root. */
export const OWNER_FILE = "owner.json";

/** Prefix of a root still being created: it has no owner record yet, or just got one. */
export const CREATING_PREFIX = ".creating-";

/** The base folder for lab roots: `EBS_CACHE_LAB_BASE`, else /var/tmp/ebs-cache-lab. */
export function labBase(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env.EBS_CACHE_LAB_BASE?.trim();
  return fromEnv ? fromEnv : DEFAULT_LAB_BASE;
}

/** The owner record stored in `<root>/owner.json`. */
export interface LabOwner extends ProcessIdentity {
  name: string;
  createdAt: string;
}

/** Ids become file names: only plain ids are allowed, never a path. */
const ID_PATTERN = /^(vol|snap|i)-[0-9A-Za-z]+$/;

/** Throws unless `id` is a plain EC2-style id with the expected prefix (no "/", no ".."). */
export function assertLabId(id: string, prefix: "vol" | "snap" | "i"): void {
  if (!ID_PATTERN.test(id) || !id.startsWith(`${prefix}-`)) {
    throw new Error(`invalid ${prefix} id ${JSON.stringify(id)}: expected ${prefix}-<letters and digits>`);
  }
}

/** Paths of a lab root's parts. */
export function labPaths(root: string) {
  return {
    root,
    owner: join(root, OWNER_FILE),
    volumes: join(root, "volumes"),
    snapshots: join(root, "snapshots"),
    hosts: join(root, "hosts"),
    pids: join(root, "pids"),
    state: join(root, "state"),
  };
}

/** `<root>/volumes/<vol-id>.img` */
export function volumeImagePath(root: string, volumeId: string): string {
  assertLabId(volumeId, "vol");
  return join(labPaths(root).volumes, `${volumeId}.img`);
}

/** `<root>/snapshots/<snap-id>.img` */
export function snapshotImagePath(root: string, snapshotId: string): string {
  assertLabId(snapshotId, "snap");
  return join(labPaths(root).snapshots, `${snapshotId}.img`);
}

/** `<root>/hosts/<instance-id>`: the folder standing for an instance's root filesystem. */
export function hostRootPath(root: string, instanceId: string): string {
  assertLabId(instanceId, "i");
  return join(labPaths(root).hosts, instanceId);
}

/** Creates an instance's root with the folders the agent watches (`dev/disk/by-id`, `sys`). */
export async function createHostRoot(root: string, instanceId: string): Promise<string> {
  const hostRoot = hostRootPath(root, instanceId);
  await mkdir(join(hostRoot, "dev", "disk", "by-id"), { recursive: true });
  await mkdir(join(hostRoot, "sys", "class", "block"), { recursive: true });
  return hostRoot;
}

/** A name safe as part of a folder name. */
function safeName(name: string): string {
  const cleaned = name.replace(/[^0-9A-Za-z_.-]/g, "-").replace(/^[.-]+/, "");
  return cleaned.slice(0, 40) || "lab";
}

/**
 * Creates a new lab root under `base`, owned by the calling process. The folder is made under a
 * `.creating-` name, gets its owner record, and only then is renamed into place: a root visible
 * under its final name always says who owns it, so a parallel reaper never guesses.
 */
export async function createLabRoot(base: string, name = "lab"): Promise<string> {
  await mkdir(base, { recursive: true });
  const owner = await processIdentity();
  if (!owner) throw new Error("cannot read this process's identity from /proc");
  const temp = await mkdtemp(join(base, CREATING_PREFIX));
  const record: LabOwner = { ...owner, name, createdAt: new Date().toISOString() };
  await writeFile(join(temp, OWNER_FILE), JSON.stringify(record) + "\n", { flag: "wx" });
  const paths = labPaths(temp);
  for (const dir of [paths.volumes, paths.snapshots, paths.hosts, paths.pids, paths.state]) await mkdir(dir);
  const root = join(
    base,
    `${safeName(name)}-${temp.slice(temp.lastIndexOf(CREATING_PREFIX) + CREATING_PREFIX.length)}`,
  );
  await rename(temp, root);
  return root;
}

/** Reads a root's owner record; undefined when it is missing or malformed. */
export async function readLabOwner(root: string): Promise<LabOwner | undefined> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readFile(join(root, OWNER_FILE), "utf8"));
  } catch {
    return undefined;
  }
  const identity = parseIdentity(parsed);
  if (!identity) return undefined;
  const { name, createdAt } = parsed as Record<string, unknown>;
  return { ...identity, name: String(name ?? "lab"), createdAt: String(createdAt ?? "") };
}
