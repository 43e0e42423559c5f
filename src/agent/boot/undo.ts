/**
 * The two ways out of a boot that failed: undo what it did to the volume in hand (which is then
 * handed back, maybe quarantined), and degrade (docker on its default data-root, the `degraded`
 * label, one clear log line).
 */
import { mountPointOf } from "../../layout.ts";
import { describeError } from "../../errors.ts";
import { Label, VolumeKind, VolumeTag } from "../../tags.ts";
import type { VolumeInfo } from "../ports.ts";
import { releaseTags } from "../release/plan.ts";
import type { VolumeIntent } from "../volume-intent.ts";
import type { BootLimits, Finished, Progress } from "./context.ts";
import type { BootDeps } from "./deps.ts";
import type { BootPlan } from "./plan.ts";
import { detachBlocker } from "../detach-guard.ts";

/**
 * Reverses what this boot did, newest first; each undo is best-effort and logged. The volume is
 * detached (never forced) and its claim tags removed (only while they are this instance's, with
 * a keep its claim wrote);
 * with `quarantine` (the failure was the volume's) it is tagged `last-error` and
 * `last-error-at`, so no boot takes it for `claim.quarantineHours`; with `releaseWorkspace` (the
 * user's own workspace, full) it is tagged as a release tags it instead (releaseWorkspace).
 */
export async function undo(
  progress: Progress,
  plan: BootPlan,
  deps: BootDeps,
  reason: string,
  options: {
    quarantine: boolean;
    keepDocker?: boolean;
    /** How long a holder of the mount in another namespace is given to go (BootLimits.holderWaitMs). */
    holderWaitMs?: number;
    releaseWorkspace?: boolean;
  },
): Promise<void> {
  const { log } = deps;
  const attempt = async (what: string, work: () => Promise<unknown>) => {
    try {
      await work();
    } catch (error) {
      log.error("boot.undo", `${what} failed: ${describeError(error)}`, { volume: progress.volume?.volumeId });
    }
  };
  if (progress.switched) {
    await attempt("restoring daemon.json", () => deps.daemonConfig.restoreBackup());
  }
  if (progress.containerdSwitched && deps.containerd) {
    await attempt("restoring containerd's config.toml", () => deps.containerd!.restoreBackup());
  }
  if (
    progress.mountPoint &&
    (progress.mountedNow || progress.switched || progress.claimedNow || progress.containerdSwitched)
  ) {
    // keepDocker: docker runs elsewhere, in a swarm (JoinedBeforeSwitch); the volume is not its.
    if (deps.docker && (progress.switched || progress.containerdSwitched) && !options.keepDocker)
      await attempt("stopping docker", () => deps.docker!.stop());
    // containerd holds its metadata (meta.db) on the volume open: the unmount would be refused.
    // Only in a run with docker control: in phase 1 containerd has not started (it is ordered
    // after the agent), and a stop job would cancel its pending start.
    const containerd = progress.containerdSwitched && deps.docker ? deps.containerd?.service : undefined;
    if (containerd) await attempt("stopping containerd", () => containerd.stop());
    await attempt("unmounting", () => deps.storage.unmount(progress.mountPoint!));
  }
  if (progress.volume) {
    const volumeId = progress.volume.volumeId;
    // Unmounted here is not unmounted everywhere: a mount namespace copied after the mount keeps
    // the filesystem live (a check that fails counts as mounted). A copy made for a moment is given
    // its time to go; the undo has no signal (a stopped boot still hands back what it holds).
    const wait = { boundMs: options.holderWaitMs ?? 0, log, area: "boot" as const };
    const blocker = progress.device
      ? await detachBlocker(deps.storage, volumeId, progress.device, "boot", wait)
      : undefined;
    if (blocker) {
      log.error("boot.undo", `not detaching it: ${blocker.message}`, {
        volume: volumeId,
        remediation: blocker.remediation,
      });
      return;
    }
    // The intent this instance's claim wrote goes with the claim: the volume is no longer its.
    // The keep only where the claim marked it as its own, the TTL only while it is the value the
    // claim wrote (a value-conditional DeleteTags).
    const ownKeep: Record<string, string> =
      progress.volume.tags[VolumeTag.keepBy] === plan.instanceId
        ? { [VolumeTag.keep]: "true", [VolumeTag.keepBy]: plan.instanceId }
        : {};
    const claimStep = plan.steps.find((s) => s.step === "tag-claim");
    const ownTtl: Record<string, string> =
      claimStep?.step === "tag-claim" ? { [VolumeTag.ttlHours]: String(claimStep.intent.ttlHours) } : {};
    if (options.releaseWorkspace && claimStep?.step === "tag-claim") {
      const intent = claimStep.intent;
      await attempt("tagging it released", () => releaseWorkspace(progress.volume!, intent, plan, deps));
    } else {
      await attempt("tagging the failure", async () => {
        await deps.cloud.untagVolume(volumeId, {
          [VolumeTag.claimedBy]: plan.instanceId,
          ...(progress.claimedAt ? { [VolumeTag.claimedAt]: progress.claimedAt } : {}),
          ...ownKeep,
          ...ownTtl,
        });
        if (options.quarantine) {
          const at = deps.cloud.clock.now().toISOString();
          await deps.cloud.tagVolume(volumeId, {
            [VolumeTag.lastError]: shorten(`${plan.instanceId}: ${reason}`),
            [VolumeTag.lastErrorAt]: at,
          });
        }
      });
    }
    await attempt("detaching", async () => {
      await deps.cloud.detachVolume(volumeId, plan.instanceId);
      log.info("boot.undo", "volume detached and left for another instance", { volume: volumeId });
    });
  }
}

