/**
 * Carrying out a boot plan. Each step re-checks the world and is safe to repeat, so a boot
 * killed at any point and run again converges. Whatever fails after the claim is undone in
 * reverse (docker back on its old root, unmount, detach without force). A failure that is the
 * volume's (its device never attached, its filesystem is not the agent's) hands that volume
 * back tagged `last-error` (quarantined) and the boot claims its next candidate, up to
 * `claim.maxVolumes`; any other failure, or SIGTERM, leaves the node degraded: docker on its
 * default data-root, a `degraded` label, one clear log line.
 */
import { createHash } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { join } from "node:path";
import { describeError } from "../../errors.ts";
import { DATA_ROOT_SUBDIR, FS_LABEL } from "../../layout.ts";
import type { Logger } from "../../log.ts";
import { VolumeTag } from "../../tags.ts";
import { DeviceTimeoutError } from "../../host/device.ts";
import { createSpecFrom, isQuarantined, orderCandidates, type BootPlan, type BootStep, type CreateSpec } from "./plan.ts";
import type { CloudVolumes, DaemonConfig, DockerEngine, DockerService, HostStorage, ReadinessState, VolumeInfo } from "../ports.ts";
import type { PrewarmOutcome, PrewarmTarget } from "../prewarm.ts";
import { volumeDetails } from "../report.ts";

/** The adapters a boot uses (built in src/agent/wiring.ts, for the CLI or a lab host). */
export interface BootDeps {
  cloud: CloudVolumes;
  storage: HostStorage;
  daemonConfig: DaemonConfig;
  /** undefined when docker is left to systemd ordering (config docker.control = none). */
  docker: DockerService | undefined;
  engine: DockerEngine & { waitUntilReady(timeoutMs: number): Promise<void> };
  /**
   * Cleans a volume's data-root of state that must not travel between machines. On a volume the
   * agent created blank (`createdByAgent`) that docker never initialized, it creates the empty
   * data-root folder instead: there is nothing to clean, and docker fills it.
   */
  prepareDataRoot(dataRoot: string, options: { kind: "pool" | "workspace"; instanceId: string; createdByAgent: boolean }): Promise<void>;
  /** The installed dockerd's version (`dockerd --version`), read before docker starts. */
  dockerVersion(): Promise<string | undefined>;
  /**
   * Publishes the readiness labels (node labels via a manager, or engine labels) and reads them
   * back; throws when they did not take.
   */
  report(state: ReadinessState, details: Record<string, string>): Promise<void>;
  /**
   * The host checks before anything is claimed (src/agent/boot/preflight.ts): daemon.json parses and
   * holds nothing the switch refuses, dockerd's flags do not conflict with it. Throws the
   * refusal. Absent: only daemon.json's parse is checked.
   */
  preflight?(): Promise<void>;
  /**
   * The pre-warm step (prewarmAtBoot with the configured settings): a verdict, and maybe an
   * initialization, inline or handed to the background run. Absent: the step does nothing.
   */
  prewarm?(target: PrewarmTarget): Promise<PrewarmOutcome>;
  log: Logger;
  now?: () => Date;
}

/** Limits and expectations of this boot. */
export interface BootLimits {
  attachTimeoutMs: number;
  deviceTimeoutMs: number;
  dockerTimeoutMs: number;
  /** Images that must be listed after docker starts, beyond the volume's `images` tag. */
  expectedImages: string[];
  device: string;
  /** Where cache volumes are mounted: a data-root below it is the agent's doing. */
  mountRoot: string;
  /** docker's data-root without the agent (undefined: no `data-root` key, docker's default). */
  defaultDataRoot: string | undefined;
  /**
   * This boot of the machine (/proc/sys/kernel/random/boot_id): with the instance id, it makes
   * the CreateVolume ClientToken, so a rerun of a killed boot gets the volume the first run
   * created instead of a second one, while the next boot makes a new one.
   */
  bootId?: string;
}

/** What apply gets besides the plan. */
export interface ApplyOptions {
  /** Volumes observe() saw: their tags serve the claim without another DescribeVolumes. */
  known?: readonly VolumeInfo[];
  /** Aborted on SIGTERM or when the boot budget runs out: the step in flight stops, the undo runs, the node degrades. */
  signal?: AbortSignal;
  /** When the boot budget runs out (ms since the epoch): a volume creation that would not fit is not started. */
  deadline?: number;
  /** How long creating a volume from the snapshot and attaching it takes (config timeouts.createSeconds). */
  createMs?: number;
}

