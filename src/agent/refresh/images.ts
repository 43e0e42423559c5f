/**
 * The image lists a refresh wants, read from the world's tags: osparc's `pre_pulled_images`
 * instance tag, and references compared the way docker lists them. Pure.
 *
 * osparc's autoscaler writes `io.simcore.autoscaling.pre_pulled_images`
 * (`INSTANCE_PRE_PULLED_IMAGES_EC2_TAG_KEY`) as the JSON array of the images it pulled onto a warm
 * buffer before stopping it (`_handle_pool_image_pulling`), and onto an idle hot buffer when it
 * starts a pull there (`_pre_pull_docker_images_on_idle_hot_buffers`): `dump_as_ec2_tags`, whole or
 * in 256-character chunks `<key>_0`, `<key>_1`, …, like the labels tag. The tag is the
 * autoscaler's: whatever is wrong with it is a warning and the refresh goes on without it (or
 * without the bad entries).
 */
import { validateImageRef } from "../../inputs.ts";
import { asListed } from "../../image-ref.ts";
import { readChunkedJsonTag } from "../labels-tag.ts";
import { BufferTag, bufferRole, hasChunkedTag } from "../buffer-tags.ts";

export interface PrePulledImagesRead {
  /** Valid references, in the tag's order, without repeats (as docker would list them). */
  images: string[];
  /** One sentence per problem: the tag unreadable (then no image), or an entry skipped. */
  warnings: string[];
}

/** The images osparc's `pre_pulled_images` tag lists; nothing (and no warning) when the tag is absent. */
export function readPrePulledImages(tags: Readonly<Record<string, string>>, key: string): PrePulledImagesRead {
  const read = readChunkedJsonTag(tags, key);
  if (!read.found) return { images: [], warnings: [] };
  if (!read.ok) return { images: [], warnings: [`${read.problem}; its images are not pulled`] };
  if (!Array.isArray(read.value)) {
    return {
      images: [],
      warnings: [
        `instance tag "${key}": must hold a JSON array of image references, got ` +
          `${read.value === null ? "null" : typeof read.value}; its images are not pulled`,
      ],
    };
  }
  const images: string[] = [];
  const warnings: string[] = [];
  const seen = new Set<string>();
  for (const [index, entry] of (read.value as unknown[]).entries()) {
    const check = validateImageRef(entry, `instance tag "${key}" entry ${index}`);
    if (!check.ok) {
      warnings.push(`${check.problem}; skipped`);
      continue;
    }
    const listed = asListed(check.value);
    if (seen.has(listed)) continue;
    seen.add(listed);
    images.push(check.value);
  }
  return { images, warnings };
}

/**
 * A warning when osparc's buffer tags say the list should be there and the configured key does
 * not find it: an activated warm buffer always carries it (osparc tags a buffer's list before it
 * stops it), a hot buffer once a pull was started on it; or osparc's own key is there and the
 * configuration names another (the key an earlier version of this agent defaulted to).
 */
export function missingPrePulledListWarning(
  tags: Readonly<Record<string, string>>,
  key: string | null,
): string | undefined {
  if (key === null || hasChunkedTag(tags, key)) return undefined;
  const fix = `set refresh.prePulledImagesTag to "${BufferTag.prePulledImages}" (osparc's key) or null`;
  if (hasChunkedTag(tags, BufferTag.prePulledImages))
    return (
      `the instance carries osparc's pre-pulled images tag "${BufferTag.prePulledImages}" but ` +
      `refresh.prePulledImagesTag is "${key}": its images are not pulled; ${fix}`
    );
  const role = bufferRole(tags);
  if (role === "warm-activated" || role === "hot")
    return (
      `osparc's ${role === "hot" ? "hot" : "warm"} buffer tags are present but no "${key}" instance tag: its ` +
      `images are not pulled; if osparc wrote its list under another key, ${fix}`
    );
  return undefined;
}

export { asListed } from "../../image-ref.ts";
