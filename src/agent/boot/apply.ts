/**
 * Carrying out a boot plan. Each step re-checks the world and is safe to repeat, so a boot
 * killed at any point and run again converges. Whatever fails after the claim is undone in
 * reverse (docker back on its old root, unmount, detach without force). A failure that is the
 * volume's (its device never attached, its filesystem is not the agent's) hands that volume
 * back tagged `last-error` (quarantined) and the boot claims its next candidate, up to
 * `claim.maxVolumes`; any other failure, or SIGTERM, leaves the node degraded: docker on its
 * default data-root, a `degraded` label, one clear log line.
 */
import { join } from "node:path";
import { describeError } from "../../errors.ts";
import { diskErrorKind } from "../../disk-errors.ts";
import { containerdRootOnVolume, DATA_ROOT_SUBDIR, FS_LABEL, GROW_MARGIN_BYTES, mountPointOf } from "../../layout.ts";
import { Label, VolumeKind, VolumeTag } from "../../tags.ts";
import { releaseTags } from "../release/plan.ts";
import { detachBlocker } from "../detach-guard.ts";
import { DeviceTimeoutError } from "../../host/device.ts";
import type { VolumeInfo } from "../ports.ts";
import type { PrewarmAtBoot } from "../prewarm/apply.ts";
import { CHECKING, mayReadFromMount, prewarmVolumeOf, type PrewarmReport } from "../prewarm/plan.ts";
import { volumeDetails } from "../report.ts";
import { imagesOf, withLatest } from "../volume-rules.ts";
import { claimNext, createAndClaim } from "./claim.ts";
import { adoptWorkspace } from "./adopt.ts";
import { prepareVolumeDataRoot } from "./activation-marker.ts";
import { writeVolumeRecord } from "../volume-record.ts";
import { claimTagChanges } from "./claim-tags.ts";
import {
  freshProgress,
  type ApplyOptions,
  type BootLimits,
  type ClaimState,
  type Finished,
  type Progress,
  type StepContext,
} from "./context.ts";
import type { BootDeps } from "./deps.ts";
import { BootStepError, CancelledError, JoinedBeforeSwitch, remediationOf } from "./errors.ts";
import type { BootPlan, BootStep } from "./plan.ts";
import { bootSourceOf } from "./source.ts";
import { imagesOfNode } from "../prewarm/need.ts";
import { degrade, shorten, undo } from "./undo.ts";
import { judgeSpace, type SpaceFailure } from "./volume-space.ts";
import type { BootReport } from "../outcomes.ts";

/** Steps whose failure is the volume's: it is handed back quarantined and the next one tried. */
const VOLUME_STEPS = new Set<BootStep["step"]>([
  "wait-for-device",
  "check-filesystem",
  "mount",
  "grow-filesystem",
  "prepare-data-root",
]);
/**
 * Docker failing on the volume's data-root, or missing its images, is most likely the volume's
 * too (the host's side, daemon.json and dockerd's flags, was checked before the claim): it is
 * quarantined, but the node degrades rather than restart docker on volume after volume.
 */
const DOCKER_ON_VOLUME_STEPS = new Set<BootStep["step"]>(["start-docker", "verify-docker"]);

/** Runs the plan. Never throws for a failure the node can live with: it degrades instead. */
export async function applyBoot(
  plan: BootPlan,
  deps: BootDeps,
  limits: BootLimits,
  options: ApplyOptions = {},
): Promise<BootReport> {
  const timeline: BootReport["timeline"] = [];
  const claim: ClaimState = {
    known: new Map((options.known ?? []).map((v) => [v.volumeId, v])),
    tried: new Set(),
    volumes: 0,
    losses: 0,
    handedBack: [],
    createMs: options.createMs ?? 0,
    signal: options.signal,
    deadline: options.deadline,
  };
  const claimIndex = plan.steps.findIndex((step) => step.step === "claim-volume");
  const claimStep = plan.steps[claimIndex];
  const maxVolumes = claimStep?.step === "claim-volume" ? claimStep.maxVolumes : 1;
  if (plan.steps.some((step) => step.step === "switch-data-root")) {
    const refused = await checkHost(deps, limits, timeline);
    if (refused) return { ...refused, timeline, source: bootSourceOf(plan.selection, refused.outcome, undefined) };
  }
  const run: Run = { plan, deps, limits, options, claim, timeline, claimIndex, maxVolumes, dataRootFinal: false };
  // The first attempt runs the whole plan; one whose volume was handed back is followed by another
  // from the claim, with nothing in hand, until a volume serves or claim.maxVolumes are spent.
  let ended = await attemptFrom(0, run);
  while ("retryFrom" in ended) ended = await attemptFrom(ended.retryFrom, run);
  return ended.report;
}

/** One boot's run of its plan, across its attempts. */
interface Run {
  plan: BootPlan;
  deps: BootDeps;
  limits: BootLimits;
  options: ApplyOptions;
  claim: ClaimState;
  timeline: BootReport["timeline"];
  /** Where a retry starts: the plan's claim-volume step (-1 when the plan claims nothing). */
  claimIndex: number;
  maxVolumes: number;
  /** Docker verified on the volume: the node may join the swarm from here on, so nothing moves docker any more. */
  dataRootFinal: boolean;
}

/** How an attempt ended: the boot's report, or its volume handed back and the plan's step to go on from. */
type AttemptEnd = { report: BootReport } | { retryFrom: number };

