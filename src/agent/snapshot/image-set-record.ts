/**
 * The image set a build put into its image, recorded on the image itself
 * (`.ebs-cache-agent/image-set.json`, written by `snapshot build` before it unmounts): what
 * `snapshot upload` compares with the tags it is asked to write, so that a snapshot is never
 * tagged as another image set than the one it holds. Pure: the file is written through the
 * build's deps and read from the unmounted image by src/host/pool-image.ts.
 */
import type { ImageStore } from "../../docker/engine.ts";
import { VolumeTag } from "../../tags.ts";

export const IMAGE_SET_RECORD_FORMAT = "ebs-cache-agent/image-set@1";

/** What the build put into the image. */
export interface ImageSetRecord {
  images: string[];
  imageStore: ImageStore;
  engineVersion: string;
}

/** The record's text, as the build writes it. */
export function imageSetRecordText(record: ImageSetRecord): string {
  return JSON.stringify({ format: IMAGE_SET_RECORD_FORMAT, ...record }, null, 1) + "\n";
}

/** The record in `text`, or a problem (not JSON, another format, a field missing or of another type). */
export function parseImageSetRecord(text: string): ImageSetRecord | { problem: string } {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { problem: "is not JSON" };
  }
  const r = (typeof json === "object" && json !== null ? json : {}) as Record<string, unknown>;
  if (r.format !== IMAGE_SET_RECORD_FORMAT) return { problem: `is not of the format ${IMAGE_SET_RECORD_FORMAT}` };
  if (!Array.isArray(r.images) || r.images.length === 0 || !r.images.every((i) => typeof i === "string"))
    return { problem: "names no images" };
  if (r.imageStore !== "graphdriver" && r.imageStore !== "containerd") return { problem: "names no image store" };
  if (typeof r.engineVersion !== "string" || r.engineVersion === "") return { problem: "names no engine version" };
  return { images: r.images as string[], imageStore: r.imageStore, engineVersion: r.engineVersion };
}

/**
 * How the tags of the upload differ from what the image holds (empty: they agree). The images
 * are compared as a set: the tag lists them in the order given.
 */
export function imageSetMismatch(record: ImageSetRecord, tags: Record<string, string>): string[] {
  const problems: string[] = [];
  const named = (tags[VolumeTag.images] ?? "").split(",").filter((image) => image !== "");
  const held = new Set(record.images);
  const missing = named.filter((image) => !held.has(image));
  const extra = record.images.filter((image) => !named.includes(image));
  if (missing.length > 0) problems.push(`it does not hold ${missing.join(", ")}`);
  if (extra.length > 0) problems.push(`it also holds ${extra.join(", ")}, which --images does not name`);
  if (tags[VolumeTag.imageStore] !== record.imageStore)
    problems.push(`it was built for the ${record.imageStore} store, not ${tags[VolumeTag.imageStore] ?? "none"}`);
  if (tags[VolumeTag.engineVersion] !== record.engineVersion)
    problems.push(`it was built by docker ${record.engineVersion}, not ${tags[VolumeTag.engineVersion] ?? "none"}`);
  return problems;
}