export interface BootResult {
  /** `prepared`: volume mounted and daemon.json switched; docker not started (first boot phase). */
  outcome: ReadinessState | "prepared";
  /** The pre-warm's verdict and what it did (see docs/prewarm.md). */
  prewarm?: Pick<PrewarmOutcome, "verdict" | "phase" | "before" | "after" | "error"> & { action: string };
  volumeId?: string;
  device?: string;
  mountPoint?: string;
  dataRoot?: string;
  reason?: string;
  timeline: Array<{ step: string; ms: number }>;
}

/** What the steps learn as they go (about the volume in hand; reset when it is handed back). */
interface Progress {
  volume?: VolumeInfo;
  claimedNow: boolean;
  /** The claimed-at this run wrote, so the undo removes only its own. */
  claimedAt?: string;
  device?: string;
  mountPoint?: string;
  mountedNow: boolean;
  dataRoot?: string;
  switched: boolean;
  prewarm?: PrewarmOutcome;
}

/** A failure that should leave the node degraded, with the reason for the log and the label. */
export class BootStepError extends Error {
  constructor(
    readonly step: string,
    message: string,
    readonly remediation: string,
  ) {
    super(`${step}: ${message}`);
  }
}

/** The claim's bookkeeping across the volumes one boot takes in turn. */
interface ClaimState {
  known: Map<string, VolumeInfo>;
  /** Volumes lost to another instance, or handed back: never tried again in this boot. */
  tried: Set<string>;
  /** Volumes claimed so far (each one that failed was handed back). */
  volumes: number;
  losses: number;
  /** Why each volume handed back in this boot failed, for the reason of a boot that then degrades. */
  handedBack: string[];
  signal?: AbortSignal;
  deadline?: number;
  createMs: number;
}

/** Steps whose failure is the volume's: it is handed back quarantined and the next one tried. */
const VOLUME_STEPS = new Set<BootStep["step"]>(["wait-for-device", "check-filesystem", "mount", "grow-filesystem", "prepare-data-root"]);
/**
 * Docker failing on the volume's data-root, or missing its images, is most likely the volume's
 * too (the host's side, daemon.json and dockerd's flags, was checked before the claim): it is
 * quarantined, but the node degrades rather than restart docker on volume after volume.
 */
const DOCKER_ON_VOLUME_STEPS = new Set<BootStep["step"]>(["start-docker", "verify-docker"]);

/** Runs the plan. Never throws for a failure the node can live with: it degrades instead. */
export async function applyBootPlan(plan: BootPlan, deps: BootDeps, limits: BootLimits, options: ApplyOptions = {}): Promise<BootResult> {
  const { log } = deps;
  const timeline: BootResult["timeline"] = [];
  let progress: Progress = { claimedNow: false, mountedNow: false, switched: false };
  const claim: ClaimState = {
    known: new Map((options.known ?? []).map((v) => [v.volumeId, v])),
    tried: new Set(),
    volumes: 0,
    losses: 0,
    handedBack: [],
    createMs: options.createMs ?? 0,
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.deadline !== undefined ? { deadline: options.deadline } : {}),
  };
  const claimIndex = plan.steps.findIndex((step) => step.step === "claim-volume");
  const claimStep = plan.steps[claimIndex];
  const maxVolumes = claimStep?.step === "claim-volume" ? claimStep.maxVolumes : 1;
  // The host must take the switch before a volume is claimed (daemon.json parses and holds
  // nothing the switch or dockerd refuses, dockerd's flags agree with it): the agent would
  // otherwise attach, mount and clean a pool volume only to hand it back at switch-data-root or
  // start-docker, tagged with a last-error that is not the volume's fault.
  if (plan.steps.some((step) => step.step === "switch-data-root")) {
    const started = Date.now();
    try {
      await (deps.preflight ? deps.preflight() : deps.daemonConfig.dataRoot());
      timeline.push({ step: "check-host", ms: Date.now() - started });
    } catch (error) {
      timeline.push({ step: "check-host", ms: Date.now() - started });
      const reason = describeError(error);
      log.error("boot.failed", `${reason}; no volume was claimed`, { step: "check-host", remediation: remediationOf(error) });
      // daemon.json (or dockerd's reading of it) is what is wrong: the agent writes nothing into
      // it, not even the degraded engine label, and leaves it as it found it.
      const report = async () => log.notice("boot.label", "no degraded label published: the host's docker configuration refused the switch");
      return { ...(await degrade({ ...deps, report }, limits, reason)), timeline };
    }
  }
  for (let index = 0; index < plan.steps.length; index++) {
    const step = plan.steps[index]!;
    const started = Date.now();
    try {
      if (options.signal?.aborted) throw new CancelledError(step.step, options.signal);
      const done = await runStep(step, plan, progress, deps, limits, claim);
      timeline.push({ step: step.step, ms: Date.now() - started });
      if (done) return { ...done, timeline };
    } catch (caught) {
      timeline.push({ step: step.step, ms: Date.now() - started });
      const error = options.signal?.aborted && !(caught instanceof CancelledError) ? new CancelledError(step.step, options.signal, caught) : caught;
      const reason = describeError(error);
      const volumeId = progress.volume?.volumeId;
      const cancelled = error instanceof CancelledError;
      const volumeFault = !cancelled && VOLUME_STEPS.has(step.step) && (await isVolumeFault(error, progress, plan, deps));
      // Undo with no signal: a boot stopped by SIGTERM still hands back what it holds.
      await undo(progress, plan, deps, reason, { quarantine: volumeFault || (!cancelled && DOCKER_ON_VOLUME_STEPS.has(step.step)) });
      if (volumeFault && volumeId && claimIndex >= 0 && claim.volumes < maxVolumes) {
        log.warning("boot.volume-unusable", `${reason}; handed back, trying the next candidate`, {
          step: step.step,
          volume: volumeId,
          remediation: remediationOf(error),
        });
        claim.tried.add(volumeId);
        claim.handedBack.push(reason);
        progress = { claimedNow: false, mountedNow: false, switched: false };
        index = claimIndex - 1;
        continue;
      }
      log.error("boot.failed", `${reason}; falling back to docker's default data-root`, {
        step: step.step,
        volume: volumeId,
        remediation: remediationOf(error),
      });
      const degraded = await degrade(deps, limits, reason);
      return { ...degraded, timeline };
    }
  }
  const outcome = !plan.steps.some((step) => step.step === "report-ready") ? "prepared" : progress.prewarm?.labelState === "warming" ? "warming" : "ready";
  return { outcome, timeline, ...resultOf(progress) };
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

