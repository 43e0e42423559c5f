/**
 * Carrying out a boot plan. Each step re-checks the world and is safe to repeat, so a boot
 * killed at any point and run again converges. Whatever fails after the claim is undone in
 * reverse (docker back on its old root, unmount, detach without force) and the node comes up
 * degraded: docker on its default data-root, a `degraded` label, one clear log line.
 */
import { join } from "node:path";
import { describeError } from "../errors.ts";
import { DATA_ROOT_SUBDIR, FS_LABEL } from "../layout.ts";
import type { Logger } from "../log.ts";
import { VolumeTag } from "../tags.ts";
import type { BootPlan, BootStep, CreateSpec } from "./plan.ts";
import type { CloudVolumes, DaemonConfig, DockerEngine, DockerService, HostStorage, VolumeInfo } from "./ports.ts";
import type { PrewarmOutcome, PrewarmTarget } from "./prewarm.ts";

/** The adapters a boot uses (built in src/cli.ts, or from the lab in tests). */
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
   * The host checks before anything is claimed (src/agent/preflight.ts): daemon.json parses and
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

/** `warming`: docker runs on the cache volume, usable, while its initialization runs in the background. */
export type ReadinessState = "ready" | "warming" | "degraded" | "disabled";

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

/** What the steps learn as they go. */
interface Progress {
  volume?: VolumeInfo;
  claimedNow: boolean;
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

/** Runs the plan. Never throws for a failure the node can live with: it degrades instead. */
export async function applyBootPlan(plan: BootPlan, deps: BootDeps, limits: BootLimits): Promise<BootResult> {
  const { log } = deps;
  const timeline: BootResult["timeline"] = [];
  const progress: Progress = { claimedNow: false, mountedNow: false, switched: false };
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
  for (const step of plan.steps) {
    const started = Date.now();
    try {
      const done = await runStep(step, plan, progress, deps, limits);
      timeline.push({ step: step.step, ms: Date.now() - started });
      if (done) return { ...done, timeline };
    } catch (error) {
      timeline.push({ step: step.step, ms: Date.now() - started });
      const reason = describeError(error);
      const remediation = error instanceof BootStepError ? error.remediation : remediationOf(error);
      log.error("boot.failed", `${reason}; falling back to docker's default data-root`, {
        step: step.step,
        volume: progress.volume?.volumeId,
        remediation,
      });
      await undo(progress, plan, deps, reason);
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

async function runStep(
  step: BootStep,
  plan: BootPlan,
  p: Progress,
  deps: BootDeps,
  limits: BootLimits,
): Promise<Omit<BootResult, "timeline"> | undefined> {
  const { cloud, storage, log } = deps;
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
      const volume = await cloud.describeVolume(step.volumeId);
      if (!volume) throw new BootStepError(step.step, `${step.volumeId} no longer exists`, "run boot again");
      p.volume = volume;
      log.info("boot.reuse", "volume already attached to this instance: reusing it", { volume: volume.volumeId });
      return undefined;
    }

    case "claim-volume": {
      for (const volumeId of step.candidates) {
        const outcome = await cloud.claimVolume(volumeId, plan.instanceId, limits.device);
        if (outcome.kind === "claimed") {
          p.volume = await mustDescribe(cloud, volumeId, step.step);
          p.claimedNow = true;
          log.info("boot.claim", `claimed ${step.family} volume`, { volume: volumeId });
          return undefined;
        }
        log.info("boot.claim", "candidate taken, trying the next", { volume: volumeId, reason: outcome.reason });
      }
      if (!step.fallback) {
        throw new BootStepError(step.step, `every ${step.family} candidate was taken by another instance`, "grow the pool");
      }
      log.notice("boot.claim", "every candidate was taken: creating a volume from the pool's snapshot");
      await createAndClaim(step.fallback, plan, p, deps, limits);
      return undefined;
    }

    case "create-and-claim":
      await createAndClaim(step.create, plan, p, deps, limits);
      return undefined;

    case "wait-for-attachment":
      await cloud.waitForAttachment(volumeOf(p).volumeId, plan.instanceId, "attached", limits.attachTimeoutMs);
      return undefined;

    case "tag-claim": {
      const volume = volumeOf(p);
      const at = (deps.now?.() ?? new Date()).toISOString();
      await cloud.tagVolume(volume.volumeId, { [VolumeTag.claimedBy]: plan.instanceId, [VolumeTag.claimedAt]: at });
      // An earlier release's expiry no longer applies: were this instance to die without a
      // release, gc would otherwise delete the volume at that old time instead of giving it a TTL.
      const stale = [VolumeTag.releasedAt, VolumeTag.expiresAt].filter((key) => volume.tags[key] !== undefined);
      await cloud.untagVolume(volume.volumeId, stale);
      return undefined;
    }

    case "wait-for-device":
      p.device = await storage.waitForDevice(volumeOf(p).volumeId, limits.deviceTimeoutMs);
      log.info("boot.device", "device verified by its serial", { volume: volumeOf(p).volumeId, device: p.device });
      return undefined;

    case "check-filesystem": {
      const volume = volumeOf(p);
      const device = p.device!;
      const contents = await storage.probe(device);
      if (contents.kind === "filesystem" && contents.type === "xfs") return undefined;
      if (contents.kind === "blank" && createdByAgent(volume)) {
        log.notice("boot.format", "formatting the blank volume the agent created", { volume: volume.volumeId, device });
        await storage.format(device, FS_LABEL);
        return undefined;
      }
      const found = contents.kind === "filesystem" ? `a ${contents.type} filesystem` : contents.kind === "blank" ? "no filesystem" : `a ${contents.signature} signature`;
      throw new BootStepError(
        step.step,
        `${volume.volumeId} (${device}) holds ${found}, not the XFS cache filesystem; it was left untouched`,
        "check the pool's snapshot; the agent formats only blank volumes it created itself",
      );
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
  return { "volume-id": volume.volumeId, pool: volume.tags[VolumeTag.pool] ?? "", kind: volume.tags[VolumeTag.kind] ?? "" };
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

async function mustDescribe(cloud: CloudVolumes, volumeId: string, step: string): Promise<VolumeInfo> {
  const volume = await cloud.describeVolume(volumeId);
  if (!volume) throw new BootStepError(step, `${volumeId} vanished after it was claimed`, "run boot again");
  return volume;
}

async function createAndClaim(spec: CreateSpec, plan: BootPlan, p: Progress, deps: BootDeps, limits: BootLimits): Promise<void> {
  const volume = await deps.cloud.createVolume({
    availabilityZone: spec.availabilityZone,
    ...(spec.snapshotId !== undefined ? { snapshotId: spec.snapshotId } : {}),
    ...(spec.sizeGiB !== undefined ? { sizeGiB: spec.sizeGiB } : {}),
    volumeType: spec.volumeType,
    tags: spec.tags,
    ...(spec.initializationRateMiBps && spec.snapshotId !== undefined ? { initializationRateMiBps: spec.initializationRateMiBps } : {}),
  });
  const kind = spec.tags[VolumeTag.kind] ?? "pool";
  deps.log.info(
    "boot.create",
    spec.snapshotId !== undefined ? `${kind} volume created from the pool's snapshot` : `blank ${kind} volume created (${spec.sizeGiB ?? "?"} GiB)`,
    { volume: volume.volumeId, snapshot: spec.snapshotId },
  );
  const outcome = await deps.cloud.claimVolume(volume.volumeId, plan.instanceId, limits.device);
  if (outcome.kind !== "claimed") {
    throw new BootStepError("create-and-claim", `the new volume ${volume.volumeId} could not be attached: ${outcome.reason}`, "see the EC2 error above");
  }
  p.volume = volume;
  p.claimedNow = true;
}

/** Reverses what this boot did, newest first; each undo is best-effort and logged. */
async function undo(p: Progress, plan: BootPlan, deps: BootDeps, reason: string): Promise<void> {
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
      await deps.cloud.untagVolume(volumeId, [VolumeTag.claimedBy, VolumeTag.claimedAt]);
      await deps.cloud.tagVolume(volumeId, { [VolumeTag.lastError]: shorten(`${plan.instanceId}: ${reason}`) });
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
