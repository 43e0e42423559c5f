/**
 * The snapshot upload bench's `--sizes`, checked before anything is made: each size (MiB of an
 * image set) gets an image of IMAGE_PER_SET times it, and that image is a pool volume's file
 * system, so it is at least the smallest one `snapshot build` makes (src/agent/snapshot/build-plan.ts;
 * mkfs.xfs itself refuses less than 300 MiB).
 */
import { MIN_SIZE_GIB } from "../src/agent/snapshot/build-plan.ts";

/** The image of a size is this many times the size: room for the next generation and XFS's own. */
export const IMAGE_PER_SET = 4;
/** The smallest size: its image is the smallest file system a pool volume has. */
export const MIN_SET_MIB = (MIN_SIZE_GIB * 1024) / IMAGE_PER_SET;

/** `--sizes 256,1024` as MiB; an error that names the smallest size for anything else. */
export function parseSizes(text: string): number[] {
  const parts = text.split(",").map((part) => part.trim());
  const wrong = parts.filter((part) => !Number.isSafeInteger(Number(part)) || Number(part) < MIN_SET_MIB);
  if (wrong.length > 0) {
    throw new Error(
      `--sizes ${text}: ${wrong.map((part) => JSON.stringify(part)).join(", ")} is not a whole number of MiB ` +
        `from ${MIN_SET_MIB}: each size gets an image of ${IMAGE_PER_SET} times it, and a pool volume's file ` +
        `system is at least ${MIN_SIZE_GIB} GiB (mkfs.xfs refuses less than 300 MiB)`,
    );
  }
  return parts.map(Number);
}