function remediationOf(error: unknown): string {
  const r = (error as { remediation?: unknown } | undefined)?.remediation;
  return typeof r === "string" ? r : "see the log lines above";
}

/** systemd stopped the boot (SIGTERM: a stop, or TimeoutStartSec): it undoes and degrades. */
export class CancelledError extends BootStepError {
  constructor(step: string, signal: AbortSignal, cause?: unknown) {
    const budget = signal.reason instanceof BootBudgetSpent ? signal.reason : undefined;
    super(
      step,
      budget ? `the boot budget of ${budget.seconds} s ran out before it finished` : "stopped by SIGTERM before it finished",
      budget
        ? "EC2 or the device was slow: see the timeline; raise timeouts.bootSeconds only as far as the autoscaler's start-time limit allows"
        : "see why systemd stopped the unit (journalctl -u ebs-cache-agent; TimeoutStartSec)",
    );
    if (cause !== undefined) this.cause = cause;
  }
}

/** The abort reason of a boot whose budget (config timeouts.bootSeconds) ran out. */
export class BootBudgetSpent extends Error {
  constructor(readonly seconds: number) {
    super(`boot budget of ${seconds} s spent`);
  }
}

/**
 * Whether a failure of a volume step is the volume's fault (quarantine it, try the next) rather
 * than the host's. A device that never appeared is the volume's only while EC2 still shows the
 * attachment unfinished: attached with no device is this host's udev/driver, and quarantining
 * good volumes one after another would not help it.
 */
async function isVolumeFault(error: unknown, p: Progress, plan: BootPlan, deps: BootDeps): Promise<boolean> {
  if (!(error instanceof DeviceTimeoutError)) return true;
  const volume = p.volume ? await deps.cloud.describeVolume(p.volume.volumeId).catch(() => undefined) : undefined;
  const attachment = volume?.attachment;
  return !(attachment?.instanceId === plan.instanceId && attachment.state === "attached");
}

