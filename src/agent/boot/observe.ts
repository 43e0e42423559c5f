/**
 * Observing before planning: who this instance is (its tags, waiting a bounded time for a late
 * labels tag) and what it was given before (the workspace record), then the volumes, at a cost that does not grow with the pool: one DescribeInstances
 * (the instance's tags and its attached volumes; shared with identify when IMDS serves no
 * tags), a DescribeVolumes by id only when volumes are attached, then only the lookups the
 * selection can still need, each one bounded page (see `lookupsNeeded` in plan.ts). A pool boot
 * makes DescribeInstances + one DescribeVolumes here.
 */
import type { AgentConfig } from "../../config/index.ts";
import type { Logger } from "../../log.ts";
import { VolumeTag } from "../../tags.ts";
import type { HostStore } from "../../docker/image-store.ts";
import type { Cancellable, CloudVolumes, Identity } from "../ports.ts";
import { readWorkspaceRecord, type WorkspaceRecord } from "../workspace-record.ts";
import { currentSnapshot } from "../generation.ts";
import { lookupsNeeded, poolQuery, poolSelector, workspaceQuery, type BootObservation, type BootSettings } from "./plan.ts";

/** What identifying the instance needs (part of the boot's deps). */
export interface IdentitySource {
  config: AgentConfig;
  /** `fresh`: tags read again from their source (a late labels tag), not the answer cached for this run. */
  identify(options?: { fresh?: boolean }): Promise<Identity>;
  log: Logger;
}

/**
 * The instance and the workspace record an earlier run left (`problem`: it could not be read).
 * Only a run that may claim (the first phase) waits for a late labels tag, and only while this
 * instance was never given a workspace: a node activated once keeps its ids in the record
 * (osparc deletes the tag after the join and does not re-activate a node for other ids), so a
 * later start must not wait for a tag that will not come.
 */
export async function observeIdentity(
  source: IdentitySource,
  options: { mayClaim: boolean; signal?: AbortSignal },
): Promise<{ identity: Identity; previous: { record?: WorkspaceRecord; problem?: string } }> {
  const previous = await readWorkspaceRecord(source.config.paths.stateDir);
  const found = await source.identify();
  const activatedBefore = previous.record?.instanceId === found.instanceId && previous.record.ids !== undefined;
  const identity = options.mayClaim && !activatedBefore ? await waitForLabelsTag(source, found, options.signal) : found;
  return { identity, previous };
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
  options: Cancellable & { now?: () => Date; hostStore?: () => Promise<HostStore> } = {},
): Promise<BootObservation> {
  const now = options.now?.() ?? new Date();
  const observed: BootObservation = { identity, now, attached: [], workspace: [], pool: [] };
  if (!settings.enabled) return observed;
  const hostStore = options.hostStore?.().catch(() => undefined);
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
  // Read beside EC2's calls; the snapshot lookup depends on it (pool volumes of the other store are no candidates).
  const store = await hostStore;
  if (store) observed.hostStore = store;
  if (lookupsNeeded(settings, observed, "snapshot")) {
    const snapshot = currentSnapshot(await cloud.findSnapshots(poolSelector(settings), call));
    if (snapshot) observed.snapshot = snapshot;
  }
  return observed;
}

/** Tags that mark an osparc warm buffer; `false` while it is being activated for a task. */
const WARM_BUFFER_TAGS = ["io.simcore.autoscaling.warm_buffer_machine", "io.simcore.autoscaling.buffer_machine"];

/** Whether the tags hold the labels tag, single or chunked (`<key>_0`, `<key>_1`, …). */
function hasLabelsTag(tags: Readonly<Record<string, string>>, key: string): boolean {
  return Object.keys(tags).some((name) => name === key || (name.startsWith(`${key}_`) && /^\d+$/.test(name.slice(key.length + 1))));
}

/**
 * osparc activates a warm buffer with StartInstances and writes the task's tags only after it:
 * the first boot phase may run before the labels tag exists. On such an instance (or always,
 * by config) the boot reads the tags again, once a second, for a bounded time before it falls
 * back to the pool. Tags that never come are a warning, not a failure.
 */
async function waitForLabelsTag(source: IdentitySource, identity: Identity, signal: AbortSignal | undefined): Promise<Identity> {
  const { config, log } = source;
  const key = config.workspace.labelsTag;
  const mode = config.workspace.waitForLabelsTag;
  const activating = WARM_BUFFER_TAGS.some((tag) => identity.tags[tag] === "false");
  const seconds = config.workspace.waitForLabelsTagSeconds;
  if (hasLabelsTag(identity.tags, key) || mode === "never" || seconds === 0 || (mode === "warm-buffer" && !activating)) return identity;
  log.notice("boot.labels-tag", `no labels tag yet${activating ? " on a warm buffer being activated" : ""}: waiting up to ${seconds} s for it`, { tag: key });
  const deadline = Date.now() + seconds * 1000;
  while (Date.now() < deadline && !signal?.aborted) {
    await new Promise((resolve) => setTimeout(resolve, Math.min(1000, Math.max(0, deadline - Date.now()))));
    const again = await source.identify({ fresh: true });
    if (hasLabelsTag(again.tags, key)) {
      log.info("boot.labels-tag", "the labels tag arrived", { tag: key });
      return again;
    }
  }
  log.warning("boot.labels-tag", `no labels tag after ${seconds} s: going on without workspace ids`, { tag: key });
  return identity;
}
