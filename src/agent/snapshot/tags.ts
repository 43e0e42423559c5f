/**
 * The tags an uploaded snapshot carries: those of the pool's generation, as Packer's
 * pool-volume flow writes them (packer/pool-volume.pkr.hcl), so the keeper and boots treat it
 * as any golden snapshot; then the operator's own tags (never `ebs-cache:` or `aws:` keys).
 */
import { validateImageRef, validatePoolName, validateTagValue } from "../../inputs.ts";
import { TAG_PREFIX, VolumeKind, VolumeTag } from "../../tags.ts";

export interface GenerationTagsInput {
  pool: string;
  imageSet: string;
  images: readonly string[];
  imageStore: "graphdriver" | "containerd";
  engineVersion: string;
  /** RFC 3339 UTC, seconds (`2026-12-01T10:00:00Z`): the generation's time. */
  builtAt: string;
  operatorTags: Record<string, string>;
}

/** The tags, or the problems with the input (nothing is uploaded then). */
export function generationTags(input: GenerationTagsInput): { tags: Record<string, string> } | { problems: string[] } {
  const problems: string[] = [];
  const check = (result: { ok: true; value: string } | { ok: false; problem: string }) => {
    if (!result.ok) problems.push(result.problem);
  };
  check(validatePoolName(input.pool));
  check(validateTagValue(input.imageSet, "image set"));
  for (const image of input.images) check(validateImageRef(image));
  const images = input.images.join(",");
  if (images.length > 256) problems.push(`the images list is ${images.length} characters; tag values hold 256`);
  check(validateTagValue(input.engineVersion, "engine version"));
  if (!/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/.test(input.builtAt) || Number.isNaN(Date.parse(input.builtAt)))
    problems.push(`built-at ${JSON.stringify(input.builtAt)} is not an RFC 3339 UTC time (2026-12-01T10:00:00Z)`);
  for (const [key, value] of Object.entries(input.operatorTags)) {
    if (key.startsWith(TAG_PREFIX) || key.toLowerCase().startsWith("aws:") || key.length === 0 || key.length > 128)
      problems.push(
        `tag key ${JSON.stringify(key)} is not an operator's tag (not ${TAG_PREFIX}…, not aws:…, 1-128 characters)`,
      );
    check(validateTagValue(value, `tag ${key}`));
  }
  if (problems.length > 0) return { problems };
  return {
    tags: {
      ...input.operatorTags,
      [VolumeTag.managed]: "true",
      [VolumeTag.kind]: VolumeKind.pool,
      [VolumeTag.pool]: input.pool,
      [VolumeTag.imageSet]: input.imageSet,
      [VolumeTag.images]: images,
      [VolumeTag.imageStore]: input.imageStore,
      [VolumeTag.engineVersion]: input.engineVersion,
      [VolumeTag.builtAt]: input.builtAt,
    },
  };
}
