/**
 * What a release looks at before it plans: the managed volumes this instance holds (and those an
 * interrupted release detached but did not tag), their devices and mounts, whether the instance
 * stops or terminates, daemon.json and docker. Reads only, through the ports.
 */
import { mountPointOf } from "../../layout.ts";
import { describeError } from "../../errors.ts";
import { isUnderPrefix, parseEngineLabel } from "../../docker/labels.ts";
import { VolumeTag } from "../../tags.ts";
import { MANAGED } from "../volume-rules.ts";
import type { Identity } from "../ports.ts";
import type { ReleaseDeps } from "./deps.ts";
import { type HeldVolume, type ReleaseObservation, type ReleaseSettings, type ShutdownObservation } from "./plan.ts";

/** Gathers what the planner needs: two filtered DescribeVolumes, the mount table, daemon.json, docker. */
export async function observeRelease(
  deps: ReleaseDeps,
  identity: Identity,
  settings: ReleaseSettings,
): Promise<ReleaseObservation> {
  const { cloud, log } = deps;
  const instanceId = identity.instanceId;
  const [attached, claimed] = await Promise.all([
    cloud.findVolumes({ tags: MANAGED, attachedTo: instanceId }),
    settings.enabled
      ? cloud.findVolumes({
          tags: { ...MANAGED, [VolumeTag.claimedBy]: instanceId },
          status: ["available"],
        })
      : Promise.resolve([]),
  ]);
  const held: HeldVolume[] = [];
  for (const volume of attached) {
    const a = volume.attachment;
    if (!a || a.instanceId !== instanceId || a.state === "detached") continue;
    if (!settings.enabled) {
      held.push({ volume, mountPoints: [] });
      continue;
    }
    const device = await deps.storage.findDevice(volume.volumeId).catch((error: unknown) => {
      log.warning("release.observe", `could not find the volume's device: ${describeError(error)}`, {
        volume: volume.volumeId,
      });
      return undefined;
    });
    const mountPoints = await deps.mounts.list(device, mountPointOf(settings.mountRoot, volume.volumeId));
    held.push({ volume, ...(device !== undefined ? { device } : {}), mountPoints });
  }
  const untagged = claimed.filter((v) => v.state === "available" && !v.attachment);
  // Asked only when it matters: a stop keeps held volumes attached; everything else is the same.
  const shutdown = settings.enabled && held.length > 0 ? await observeShutdown(deps, instanceId) : undefined;

  return {
    identity,
    held,
    untagged,
    ...(shutdown ? { shutdown } : {}),
    daemonJson: await observeDaemonJson(deps, settings.labels.prefix),
    docker: settings.enabled ? await observeDocker(deps) : { active: false },
  };
}

/** daemon.json's data-root and the engine labels under the agent's prefix, or why it could not be read. */
async function observeDaemonJson(deps: ReleaseDeps, prefix: string): Promise<ReleaseObservation["daemonJson"]> {
  try {
    const dataRoot = await deps.daemonConfig.dataRoot();
    const agentLabels = (await deps.daemonConfig.engineLabels()).filter((entry) =>
      isUnderPrefix(prefix, parseEngineLabel(entry).key),
    );
    return { ok: true, dataRoot, agentLabels };
  } catch (error) {
    return { ok: false, problem: describeError(error) };
  }
}

/**
 * How long the spot notice may take: one IMDS answer's time (config `timeouts.imdsRequestSeconds`);
 * without it, 5 s.
 */
export function spotNoticeMs(imdsRequestSeconds: number | undefined): number {
  return imdsRequestSeconds === undefined ? 5000 : imdsRequestSeconds * 1000;
}

/**
 * How long the release waits to learn whether the instance stops or terminates: the spot notice
 * gets one IMDS answer's time (spotNoticeMs), the whole question (DescribeInstances beside it)
 * twice that; at shutdown there is no time to wait longer. Without the IMDS timeout: 10 s.
 */
export function shutdownQuestionMs(imdsRequestSeconds: number | undefined): number {
  return spotNoticeMs(imdsRequestSeconds) * 2;
}

/**
 * Stop or terminate: the instance's state (one DescribeInstances), the spot interruption
 * notice and (on a systemd host) whether a reboot is queued, asked together under one deadline. Either may fail: the
 * planner then decides from the
 * other, and without either it releases fully.
 */
async function observeShutdown(deps: ReleaseDeps, instanceId: string): Promise<ShutdownObservation> {
  const timeoutMs = shutdownQuestionMs(deps.imdsRequestSeconds);
  const signal = AbortSignal.timeout(timeoutMs);
  const bounded = <T>(work: Promise<T>): Promise<T> =>
    Promise.race([
      work,
      new Promise<never>((_, reject) => {
        if (signal.aborted) reject(new Error(`no answer within ${timeoutMs} ms`));
        signal.addEventListener("abort", () => reject(new Error(`no answer within ${timeoutMs} ms`)), { once: true });
      }),
    ]);
  const [state, spot, reboot] = await Promise.allSettled([
    bounded(deps.cloud.describeInstance(instanceId, { signal })),
    deps.spotInstanceAction
      ? bounded(deps.spotInstanceAction({ timeoutMs: spotNoticeMs(deps.imdsRequestSeconds) }))
      : Promise.reject(new Error("no metadata service to ask")),
    deps.rebootQueued ? bounded(deps.rebootQueued()) : Promise.resolve(undefined),
  ]);
  return {
    instanceState:
      state.status === "fulfilled"
        ? { ok: true, state: state.value.state }
        : { ok: false, problem: describeError(state.reason) },
    spotAction:
      spot.status === "fulfilled"
        ? { ok: true, action: spot.value }
        : { ok: false, problem: describeError(spot.reason) },
    ...(deps.rebootQueued
      ? {
          reboot:
            reboot.status === "fulfilled"
              ? { ok: true as const, queued: reboot.value === true }
              : { ok: false as const, problem: describeError(reboot.reason) },
        }
      : {}),
  };
}

async function observeDocker(deps: ReleaseDeps): Promise<ReleaseObservation["docker"]> {
  if (deps.docker) {
    if (!(await deps.docker.isActive())) return { active: false };
    const info = await deps.engine.info().catch(() => undefined);
    return { active: true, ...(info ? { dataRoot: info.dockerRootDir } : {}) };
  }
  // Without control of docker, it runs when its API answers.
  return (await dockerAnswers(deps)) ?? { active: false };
}

/** docker as its API shows it, or undefined when the API does not answer. */
async function dockerAnswers(deps: ReleaseDeps): Promise<{ active: true; dataRoot: string } | undefined> {
  const info = await deps.engine.info().catch(() => undefined);
  return info ? { active: true, dataRoot: info.dockerRootDir } : undefined;
}

/**
 * Whether docker runs now: systemd's word when the agent controls docker, else whether its API answers. Re-asked by
 * apply's steps.
 */
export async function dockerActive(deps: ReleaseDeps): Promise<boolean> {
  if (deps.docker) return deps.docker.isActive();
  return (await dockerAnswers(deps)) !== undefined;
}