async function runStep(
  step: BootStep,
  plan: BootPlan,
  p: Progress,
  deps: BootDeps,
  limits: BootLimits,
  claim: ClaimState,
): Promise<Omit<BootResult, "timeline"> | undefined> {
  const { cloud, storage, log } = deps;
  const call = claim.signal ? { signal: claim.signal } : {};
  switch (step.step) {
    case "report-disabled":
      log.notice("boot.disabled", step.reason);
      await deps.report("disabled", { reason: step.reason });
      return { outcome: "disabled", reason: step.reason };

    case "degrade": {
      log.warning("boot.no-volume", step.reason);
      return degrade(deps, limits, step.reason);
    }

    case "reuse-attached": {
      const volume = claim.known.get(step.volumeId) ?? (await cloud.describeVolume(step.volumeId, call));
      if (!volume) throw new BootStepError(step.step, `${step.volumeId} no longer exists`, "run boot again");
      p.volume = volume;
      log.info("boot.reuse", "volume already attached to this instance: reusing it", { volume: volume.volumeId });
      return undefined;
    }

    case "claim-volume":
      await claimNext(step, plan, p, deps, limits, claim);
      return undefined;

    case "create-and-claim":
      await createAndClaim(step.create, plan, p, deps, limits, claim);
      return undefined;

    case "tag-claim": {
      // Ensured from the volume's tags as last described, on every run (a reused attachment
      // included): a boot killed between AttachVolume and these tags, or between CreateTags and
      // DeleteTags, is finished here. At most one CreateTags and one DeleteTags; none when the
      // tags are right already.
      const volume = volumeOf(p);
      const tags = volume.tags;
      if (tags[VolumeTag.claimedBy] !== plan.instanceId) {
        const at = (deps.now?.() ?? new Date()).toISOString();
        await cloud.tagVolume(volume.volumeId, { [VolumeTag.claimedBy]: plan.instanceId, [VolumeTag.claimedAt]: at }, call);
        tags[VolumeTag.claimedBy] = plan.instanceId;
        tags[VolumeTag.claimedAt] = at;
        p.claimedAt = at;
      }
      // An earlier release's expiry no longer applies (were this instance to die without a
      // release, gc would otherwise delete the volume at that old time instead of giving it a
      // TTL), nor does an earlier instance's error once this one uses the volume.
      const stale = CLAIM_CLEARS.filter((key) => tags[key] !== undefined);
      await cloud.untagVolume(volume.volumeId, stale, call);
      for (const key of stale) delete tags[key];
      return undefined;
    }

    case "wait-for-device":
      // The device, identified by its NVMe serial, is the proof of the attachment: no
      // DescribeVolumes polling. Its deadline covers both (EC2's attach, then udev).
      p.device = await storage.waitForDevice(volumeOf(p).volumeId, limits.attachTimeoutMs + limits.deviceTimeoutMs, call);
      log.info("boot.device", "device verified by its serial", { volume: volumeOf(p).volumeId, device: p.device });
      return undefined;

    case "check-filesystem": {
      // Positive identification before any write: only the agent's own cache filesystem goes on
      // to be mounted read-write (which replays its log) and grown. Anything else throws
      // ForeignVolumeError with the volume left byte-for-byte unchanged.
      const volume = volumeOf(p);
      const device = p.device!;
      const owner = { volumeId: volume.volumeId, createdByAgent: createdByAgent(volume) };
      let identity = await storage.identify(owner, device);
      if (identity.kind === "blank") {
        log.notice("boot.format", "formatting the blank volume the agent created", { volume: volume.volumeId, device });
        await storage.format(device, FS_LABEL);
        identity = await storage.identify(owner, device);
        if (identity.kind !== "cache") throw new BootStepError(step.step, `${volume.volumeId} (${device}) is still blank after mkfs.xfs`, `check dmesg and lsblk -f ${device}`);
      }
      log.info("boot.filesystem", "the agent's cache filesystem", { volume: volume.volumeId, device, fresh: identity.fresh });
      return undefined;
    }

    case "mount": {
      const volume = volumeOf(p);
      const device = p.device!;
      const mountPoint = join(step.mountRoot, volume.volumeId);
      const current = await storage.mountPointOf(device);
      if (current && current !== mountPoint) {
        throw new BootStepError(step.step, `${device} is already mounted at ${current}`, `unmount ${current} first`);
      }
      if (!current) {
        await storage.mount(device, mountPoint);
        p.mountedNow = true;
      }
      p.mountPoint = mountPoint;
      log.info("boot.mount", "volume mounted", { volume: volume.volumeId, mountPoint });
      return undefined;
    }

    case "grow-filesystem":
      if (await storage.grow(p.mountPoint!)) log.info("boot.grow", "filesystem grown to the volume's size", { mountPoint: p.mountPoint });
      return undefined;

    case "prepare-data-root": {
      const volume = volumeOf(p);
      p.dataRoot = join(p.mountPoint!, DATA_ROOT_SUBDIR);
      const kind = volume.tags[VolumeTag.kind] === "workspace" ? "workspace" : "pool";
      await deps.prepareDataRoot(p.dataRoot, { kind, instanceId: plan.instanceId, createdByAgent: createdByAgent(volume) });
      return undefined;
    }

    case "switch-data-root": {
      const engineVersion = await deps.dockerVersion().catch(() => undefined);
      await deps.daemonConfig.setImageStore("graphdriver", engineVersion ? { engineVersion } : {});
      const current = await deps.daemonConfig.dataRoot();
      if (current !== p.dataRoot) {
        await deps.daemonConfig.setDataRoot(p.dataRoot);
        p.switched = true;
        log.info("boot.data-root", "daemon.json data-root switched", { from: current ?? "(default)", to: p.dataRoot });
      }
      return undefined;
    }

    case "start-docker": {
      if (!deps.docker) return undefined;
      if (await deps.docker.isActive()) {
        const info = await deps.engine.info().catch(() => undefined);
        if (info?.dockerRootDir === p.dataRoot) return undefined;
        log.info("boot.docker", "restarting docker on the cache volume");
        await deps.docker.restart();
      } else {
        log.info("boot.docker", "starting docker on the cache volume");
        await deps.docker.start();
      }
      await deps.engine.waitUntilReady(limits.dockerTimeoutMs);
      return undefined;
    }

    case "verify-docker": {
      if (!deps.docker) return undefined;
      const info = await deps.engine.info();
      if (info.dockerRootDir !== p.dataRoot) {
        throw new BootStepError(
          step.step,
          `docker reports data-root ${info.dockerRootDir}, expected ${p.dataRoot}`,
          "check that dockerd reads the agent's daemon.json (its --config-file) and that nothing else sets its data-root: dockerd refuses --data-root given both as a flag and in daemon.json (systemctl cat docker; journalctl -u docker)",
        );
      }
      if (info.imageStore === "containerd") {
        throw new BootStepError(step.step, "docker uses the containerd image store: the images on the volume are in graphdriver layout", 'set "features": {"containerd-snapshotter": false} in daemon.json');
      }
      const listed = new Set(await deps.engine.images());
      // A volume the agent created blank holds only what its users pulled: the configured images
      // cannot be expected there.
      const wanted = [...expectedImages(volumeOf(p)), ...(createdByAgent(volumeOf(p)) ? [] : limits.expectedImages)];
      const missing = wanted.filter((image) => !listed.has(image) && !listed.has(withLatest(image)));
      if (missing.length > 0) {
        throw new BootStepError(step.step, `images missing on the volume: ${missing.join(", ")}`, "rebuild the pool's snapshot with the wanted image set");
      }
      log.info("boot.verified", "docker runs on the cache volume with the expected images", { images: wanted.length, dataRoot: p.dataRoot });
      return undefined;
    }

    case "prewarm": {
      if (!deps.prewarm) return undefined;
      const volume = volumeOf(p);
      try {
        p.prewarm = await deps.prewarm({
          volume: { volumeId: volume.volumeId, ...(volume.snapshotId ? { snapshotId: volume.snapshotId } : {}), tags: volume.tags },
          sizeBytes: volume.sizeGiB * 1024 ** 3,
          device: p.device!,
          mountPoint: p.mountPoint!,
          labels: readyDetails(volume),
        });
      } catch (error) {
        // The pre-warm never keeps a node from being reported: its verdict is then unknown.
        log.error("boot.prewarm", `pre-warm failed: ${describeError(error)}`, { volume: volume.volumeId, remediation: remediationOf(error) });
      }
      return undefined;
    }

    case "report-ready": {
      const volume = volumeOf(p);
      const state = p.prewarm?.labelState ?? "ready";
      // A pre-warm that failed outright (it normally never throws) leaves the verdict unknown.
      const prewarmLabels = p.prewarm?.labels ?? (deps.prewarm ? { prewarm: "unknown" } : {});
      // Published already when the background run took over: it alone publishes from then on.
      if (!p.prewarm?.published) {
        try {
          await deps.report(state, { ...readyDetails(volume), ...prewarmLabels });
        } catch (error) {
          return labelsDidNotTake(deps, p, error);
        }
      }
      if (state === "warming") {
        log.notice("boot.ready", "node usable on the cache volume; the volume is warming in the background", { volume: volume.volumeId, dataRoot: p.dataRoot, prewarm: p.prewarm?.verdict });
      } else {
        log.notice("boot.ready", "node ready on the cache volume", { volume: volume.volumeId, dataRoot: p.dataRoot, prewarm: p.prewarm?.verdict });
      }
      return undefined;
    }
  }
}

