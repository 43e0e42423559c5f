/**
 * Observing before planning, at a cost that does not grow with the pool: one DescribeInstances
 * (the instance's tags and its attached volumes; shared with identify when IMDS serves no
 * tags), a DescribeVolumes by id only when volumes are attached, then only the lookups the
 * selection can still need, each one bounded page (see `lookupsNeeded` in plan.ts). A pool boot
 * makes DescribeInstances + one DescribeVolumes here.
 */
import { VolumeTag } from "../../tags.ts";
import { lookupsNeeded, poolQuery, poolSelector, workspaceQuery, type BootObservation, type BootSettings } from "./plan.ts";
import type { Cancellable, CloudVolumes, Identity } from "../ports.ts";

export { poolSelector };

/** Gathers what the planner needs. */
export async function observeBoot(
  cloud: CloudVolumes,
  identity: Identity,
  settings: BootSettings,
  options: Cancellable & { now?: () => Date } = {},
): Promise<BootObservation> {
  const now = options.now?.() ?? new Date();
  const observed: BootObservation = { identity, now, attached: [], workspace: [], pool: [] };
  if (!settings.enabled) return observed;
  const call = options.signal ? { signal: options.signal } : {};
  const zone = identity.availabilityZone;

  const instance = await cloud.describeInstance(identity.instanceId, call);
  const mapped = instance.volumes.map((v) => v.volumeId);
  if (mapped.length > 0) {
    observed.attached = await cloud.findVolumes({ volumeIds: mapped, tags: { [VolumeTag.managed]: "true" } }, call);
  }
  const page = { ...call, firstPage: settings.claim.candidatesPerListing };
  if (settings.workspace && lookupsNeeded(settings, observed, "workspace")) {
    observed.workspace = await cloud.findVolumes(workspaceQuery(settings.workspace, zone), page);
  }
  if (lookupsNeeded(settings, observed, "pool")) {
    observed.pool = await cloud.findVolumes(poolQuery(settings, zone), page);
  }
  if (lookupsNeeded(settings, observed, "snapshot")) {
    const snapshot = await cloud.newestSnapshot(poolSelector(settings), call);
    if (snapshot) observed.snapshot = snapshot;
  }
  return observed;
}
