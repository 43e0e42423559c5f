/**
 * Taking a volume: the next candidate (AttachVolume is the lock), or one created from the
 * pool's snapshot when the candidates run out.
 */
import { createHash } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { VolumeTag } from "../../tags.ts";
import type { StepContext } from "./context.ts";
import { BootStepError } from "./errors.ts";
import { ClientTokenSpentError } from "../../aws/errors.ts";
import type { Logger } from "../../log.ts";
import type { VolumeInfo } from "../ports.ts";
import { replacingToken, sentCreationParameters } from "../volume-creation.ts";
import { candidateOrder, currentSnapshot, hostStoreOr, isClaimable, storeFit } from "../volume-rules.ts";
import { createSpecFrom, type BootStep, type CreateSpec } from "./plan.ts";

type ClaimStep = Extract<BootStep, { step: "claim-volume" }>;

/**
 * Claims the next candidate. AttachVolume is the lock; a loss to another instance (VolumeInUse)
 * costs one fresh page of candidates rather than a walk over a stale list, after a jittered
 * pause so that the losers of one round do not collide again. Out of candidates (or of
 * `maxLosses`): a volume from the pool's snapshot, or the node degrades.
 */
export async function claimNext(step: ClaimStep, ctx: StepContext): Promise<void> {
  const { plan, progress, deps, limits, claim, call } = ctx;
  const { cloud, log } = deps;
  if (step.note && claim.volumes === 0) log.notice("boot.claim", step.note);
  let candidates = step.candidates.filter((id) => !claim.tried.has(id));
  // After a volume was handed back, the plan's list is stale: ask again.
  if (claim.volumes > 0) candidates = await relist(step, ctx);
  while (candidates.length > 0 && claim.losses < step.maxLosses) {
    const volumeId = candidates[0]!;
    claim.tried.add(volumeId);
    // Observe found no managed volume attached here (else the plan would reuse it), and this
    // boot tries each candidate once: a refusal is someone else's claim.
    // Held as "maybe ours" while AttachVolume is in flight: if SIGTERM cuts the call, the undo's
    // detach (a no-op for a volume not attached here) settles whatever EC2 did with it.
    const listed = claim.known.get(volumeId);
    if (listed) progress.volume = listed;
    const outcome = await cloud.claimVolume(volumeId, plan.instanceId, limits.device, { ...call, notHeldHere: true });
    if (outcome.kind === "claimed") {
      progress.volume = listed ?? (await cloud.describeVolume(volumeId, call));
      if (!progress.volume)
        throw new BootStepError(step.step, `${volumeId} vanished after it was claimed`, "run boot again");
      progress.claimedNow = true;
      claim.volumes++;
      log.info("boot.claim", `claimed ${step.family} volume`, { volume: volumeId, losses: claim.losses });
      return;
    }
    delete progress.volume;
    claim.losses++;
    log.info("boot.claim", "candidate taken by another instance", {
      volume: volumeId,
      reason: outcome.reason,
      losses: claim.losses,
    });
    if (claim.losses >= step.maxLosses) break;
    await sleep(lossPauseMs(claim.losses), undefined, call);
    candidates = await relist(step, ctx);
  }
  const before = claim.handedBack.length > 0 ? ` (handed back: ${claim.handedBack.join("; ")})` : "";
  const gone =
    claim.handedBack.length > 0 ? `no other ${step.family} candidate` : `every ${step.family} candidate was taken`;
  const why = `${candidates.length === 0 ? gone : `lost ${claim.losses} claims to other instances`}${before}`;
  if (!step.fallback)
    throw new BootStepError(
      step.step,
      `${why}, and creating from the snapshot is off`,
      "grow the pool, or enable createFromSnapshot",
    );
  // The newest generation's snapshot (built-at beats start time: an old image set snapshotted again is no newer).
  const snapshot = currentSnapshot(await cloud.findSnapshots(step.fallback.snapshotTags, call));
  const fit =
    snapshot?.state === "completed" ? storeFit(snapshot.tags, hostStoreOr(step.fallback.hostStore)) : undefined;
  if (snapshot && fit && !fit.fits)
    throw new BootStepError(
      step.step,
      `${why}, and the pool's snapshot ${snapshot.snapshotId} does not fit: ${fit.reason.replace(/^the volume/, "it")}`,
      fit.remediation,
    );
  const create = createSpecFrom(step.fallback, snapshot);
  if (!create)
    throw new BootStepError(
      step.step,
      `${why}, and the pool has no completed snapshot`,
      "grow the pool, or build the pool's snapshot",
    );
  log.notice("boot.claim", `${why}: creating a volume from the pool's snapshot`, { snapshot: create.snapshotId });
  await createAndClaim(create, ctx);
}