/** Runs the plan's steps from `from` with a fresh progress (nothing in hand yet). */
async function attemptFrom(from: number, run: Run): Promise<AttemptEnd> {
  const { plan, deps, limits, claim, options, timeline } = run;
  const progress = freshProgress();
  for (const step of plan.steps.slice(from)) {
    const started = Date.now();
    try {
      if (options.signal?.aborted) throw new CancelledError(step.step, options.signal);
      const done = await runStep(step, {
        plan,
        progress,
        deps,
        limits,
        claim,
        call: claim.signal ? { signal: claim.signal } : {},
      });
      timeline.push({ step: step.step, ms: Date.now() - started });
      if (done)
        return { report: { ...done, timeline, source: bootSourceOf(plan.selection, done.outcome, progress.created) } };
      if (step.step === "verify-docker") {
        run.dataRootFinal = true;
        await options.dataRootFinal?.();
      }
    } catch (caught) {
      timeline.push({ step: step.step, ms: Date.now() - started });
      return afterFailure(run, step, progress, caught);
    }
  }
  const outcome = !plan.steps.some((step) => step.step === "report-ready")
    ? "prepared"
    : progress.prewarm?.labelState === "warming"
      ? "warming"
      : "ready";
  return {
    report: {
      outcome,
      source: bootSourceOf(plan.selection, outcome, progress.created),
      timeline,
      ...resultOf(progress),
    },
  };
}

/**
 * A step failed: what is undone, and whether the next candidate is claimed (the volume's fault, or a
 * full pool volume) or the node degrades.
 */
async function afterFailure(run: Run, step: BootStep, progress: Progress, caught: unknown): Promise<AttemptEnd> {
  const { plan, deps, limits, claim, options, timeline } = run;
  const { log } = deps;
  if (run.dataRootFinal) {
    const finished = await failedAfterDataRootFinal(deps, progress, caught);
    return {
      report: { ...finished, timeline, source: bootSourceOf(plan.selection, finished.outcome, progress.created) },
    };
  }
  const error =
    options.signal?.aborted && !(caught instanceof CancelledError)
      ? new CancelledError(step.step, options.signal, caught)
      : caught;
  const volumeId = progress.volume?.volumeId;
  const cancelled = error instanceof CancelledError;
  const failed = progress.inStep ?? step.step;
  // Space first: a full volume is handed back for its owner, never quarantined (volume-space.ts).
  const space = cancelled ? undefined : await spaceFailureOf(error, failed, progress, deps);
  const full = space?.kind === "volume-full";
  const reason = space ? `${volumeId ?? "the volume"}: ${space.detail}: ${describeError(error)}` : describeError(error);
  const remediation = space ? spaceRemediation(space, progress) : remediationOf(error);
  const volumeFault =
    !cancelled &&
    !full &&
    space?.kind !== "host-full" &&
    VOLUME_STEPS.has(failed) &&
    (await isVolumeFault(error, progress, plan, deps));
  const workspace = progress.volume?.tags[VolumeTag.kind] === VolumeKind.workspace;
  // A sample begun while docker started still reads the device, and so may the run begun at the mount: the undo
  // unmounts and detaches only once they are done (the sample is bounded by prewarm.check.seconds, the run stopped).
  await stopPrewarmReads(deps, progress);
  // Undo with no signal: a boot stopped by SIGTERM still hands back what it holds.
  // A node that joined before the switch keeps docker as it runs: not the volume's fault either.
  const joined = error instanceof JoinedBeforeSwitch;
  await undo(progress, plan, deps, reason, {
    quarantine: volumeFault || (!cancelled && !joined && space === undefined && DOCKER_ON_VOLUME_STEPS.has(failed)),
    keepDocker: joined,
    holderWaitMs: limits.holderWaitMs,
    // The user's own workspace goes back as a release gives it back: its expiry (or keep) intact.
    releaseWorkspace: full && workspace,
  });
  // Another volume for a full pool volume, as for a broken one (not after docker ran on it:
  // docker is not restarted on volume after volume); never for a full workspace, whose user
  // would get a fresh one and lose theirs.
  const nextCandidate = volumeFault || (full && !workspace && VOLUME_STEPS.has(failed));
  if (nextCandidate && volumeId && run.claimIndex >= 0 && claim.volumes < run.maxVolumes) {
    const fields = { step: failed, volume: volumeId, remediation };
    if (full)
      log.warning(
        "boot.volume-full",
        `${reason}; handed back to the pool, not quarantined, trying the next candidate`,
        fields,
      );
    else log.warning("boot.volume-unusable", `${reason}; handed back, trying the next candidate`, fields);
    claim.tried.add(volumeId);
    claim.handedBack.push(reason);
    return { retryFrom: run.claimIndex };
  }
  const kept = full && workspace ? "; the workspace is handed back for its user, not quarantined" : "";
  const line = `${reason}${kept}; falling back to docker's default data-root`;
  const fields = { step: failed, volume: volumeId, remediation };
  if (full) log.error("boot.volume-full", line, fields);
  else log.error("boot.failed", line, fields);
  const degraded = await degrade(deps, limits, reason, attachedHere(plan, claim, progress));
  return { report: { ...degraded, timeline, source: bootSourceOf(plan.selection, degraded.outcome, undefined) } };
}

/**
 * The host must take the switch before a volume is claimed (daemon.json parses and holds
 * nothing the switch or dockerd refuses, dockerd's flags agree with it): the agent would
 * otherwise attach, mount and clean a pool volume only to hand it back at switch-data-root or
 * start-docker, tagged with a last-error that is not the volume's fault. Returns the degraded
 * boot when the host refuses.
 */
