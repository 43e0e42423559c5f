/**
 * Observing before planning: who this instance is (its tags, waiting a bounded time for a late
 * labels tag) and what it was given before (the workspace record), then the volumes, at a cost that does not grow with
 * the pool: one DescribeInstances
 * (the instance's tags and its attached volumes; shared with identify when IMDS serves no
 * tags), a DescribeVolumes by id only when volumes are attached, then only the lookups the
 * selection can still need, each one bounded page (see `lookupsNeeded` in plan.ts). A pool boot
 * makes DescribeInstances + one DescribeVolumes here.
 */
import type { AgentConfig } from "../../config/index.ts";
import type { Logger } from "../../log.ts";
import type { HostStore } from "../../docker/image-store.ts";
import type { Cancellable, CloudVolumes, Identity } from "../ports.ts";
import { readWorkspaceRecord, sameActivation, type Activation, type WorkspaceRecord } from "../workspace-record.ts";
import { findVolumeRecord } from "../volume-record.ts";
import { VolumeKind, VolumeTag } from "../../tags.ts";
import { attachedCacheVolume, currentSnapshot, MANAGED, poolSelector } from "../volume-rules.ts";
import { bufferRole, hasChunkedTag } from "../buffer-tags.ts";
import {
  everyWorkspaceVolumeQuery,
  lookupsNeeded,
  poolQuery,
  type BootObservation,
  type BootSettings,
} from "./plan.ts";

/** What identifying the instance needs (part of the boot's deps). */
export interface IdentitySource {
  config: AgentConfig;
  /** `fresh`: tags read again from their source (a late labels tag), not the answer cached for this run. */
  identify(options?: { fresh?: boolean }): Promise<Identity>;
  /**
   * EC2's LaunchTime of the instance (DescribeInstances, shared with the boot's own): one activation. Absent or
   * failing: unknown.
   */
  launchTime?(identity: Identity): Promise<string | undefined>;
  /** This boot of the machine (/proc/sys/kernel/random/boot_id). */
  bootId?: string;
  /**
   * EC2 in the instance's region, to learn whether a volume attached here is reused (reusedVolume). Absent: not asked.
   */
  cloudFor?(region: string): Pick<CloudVolumes, "describeInstance" | "findVolumes">;
  log: Logger;
}

/**
 * The instance, its activation, and the workspace record an earlier run left: `record` only when
 * it was written in this activation (workspace-record.ts: phase 2, a reboot, a rerun), `earlier`
 * when it is this instance's from an earlier one (a stop and start: it proves nothing about the
 * current tenant), `problem` when it could not be read. Only a run that may claim (the first
 * phase) and has no record of this activation waits for the activation's tags (waitForTags).
 */
export async function observeIdentity(
  source: IdentitySource,
  options: { mayClaim: boolean; signal?: AbortSignal; checkTags?: (identity: Identity) => void },
): Promise<{
  identity: Identity;
  activation: Activation;
  previous: { record?: WorkspaceRecord; earlier?: WorkspaceRecord; problem?: string };
}> {
  const read = await readWorkspaceRecord(source.config.paths.stateDir);
  const found = await source.identify();
  // Tags that refuse the boot do so before any EC2 call of its own (the launch time's included).
  options.checkTags?.(found);
  const launchTime = await source.launchTime?.(found).catch(() => undefined);
  const activation: Activation = {
    instanceId: found.instanceId,
    ...(launchTime ? { launchTime } : {}),
    ...(source.bootId ? { bootId: source.bootId } : {}),
  };
  const mine = read.record?.instanceId === found.instanceId ? read.record : undefined;
  // The state folder's record lost (a full or read-only folder, wiped): the copy on the volume
  // phase 1 mounted (volume-record.ts) speaks for this activation as well.
  const onVolume: { record?: WorkspaceRecord; problem?: string } =
    mine && sameActivation(mine, activation) ? {} : await findVolumeRecord(source.config.paths.mountRoot, activation);
  if (onVolume.problem) source.log.warning("boot.settings", `${onVolume.problem}: not used`);
  const current = mine && sameActivation(mine, activation) ? mine : onVolume.record;
  const identity =
    options.mayClaim && !current
      ? await waitForTags(source, found, { startedBefore: mine !== undefined }, options.signal)
      : found;
  const previous = {
    ...(current ? { record: current } : {}),
    ...(mine && !sameActivation(mine, activation) ? { earlier: mine } : {}),
    ...(read.problem ? { problem: read.problem } : {}),
  };
  return { identity, activation, previous };
}

/**
 * Gathers what the planner needs. `hostStore` reads the host's image store (daemon.json and
 * `dockerd --version`), alongside EC2; when it fails, the store is left unobserved: the same
 * daemon.json read fails the host check before any claim.
 */