/**
 * One fresh page of candidates, minus those tried and those the selection's rule rejects
 * (isClaimable: in quarantine, on their way; not encrypted when the step requires it;
 * candidateOrder: of the other image store), in this
 * instance's order (those built by the host's engine major first).
 */
async function relist(step: ClaimStep, { plan, deps, claim }: StepContext): Promise<string[]> {
  const fresh = await deps.cloud.findVolumes(step.relist, {
    firstPage: step.pageSize,
    signal: claim.signal,
  });
  const now = deps.cloud.clock.now();
  for (const volume of fresh) claim.known.set(volume.volumeId, volume);
  const at = {
    now,
    availabilityZone: plan.availabilityZone,
    instanceId: plan.instanceId,
    quarantineHours: step.quarantineHours,
  };
  const usable = fresh.filter(
    (v) =>
      !claim.tried.has(v.volumeId) && isClaimable(v, at) && (step.requireEncrypted !== true || v.encrypted === true),
  );
  return candidateOrder(plan.instanceId, usable, hostStoreOr(step.hostStore)).fitting;
}

/** A pause after the n-th lost claim: 100-500 ms, growing, with jitter. */
function lossPauseMs(losses: number): number {
  return Math.round(Math.random() * 100 * 2 ** Math.min(losses, 2)) + 100;
}

/** Creates a volume (from the snapshot, or blank) and attaches it; refused when the boot budget could not hold it. */
export async function createAndClaim(spec: CreateSpec, ctx: StepContext): Promise<void> {
  const { plan, progress, deps, limits, claim, call } = ctx;
  // Started too late, a creation would only be undone at the deadline: the node degrades now.
  const left = claim.deadline !== undefined ? claim.deadline - Date.now() : Infinity;
  if (left < claim.createMs) {
    throw new BootStepError(
      "create-and-claim",
      `${Math.max(0, Math.round(left / 1000))} s of the boot budget left, less than a volume from the snapshot ` +
        `takes (timeouts.createSeconds ${Math.round(claim.createMs / 1000)} s): not created`,
      "keep the pool filled so boots need not create volumes",
    );
  }
  // Claimed from its creation: a pool volume is visible to other boots (and the keeper) as an
  // available pool volume before this boot attaches it, and they leave a claimed one alone
  // (isInTransit, timed by the volume's create time until tag-claim adds claimed-at). Only the
  // instance id: the request must be the same on a rerun, or EC2 refuses the repeated token.
  const request = {
    availabilityZone: spec.availabilityZone,
    ...(spec.snapshotId !== undefined ? { snapshotId: spec.snapshotId } : {}),
    ...(spec.sizeGiB !== undefined ? { sizeGiB: spec.sizeGiB } : {}),
    volumeType: spec.volumeType,
    tags: { ...spec.tags, [VolumeTag.claimedBy]: plan.instanceId },
    ...(spec.initializationRateMiBps && spec.snapshotId !== undefined
      ? { initializationRateMiBps: spec.initializationRateMiBps }
      : {}),
    ...(spec.creation ? { creation: spec.creation } : {}),
  };
  const volume = await createUsable(
    (token) => deps.cloud.createVolume({ ...request, clientToken: token }, call),
    clientToken(plan.instanceId, limits.bootId, spec),
    (made) => unusableForThisBoot(made, ctx),
    deps.log,
  );
  const kind = spec.tags[VolumeTag.kind] ?? "pool";
  deps.log.info(
    "boot.create",
    spec.snapshotId !== undefined
      ? `${kind} volume created from the pool's snapshot`
      : `blank ${kind} volume created (${spec.sizeGiB ?? "?"} GiB)`,
    { volume: volume.volumeId, snapshot: spec.snapshotId },
  );
  progress.volume = volume;
  const outcome = await deps.cloud.claimVolume(volume.volumeId, plan.instanceId, limits.device, {
    ...call,
    justCreated: true,
  });
  if (outcome.kind !== "claimed") {
    delete progress.volume;
    // Not this instance's after all: the claim made at creation goes (only if still ours).
    await deps.cloud
      .untagVolume(volume.volumeId, { [VolumeTag.claimedBy]: plan.instanceId }, call)
      .catch(() => undefined);
    throw new BootStepError(
      "create-and-claim",
      `the new volume ${volume.volumeId} could not be attached: ${outcome.reason}`,
      "see the EC2 error above",
    );
  }
  progress.volume = volume;
  progress.claimedNow = true;
  progress.created = spec.snapshotId !== undefined ? "snapshot" : "blank";
  claim.volumes++;
}