async function checkHost(
  deps: BootDeps,
  limits: BootLimits,
  timeline: BootReport["timeline"],
): Promise<Finished | undefined> {
  const started = Date.now();
  try {
    await (deps.preflight ? deps.preflight() : deps.daemonConfig.dataRoot());
    timeline.push({ step: "check-host", ms: Date.now() - started });
    return undefined;
  } catch (error) {
    timeline.push({ step: "check-host", ms: Date.now() - started });
    const reason = describeError(error);
    deps.log.error("boot.failed", `${reason}; no volume was claimed`, {
      step: "check-host",
      remediation: remediationOf(error),
    });
    // daemon.json (or dockerd's reading of it) is what is wrong: the agent writes nothing into
    // it, not even the degraded engine label, and leaves it as it found it.
    const report = async () =>
      deps.log.notice("boot.label", "no degraded label published: the host's docker configuration refused the switch");
    return degrade({ ...deps, report }, limits, reason);
  }
}

function resultOf(progress: Progress) {
  return {
    ...(progress.volume ? { volumeId: progress.volume.volumeId } : {}),
    ...(progress.device ? { device: progress.device } : {}),
    ...(progress.mountPoint ? { mountPoint: progress.mountPoint } : {}),
    ...(progress.dataRoot ? { dataRoot: progress.dataRoot } : {}),
    ...(progress.prewarm
      ? {
          prewarm: {
            action: progress.prewarm.decision.action,
            verdict: progress.prewarm.verdict,
            phase: progress.prewarm.phase,
            ...(progress.prewarm.before ? { before: progress.prewarm.before } : {}),
            ...(progress.prewarm.after ? { after: progress.prewarm.after } : {}),
            ...(progress.prewarm.error ? { error: progress.prewarm.error } : {}),
          },
        }
      : {}),
  };
}

/**
 * Space or writability behind a failure of a step on the volume (volume-space.ts): the error's
 * class, and the fill of the volume's filesystem read right after it. Undefined for any other step
 * or failure.
 */
async function spaceFailureOf(
  error: unknown,
  failed: BootStep["step"],
  progress: Progress,
  deps: BootDeps,
): Promise<SpaceFailure | undefined> {
  const onVolume = VOLUME_STEPS.has(failed);
  if (!onVolume && !DOCKER_ON_VOLUME_STEPS.has(failed)) return undefined;
  const mountPoint = progress.mountPoint;
  const fill = mountPoint && deps.fill ? await deps.fill(mountPoint).catch(() => undefined) : undefined;
  return judgeSpace(diskErrorKind(error), fill, { onVolume });
}

/** What to do about a volume failure that space or writability explains. */
function spaceRemediation(space: SpaceFailure, progress: Progress): string {
  const volumeId = progress.volume?.volumeId ?? "the volume";
  switch (space.kind) {
    case "volume-full":
      return progress.volume?.tags[VolumeTag.kind] === VolumeKind.workspace
        ? `free space on ${volumeId} (its user's images and docker volumes: attach it to a machine, mount it, ` +
            `remove what is no longer needed) or grow it (aws ec2 modify-volume --size), then boot again`
        : `prune ${volumeId} (ebs-cache-agent prune on a machine that holds it), grow it (aws ec2 modify-volume ` +
            `--size), or delete it and let the keeper make a fresh one`;
    case "host-full":
      return "free space on the host's own disks (df -h; journalctl -u docker), then boot again";
    case "read-only":
      return (
        `the kernel made ${volumeId}'s filesystem read-only (XFS shuts a filesystem down after a metadata I/O ` +
        `error or corruption: dmesg); repair it (xfs_repair) or delete it`
      );
  }
}

/**
 * Whether a failure of a volume step is the volume's fault (quarantine it, try the next) rather
 * than the host's. A device that never appeared is the volume's only while EC2 still shows the
 * attachment unfinished: attached with no device is this host's udev/driver, and quarantining
 * good volumes one after another would not help it.
 */
async function isVolumeFault(error: unknown, progress: Progress, plan: BootPlan, deps: BootDeps): Promise<boolean> {
  if (!(error instanceof DeviceTimeoutError)) return true;
  const volume = progress.volume
    ? await deps.cloud.describeVolume(progress.volume.volumeId).catch(() => undefined)
    : undefined;
  const attachment = volume?.attachment;
  return !(attachment?.instanceId === plan.instanceId && attachment.state === "attached");
}

type StepName = BootStep["step"];
type StepOf<K extends StepName> = Extract<BootStep, { step: K }>;
/** A step's work: `Finished` ends the boot there (disabled, degraded); nothing goes on to the next step. */
type StepHandler<K extends StepName> = (step: StepOf<K>, ctx: StepContext) => Promise<Finished | undefined>;

/** One handler per step of the plan. */
const STEP_HANDLERS: { [K in StepName]: StepHandler<K> } = {
  "report-disabled": reportDisabled,
  degrade: degradeAsPlanned,
  "hand-back-attached": handBackAttached,
  "reuse-attached": reuseAttached,
  "claim-volume": claimVolume,
  "create-and-claim": createVolumeAndClaim,
  "adopt-workspace": async (step, ctx) => {
    await adoptWorkspace(step, ctx);
    return undefined;
  },
  "tag-claim": tagClaim,
  "wait-for-device": waitForDevice,
  "check-filesystem": checkFilesystem,
  mount: mountVolume,
  "begin-prewarm": beginPrewarmRun,
  "grow-filesystem": growFilesystem,
  "prepare-data-root": prepareDataRoot,
  "switch-data-root": switchDataRoot,
  "resume-prepared": resumePrepared,
  "start-docker": startDocker,
  "verify-docker": verifyDocker,
  prewarm,
  "report-ready": reportReady,
};

function runStep<K extends StepName>(step: StepOf<K>, ctx: StepContext): Promise<Finished | undefined> {
  return STEP_HANDLERS[step.step](step, ctx);
}

