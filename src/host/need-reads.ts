/**
 * Where on the device the files of the pre-warm's need list lie (src/agent/prewarm/need.ts):
 * the list read from the volume through volume-paths (bounded, never through a link), each file
 * (a path from the volume's root: in the data-root, or in containerd's root for the containerd
 * image store) checked to be a regular file, walked from the volume's root without following a
 * link, before `filefrag` maps it to device ranges.
 * An entry that is missing, a link, behind one, on a filesystem mounted below the volume, or
 * that lstat cannot take (a name over 255 bytes) is left out (a layer's `lib -> usr/lib` is
 * image content, not a reason to refuse the volume); a list that does not validate is not used.
 */
import { AGENT_SUBDIR } from "../layout.ts";
import { join } from "node:path";
import { AgentError } from "../errors.ts";
import { MAX_READ_LIST_BYTES, parseReadList, READ_LIST_FILE, type ReadList } from "../read-list.ts";
import { run } from "../exec.ts";
import { mapConcurrently } from "../map-concurrently.ts";
import type { Logger } from "../log.ts";
import { parseFilefrag, type ByteRange } from "./extents.ts";
import { fileSystemOf, readFileBeneath, resolveBeneath, VolumePathError } from "./volume-paths.ts";

/**
 * What lstat answers for a listed path it cannot take, the entry's own fault: left out like a
 * missing file (resolveBeneath's other callers name fixed paths, and keep these as errors).
 * ENAMETOOLONG: a name over 255 bytes (the list bounds a path's characters, not a name's bytes),
 * or a path over PATH_MAX with the mount point's. ENOTDIR, ELOOP: a folder the walk checked was
 * replaced since (by a file, by a link). EACCES: a folder the agent may not search (root is
 * refused only by a security module).
 */
const UNREACHABLE = new Set(["ENAMETOOLONG", "ENOTDIR", "ELOOP", "EACCES"]);

/**
 * Files walked at once. On a volume still fetched from its snapshot each walk's folders and inodes
 * are first reads (10-40 ms each in the lab's models), and EBS serves several fetches at once:
 * walked one after another, the 33 wanted files of bench/cold.ts took 32-110 ms, beside docker's
 * start, before the first wanted read.
 */
const RESOLVE_AT_ONCE = 8;

/** Files per filefrag process (its command line stays far below ARG_MAX). */
const FILEFRAG_BATCH = 256;

/**
 * How long one filefrag process may take before it is killed and the list is not used. A file
 * swapped for a FIFO after the walk would block filefrag's open for ever, and the pre-warm with
 * it. A batch maps in milliseconds (256 files in 4-7 ms on a warm ext4 disk): the walk has read
 * its inodes already, FIEMAP reads at most a file's extent tree. Five minutes allows over a
 * second a file, for a volume still fetched from its snapshot with those reads queued behind the
 * pre-warm's own: only a file that blocks filefrag comes near it.
 */
const FILEFRAG_TIMEOUT_MS = 5 * 60 * 1000;

/**
 * The need list on the volume mounted at `mountPoint`, or undefined when it has none. Throws ReadListError /
 * VolumePathError.
 */
export async function readReadList(mountPoint: string): Promise<ReadList | undefined> {
  const text = await readFileBeneath(mountPoint, join(AGENT_SUBDIR, READ_LIST_FILE), MAX_READ_LIST_BYTES + 1);
  return text === undefined ? undefined : parseReadList(text);
}

/** A listed file found on the volume: its path (the mount point's joined), and the ranges it adds to the list's. */
export interface MappedFile {
  path: string;
  /** Its extents not already given by a file before it, in the file's order. */
  ranges: ByteRange[];
}

/**
 * The device ranges of `files` (paths relative to the volume's root), in the files' order; each range
 * once (a block two files share, or a file listed twice, is read once); and the files mapped, in the same order.
 */
export async function fileRanges(
  mountPoint: string,
  files: readonly string[],
  options: { log?: Logger; filefragTimeoutMs?: number } = {},
): Promise<{ ranges: ByteRange[]; files: MappedFile[]; mapped: number; skipped: number }> {
  // A file of another filesystem mounted below the volume (a docker volume's bind mount, a
  // container's tmpfs) is not the volume's: filefrag would give its offsets on that filesystem's
  // device, read on this one.
  const volumeFileSystem = await fileSystemOf(mountPoint);
  const onVolume = async (path: string) => {
    const id = await fileSystemOf(path);
    return id !== undefined && id === volumeFileSystem;
  };
  const resolveOne = async (file: string): Promise<string | undefined> => {
    try {
      const found = await resolveBeneath(mountPoint, file);
      return found.kind === "file" && (await onVolume(found.path)) ? found.path : undefined;
    } catch (error) {
      if (!(error instanceof VolumePathError || UNREACHABLE.has((error as NodeJS.ErrnoException).code ?? "")))
        throw error;
      return undefined;
    }
  };
  const resolved = await mapConcurrently(files, RESOLVE_AT_ONCE, resolveOne);
  const paths = resolved.filter((path): path is string => path !== undefined);
  const skipped = resolved.length - paths.length;
  const ranges: ByteRange[] = [];
  const mappedFiles: MappedFile[] = [];
  const seen = new Set<number>();
  for (let i = 0; i < paths.length; i += FILEFRAG_BATCH) {
    const batch = paths.slice(i, i + FILEFRAG_BATCH);
    const timeoutMs = options.filefragTimeoutMs ?? FILEFRAG_TIMEOUT_MS;
    const signal = AbortSignal.timeout(timeoutMs);
    // check: false: a file removed since the walk makes filefrag exit 1 for that file only.
    const { stdout } = await run("filefrag", ["-v", "-e", ...batch], {
      log: options.log,
      check: false,
      remediation: "install e2fsprogs (filefrag)",
      signal,
    }).catch((error: unknown) => {
      if (!signal.aborted) throw error;
      throw new AgentError(
        `filefrag did not map ${batch.length} file${batch.length === 1 ? "" : "s"} of the need list within ` +
          `${timeoutMs / 1000} s (killed): a listed file blocks it (a FIFO or a device put there since it was checked)`,
        "the volume's content changed while the agent read it: inspect the files the need list names",
        undefined,
        { cause: error },
      );
    });
    const extents = parseFilefrag(stdout);
    for (const path of batch) {
      const own: ByteRange[] = [];
      for (const range of extents.get(path) ?? []) {
        if (seen.has(range.start)) continue;
        seen.add(range.start);
        own.push(range);
      }
      ranges.push(...own);
      mappedFiles.push({ path, ranges: own });
    }
  }
  return { ranges, files: mappedFiles, mapped: paths.length, skipped };
}