/**
 * The labels of a node on its cache volume did not take (refused, or not read back): the node
 * is not reported `ready` to anyone. Docker stays on the volume (the volume is not at fault, and
 * rolling back would not make labels take); the outcome is `degraded` with the reason, and one
 * best-effort `degraded` publication follows.
 */
async function labelsDidNotTake(deps: BootDeps, p: Progress, error: unknown): Promise<Omit<BootResult, "timeline">> {
  const reason = `readiness labels did not take: ${describeError(error)}`;
  deps.log.error("boot.labels", `${reason}; the node is not reported ready (docker stays on the cache volume)`, {
    volume: p.volume?.volumeId,
    remediation: remediationOf(error),
  });
  await deps.report("degraded", { reason: shorten(reason) }).catch((again: unknown) => {
    deps.log.error("boot.label", `could not publish the degraded label either: ${describeError(again)}`);
  });
  return { outcome: "degraded", reason, ...resultOf(p) };
}

/** The labels that go with `ready` (and `warming`): which volume, pool and kind. */
function readyDetails(volume: VolumeInfo): Record<string, string> {
  return volumeDetails(volume);
}

function withLatest(image: string): string {
  return /:[^/]+$/.test(image) || image.includes("@") ? image : `${image}:latest`;
}

function expectedImages(volume: VolumeInfo): string[] {
  return (volume.tags[VolumeTag.images] ?? "").split(",").map((s) => s.trim()).filter(Boolean);
}