async function reportDisabled(step: StepOf<"report-disabled">, { deps }: StepContext): Promise<Finished> {
  deps.log.notice("boot.disabled", step.reason);
  await deps.report("disabled", { [Label.reason]: step.reason });
  return { outcome: "disabled", reason: step.reason };
}

async function degradeAsPlanned(
  step: StepOf<"degrade">,
  { plan, claim, progress, deps, limits }: StepContext,
): Promise<Finished> {
  deps.log.warning("boot.no-volume", step.reason);
  return degrade(deps, limits, step.reason, attachedHere(plan, claim, progress));
}

/** The cache volumes attached to this instance as observed, and the one in hand: a degraded node uses none. */
function attachedHere(plan: BootPlan, claim: ClaimState, progress: Progress): string[] {
  const attached = [...claim.known.values()]
    .filter((v) => v.attachment?.instanceId === plan.instanceId && v.attachment.state !== "detached")
    .map((v) => v.volumeId);
  return progress.volume ? [...attached, progress.volume.volumeId] : attached;
}

/**
 * Another tenant's workspace volume (or one no current id names) is given back as a release
 * gives a volume back, so that its owner's next start finds it `available`: unmounted (only an
 * earlier run of this boot can have mounted it, before docker), detached without force, tagged
 * `released-at` with `expires-at` (or `keep`). A mount the agent did not make, or any failure,
 * stops here: the node degrades with the volume attached and unmounted, never mounted for this run.
 */
async function handBackAttached(
  step: StepOf<"hand-back-attached">,
  { plan, deps, limits, call }: StepContext,
): Promise<undefined> {
  const { cloud, storage, log } = deps;
  const { volumeId } = step;
  log.notice("boot.hand-back", `${step.reason}: not mounted; handing it back released`, { volume: volumeId });
  const device = await storage.findDevice(volumeId);
  const ours = mountPointOf(limits.mountRoot, volumeId);
  const mounted = device ? await storage.mountPointOf(device) : undefined;
  if (mounted !== undefined && mounted !== ours) {
    throw new BootStepError(
      step.step,
      `${volumeId} is mounted at ${mounted}, not by the agent: not handed back`,
      `unmount ${mounted}, then run boot again`,
    );
  }
  if (mounted !== undefined) await storage.unmount(mounted);
  const wait = { boundMs: limits.holderWaitMs ?? 0, log, area: "boot" as const, ...call };
  const blocker = device ? await detachBlocker(storage, volumeId, device, "boot", wait) : undefined;
  if (blocker) throw new BootStepError(step.step, `not handed back: ${blocker.message}`, blocker.remediation);
  await cloud.detachVolume(volumeId, plan.instanceId, call);
  await cloud.waitForAttachment(volumeId, plan.instanceId, "detached", limits.attachTimeoutMs, call);
  const volume = await cloud.describeVolume(volumeId, call);
  if (!volume) return undefined;
  const claimedAt = volume.tags[VolumeTag.claimedAt];
  const releasedAt = cloud.clock.now();
  const tags = releaseTags({
    instanceId: plan.instanceId,
    kind: VolumeKind.workspace,
    keep: step.keep,
    ttlHours: step.ttlHours,
    releasedAt,
    ...(claimedAt !== undefined ? { claimedAt } : {}),
  });
  await cloud.tagVolume(volumeId, tags.set, call);
  await cloud.untagVolume(volumeId, tags.removeKeys, call);
  await cloud.untagVolume(volumeId, tags.remove, call);
  log.notice("boot.hand-back", "workspace volume handed back released", {
    volume: volumeId,
    expiresAt: tags.set[VolumeTag.expiresAt],
    keep: tags.set[VolumeTag.keep],
  });
  return undefined;
}

async function reuseAttached(
  step: StepOf<"reuse-attached">,
  { progress, deps, claim, call }: StepContext,
): Promise<undefined> {
  const volume = claim.known.get(step.volumeId) ?? (await deps.cloud.describeVolume(step.volumeId, call));
  if (!volume) throw new BootStepError(step.step, `${step.volumeId} no longer exists`, "run boot again");
  progress.volume = volume;
  deps.log.info("boot.reuse", "volume already attached to this instance: reusing it", { volume: volume.volumeId });
  return undefined;
}

/** The next candidate, or one created from the snapshot when they run out (claim.ts). */
async function claimVolume(step: StepOf<"claim-volume">, ctx: StepContext): Promise<undefined> {
  await claimNext(step, ctx);
  return undefined;
}

/** The plan chose a new volume (from the snapshot, or a blank workspace volume): created and attached (claim.ts). */
async function createVolumeAndClaim(step: StepOf<"create-and-claim">, ctx: StepContext): Promise<undefined> {
  await createAndClaim(step.create, ctx);
  return undefined;
}

/**
 * Ensured from the volume's tags as last described, on every run (a reused attachment
 * included): a boot killed between AttachVolume and these tags, or between CreateTags and
 * DeleteTags, is finished here, and an intent changed since (a reboot with other instance tags)
 * is written. At most one CreateTags and one DeleteTags (claim-tags.ts); none when the tags are
 * right already.
 */
async function tagClaim(step: StepOf<"tag-claim">, { plan, progress, deps, call }: StepContext): Promise<undefined> {
  const volume = volumeOf(progress);
  const tags = volume.tags;
  const changes = claimTagChanges(tags, plan.instanceId, step.intent, deps.cloud.clock.now());
  if (Object.keys(changes.set).length > 0) {
    await deps.cloud.tagVolume(volume.volumeId, changes.set, call);
    Object.assign(tags, changes.set);
    if (changes.set[VolumeTag.claimedAt] !== undefined) progress.claimedAt = changes.set[VolumeTag.claimedAt];
  }
  await deps.cloud.untagVolume(volume.volumeId, changes.remove, call);
  for (const key of changes.remove) delete tags[key];
  return undefined;
}