/**
 * The user's own workspace, handed back unused (its filesystem is full), tagged as a release
 * tags it: `released-at`, and `expires-at` by this run's TTL or `keep` as this run asks (the run
 * claimed it for its own ids), the claim's tags removed. Neither abandoned without an expiry nor
 * quarantined: the same user's next boot finds it.
 */
async function releaseWorkspace(
  volume: VolumeInfo,
  intent: VolumeIntent,
  plan: BootPlan,
  deps: BootDeps,
): Promise<void> {
  const claimedAt = volume.tags[VolumeTag.claimedAt];
  const keepBy = volume.tags[VolumeTag.keepBy];
  const tags = releaseTags({
    instanceId: plan.instanceId,
    kind: VolumeKind.workspace,
    keep: intent.keep,
    ttlHours: intent.ttlHours,
    releasedAt: deps.cloud.clock.now(),
    ...(claimedAt !== undefined ? { claimedAt } : {}),
    ...(keepBy !== undefined ? { keepBy } : {}),
  });
  await deps.cloud.tagVolume(volume.volumeId, tags.set);
  await deps.cloud.untagVolume(volume.volumeId, tags.removeKeys);
  await deps.cloud.untagVolume(volume.volumeId, tags.remove);
  deps.log.notice("boot.undo", "workspace volume handed back released, for its user", {
    volume: volume.volumeId,
    expiresAt: tags.set[VolumeTag.expiresAt],
    keep: tags.set[VolumeTag.keep],
  });
}

/** One line of at most 250 characters: fits an EC2 tag value (256) and a docker label. */
export function shorten(text: string): string {
  // eslint-disable-next-line no-control-regex
  const line = text.replace(/[\u0000-\u001f\u007f]+/g, " ");
  return line.length <= 250 ? line : `${line.slice(0, 247)}...`;
}

/**
 * Docker on its default data-root, started, and the degraded label; then the cache volumes
 * attached here (`attached`) that are still mounted where the agent mounts them are unmounted:
 * a volume the node does not use is not left mounted (phase 1 mounted it, and phase 2 found it
 * not this run's, or failed on it). Never forced; one that cannot be unmounted stays as it is,
 * with one line. They stay attached: the release gives them back.
 */
