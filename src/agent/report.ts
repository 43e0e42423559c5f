/**
 * What the readiness labels say of the mounted volume; publishing them is the docker adapter's
 * (src/docker/readiness-labels.ts).
 */
import { workspaceLabelExtras } from "../docker/labels.ts";
import { Label, VolumeTag, WORKSPACE_ID_TAG } from "../tags.ts";

/**
 * The readiness extras that describe the mounted volume: `volume-id`, `pool`, `kind`, and for a
 * workspace volume the ids it records (`workspace.user-id`, …, from its `ebs-cache:<key>` tags).
 */
export function volumeDetails(volume: { volumeId: string; tags: Record<string, string> }): Record<string, string> {
  const kind = volume.tags[VolumeTag.kind];
  return {
    [Label.volumeId]: volume.volumeId,
    [Label.pool]: volume.tags[VolumeTag.pool] ?? "",
    [Label.kind]: kind ?? "",
    ...workspaceLabelExtras(kind, (key) => volume.tags[WORKSPACE_ID_TAG[key]]),
  };
}