export async function observeBoot(
  cloud: CloudVolumes,
  identity: Identity,
  settings: BootSettings,
  options: Cancellable & { hostStore?: () => Promise<HostStore> } = {},
): Promise<BootObservation> {
  const observed: BootObservation = { identity, attached: [], workspace: [], pool: [] };
  if (!settings.enabled) return observed;
  const hostStore = options.hostStore?.().catch(() => undefined);
  const call = options.signal ? { signal: options.signal } : {};
  const zone = identity.availabilityZone;

  const instance = await cloud.describeInstance(identity.instanceId, call);
  // EC2's time, known from that answer: the candidates' quarantine and claims are judged in it.
  observed.now = cloud.clock.now();
  const mapped = instance.volumes.map((v) => v.volumeId);
  if (mapped.length > 0) {
    observed.attached = await cloud.findVolumes({ volumeIds: mapped, tags: MANAGED }, call);
  }
  const page = { ...call, firstPage: settings.claim.candidatesPerListing };
  if (settings.workspace && lookupsNeeded(settings, observed, "workspace")) {
    // Every state: one in use elsewhere makes this boot a plain pool node (workspaceHeldElsewhere).
    observed.workspace = await cloud.findVolumes(everyWorkspaceVolumeQuery(settings.workspace, zone), page);
  }
  if (lookupsNeeded(settings, observed, "pool")) {
    observed.pool = await cloud.findVolumes(poolQuery(settings, zone), page);
  }
  // Read beside EC2's calls; the snapshot lookup depends on it (pool volumes of the other store are no candidates).
  const store = await hostStore;
  if (store) observed.hostStore = store;
  if (lookupsNeeded(settings, observed, "snapshot")) {
    const snapshot = currentSnapshot(await cloud.findSnapshots(poolSelector(settings), call));
    if (snapshot) observed.snapshot = snapshot;
  }
  return observed;
}

/**
 * What the boot still waits for in these tags, undefined when nothing. osparc activates a warm
 * buffer with ModifyInstanceAttribute (the join script), StartInstances and then ONE CreateTags
 * carrying `warm_buffer_machine=false` and the labels tag together (`_try_start_warm_buffer_instances`,
 * services/autoscaling modules/cluster_scaling/_auto_scaling_core.py): a boot that sees `false`
 * sees the labels already, or none will come (a start to refill hot buffers has no task, and
 * `_compute_hot_buffer_missing` starts such buffers); one that sees `true` on an instance that ran
 * before (a stopped buffer started again) runs before that CreateTags and waits for it. `true` on
 * the first boot is the buffer's own creation: no wait. `always` also waits for a missing labels
 * tag on an instance osparc did not start as a warm buffer; once the activation's tags are there
 * (`false`) nothing more will come in either mode.
 */
export function awaitedTags(
  tags: Readonly<Record<string, string>>,
  options: { labelsTag: string; mode: string; startedBefore: boolean },
): string | undefined {
  if (hasChunkedTag(tags, options.labelsTag) || options.mode === "never") return undefined;
  const role = bufferRole(tags);
  if (role === "warm-dormant" && (options.startedBefore || options.mode === "always"))
    return "a stopped warm buffer started again, before its activation's tags";
  if (role === "warm-activated" || role === "hot") return undefined;
  return options.mode === "always" ? "no labels tag on this instance" : undefined;
}

/**
 * The managed volume attached to this instance that a boot reuses whatever its tags say (a pool
 * volume: a stopped warm buffer keeps its own); undefined when none is. A workspace volume
 * attached here does not count: the ids decide whether it is this run's. The instance's own
 * DescribeInstances (shared with identify), then a DescribeVolumes by id only when volumes are attached.
 */
export async function reusedVolume(
  cloud: Pick<CloudVolumes, "describeInstance" | "findVolumes">,
  instanceId: string,
  call?: Cancellable,
): Promise<string | undefined> {
  const mapped = (await cloud.describeInstance(instanceId, call)).volumes.map((v) => v.volumeId);
  if (mapped.length === 0) return undefined;
  const managed = await cloud.findVolumes({ volumeIds: mapped, tags: MANAGED }, call);
  const attached = attachedCacheVolume(managed, instanceId);
  return attached && attached.tags[VolumeTag.kind] !== VolumeKind.workspace ? attached.volumeId : undefined;
}

/**
 * Reads the tags again, once a second, for up to `workspace.waitForLabelsTagSeconds` while
 * awaitedTags says the activation's tags are still to come. Tags that never come are a warning,
 * not a failure: the boot goes on with the tags it has (no ids: the pool).
 */
async function waitForTags(
  source: IdentitySource,
  identity: Identity,
  context: { startedBefore: boolean },
  signal: AbortSignal | undefined,
): Promise<Identity> {
  const { config, log } = source;
  const key = config.workspace.labelsTag;
  const options = { labelsTag: key, mode: config.workspace.waitForLabelsTag, startedBefore: context.startedBefore };
  const seconds = config.workspace.waitForLabelsTagSeconds;
  const why = awaitedTags(identity.tags, options);
  if (why === undefined || seconds === 0) return identity;
  // A pool volume attached here is reused whatever tags come: waiting for them cannot change the boot.
  const cloud = source.cloudFor?.(config.region ?? identity.region);
  const reused = cloud
    ? await reusedVolume(cloud, identity.instanceId, signal ? { signal } : {}).catch(() => undefined)
    : undefined;
  if (reused) {
    log.info("boot.labels-tag", `no labels tag yet (${why}), not waited for: ${reused} is attached here and reused`, {
      tag: key,
    });
    return identity;
  }
  log.notice("boot.labels-tag", `no labels tag yet (${why}): waiting up to ${seconds} s for the instance's tags`, {
    tag: key,
  });
  const deadline = Date.now() + seconds * 1000;
  while (Date.now() < deadline && !signal?.aborted) {
    await new Promise((resolve) => setTimeout(resolve, Math.min(1000, Math.max(0, deadline - Date.now()))));
    const again = await source.identify({ fresh: true });
    if (awaitedTags(again.tags, options) === undefined) {
      log.info(
        "boot.labels-tag",
        hasChunkedTag(again.tags, key) ? "the labels tag arrived" : "the instance was activated without a labels tag",
        { tag: key },
      );
      return again;
    }
  }
  log.warning("boot.labels-tag", `no labels tag after ${seconds} s: going on without workspace ids`, { tag: key });
  return identity;
}
