/**
 * What the pre-warm reads of the world, through the ports: what it decides from (observePrewarm:
 * EC2's initialization status of the volume), a sample of the volume's read performance (fio on
 * a host), and, for the `prewarm` command, the cache volume attached to this instance with its
 * device and mount point.
 */
import { AgentError, describeError, remediationOr } from "../../errors.ts";
import { VolumeTag } from "../../tags.ts";
import { attachedCacheVolume, MANAGED } from "../volume-rules.ts";
import type { CheckFigures, CloudVolumes, HostStorage, InitializationStatus, VolumeInfo } from "../ports.ts";
import type { PrewarmDeps } from "./deps.ts";
import { readPrewarmState, stateOfVolume } from "./state.ts";
import {
  verdictOf,
  type PrewarmObservation,
  type PrewarmSettings,
  type PrewarmTarget,
  type PrewarmVolume,
  type Verdict,
} from "./plan.ts";

/** A sample's figures and verdict; `error` when the sample failed (the verdict is then `unknown`). */
export interface Sample {
  figures?: CheckFigures;
  verdict: Verdict;
  error?: string;
}

/** What planPrewarm decides from: the volume, EC2's initialization status when it is had, and now. */
export async function observePrewarm(deps: PrewarmDeps, volume: PrewarmVolume): Promise<PrewarmObservation> {
  const status = await initializationStatusOf(deps, volume);
  // The verdict an earlier run of this volume left (the boot's sample, which the background run it hands to
  // takes): a volume a sample found cold is warmed, not sampled again.
  const sampled = stateOfVolume(await readPrewarmState(deps.stateDir), volume.volumeId)?.verdict;
  return { volume, ...(status ? { status } : {}), ...(sampled ? { sampled } : {}), now: deps.clock.now() };
}

/**
 * EC2's initialization status, or undefined (logged) when it cannot be had, or is not needed: a
 * volume not made from a snapshot, or tagged initialized already.
 */
async function initializationStatusOf(
  deps: PrewarmDeps,
  volume: PrewarmVolume,
): Promise<InitializationStatus | undefined> {
  if (!deps.initializationStatus || !volume.snapshotId || volume.tags[VolumeTag.initialized]) return undefined;
  try {
    return await deps.initializationStatus(volume.volumeId);
  } catch (error) {
    deps.log.warning("prewarm.status", `DescribeVolumeStatus failed, deciding without it: ${describeError(error)}`, {
      volume: volume.volumeId,
    });
    return undefined;
  }
}

/** Runs the sample and logs its verdict; a failure is logged and gives `unknown` (never throws). */
export async function sampleVolume(
  target: PrewarmTarget,
  settings: PrewarmSettings,
  deps: PrewarmDeps,
  when: string,
): Promise<Sample> {
  const { log } = deps;
  try {
    const figures = await deps.reader.check(target, settings.check);
    const { verdict, reasons } = verdictOf(figures, settings.thresholds);
    const lat = figures.latencyMs;
    log.notice("prewarm.verdict", `${when}: ${verdict} (${reasons.join("; ")})`, {
      volume: target.volume.volumeId,
      iops: Math.round(figures.iops),
      mibps: figures.mibps.toFixed(1),
      p50ms: lat.p50?.toFixed(2),
      p90ms: lat.p90?.toFixed(2),
      p99ms: lat.p99?.toFixed(2),
      reads: figures.reads,
      seconds: figures.seconds.toFixed(1),
    });
    return { figures, verdict };
  } catch (error) {
    const message = describeError(error);
    log.error("prewarm.verdict", `${when}: no verdict, the sample failed: ${message}`, {
      volume: target.volume.volumeId,
      remediation: remediationOr(error, "install fio and check the device"),
    });
    return { verdict: "unknown", error: message };
  }
}

/** The managed cache volume attached to this instance (a workspace volume first), if any. */
export async function findAttachedVolume(cloud: CloudVolumes, instanceId: string): Promise<VolumeInfo | undefined> {
  return attachedCacheVolume(await cloud.findVolumes({ tags: MANAGED, attachedTo: instanceId }), instanceId);
}

/** The volume's device and where it is mounted; throws when the boot has not mounted it here. */
export async function findMountedDevice(
  storage: Pick<HostStorage, "findDevice" | "mountPointOf">,
  volumeId: string,
): Promise<{ device: string; mountPoint: string }> {
  const device = await storage.findDevice(volumeId);
  if (!device)
    throw new AgentError(`the device of ${volumeId} is not present on this host`, "run `ebs-cache-agent boot` first");
  const mountPoint = await storage.mountPointOf(device);
  if (!mountPoint) throw new AgentError(`${volumeId} (${device}) is not mounted`, "run `ebs-cache-agent boot` first");
  return { device, mountPoint };
}