/**
 * The device, identified by its NVMe serial, is the proof of the attachment: no DescribeVolumes
 * polling. Its deadline covers both (EC2's attach, then udev).
 */
async function waitForDevice(
  _step: StepOf<"wait-for-device">,
  { progress, deps, limits, call }: StepContext,
): Promise<undefined> {
  progress.device = await deps.storage.waitForDevice(
    volumeOf(progress).volumeId,
    limits.attachTimeoutMs + limits.deviceTimeoutMs,
    call,
  );
  deps.log.info("boot.device", "device verified by its serial", {
    volume: volumeOf(progress).volumeId,
    device: progress.device,
  });
  return undefined;
}

/**
 * Positive identification before any write: only the agent's own cache filesystem goes on to be
 * mounted read-write (which replays its log) and grown. Anything else throws ForeignVolumeError
 * with the volume left byte-for-byte unchanged.
 */
async function checkFilesystem(step: StepOf<"check-filesystem">, { progress, deps }: StepContext): Promise<undefined> {
  const { storage, log } = deps;
  const volume = volumeOf(progress);
  const device = progress.device!;
  const owner = { volumeId: volume.volumeId, createdByAgent: createdByAgent(volume) };
  let identity = await storage.identify(owner, device);
  if (identity.kind === "blank") {
    log.notice("boot.format", "formatting the blank volume the agent created", { volume: volume.volumeId, device });
    await storage.format(device, FS_LABEL);
    identity = await storage.identify(owner, device);
    if (identity.kind !== "cache")
      throw new BootStepError(
        step.step,
        `${volume.volumeId} (${device}) is still blank after mkfs.xfs`,
        `check dmesg and lsblk -f ${device}`,
      );
  }
  if (identity.dataBytes !== undefined) progress.filesystemBytes = identity.dataBytes;
  log.info("boot.filesystem", "the agent's cache filesystem", {
    volume: volume.volumeId,
    device,
    fresh: identity.fresh,
  });
  return undefined;
}

async function mountVolume(step: StepOf<"mount">, ctx: StepContext): Promise<undefined> {
  const { progress, deps } = ctx;
  const volume = volumeOf(progress);
  const device = progress.device!;
  const mountPoint = join(step.mountRoot, volume.volumeId);
  const current = await deps.storage.mountPointOf(device);
  if (current && current !== mountPoint) {
    throw new BootStepError(step.step, `${device} is already mounted at ${current}`, `unmount ${current} first`);
  }
  if (!current) {
    await deps.storage.mount(device, mountPoint);
    progress.mountedNow = true;
  }
  progress.mountPoint = mountPoint;
  deps.log.info("boot.mount", "volume mounted", { volume: volume.volumeId, mountPoint });
  // The pre-warm needs only the device from here on: its decision, and the sample or (a volume known cold) the
  // need list's reads, run while the data-root is prepared and docker starts. A first phase (no docker) has no
  // `prewarm` step (beginPrewarm then begins nothing): the second begins it with start-docker.
  progress.prewarmRun ??= await beginPrewarm(ctx);
  return undefined;
}

/**
 * The first phase's pre-warm run (mount-run.ts): a volume that may be cold (pure: mayReadFromMount) gets a run that
 * reads it from here on and outlives this phase; it decides itself (one more EC2 call, not this phase's) and reads
 * only a volume known cold. Never fails the boot: without it, the second phase reads as before.
 */
async function beginPrewarmRun(step: StepOf<"begin-prewarm">, { progress, deps }: StepContext): Promise<undefined> {
  const volume = volumeOf(progress);
  if (!deps.mountRun || !mayReadFromMount(prewarmVolumeOf(volume), step.strategy)) return undefined;
  try {
    await deps.mountRun.begin(volume);
    progress.mountRunBegun = true;
    deps.log.info("boot.prewarm", "pre-warm run begun at the mount: it reads a cold volume while docker starts", {
      volume: volume.volumeId,
    });
  } catch (error) {
    deps.log.warning("boot.prewarm", `could not begin the pre-warm run at the mount: ${describeError(error)}`, {
      volume: volume.volumeId,
      remediation: remediationOf(error),
    });
  }
  return undefined;
}

/** Ends every read of the volume this boot began (the sample, the head start, the run begun at the mount). */
async function stopPrewarmReads(deps: BootDeps, progress: Progress): Promise<void> {
  await progress.prewarmRun?.idle();
  const volumeId = progress.volume?.volumeId;
  if (!deps.mountRun || volumeId === undefined) return;
  // A second phase that failed before its pre-warm began learns of the first phase's run from its record.
  if (!progress.mountRunBegun && !(await deps.mountRun.begun(volumeId).catch(() => true))) return;
  await deps.mountRun.stop().catch((error: unknown) => {
    deps.log.warning("boot.prewarm", `could not stop the pre-warm run begun at the mount: ${describeError(error)}`, {
      volume: progress.volume?.volumeId,
      remediation: remediationOf(error),
    });
  });
}

/**
 * Grows the filesystem when the volume is larger. A filesystem whose superblock (read at
 * check-filesystem) already covers the size EC2 gives the volume cannot grow: no device size
 * and xfs_info to read (a pool volume is made at its snapshot's size). A stale superblock only
 * ever shows less, which takes the full check.
 */
