/**
 * The need list on a cache volume, `.ebs-cache-agent/reads.json` (docs/prewarm.md): its format,
 * checked and bounded (volume content is untrusted input), and the order it gives the pre-warm's
 * reads. Written by the golden build (src/host/record-reads.ts), read at boot through
 * src/host/volume-paths.ts (src/host/need-reads.ts); the pre-warm (src/agent/prewarm/need.ts)
 * decides which images are about to run.
 */
import { AgentError } from "./errors.ts";
import { asListed } from "./image-ref.ts";
import { validateImageRef } from "./inputs.ts";

/** The list's place on the volume, below the agent's folder. */
export const READ_LIST_FILE = "reads.json";
/** The list is refused past this size (it is read whole into memory at boot). */
export const MAX_READ_LIST_BYTES = 8 * 1024 * 1024;
/** The list is refused past this many files, all images together. */
export const MAX_READ_LIST_FILES = 200_000;
const MAX_PATH_CHARS = 4096;

/**
 * `.ebs-cache-agent/reads.json`: per image, the files it read at start, as paths relative to the
 * data-root (`overlay2/<layer>/diff/usr/bin/python3`), first read first.
 */
export interface ReadList {
  version: 1;
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

/** A path the list may name: relative, inside the data-root, no `.`/`..`/empty component, no control character. */
export function isDataRootPath(path: unknown): path is string {
  if (typeof path !== "string" || path.length === 0 || path.length > MAX_PATH_CHARS) return false;
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(path) || path.startsWith("/")) return false;
  return path.split("/").every((part) => part !== "" && part !== "." && part !== "..");
}

/** Parses and validates the list; throws ReadListError naming the first problem. */
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
  if (doc.version !== 1) throw new ReadListError(`version ${JSON.stringify(doc.version)} is not 1`);
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
    const bad = (files as unknown[]).findIndex((file) => !isDataRootPath(file));
    if (bad >= 0)
      throw new ReadListError(
        `images[${index}].files[${bad}] ${JSON.stringify(files[bad]).slice(0, 200)} is not a plain path inside the ` +
          `data-root`,
      );
    images.push({ image: ref.value, files: files as string[] });
  }
  return { version: 1, images };
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
