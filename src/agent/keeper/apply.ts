/**
 * The keeper's plan, carried out: one handler per step (KEEPER_HANDLERS). Each re-checks what it
 * relies on: a trim describes the volume again and deletes it only while it is still an
 * available, unattached, managed, not kept volume of the pool (EC2 refuses DeleteVolume for an
 * attached one anyway); a create carries its slot's ClientToken, so a keeper racing another
 * gets the volume the other made rather than a second one. A slot token EC2 answers with a
 * volume gone since (the slot's own volume, deleted, the zone back as it was) is followed by the
 * token that replaces that volume (replacingToken): every keeper that met the same answer asks
 * with the same next token, so the slot still gets one volume.
 */
import { describeError } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import { VolumeKind, VolumeTag } from "../../tags.ts";
import type { KeeperCloud, VolumeInfo } from "../ports.ts";
import { ClientTokenSpentError } from "../../aws/errors.ts";
import { releaseTags } from "../release/plan.ts";
import { replacingToken } from "../volume-creation.ts";
import { createVolumeSpec, type CreateStep, type KeeperStep } from "./plan.ts";

/** How many volumes gone since a slot's tokens may have made before the create gives up (the next run goes on). */
const MAX_REPLACED = 3;

/**
 * `created`: a new volume; `existing`: the slot's token answered a volume that existed before
 * this keeper's round (another keeper's, made for the same slot); `tagged`, `deleted`; `skipped`:
 * the volume changed since it was observed (claimed, kept) and was left alone; `failed`.
 */
export type KeeperStepDone = "created" | "existing" | "tagged" | "deleted" | "reclaimed" | "skipped" | "failed";

/** One step as carried out: the step, what came of it, and the volume it made or touched. */
export type KeeperStepReport = KeeperStep & { done: KeeperStepDone; volumeId?: string; error?: string };

type Fields = Record<string, string | number | undefined>;

interface HandlerContext {
  cloud: KeeperCloud;
  log: Logger;
  /** The TTL a reclaimed volume's release tags give it (config ttlHours); default 24. */
  ttlHours?: number;
  /** How long a reclaim waits for EC2 to finish the detach (default 120 s). */
  detachTimeoutMs?: number;
  /** Volume ids this round observed: a create answered with one of them made nothing new. */
  known: ReadonlySet<string>;
  /** Told the new volume's state while a create waits for it to be available (the progress line). */
  onWait?: (volume: VolumeInfo | undefined, zone: string) => void;
}

type Handler<S extends KeeperStep> = (
  step: S,
  ctx: HandlerContext,
  fields: Fields,
) => Promise<{ done: Exclude<KeeperStepDone, "failed">; volumeId?: string; clientToken?: string }>;

type KeeperStepName = KeeperStep["step"];
type KeeperStepOf<K extends KeeperStepName> = Extract<KeeperStep, { step: K }>;