async function growFilesystem(_step: StepOf<"grow-filesystem">, { progress, deps }: StepContext): Promise<undefined> {
  if (
    progress.filesystemBytes !== undefined &&
    volumeOf(progress).sizeGiB * 1024 ** 3 - progress.filesystemBytes <= GROW_MARGIN_BYTES
  ) {
    deps.log.debug("boot.grow", "the filesystem fills the volume's size", {
      mountPoint: progress.mountPoint,
      filesystem: progress.filesystemBytes,
    });
    return undefined;
  }
  if (await deps.storage.grow(progress.mountPoint!))
    deps.log.info("boot.grow", "filesystem grown to the volume's size", { mountPoint: progress.mountPoint });
  return undefined;
}

async function prepareDataRoot(
  _step: StepOf<"prepare-data-root">,
  { plan, progress, deps, limits }: StepContext,
): Promise<undefined> {
  const volume = volumeOf(progress);
  progress.dataRoot = join(progress.mountPoint!, DATA_ROOT_SUBDIR);
  const kind = volume.tags[VolumeTag.kind] === "workspace" ? "workspace" : "pool";
  const imageStore = plan.hostStore?.store ?? "graphdriver";
  const activation = {
    instanceId: plan.instanceId,
    ...(limits.launchTime ? { launchTime: limits.launchTime } : {}),
    ...(limits.bootId ? { bootId: limits.bootId } : {}),
  };
  await prepareVolumeDataRoot(
    progress.dataRoot,
    { kind, activation, createdByAgent: createdByAgent(volume), imageStore },
    deps.dataRoot,
    deps.log,
  );
  // The volume carries its own copy of what it was chosen for: the state folder's may be lost.
  if (limits.workspaceRecord) await writeVolumeRecord(progress.mountPoint!, volume.volumeId, limits.workspaceRecord);
  return undefined;
}

/**
 * daemon.json's data-root on the volume and, on a host with the containerd image store,
 * containerd's root too (config.toml): there the images are under containerd's root, and with
 * only the data-root moved docker would see none of them.
 */
async function switchDataRoot(
  step: StepOf<"switch-data-root">,
  { plan, progress, deps }: StepContext,
): Promise<undefined> {
  const store = plan.hostStore?.store ?? "graphdriver";
  const engineVersion = plan.hostStore?.engineVersion ?? (await deps.dockerVersion().catch(() => undefined));
  await deps.daemonConfig.setImageStore(store, engineVersion ? { engineVersion } : {});
  if (store === "containerd") {
    if (!deps.containerd) {
      throw new BootStepError(
        step.step,
        "this host uses the containerd image store and the agent was built without containerd's config",
        "report this: the wiring passes no containerd adapter",
      );
    }
    const root = containerdRootOnVolume(progress.mountPoint!);
    await deps.containerd.prepareRoot(root, { dropMachineState: false });
    if (await deps.containerd.setRoot(root)) {
      progress.containerdSwitched = true;
      deps.log.info("boot.containerd-root", "containerd's root set to the volume", { to: root });
    }
  }
  const current = await deps.daemonConfig.dataRoot();
  if (current !== progress.dataRoot) {
    await deps.daemonConfig.setDataRoot(progress.dataRoot);
    progress.switched = true;
    deps.log.info("boot.data-root", "daemon.json data-root switched", {
      from: current ?? "(default)",
      to: progress.dataRoot,
    });
  }
  return undefined;
}

/**
 * Phase 1 of this boot identified, mounted, grew, cleaned and switched to this volume (its
 * record, prepared-record.ts): when its device (verified by serial at wait-for-device) is mounted where
 * phase 1 mounted it and daemon.json's data-root is still phase 1's, none of that is done
 * again. Anything else (unmounted, switched back meanwhile) runs those steps after all.
 */
async function resumePrepared(step: StepOf<"resume-prepared">, ctx: StepContext): Promise<undefined> {
  const { progress, deps } = ctx;
  const volume = volumeOf(progress);
  const [mountedAt, dataRoot] = await Promise.all([
    deps.storage.mountPointOf(progress.device!),
    deps.daemonConfig.dataRoot(),
  ]);
  if (
    mountedAt === step.mountPoint &&
    dataRoot === step.dataRoot &&
    step.dataRoot === join(step.mountPoint, DATA_ROOT_SUBDIR)
  ) {
    progress.mountPoint = step.mountPoint;
    progress.dataRoot = step.dataRoot;
    deps.log.info(
      "boot.resume",
      "prepared by the first phase of this boot: mounted, data-root switched; not checked again",
      { volume: volume.volumeId, mountPoint: step.mountPoint },
    );
    return undefined;
  }
  deps.log.notice("boot.resume", "not as the first phase of this boot left it: preparing it again", {
    volume: volume.volumeId,
    mountedAt: mountedAt ?? "(not mounted)",
    dataRoot: dataRoot ?? "(default)",
  });
  const again: BootStep[] = [
    { step: "check-filesystem" },
    { step: "mount", mountRoot: step.mountRoot },
    { step: "grow-filesystem" },
    { step: "prepare-data-root" },
    { step: "switch-data-root" },
  ];
  for (const each of again) {
    // A failure is judged as that step's (quarantine or not), as without the record.
    progress.inStep = each.step;
    await runStep(each, ctx);
  }
  progress.inStep = undefined;
  return undefined;
}