/** How many volumes of its own a boot's CreateVolume may meet again, unusable, before it gives up. */
const MAX_REPLACED = 3;

/**
 * CreateVolume with `token`, or, while EC2 answers with a volume made earlier for the same intent
 * that is gone since (ClientTokenSpentError) or of no use to this boot (`unusable` says why), with
 * the token that replaces that volume (replacingToken): a rerun meets the same answers and asks
 * with the same tokens, so it gets the volume the killed run made, never a second one.
 */
export async function createUsable(
  create: (token: string) => Promise<VolumeInfo>,
  token: string,
  unusable: (volume: VolumeInfo) => string | undefined,
  log: Logger,
): Promise<VolumeInfo> {
  for (let replaced = 0; ; replaced++) {
    let why: string;
    let volumeId: string;
    try {
      const volume = await create(token);
      const reason = unusable(volume);
      if (reason === undefined) return volume;
      [why, volumeId] = [reason, volume.volumeId];
    } catch (error) {
      if (!(error instanceof ClientTokenSpentError)) throw error;
      [why, volumeId] = ["gone since", error.volumeId];
    }
    if (replaced >= MAX_REPLACED)
      throw new BootStepError(
        "create-and-claim",
        `CreateVolume answered ${volumeId}, made earlier for this boot and ${why}, ${replaced + 1} times`,
        "run boot again after a reboot (a new boot id), or look at the volumes tagged with this instance's claim",
      );
    log.info("boot.create", `CreateVolume answered ${volumeId}, made earlier for this boot and ${why}: asking again`, {
      volume: volumeId,
    });
    token = replacingToken(token, volumeId);
  }
}

/**
 * Why a volume CreateVolume answered cannot serve this boot, or undefined: handed back by it (a
 * volume of its own that failed), quarantined (a failure recorded by an earlier run of it), or
 * attached to another instance (taken while this boot was not looking).
 */
function unusableForThisBoot(volume: VolumeInfo, { plan, claim }: StepContext): string | undefined {
  if (claim.tried.has(volume.volumeId)) return "handed back by this boot";
  if (volume.tags[VolumeTag.lastError] !== undefined) return `quarantined (${volume.tags[VolumeTag.lastError]})`;
  const holder = volume.attachment?.instanceId;
  if (holder !== undefined && holder !== plan.instanceId) return `attached to ${holder}`;
  return undefined;
}

/**
 * CreateVolume's idempotency token (EC2 allows 64 ASCII characters): the same for a rerun of
 * this boot (same instance, same boot id, same spec), so a boot killed after CreateVolume gets
 * that volume back rather than leaving it behind and making another. Nothing that changes between
 * reruns of the same intent is in it (no clock, no count of the volumes this run went through: a
 * rerun skips a volume the killed run handed back): a volume of this token's that can no longer
 * serve is stepped over by createUsable. Every field of the spec that shapes the volume is in it
 * (EC2 answers a repeated token with the volume it made first), config `volumes` (the spec's
 * creation) included, by the parameters the request sends (as the keeper's slot token): tags
 * sorted, so no object's key order shapes the token.
 */
export function clientToken(instanceId: string, bootId: string | undefined, spec: CreateSpec): string {
  const sent = sentCreationParameters(spec.creation);
  const text = JSON.stringify([
    instanceId,
    bootId ?? "",
    spec.snapshotId ?? "",
    spec.sizeGiB ?? 0,
    spec.availabilityZone,
    spec.volumeType,
    spec.initializationRateMiBps ?? null,
    Object.entries(spec.tags).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
    ...(sent.length > 0 ? [sent] : []),
  ]);
  return `ebs-cache-${createHash("sha256").update(text).digest("hex").slice(0, 48)}`;
}
