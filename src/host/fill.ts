/**
 * How full a mounted filesystem is, from statfs(2): what the prune decides on and what the fill
 * metrics and `status` show. Only a filesystem mounted exactly at the mount point is measured:
 * statfs of a plain folder would answer for the filesystem that holds it (the root disk), and a
 * prune must never act on that figure.
 */
import { statfs } from "node:fs/promises";
import type { FilesystemFill } from "../agent/ports.ts";
import { mountAt } from "./mount.ts";

/** The figures of one statfs answer, as df counts them. Pure. */
export function fillOf(
  mountPoint: string,
  device: string,
  s: { bsize: number; blocks: number; bfree: number; bavail: number; files: number; ffree: number },
): FilesystemFill {
  const sizeBytes = s.blocks * s.bsize;
  const usedBytes = (s.blocks - s.bfree) * s.bsize;
  const availableBytes = s.bavail * s.bsize;
  return {
    mountPoint,
    device,
    sizeBytes,
    usedBytes,
    availableBytes,
    usedRatio: usedBytes + availableBytes > 0 ? usedBytes / (usedBytes + availableBytes) : 0,
    inodes: s.files,
    freeInodes: s.ffree,
  };
}

/** The fill of the filesystem mounted at `mountPoint`; undefined when nothing is mounted exactly there. */
export async function readFilesystemFill(mountPoint: string): Promise<FilesystemFill | undefined> {
  const mounted = await mountAt(mountPoint);
  if (!mounted) return undefined;
  return fillOf(mountPoint, mounted.source, await statfs(mountPoint));
}
