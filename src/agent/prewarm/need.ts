/**
 * The pre-warm ordered by need, as pure decisions. At the golden build a builder records which
 * files of the volume (the data-root's layers, or containerd's snapshots) each image reads when it
 * starts (in first-read order) and stores the list on the volume, `.ebs-cache-agent/reads.json`;
 * at boot the `files` initialization reads first the files of the images the node is about to
 * run, then everything else. This module
 * parses that list (volume content: untrusted, validated and bounded here) and orders it; the
 * host reads it through src/host/volume-paths.ts (src/host/need-reads.ts). See docs/prewarm.md.
 */
import { imagesAboutToRun } from "../../read-list.ts";
import { imagesOf } from "../volume-rules.ts";
import { readPrePulledImages } from "../refresh/images.ts";

export {
  imagesAboutToRun,
  isDataRootPath,
  isVolumeFilePath,
  MAX_READ_LIST_BYTES,
  MAX_READ_LIST_FILES,
  needOrder,
  parseReadList,
  READ_LIST_FILE,
  READ_LIST_ROOTS,
  readListText,
  ReadListError,
  type ReadList,
} from "../../read-list.ts";

/**
 * The images a node is about to run: osparc's pre-pulled images (instance tag
 * `refresh.prePulledImagesTag`, when the instance's tags are at hand), the volume's image set
 * (`ebs-cache:images`), config `docker.expectedImages`. A bad pre-pulled tag only drops its images.
 */
export function imagesOfNode(
  volumeTags: Readonly<Record<string, string>>,
  expectedImages: readonly string[],
  instance?: { tags: Readonly<Record<string, string>>; prePulledImagesTag: string | null },
): string[] {
  const prePulled =
    instance && instance.prePulledImagesTag !== null
      ? readPrePulledImages(instance.tags, instance.prePulledImagesTag).images
      : [];
  return imagesAboutToRun(prePulled, imagesOf(volumeTags), expectedImages);
}
