/**
 * What `snapshot upload` is given as the pool's image, looked at before any call to EBS, read only
 * and without a mount (no root): a regular file holding the agent's cache file system as a boot
 * identifies it (src/host/identify.ts: the signature probe and `xfs_db -r`'s layout, judged by
 * the boot's own judgeSignature and judgeLayout), whole (the file holds all the file system's
 * blocks), and the image set record the build left on it, read through xfs_db's block map of the
 * file (no mount: the upload needs no root).
 */
import { open, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { AgentError, ExitCode } from "../errors.ts";
import { run } from "../exec.ts";
import { AGENT_SUBDIR, DATA_ROOT_SUBDIR, FS_LABEL } from "../layout.ts";
import type { Logger } from "../log.ts";
import { probeImageFile } from "./filesystem.ts";
import { judgeLayout, judgeSignature, parseXfsSuperblock, readXfsImageLayout } from "./identify.ts";
import { writeFileAtomic } from "../fs-atomic.ts";
import { mkdirBeneath } from "./volume-paths.ts";

/** Where the build records the image set on the image (src/agent/snapshot/image-set-record.ts). */
export const IMAGE_SET_RECORD_PATH = `/${AGENT_SUBDIR}/image-set.json`;
/** Writes the image set record onto the volume the build has mounted at `mountPoint` (never through a link). */
export async function writeImageSetRecord(mountPoint: string, text: string): Promise<void> {
  const folder = await mkdirBeneath(mountPoint, AGENT_SUBDIR);
  await writeFileAtomic(join(folder, IMAGE_SET_RECORD_PATH.split("/").pop()!), text);
}

/** A record larger than this is not one the build wrote. */
const MAX_RECORD_BYTES = 64 * 1024;
const START_BYTES = 1024 * 1024;
const XFS_DB_TIMEOUT_MS = 60_000;

/** The file is not a pool image: nothing was asked of EBS. */
export class PoolImageError extends AgentError {
  readonly image: string;

  constructor(image: string, found: string, options?: { cause?: unknown }) {
    super(
      `${image} ${found}, not a pool image (an XFS file system labelled ${JSON.stringify(FS_LABEL)} holding ` +
        `${DATA_ROOT_SUBDIR}/, as \`snapshot build\` makes it): nothing was uploaded`,
      "give the image `snapshot build` wrote (--image), unmounted",
      ExitCode.usage,
      options,
    );
    this.image = image;
  }
}

/** What the upload learns of its image (src/agent/snapshot/deps.ts InspectedImage). */
export interface PoolImage {
  bytes: number;
  /** The XFS file system's size (its superblock's). */
  fsBytes: number;
  /** The image set record's text; undefined when the image has none. */
  imageSetRecord: string | undefined;
}

/** The image checked as a pool image (throws PoolImageError), its sizes and its image set record. */
export async function inspectPoolImage(path: string, options: { log?: Logger } = {}): Promise<PoolImage> {
  const image = resolve(path);
  const info = await stat(image).catch((error: NodeJS.ErrnoException) => {
    throw new PoolImageError(image, error.code === "ENOENT" ? "does not exist" : `cannot be read (${error.message})`, {
      cause: error,
    });
  });
  if (!info.isFile()) throw new PoolImageError(image, "is not a regular file");
  const start = readStart(image);
  const contents = await probeImageFile(image, start, options).catch((error: unknown) => {
    throw new PoolImageError(image, `cannot be probed (${(error as Error).message})`, { cause: error });
  });
  const signature = judgeSignature(contents, false);
  if (signature.verdict === "blank") throw new PoolImageError(image, "holds no file system (zeros)");
  if (signature.verdict === "foreign") throw new PoolImageError(image, `holds ${signature.found}`);
  const superblock = parseXfsSuperblock(await start);
  if (!superblock || superblock.label !== FS_LABEL)
    throw new PoolImageError(image, "does not start with an XFS superblock labelled as the builder labels it");
  if (superblock.dataBytes > info.size)
    throw new PoolImageError(
      image,
      `is ${info.size} bytes, but its file system ${superblock.dataBytes} (the file was cut short)`,
    );
  const layout = await readXfsImageLayout(image, options).catch((error: unknown) => {
    throw new PoolImageError(image, `has an XFS layout xfs_db cannot read (${(error as Error).message})`, {
      cause: error,
    });
  });
  const verdict = judgeLayout(layout, false);
  if (verdict.verdict === "foreign") throw new PoolImageError(image, `holds ${verdict.found}`);
  return {
    bytes: info.size,
    fsBytes: superblock.dataBytes,
    imageSetRecord: await readFileInImage(image, IMAGE_SET_RECORD_PATH, options),
  };
}

async function readStart(image: string): Promise<Buffer> {
  const handle = await open(image, "r");
  try {
    const buffer = Buffer.alloc(START_BYTES);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

/** What xfs_db says of a file: the geometry to place its blocks, and its extents. */
export interface XfsFileMap {
  blockSize: number;
  agBlocks: number;
  size: number;
  mode: number;
  /** File offset, start (allocation group, block in it) and length, in file system blocks; unwritten read as zeros. */
  extents: { offset: number; ag: number; agBlock: number; count: number; unwritten: boolean }[];
}

/**
 * Parses `xfs_db -r -f IMG -c "sb 0" -c "print blocksize agblocks" -c "inode N" -c "print core.size
 * core.mode" -c bmap` (pure; undefined when there is no such inode's core).
 */
export function parseXfsFileMap(text: string): XfsFileMap | undefined {
  const field = (name: string) => {
    const match = new RegExp(`^${name.replace(".", "\\.")} = (\\d+)`, "m").exec(text);
    return match ? Number(match[1]) : undefined;
  };
  const blockSize = field("blocksize");
  const agBlocks = field("agblocks");
  const size = field("core.size");
  const mode = /^core\.mode = (0[0-7]+)$/m.exec(text);
  if (blockSize === undefined || agBlocks === undefined) throw new Error("xfs_db printed no blocksize or agblocks");
  if (size === undefined || !mode) return undefined;
  const extents = [
    ...text.matchAll(/^data offset (\d+) startblock \d+ \((\d+)\/(\d+)\) count (\d+) flag (\d+)$/gm),
  ].map((m) => ({
    offset: Number(m[1]),
    ag: Number(m[2]),
    agBlock: Number(m[3]),
    count: Number(m[4]),
    unwritten: m[5] !== "0",
  }));
  return { blockSize, agBlocks, size, mode: parseInt(mode[1]!, 8), extents };
}

/**
 * The entries of a directory as xfs_db shows them (pure): a short-form directory's `print u3`
 * (`u3.sfdir3.list[k].name = "…"`, `u3.sfdir3.list[k].inumber.i4 = N`), or `ls` of the current
 * inode (`<offset> <inode> <type> <hash> <namelen> <name>`).
 */
export function parseDirectoryEntries(text: string): { name: string; inode: number }[] {
  const names = new Map<string, string>();
  const inodes = new Map<string, number>();
  for (const m of text.matchAll(/^u3\.sfdir\d\.list\[(\d+)\]\.name = "(.*)"$/gm)) names.set(m[1]!, m[2]!);
  for (const m of text.matchAll(/^u3\.sfdir\d\.list\[(\d+)\]\.inumber\.i[48] = (\d+)$/gm))
    inodes.set(m[1]!, Number(m[2]));
  const entries = [...names].flatMap(([k, name]) => (inodes.has(k) ? [{ name, inode: inodes.get(k)! }] : []));
  for (const m of text.matchAll(/^\s*\d+\s+(\d+)\s+\S+\s+0x[0-9a-f]+\s+(\d+)\s(.*)$/gm)) {
    const name = m[3]!.slice(0, Number(m[2]));
    if (name !== "." && name !== "..") entries.push({ name, inode: Number(m[1]) });
  }
  return entries;
}

/**
 * A small regular file of the file system in `image` (its text), read through xfs_db without a
 * mount; undefined when there is no such file. The path is walked inode by inode from the root
 * (`inode N`, a short-form directory's entries printed, a longer one listed), never with xfs_db's
 * `path`, which an older xfs_db cannot take on a file system a newer mkfs.xfs made (parent
 * pointers: xfsprogs 6.1 crashes on them, 7.2 makes them): the upload's machine may well be older
 * than the build's. The file's blocks are read where its block map puts them: allocation group
 * `a` starts at block `a × agblocks` of the image.
 */
export async function readFileInImage(
  image: string,
  path: string,
  options: { log?: Logger } = {},
): Promise<string | undefined> {
  const xfsDb = async (...commands: string[]) => {
    try {
      const result = await run("xfs_db", ["-r", "-f", ...commands.flatMap((c) => ["-c", c]), image], {
        log: options.log,
        check: false,
        timeoutMs: XFS_DB_TIMEOUT_MS,
      });
      return result.stdout;
    } catch (error) {
      throw new PoolImageError(
        image,
        `cannot be read by this machine's xfs_db (${(error as Error).message.split("\n")[0]}): its xfsprogs may be ` +
          "older than the mkfs.xfs that made the image",
        { cause: error },
      );
    }
  };
  const geometry = await xfsDb("sb 0", "print blocksize agblocks rootino");
  const root = /^rootino = (\d+)$/m.exec(geometry);
  if (!root) throw new PoolImageError(image, `has no root inode xfs_db can print (${geometry.trim().slice(0, 200)})`);
  let inode = Number(root[1]);
  for (const name of path.split("/").filter((part) => part !== "")) {
    const shown = await xfsDb(`inode ${inode}`, "print core.format core.mode", "print u3");
    if (!/^core\.mode = 040[0-7]+$/m.test(shown)) return undefined;
    const listing = /^core\.format = 1 \(local\)$/m.test(shown) ? shown : await xfsDb(`inode ${inode}`, "ls");
    const entry = parseDirectoryEntries(listing).find((e) => e.name === name);
    if (!entry) return undefined;
    inode = entry.inode;
  }
  let map: XfsFileMap | undefined;
  try {
    map = parseXfsFileMap(
      await xfsDb("sb 0", "print blocksize agblocks", `inode ${inode}`, "print core.size core.mode", "bmap"),
    );
  } catch (error) {
    throw new PoolImageError(image, `cannot be read by xfs_db (${(error as Error).message})`);
  }
  if (!map) return undefined;
  if ((map.mode & 0o170000) !== 0o100000) throw new PoolImageError(image, `holds ${path}, but not as a regular file`);
  if (map.size > MAX_RECORD_BYTES) throw new PoolImageError(image, `holds a ${path} of ${map.size} bytes`);
  const data = Buffer.alloc(map.size);
  const handle = await open(image, "r");
  try {
    for (const extent of map.extents) {
      const from = extent.offset * map.blockSize;
      const length = Math.min(extent.count * map.blockSize, map.size - from);
      if (length <= 0 || extent.unwritten) continue;
      const at = (extent.ag * map.agBlocks + extent.agBlock) * map.blockSize;
      for (let done = 0; done < length;) {
        const { bytesRead } = await handle.read(data, from + done, length - done, at + done);
        if (bytesRead === 0) throw new PoolImageError(image, `ends inside ${path}`);
        done += bytesRead;
      }
    }
  } finally {
    await handle.close();
  }
  return data.toString("utf8");
}
