/**
 * osparc's `io.simcore.autoscaling.pre_pulled_images` instance tag (services/autoscaling
 * `constants.py` INSTANCE_PRE_PULLED_IMAGES_EC2_TAG_KEY): the images the autoscaler pulled into a
 * warm or idle hot buffer over SSM, a JSON list of image references written by
 * `dump_pre_pulled_images_as_tags` (utils/buffer_machines.py) through `dump_as_ec2_tags`: one tag,
 * or `<key>_0`, `<key>_1`, … of 256 characters when longer. Its `load_from_ec2_tags` prefers the
 * single tag when both forms exist; here both forms count (their union): an image either lists
 * is kept. Pure.
 */
import { readChunkedJsonTag } from "./labels-tag.ts";

/** The tag's images, none when it is absent; a problem when it is there but unreadable. */
export function prePulledImages(
  tags: Readonly<Record<string, string>>,
  key: string,
): { images: string[] } | { problem: string } {
  const single = tags[key];
  const chunked = Object.fromEntries(Object.entries(tags).filter(([k]) => k.startsWith(`${key}_`)));
  const forms = [
    ...(single !== undefined ? [readChunkedJsonTag({ [key]: single }, key)] : []),
    ...(Object.keys(chunked).length > 0 ? [readChunkedJsonTag(chunked, key)] : []),
  ];
  const images = new Set<string>();
  for (const read of forms) {
    if (!read.found) continue;
    if (!read.ok) return { problem: read.problem };
    if (!Array.isArray(read.value) || !read.value.every((v) => typeof v === "string"))
      return { problem: `instance tag ${key}: not a JSON list of image references` };
    for (const image of read.value as string[]) images.add(image);
  }
  return { images: [...images].sort() };
}
