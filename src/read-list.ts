/**
 * The need list on a cache volume, `.ebs-cache-agent/reads.json` (docs/prewarm.md): its format
 * (version 1: paths in the data-root; version 2: paths in the volume, the data-root's or
 * containerd's root's), checked and bounded (volume content is untrusted input), and the order it
 * gives the pre-warm's reads. Written by the golden build (src/host/record-reads.ts), read at boot through
 * src/host/volume-paths.ts (src/host/need-reads.ts); the pre-warm (src/agent/prewarm/need.ts)
 * decides which images are about to run.
 */
import { AgentError } from "./errors.ts";
import { asListed } from "./image-ref.ts";
import { validateImageRef } from "./inputs.ts";
import { CONTAINERD_ROOT_SUBDIR, DATA_ROOT_SUBDIR } from "./layout.ts";

/** The list's place on the volume, below the agent's folder. */
export const READ_LIST_FILE = "reads.json";
/** The list is refused past this size (it is read whole into memory at boot). */
export const MAX_READ_LIST_BYTES = 8 * 1024 * 1024;
/** The list is refused past this many files, all images together. */
export const MAX_READ_LIST_FILES = 200_000;
const MAX_PATH_CHARS = 4096;
/**
 * The folders of the volume a version 2 list may name files in: docker's data-root, and
 * containerd's root (the containerd image store keeps its snapshots there, not in the data-root).
 */
export const READ_LIST_ROOTS: readonly string[] = [DATA_ROOT_SUBDIR, CONTAINERD_ROOT_SUBDIR];

/**
 * `.ebs-cache-agent/reads.json` as the agent holds it: per image, the files it read at start,
 * first read first, as paths relative to the volume's root
 * (`docker/overlay2/<layer>/diff/usr/bin/python3`,
 * `containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/12/fs/usr/bin/python3`), whichever
 * version the file has.
 */
export interface ReadList {
  images: Array<{ image: string; files: string[] }>;
}

/** The list on the volume is not what a builder writes: it is not used (the pre-warm reads in device order). */
export class ReadListError extends AgentError {
  constructor(problem: string) {
    super(
      `${READ_LIST_FILE} on the volume: ${problem}`,
      "rebuild the golden volume (its builder writes the list), or remove the file: the pre-warm then reads in " +
        "device order",
    );
  }
}

/**
 * A path a version 1 list may name, and the form of every list path: relative, no `.`/`..`/empty
 * component, no control character, bounded.
 */
export function isDataRootPath(path: unknown): path is string {
  if (typeof path !== "string" || path.length === 0 || path.length > MAX_PATH_CHARS) return false;
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(path) || path.startsWith("/")) return false;
  return path.split("/").every((part) => part !== "" && part !== "." && part !== "..");
}

/** A path a version 2 list may name: a plain relative path to a file below one of READ_LIST_ROOTS. */
export function isVolumeFilePath(path: unknown): path is string {
  if (!isDataRootPath(path)) return false;
  const slash = path.indexOf("/");
  return slash > 0 && READ_LIST_ROOTS.includes(path.slice(0, slash));
}

/**
 * Parses and validates the list (version 1: data-root paths, made volume paths here; version 2:
 * volume paths); throws ReadListError naming the first problem.
 */
export function parseReadList(text: string): ReadList {
  if (Buffer.byteLength(text) > MAX_READ_LIST_BYTES)
    throw new ReadListError(`larger than ${MAX_READ_LIST_BYTES} bytes`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new ReadListError(`not JSON (${(error as Error).message})`);
  }
  const doc = parsed as { version?: unknown; images?: unknown };
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    throw new ReadListError("must hold a JSON object");
  if (doc.version !== 1 && doc.version !== 2)
    throw new ReadListError(`version ${JSON.stringify(doc.version)} is neither 1 nor 2`);
  const v1 = doc.version === 1;
  if (!Array.isArray(doc.images)) throw new ReadListError("`images` must be an array");
  const images: ReadList["images"] = [];
  let count = 0;
  for (const [index, entry] of (doc.images as unknown[]).entries()) {
    const { image, files } = (entry ?? {}) as { image?: unknown; files?: unknown };
    const ref = validateImageRef(image, `images[${index}].image`);
    if (!ref.ok) throw new ReadListError(ref.problem);
    if (!Array.isArray(files)) throw new ReadListError(`images[${index}].files must be an array`);
    count += files.length;
    if (count > MAX_READ_LIST_FILES) throw new ReadListError(`more than ${MAX_READ_LIST_FILES} files`);
    const bad = (files as unknown[]).findIndex((file) => !(v1 ? isDataRootPath(file) : isVolumeFilePath(file)));
    if (bad >= 0)
      throw new ReadListError(
        `images[${index}].files[${bad}] ${JSON.stringify(files[bad]).slice(0, 200)} is not a plain path inside ` +
          (v1 ? "the data-root" : `the volume's ${READ_LIST_ROOTS.map((root) => `${root}/`).join(" or ")}`),
      );
    const paths = files as string[];
    images.push({ image: ref.value, files: v1 ? paths.map((file) => `${DATA_ROOT_SUBDIR}/${file}`) : paths });
  }
  return { images };
}

/**
 * The list as the volume stores it: version 1 (data-root paths) when every file is in the
 * data-root, so that agents that know only version 1 still read a graphdriver volume's list;
 * version 2 (volume paths) otherwise.
 */
export function readListText(list: ReadList): string {
  const prefix = `${DATA_ROOT_SUBDIR}/`;
  const v1 = list.images.every((entry) => entry.files.every((file) => file.startsWith(prefix)));
  const images = v1
    ? list.images.map(({ image, files }) => ({ image, files: files.map((file) => file.slice(prefix.length)) }))
    : list.images.map(({ image, files }) => ({ image, files }));
  return JSON.stringify({ version: v1 ? 1 : 2, images }) + "\n";
}

/**
 * The images the node is about to run, most wanted first, each once: osparc's pre-pulled list
 * (the services the autoscaler made this machine for), then the volume's image set (its
 * generation, config `docker.expectedImages`).
 */
export function imagesAboutToRun(...lists: ReadonlyArray<readonly string[]>): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  for (const image of lists.flat()) {
    const key = asListed(image);
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(image);
  }
  return out;
}

/**
 * The files to read first, in order: those of the images about to run (in that order, each
 * image's in its first-read order), then those of the list's other images; each file once.
 * `wanted` counts the files of the images about to run (the rest are read next).
 */
export function needOrder(list: ReadList, aboutToRun: readonly string[]): { files: string[]; wanted: number } {
  const rank = new Map(aboutToRun.map((image, index) => [asListed(image), index]));
  const ranked = list.images
    .map((entry, index) => ({ entry, rank: rank.get(asListed(entry.image)) ?? aboutToRun.length + index }))
    .sort((a, b) => a.rank - b.rank);
  const seen = new Set<string>();
  const files: string[] = [];
  let wanted = 0;
  for (const { entry, rank: r } of ranked) {
    for (const file of entry.files) {
      if (seen.has(file)) continue;
      seen.add(file);
      files.push(file);
      if (r < aboutToRun.length) wanted++;
    }
  }
  return { files, wanted };
}