function createdByAgent(volume: VolumeInfo): boolean {
  return volume.tags[VolumeTag.createdBy] === "agent";
}

function volumeOf(p: Progress): VolumeInfo {
  if (!p.volume) throw new Error("no volume claimed yet (plan out of order)");
  return p.volume;
}

/** Tags a claim removes: a release's expiry, an earlier instance's error. */
const CLAIM_CLEARS = [VolumeTag.releasedAt, VolumeTag.expiresAt, VolumeTag.lastError, VolumeTag.lastErrorAt];

/**
 * Claims the next candidate. AttachVolume is the lock; a loss to another instance (VolumeInUse)
 * costs one fresh page of candidates rather than a walk over a stale list, after a jittered
 * pause so that the losers of one round do not collide again. Out of candidates (or of
 * `maxLosses`): a volume from the pool's snapshot, or the node degrades.
 */
async function claimNext(
  step: Extract<BootStep, { step: "claim-volume" }>,
  plan: BootPlan,
  p: Progress,
  deps: BootDeps,
  limits: BootLimits,
  claim: ClaimState,
): Promise<void> {
  const { cloud, log } = deps;
  const call = claim.signal ? { signal: claim.signal } : {};
  let candidates = step.candidates.filter((id) => !claim.tried.has(id));
  // After a volume was handed back, the plan's list is stale: ask again.
  if (claim.volumes > 0) candidates = await relist(step, plan, deps, claim);
  while (candidates.length > 0 && claim.losses < step.maxLosses) {
    const volumeId = candidates[0]!;
    claim.tried.add(volumeId);
    // Observe found no managed volume attached here (else the plan would reuse it), and this
    // boot tries each candidate once: a refusal is someone else's claim.
    // Held as "maybe ours" while AttachVolume is in flight: if SIGTERM cuts the call, the undo's
    // detach (a no-op for a volume not attached here) settles whatever EC2 did with it.
    const listed = claim.known.get(volumeId);
    if (listed) p.volume = listed;
    const outcome = await cloud.claimVolume(volumeId, plan.instanceId, limits.device, { ...call, notHeldHere: true });
    if (outcome.kind === "claimed") {
      p.volume = listed ?? (await cloud.describeVolume(volumeId, call));
      if (!p.volume) throw new BootStepError(step.step, `${volumeId} vanished after it was claimed`, "run boot again");
      p.claimedNow = true;
      claim.volumes++;
      log.info("boot.claim", `claimed ${step.family} volume`, { volume: volumeId, losses: claim.losses });
      return;
    }
    delete p.volume;
    claim.losses++;
    log.info("boot.claim", "candidate taken by another instance", { volume: volumeId, reason: outcome.reason, losses: claim.losses });
    if (claim.losses >= step.maxLosses) break;
    await sleep(lossPauseMs(claim.losses), undefined, call);
    candidates = await relist(step, plan, deps, claim);
  }
  const before = claim.handedBack.length > 0 ? ` (handed back: ${claim.handedBack.join("; ")})` : "";
  const gone = claim.handedBack.length > 0 ? `no other ${step.family} candidate` : `every ${step.family} candidate was taken`;
  const why = `${candidates.length === 0 ? gone : `lost ${claim.losses} claims to other instances`}${before}`;
  if (!step.fallback) throw new BootStepError(step.step, `${why}, and creating from the snapshot is off`, "grow the pool, or enable createFromSnapshot");
  const create = createSpecFrom(step.fallback, await cloud.newestSnapshot(step.fallback.snapshotTags, call));
  if (!create) throw new BootStepError(step.step, `${why}, and the pool has no completed snapshot`, "grow the pool, or build the pool's snapshot");
  log.notice("boot.claim", `${why}: creating a volume from the pool's snapshot`, { snapshot: create.snapshotId });
  await createAndClaim(create, plan, p, deps, limits, claim);
}