const KEEPER_HANDLERS: { [K in KeeperStepName]: Handler<KeeperStepOf<K>> } = {
  create: async (step, { cloud, log, known, onWait }, fields) => {
    const wait = onWait ? (volume: VolumeInfo | undefined) => onWait(volume, step.zone) : undefined;
    const { volume, clientToken } = await createForSlot(step, cloud, log, fields, wait);
    const existing = known.has(volume.volumeId);
    log.notice(
      "keeper.create",
      existing ? "the slot's volume exists already (another keeper made it)" : "pool volume created",
      { ...fields, volume: volume.volumeId },
    );
    return { done: existing ? "existing" : "created", volumeId: volume.volumeId, clientToken };
  },
  "tag-initialized": async (step, { cloud, log }, fields) => {
    await cloud.tagVolume(step.volumeId, { [VolumeTag.initialized]: cloud.clock.now().toISOString() });
    log.info("keeper.initialized", "volume tagged initialized", fields);
    return { done: "tagged", volumeId: step.volumeId };
  },
  trim: async (step, { cloud, log }, fields) => {
    const now = await cloud.describeVolume(step.volumeId);
    const why = !now
      ? "gone"
      : now.state !== "available" || now.attachment
        ? `now ${now.attachment ? `attached to ${now.attachment.instanceId}` : now.state}`
        : now.tags[VolumeTag.managed] !== "true" || now.tags[VolumeTag.kind] !== VolumeKind.pool
          ? "no longer tagged as a managed pool volume"
          : now.tags[VolumeTag.keep] === "true"
            ? `tagged ${VolumeTag.keep}=true`
            : undefined;
    if (why !== undefined) {
      log.info("keeper.trim", `left alone: ${why}`, fields);
      return { done: "skipped", volumeId: step.volumeId };
    }
    await cloud.deleteVolume(step.volumeId);
    log.notice("keeper.trim", "surplus pool volume deleted", fields);
    return { done: "deleted", volumeId: step.volumeId };
  },
  reclaim: async (step, { cloud, log, ttlHours, detachTimeoutMs }, fields) => {
    // Right before the DetachVolume: the instance still stopped (a start since the plan would
    // mount it), the volume still this pool's and still attached to it. A stopped instance has
    // no OS that could hold the filesystem: the detach is never forced, and it needs no force.
    const [instance, volume] = await Promise.all([
      cloud.describeInstance(step.instanceId, { fresh: true }),
      cloud.describeVolume(step.volumeId),
    ]);
    const why =
      instance.state !== "stopped"
        ? `instance ${step.instanceId} is ${instance.state} now`
        : !volume
          ? "gone"
          : volume.attachment?.instanceId !== step.instanceId
            ? `no longer attached to ${step.instanceId}`
            : volume.tags[VolumeTag.managed] !== "true" || volume.tags[VolumeTag.kind] !== VolumeKind.pool
              ? "not a managed pool volume"
              : undefined;
    if (why !== undefined) {
      log.info("keeper.reclaim", `left alone: ${why}`, fields);
      return { done: "skipped", volumeId: step.volumeId };
    }
    await cloud.detachVolume(step.volumeId, step.instanceId);
    await cloud.waitForAttachment(step.volumeId, step.instanceId, "detached", detachTimeoutMs ?? 120_000);
    const tags = releaseTags({
      instanceId: step.instanceId,
      kind: VolumeKind.pool,
      keep: false,
      ttlHours: ttlHours ?? 24,
      releasedAt: cloud.clock.now(),
      ...(volume!.tags[VolumeTag.claimedAt] !== undefined ? { claimedAt: volume!.tags[VolumeTag.claimedAt] } : {}),
    });
    await cloud.tagVolume(step.volumeId, tags.set);
    await cloud.untagVolume(step.volumeId, tags.remove);
    log.notice("keeper.reclaim", "pool volume detached from a long-stopped instance and tagged released", {
      ...fields,
      instance: step.instanceId,
    });
    return { done: "reclaimed", volumeId: step.volumeId };
  },
};

/**
 * CreateVolume for the slot, with its token, or, while EC2 answers a token with a volume gone
 * since, with the token that replaces that volume: the volume and the token that made it.
 */
async function createForSlot(
  step: CreateStep,
  cloud: KeeperCloud,
  log: Logger,
  fields: Fields,
  onWait?: (volume: VolumeInfo | undefined) => void,
) {
  let clientToken = step.clientToken;
  for (let replaced = 0; ; replaced++) {
    try {
      const volume = await cloud.createVolume({ ...createVolumeSpec(step), clientToken }, onWait ? { onWait } : {});
      return { volume, clientToken };
    } catch (error) {
      if (!(error instanceof ClientTokenSpentError) || replaced >= MAX_REPLACED) throw error;
      log.info("keeper.create", `the slot's token made ${error.volumeId}, gone since: asking with the next token`, {
        ...fields,
        replaced: error.volumeId,
      });
      clientToken = replacingToken(clientToken, error.volumeId);
    }
  }
}

/** The step's handler, typed by the step's own kind (no cast to the whole union). */
function runKeeperStep<K extends KeeperStepName>(step: KeeperStepOf<K>, ctx: HandlerContext, fields: Fields) {
  return KEEPER_HANDLERS[step.step](step, ctx, fields);
}

/** Carries out the steps in order; a failed step is recorded and logged, never thrown. */
export async function applyKeeper(steps: readonly KeeperStep[], ctx: HandlerContext): Promise<KeeperStepReport[]> {
  const results: KeeperStepReport[] = [];
  for (const step of steps) {
    const fields: Fields = {
      step: step.step,
      zone: step.zone,
      ...("volumeId" in step ? { volume: step.volumeId } : { slot: step.slot }),
    };
    try {
      results.push({ ...step, ...(await runKeeperStep(step, ctx, fields)) });
    } catch (error) {
      const message = describeError(error);
      ctx.log.error("keeper.step-failed", `${step.step} failed: ${message}`, fields);
      results.push({ ...step, done: "failed", error: message });
    }
  }
  return results;
}