export async function degrade(
  deps: BootDeps,
  limits: BootLimits,
  reason: string,
  attached: readonly string[] = [],
): Promise<Finished> {
  const { log } = deps;
  try {
    let current = await deps.daemonConfig.dataRoot();
    // A data-root on a cache volume (left by an earlier boot) must not survive a degraded boot:
    // docker would start on an empty folder where the volume used to be mounted.
    if (current !== undefined && current.startsWith(`${limits.mountRoot}/`)) {
      await deps.daemonConfig.setDataRoot(limits.defaultDataRoot);
      log.notice("boot.data-root", "daemon.json data-root back to the host's own", {
        from: current,
        to: limits.defaultDataRoot ?? "(default)",
      });
      current = limits.defaultDataRoot;
    }
    const containerdMoved = await resetContainerdRoot(deps, limits);
    const info =
      deps.docker && (await deps.docker.isActive()) ? await deps.engine.info().catch(() => undefined) : undefined;
    // containerd reads its root only at start; docker follows it (phase 1 has no docker control:
    // containerd starts after it, on the root put back).
    const containerd = containerdMoved && deps.docker ? deps.containerd?.service : undefined;
    if (containerd && (await containerd.isActive())) {
      await deps.docker!.stop();
      await containerd.restart();
    }
    // Restarted when it runs elsewhere than daemon.json says now: on a cache volume whatever the
    // key (docker's default has no key), or on another root the key names.
    const elsewhere =
      info !== undefined &&
      (info.dockerRootDir.startsWith(`${limits.mountRoot}/`) ||
        (current !== undefined && info.dockerRootDir !== current));
    if (deps.docker && (!(await deps.docker.isActive()) || elsewhere)) {
      await deps.docker.restart();
      await deps.engine.waitUntilReady(limits.dockerTimeoutMs);
    }
  } catch (error) {
    log.error("boot.degraded", `could not bring docker up on its default data-root: ${describeError(error)}`, {
      remediation: "journalctl -u docker",
    });
  }
  for (const volumeId of new Set(attached)) await unmountUnused(deps, limits, volumeId);
  await deps.report("degraded", { [Label.reason]: shorten(reason) }).catch((error: unknown) => {
    log.error("boot.label", `could not publish the degraded label: ${describeError(error)}`);
  });
  log.warning("boot.degraded", `node up without a cache volume: ${reason}`);
  return { outcome: "degraded", reason };
}

/**
 * Unmounts a volume the degraded node does not use, where the agent mounted it (`<mountRoot>/<id>`).
 * Only after docker left it: a mount elsewhere is not the agent's, and a busy one is left as it is.
 */
async function unmountUnused(deps: BootDeps, limits: BootLimits, volumeId: string): Promise<void> {
  const ours = mountPointOf(limits.mountRoot, volumeId);
  try {
    const device = await deps.storage.findDevice(volumeId);
    if (!device || (await deps.storage.mountPointOf(device)) !== ours) return;
    await deps.storage.unmount(ours);
    deps.log.notice("boot.unmount", "unmounted the cache volume the degraded node does not use", {
      volume: volumeId,
      mountPoint: ours,
    });
  } catch (error) {
    deps.log.error("boot.unmount", `${volumeId} stays mounted at ${ours}: ${describeError(error)}`, {
      volume: volumeId,
      remediation: `find what still uses it (fuser -vm ${ours}); the release unmounts it at shutdown`,
    });
  }
}

/**
 * containerd's root left on a cache volume by an earlier boot must not survive a degraded boot
 * either: containerd would start on an empty folder where the volume used to be mounted. Put
 * back from the backup (or removed); true when it moved.
 */
async function resetContainerdRoot(deps: BootDeps, limits: BootLimits): Promise<boolean> {
  const containerd = deps.containerd;
  if (!containerd) return false;
  const below = (root: string) => root.startsWith(`${limits.mountRoot}/`);
  const from = await containerd.root();
  if (!below(from)) return false;
  await containerd.restoreBackup().catch((error: unknown) => {
    deps.log.warning(
      "boot.containerd-root",
      `could not restore config.toml from its backup: ${describeError(error)}; removing its root instead`,
    );
  });
  if (below(await containerd.root())) await containerd.setRoot(undefined);
  deps.log.notice("boot.containerd-root", "containerd's root put back off the cache volume", {
    from,
    to: await containerd.root(),
  });
  return true;
}