/** One fresh page of candidates, minus those tried and those in quarantine, in this instance's order. */
async function relist(step: Extract<BootStep, { step: "claim-volume" }>, plan: BootPlan, deps: BootDeps, claim: ClaimState): Promise<string[]> {
  const now = deps.now?.() ?? new Date();
  const fresh = await deps.cloud.findVolumes(step.relist, { firstPage: step.pageSize, ...(claim.signal ? { signal: claim.signal } : {}) });
  for (const volume of fresh) claim.known.set(volume.volumeId, volume);
  const usable = fresh.filter(
    (v) => v.state === "available" && !v.attachment && !claim.tried.has(v.volumeId) && !isQuarantined(v, now, step.quarantineHours),
  );
  return orderCandidates(plan.instanceId, usable.map((v) => v.volumeId));
}

/** A pause after the n-th lost claim: 100-500 ms, growing, with jitter. */
function lossPauseMs(losses: number): number {
  return Math.round(Math.random() * 100 * 2 ** Math.min(losses, 2)) + 100;
}

async function createAndClaim(spec: CreateSpec, plan: BootPlan, p: Progress, deps: BootDeps, limits: BootLimits, claim: ClaimState): Promise<void> {
  const call = claim.signal ? { signal: claim.signal } : {};
  // Started too late, a creation would only be undone at the deadline: the node degrades now.
  const left = claim.deadline !== undefined ? claim.deadline - Date.now() : Infinity;
  if (left < claim.createMs) {
    throw new BootStepError(
      "create-and-claim",
      `${Math.max(0, Math.round(left / 1000))} s of the boot budget left, less than a volume from the snapshot takes (timeouts.createSeconds ${Math.round(claim.createMs / 1000)} s): not created`,
      "keep the pool filled so boots need not create volumes",
    );
  }
  const volume = await deps.cloud.createVolume({
    availabilityZone: spec.availabilityZone,
    ...(spec.snapshotId !== undefined ? { snapshotId: spec.snapshotId } : {}),
    ...(spec.sizeGiB !== undefined ? { sizeGiB: spec.sizeGiB } : {}),
    volumeType: spec.volumeType,
    tags: spec.tags,
    ...(spec.initializationRateMiBps && spec.snapshotId !== undefined ? { initializationRateMiBps: spec.initializationRateMiBps } : {}),
    clientToken: clientToken(plan.instanceId, limits.bootId, spec, claim.volumes),
  }, call);
  const kind = spec.tags[VolumeTag.kind] ?? "pool";
  deps.log.info(
    "boot.create",
    spec.snapshotId !== undefined ? `${kind} volume created from the pool's snapshot` : `blank ${kind} volume created (${spec.sizeGiB ?? "?"} GiB)`,
    { volume: volume.volumeId, snapshot: spec.snapshotId },
  );
  p.volume = volume;
  const outcome = await deps.cloud.claimVolume(volume.volumeId, plan.instanceId, limits.device, { ...call, justCreated: true });
  if (outcome.kind !== "claimed") {
    delete p.volume;
    throw new BootStepError("create-and-claim", `the new volume ${volume.volumeId} could not be attached: ${outcome.reason}`, "see the EC2 error above");
  }
  p.volume = volume;
  p.claimedNow = true;
  claim.volumes++;
}

/**
 * CreateVolume's idempotency token (EC2 allows 64 ASCII characters): the same for a rerun of
 * this boot (same instance, same boot id, same spec, same turn), so a boot killed after
 * CreateVolume gets that volume back rather than leaving it behind and making another.
 */
