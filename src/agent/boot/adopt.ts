/**
 * A new workspace starts from the pool's stock: the pool volume this boot claimed (or created
 * from the snapshot because the pool was empty) becomes the workspace of the instance's ids in
 * the same claim, once its data-root was prepared as the pool volume it was (a previous tenant's
 * named volumes removed; the record of the ids written on it) and before docker starts on it.
 * At most one workspace serves one set of ids: osparc launches the tasks of one
 * user with identical labels as one RunInstances of count N (`_launch_instances` in
 * services/autoscaling's `_auto_scaling_core.py`), so two boots of the same ids adopt at the
 * same moment. Tags first, then a listing of every volume of the ids: a boot that sees another
 * one (not quarantined) undoes its adoption and runs on its volume as a plain pool node. Two
 * boots that write within each other's listing both step back (no workspace this time, never two).
 */
import { VolumeKind, VolumeTag } from "../../tags.ts";
import type { VolumeInfo } from "../ports.ts";
import { describeWorkspace, volumeMatchesWorkspace } from "../workspace-ids.ts";
import type { StepContext } from "./context.ts";
import { BootStepError } from "./errors.ts";
import { claimTagChanges } from "./claim-tags.ts";
import { everyWorkspaceVolumeQuery, type BootStep } from "./plan.ts";

type AdoptStep = Extract<BootStep, { step: "adopt-workspace" }>;

/** Carries out the adoption (see above); a rerun finds the tags written and only checks again. */
export async function adoptWorkspace(step: AdoptStep, { plan, progress, deps, call }: StepContext): Promise<void> {
  const { cloud, log } = deps;
  const volume = progress.volume;
  if (!volume) throw new BootStepError(step.step, "no volume was claimed", "run boot again");
  const { ids, set, remove } = step.adopt;
  const who = describeWorkspace(ids);
  if (volume.tags[VolumeTag.kind] !== VolumeKind.pool && !volumeMatchesWorkspace(volume.tags, ids))
    throw new BootStepError(
      step.step,
      `${volume.volumeId} is neither a pool volume nor the workspace of ${who}: not adopted`,
      "run boot again",
    );
  const dropped = Object.fromEntries(remove.flatMap((key) => (key in volume.tags ? [[key, volume.tags[key]!]] : [])));
  await cloud.tagVolume(volume.volumeId, set, call);
  Object.assign(volume.tags, set);
  if (Object.keys(dropped).length > 0) await cloud.untagVolume(volume.volumeId, Object.keys(dropped), call);
  for (const key of Object.keys(dropped)) delete volume.tags[key];
  const others = rivals(
    await cloud.findVolumes(everyWorkspaceVolumeQuery(ids, plan.availabilityZone), call),
    volume,
    step.adopt.ids,
  );
  const rival = others[0];
  if (rival === undefined) {
    // The instance's intent as a workspace's (keep, TTL): tag-claim wrote a pool volume's.
    const intent = claimTagChanges(volume.tags, plan.instanceId, step.intent, cloud.clock.now());
    if (Object.keys(intent.set).length > 0) await cloud.tagVolume(volume.volumeId, intent.set, call);
    Object.assign(volume.tags, intent.set);
    await cloud.untagVolume(volume.volumeId, intent.remove, call);
    for (const key of intent.remove) delete volume.tags[key];

    if (progress.created === "snapshot")
      log.notice(
        "boot.workspace",
        `no initialized pool volume in stock: the new workspace of ${who} starts from the pool's snapshot ` +
          "(read lazily from S3 until initialized)",
        { volume: volume.volumeId },
      );
    else log.info("boot.workspace", `pool volume adopted as the workspace of ${who}`, { volume: volume.volumeId });
    return;
  }
  // Another boot of these ids holds (or just adopted) a workspace: this volume goes back to being a pool volume.
  const workspaceKeys = Object.keys(set).filter((key) => key !== VolumeTag.kind);
  await cloud.tagVolume(volume.volumeId, { [VolumeTag.kind]: VolumeKind.pool, ...dropped }, call);
  Object.assign(volume.tags, { [VolumeTag.kind]: VolumeKind.pool, ...dropped });
  await cloud.untagVolume(volume.volumeId, workspaceKeys, call);
  for (const key of workspaceKeys) delete volume.tags[key];
  const holder = rival.attachment?.instanceId ?? rival.tags[VolumeTag.claimedBy] ?? "another instance";
  log.notice(
    "boot.workspace",
    `the workspace of ${who} is ${rival.volumeId}, held by ${holder}: ${volume.volumeId} stays a pool volume and ` +
      "this node runs on it as a plain node, no second workspace",
    { volume: volume.volumeId, workspace: rival.volumeId },
  );
}

/** The other volumes of exactly these ids that serve as their workspace (a quarantined one serves nobody). */
function rivals(listed: VolumeInfo[], mine: VolumeInfo, ids: AdoptStep["adopt"]["ids"]): VolumeInfo[] {
  return listed.filter(
    (v) =>
      v.volumeId !== mine.volumeId && volumeMatchesWorkspace(v.tags, ids) && v.tags[VolumeTag.lastError] === undefined,
  );
}