async function startDocker(_step: StepOf<"start-docker">, ctx: StepContext): Promise<undefined> {
  const { progress, deps, limits } = ctx;
  const { docker, engine, log } = deps;
  // The pre-warm reads the device, not docker: begun at the mount (or here, when the first phase mounted), it runs
  // while docker starts and is verified; the `prewarm` step awaits its verdict.
  progress.prewarmRun ??= await beginPrewarm(ctx);
  if (!docker) return undefined;
  // containerd reads its root only at start: restarted on the new one, docker after it (dockerd
  // keeps its view of containerd's images from its own start).
  const containerd = progress.containerdSwitched ? deps.containerd?.service : undefined;
  if (containerd && (await containerd.isActive())) {
    log.info("boot.containerd", "restarting containerd on the cache volume");
    if (await docker.isActive()) await docker.stop();
    await containerd.restart();
  }
  if (await docker.isActive()) {
    const info = await engine.info().catch(() => undefined);
    if (info?.dockerRootDir === progress.dataRoot) return undefined;
    // The swarm membership lives in the running data-root: a restart onto the volume would drop it.
    if (info && info.swarm.state !== "inactive") throw new JoinedBeforeSwitch(info.dockerRootDir, info.swarm.state);
    log.info("boot.docker", "restarting docker on the cache volume");
    await docker.restart();
  } else {
    log.info("boot.docker", "starting docker on the cache volume");
    await docker.start();
  }
  await engine.waitUntilReady(limits.dockerTimeoutMs);
  return undefined;
}

async function verifyDocker(
  step: StepOf<"verify-docker">,
  { plan, progress, deps, limits }: StepContext,
): Promise<undefined> {
  if (!deps.docker) return undefined;
  const info = await deps.engine.info();
  if (info.dockerRootDir !== progress.dataRoot) {
    throw new BootStepError(
      step.step,
      `docker reports data-root ${info.dockerRootDir}, expected ${progress.dataRoot}`,
      "check that dockerd reads the agent's daemon.json (its --config-file) and that nothing else sets its " +
        "data-root: dockerd refuses --data-root given both as a flag and in daemon.json (systemctl cat docker; " +
        "journalctl -u docker)",
    );
  }
  const store = plan.hostStore?.store ?? "graphdriver";
  if (info.imageStore !== store) {
    throw new BootStepError(
      step.step,
      `docker uses the ${info.imageStore} image store, and the volume was chosen for the ${store} store: its ` +
        `images would be invisible`,
      store === "graphdriver"
        ? 'set "features": {"containerd-snapshotter": false} in daemon.json'
        : 'check that daemon.json\'s "features": {"containerd-snapshotter": true} reaches dockerd (its ' +
            "--config-file; journalctl -u docker)",
    );
  }
  const listed = new Set(await deps.engine.images());
  // A volume the agent created blank holds only what its users pulled: the configured images
  // cannot be expected there.
  const wanted = [
    ...imagesOf(volumeOf(progress).tags),
    ...(createdByAgent(volumeOf(progress)) ? [] : limits.expectedImages),
  ];
  const missing = wanted.filter((image) => !listed.has(image) && !listed.has(withLatest(image)));
  if (missing.length > 0) {
    throw new BootStepError(
      step.step,
      `images missing on the volume: ${missing.join(", ")}`,
      "rebuild the pool's snapshot with the wanted image set",
    );
  }
  deps.log.info("boot.verified", "docker runs on the cache volume with the expected images", {
    images: wanted.length,
    dataRoot: progress.dataRoot,
  });
  return undefined;
}

/**
 * Begins the pre-warm of the volume in hand with the plan's strategy (undefined without a pre-warm step). A run begun
 * at the first phase's mount is taken over: it reads already, this process only decides and publishes.
 */
async function beginPrewarm({ progress, deps, limits, plan }: StepContext): Promise<PrewarmAtBoot | undefined> {
  const step = plan.steps.find((s): s is StepOf<"prewarm"> => s.step === "prewarm");
  if (!deps.prewarm || !step) return undefined;
  const volume = volumeOf(progress);
  progress.mountRunBegun ||= (await deps.mountRun?.begun(volume.volumeId).catch(() => false)) ?? false;
  return deps.prewarm(
    {
      volume: prewarmVolumeOf(volume),
      sizeBytes: volume.sizeGiB * 1024 ** 3,
      device: progress.device!,
      mountPoint: progress.mountPoint!,
      labels: volumeDetails(volume),
      images: imagesOfNode(volume.tags, limits.expectedImages),
    },
    step.strategy,
    { takeOver: progress.mountRunBegun === true },
  );
}

/**
 * The pre-warm's outcome (begun with start-docker, or now); its long part starts only here, docker verified. A
 * sample (`check`) still running is not waited for: `report-ready` publishes `ready` and then its verdict.
 */
async function prewarm(_step: StepOf<"prewarm">, ctx: StepContext): Promise<undefined> {
  const { progress, deps } = ctx;
  if (!deps.prewarm) return undefined;
  try {
    progress.prewarmRun ??= await beginPrewarm(ctx);
    const run = progress.prewarmRun;
    if (!run) return undefined;
    const outcome = run.outcome();
    if ((await run.decided()).action === "check" && !(await settledNow(outcome))) {
      // Handled by report-ready; a rejection meanwhile must not go unhandled.
      outcome.catch(() => undefined);
      progress.verdictPending = outcome;
      return undefined;
    }
    // A sample that found the volume cold hands it to the background run (the node is published `warming`).
    progress.prewarm = await run.warmIfCold(await outcome);
  } catch (error) {
    prewarmFailed(deps, progress, error);
  }
  return undefined;
}

/** The pre-warm never keeps a node from being reported: its verdict is then unknown. */
function prewarmFailed(deps: BootDeps, progress: Progress, error: unknown): void {
  deps.log.error("boot.prewarm", `pre-warm failed: ${describeError(error)}`, {
    volume: progress.volume?.volumeId,
    remediation: remediationOf(error),
  });
}

