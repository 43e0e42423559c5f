/**
 * The prune's removals, carried out one image at a time through the docker API, never forced:
 * docker itself refuses an image a container uses. Each removal first asks again which images
 * the containers use, so a container created since the plan keeps its image. A failed removal is
 * counted and logged, never thrown: the next image is tried.
 */
import { describeError } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import type { DockerImages } from "../ports.ts";
import type { ImageDecision } from "./plan.ts";

export type PruneStepDone = "removed" | "kept-in-use" | "failed";

/** One removal as carried out: the image, and what came of it. */
export interface PruneStepReport {
  id: string;
  references: string[];
  freesBytes: number;
  done: PruneStepDone;
  error?: string;
}

/**
 * What docker is asked to delete, in order: each tag (the last one deletes the image), or the id of an untagged image.
 */
export function removalReferences(decision: Pick<ImageDecision, "id" | "references">): string[] {
  return decision.references.length > 0 ? [...decision.references] : [decision.id];
}

/** Removes the images in order; a dry run only logs them. */
export async function applyPrune(
  removals: readonly ImageDecision[],
  docker: DockerImages,
  options: { dryRun: boolean; log: Logger },
): Promise<PruneStepReport[]> {
  const { log } = options;
  const results: PruneStepReport[] = [];
  for (const decision of removals) {
    const fields = { image: decision.id, references: decision.references.join(","), bytes: decision.freesBytes };
    if (options.dryRun) {
      log.info("prune.would-remove", "would remove (dry run)", fields);
      continue;
    }
    const result: PruneStepReport = {
      id: decision.id,
      references: decision.references,
      freesBytes: decision.freesBytes,
      done: "removed",
    };
    try {
      if ((await docker.containerImageIds()).includes(decision.id)) {
        result.done = "kept-in-use";
        log.notice("prune.kept", "a container uses the image now: kept", fields);
      } else {
        for (const reference of removalReferences(decision)) await docker.removeImage(reference);
        log.notice("prune.removed", "image removed", fields);
      }
    } catch (error) {
      result.done = "failed";
      result.error = describeError(error);
      log.warning("prune.failed", `could not remove the image: ${result.error}`, fields);
    }
    results.push(result);
  }
  return results;
}