function clientToken(instanceId: string, bootId: string | undefined, spec: CreateSpec, turn: number): string {
  const text = JSON.stringify([instanceId, bootId ?? "", turn, spec.snapshotId ?? "", spec.sizeGiB ?? 0, spec.availabilityZone, spec.volumeType, spec.tags]);
  return `ebs-cache-${createHash("sha256").update(text).digest("hex").slice(0, 48)}`;
}

/**
 * Reverses what this boot did, newest first; each undo is best-effort and logged. The volume is
 * detached (never forced) and its claim tags removed (only while they are this instance's);
 * with `quarantine` (the failure was the volume's) it is tagged `last-error` and
 * `last-error-at`, so no boot takes it for `claim.quarantineHours`.
 */
async function undo(p: Progress, plan: BootPlan, deps: BootDeps, reason: string, options: { quarantine: boolean }): Promise<void> {
  const { log } = deps;
  const attempt = async (what: string, work: () => Promise<unknown>) => {
    try {
      await work();
    } catch (error) {
      log.error("boot.undo", `${what} failed: ${describeError(error)}`, { volume: p.volume?.volumeId });
    }
  };
  if (p.switched) {
    await attempt("restoring daemon.json", () => deps.daemonConfig.restoreBackup());
  }
  if (p.mountPoint && (p.mountedNow || p.switched || p.claimedNow)) {
    if (deps.docker && p.switched) await attempt("stopping docker", () => deps.docker!.stop());
    await attempt("unmounting", () => deps.storage.unmount(p.mountPoint!));
  }
  if (p.volume) {
    const volumeId = p.volume.volumeId;
    const stillMounted = p.device ? await deps.storage.mountPointOf(p.device).catch(() => "unknown") : undefined;
    if (stillMounted) {
      log.error("boot.undo", "volume still mounted: not detaching it (never force-detach a mounted volume)", { volume: volumeId, mountPoint: stillMounted });
      return;
    }
    await attempt("tagging the failure", async () => {
      await deps.cloud.untagVolume(volumeId, {
        [VolumeTag.claimedBy]: plan.instanceId,
        ...(p.claimedAt ? { [VolumeTag.claimedAt]: p.claimedAt } : {}),
      });
      if (options.quarantine) {
        const at = (deps.now?.() ?? new Date()).toISOString();
        await deps.cloud.tagVolume(volumeId, { [VolumeTag.lastError]: shorten(`${plan.instanceId}: ${reason}`), [VolumeTag.lastErrorAt]: at });
      }
    });
    await attempt("detaching", async () => {
      await deps.cloud.detachVolume(volumeId, plan.instanceId);
      log.info("boot.undo", "volume detached and left for another instance", { volume: volumeId });
    });
  }
}

/** One line of at most 250 characters: fits an EC2 tag value (256) and a docker label. */
function shorten(text: string): string {
  // eslint-disable-next-line no-control-regex
  const line = text.replace(/[\u0000-\u001f\u007f]+/g, " ");
  return line.length <= 250 ? line : `${line.slice(0, 247)}...`;
}

/** Docker on its default data-root, started, and the degraded label. */
async function degrade(deps: BootDeps, limits: BootLimits, reason: string): Promise<Omit<BootResult, "timeline">> {
  const { log } = deps;
  try {
    let current = await deps.daemonConfig.dataRoot();
    // A data-root on a cache volume (left by an earlier boot) must not survive a degraded boot:
    // docker would start on an empty folder where the volume used to be mounted.
    if (current !== undefined && current.startsWith(`${limits.mountRoot}/`)) {
      await deps.daemonConfig.setDataRoot(limits.defaultDataRoot);
      log.notice("boot.data-root", "daemon.json data-root reset to docker's default", { from: current });
      current = limits.defaultDataRoot;
    }
    const info = deps.docker && (await deps.docker.isActive()) ? await deps.engine.info().catch(() => undefined) : undefined;
    if (deps.docker && (!(await deps.docker.isActive()) || (info && current !== undefined && info.dockerRootDir !== current))) {
      await deps.docker.restart();
      await deps.engine.waitUntilReady(limits.dockerTimeoutMs);
    }
  } catch (error) {
    log.error("boot.degraded", `could not bring docker up on its default data-root: ${describeError(error)}`, { remediation: "journalctl -u docker" });
  }
  await deps.report("degraded", { reason: shorten(reason) }).catch((error: unknown) => {
    log.error("boot.label", `could not publish the degraded label: ${describeError(error)}`);
  });
  log.warning("boot.degraded", `node up without a cache volume: ${reason}`);
  return { outcome: "degraded", reason };
}