/** Whether the promise has settled by now: what is done already has settled once the pending microtasks ran. */
async function settledNow(promise: Promise<unknown>): Promise<boolean> {
  let settled = false;
  const mark = () => {
    settled = true;
  };
  promise.then(mark, mark);
  await new Promise((resolve) => setImmediate(resolve));
  return settled;
}

/**
 * The readiness labels. With the sample still running, `ready` goes out at once with `prewarm=checking`, and the
 * labels again with its verdict once it ends (bounded by prewarm.check.seconds): the sample never delays `ready`.
 */
async function reportReady(
  _step: StepOf<"report-ready">,
  { progress, deps }: StepContext,
): Promise<Finished | undefined> {
  const volume = volumeOf(progress);
  const pending = progress.verdictPending;
  const state = progress.prewarm?.labelState ?? "ready";
  // A pre-warm that failed outright (it normally never throws) leaves the verdict unknown.
  const prewarmLabels = pending
    ? { [Label.prewarm]: CHECKING }
    : (progress.prewarm?.labels ?? (deps.prewarm ? { [Label.prewarm]: "unknown" } : {}));
  // Published already when the background run took over: it alone publishes from then on.
  if (!progress.prewarm?.published) {
    try {
      await deps.report(state, { ...volumeDetails(volume), ...prewarmLabels });
    } catch (error) {
      return labelsDidNotTake(deps, progress, error);
    }
  }
  // The node is published: the run begun at the mount, which held its labels until now, publishes from here on.
  if (progress.mountRunBegun)
    await deps.mountRun?.published(volume.volumeId).catch((error: unknown) => {
      deps.log.warning("boot.prewarm", `could not let the pre-warm run publish: ${describeError(error)}`, {
        volume: volume.volumeId,
        remediation: remediationOf(error),
      });
    });
  // What the `prewarm` label says: `checking` too while a background run's sample is still to come.
  const fields = {
    volume: volume.volumeId,
    dataRoot: progress.dataRoot,
    prewarm: progress.prewarm?.labels[Label.prewarm],
  };
  if (state === "warming") {
    deps.log.notice("boot.ready", "node usable on the cache volume; the volume is warming in the background", fields);
  } else {
    deps.log.notice(
      "boot.ready",
      "node ready on the cache volume",
      pending ? { ...fields, prewarm: CHECKING } : fields,
    );
  }
  return pending ? reportVerdict(pending, volume, progress, deps) : undefined;
}

/** The sample's verdict, once it ends, on the node reported `ready` already. */
async function reportVerdict(
  pending: Promise<PrewarmReport>,
  volume: VolumeInfo,
  progress: Progress,
  deps: BootDeps,
): Promise<Finished | undefined> {
  progress.verdictPending = undefined;
  try {
    const verdict = await pending;
    // Now that `ready` is out: a volume the sample found cold is handed to the background run, which publishes
    // `warming` before it starts (and from then on alone).
    progress.prewarm = (await progress.prewarmRun?.warmIfCold(verdict)) ?? verdict;
  } catch (error) {
    prewarmFailed(deps, progress, error);
  }
  const labels = progress.prewarm?.labels ?? { [Label.prewarm]: "unknown" };
  if (!progress.prewarm?.published) {
    try {
      await deps.report(progress.prewarm?.labelState ?? "ready", { ...volumeDetails(volume), ...labels });
    } catch (error) {
      return labelsDidNotTake(deps, progress, error);
    }
  }
  deps.log.notice("boot.verdict", "the pre-warm verdict published", {
    volume: volume.volumeId,
    prewarm: progress.prewarm?.verdict ?? "unknown",
  });
  return undefined;
}

/**
 * A step after docker was verified on the volume failed (the pre-warm and the labels do not throw: a bug). The
 * node may have joined the swarm since: docker is left as it runs, on the cache volume, with nothing undone; the
 * outcome is `degraded` with the reason, as when the labels did not take.
 */
async function failedAfterDataRootFinal(deps: BootDeps, progress: Progress, error: unknown): Promise<Finished> {
  await progress.prewarmRun?.idle();
  return reportedDegraded(deps, progress, `failed after docker was verified: ${describeError(error)}`, error);
}

/**
 * The labels of a node on its cache volume did not take (refused, or not read back): the node
 * is not reported `ready` to anyone. Docker stays on the volume (the volume is not at fault, and
 * rolling back would not make labels take); the outcome is `degraded` with the reason, and one
 * best-effort `degraded` publication follows.
 */
function labelsDidNotTake(deps: BootDeps, progress: Progress, error: unknown): Promise<Finished> {
  return reportedDegraded(deps, progress, `readiness labels did not take: ${describeError(error)}`, error);
}

/** The node is not reported ready, docker stays on the cache volume: `degraded` with the reason. */
async function reportedDegraded(deps: BootDeps, progress: Progress, reason: string, error: unknown): Promise<Finished> {
  deps.log.error("boot.labels", `${reason}; the node is not reported ready (docker stays on the cache volume)`, {
    volume: progress.volume?.volumeId,
    remediation: remediationOf(error),
  });
  await deps.report("degraded", { [Label.reason]: shorten(reason) }).catch((again: unknown) => {
    deps.log.error("boot.label", `could not publish the degraded label either: ${describeError(again)}`);
  });
  return { outcome: "degraded", reason, ...resultOf(progress) };
}

function createdByAgent(volume: VolumeInfo): boolean {
  return volume.tags[VolumeTag.createdBy] === "agent";
}

function volumeOf(progress: Progress): VolumeInfo {
  if (!progress.volume) throw new Error("no volume claimed yet (plan out of order)");
  return progress.volume;
}
