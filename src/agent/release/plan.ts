/**
 * The release planner: pure. From what was observed at shutdown (the volumes this instance
 * holds, what is mounted, daemon.json, docker) it decides what `release` does; apply
 * (./apply.ts) carries the steps out, each re-checking the world, and
 * `release --dry-run` prints them. Every branch is unit-tested with plain objects.
 *
 * The order of the steps:
 *   withdraw-labels → reset-data-root → stop-docker → per volume: sync → unmount → detach →
 *   wait-detached → tag-released; then tag-released for volumes an earlier release detached but
 *   did not tag (it was killed in between).
 * When the instance is being stopped (not terminated) the volume stays with it: per volume
 *   sync → unmount → keep-attached, no detach and no release tags (see instanceFate()).
 * daemon.json is reset before docker stops, so that a docker started again meanwhile (a socket
 * activation, a person) comes up on its default root and never on the volume being released.
 */
import { mountPointOf } from "../../layout.ts";
import { VolumeTag } from "../../tags.ts";
import { intentChanges, keepApplies, keepFor, type KeepAsked } from "../volume-intent.ts";
import { tagTime } from "../volume-rules.ts";
import type { LabelModeSetting } from "../../docker/labels.ts";
import type { Identity, VolumeInfo } from "../ports.ts";

/** What the planner needs of the settings (config, environment and instance tags merged). */
export interface ReleaseSettings {
  enabled: boolean;
  /**
   * Who asks keep (the instance tag, osparc's labels with their ids, or nobody known): a workspace
   * volume released here with keep never expires. Decided per volume (volume-intent.ts keepFor).
   */
  keep: KeepAsked;
  /** `expires-at` = release time + this. */
  ttlHours: number;
  /** Where cache volumes are mounted: a data-root below it is the agent's doing. */
  mountRoot: string;
  /**
   * docker's data-root without the agent: the host's own as recorded before the first switch (original-data-root.ts);
   * undefined: no `data-root` key, docker's default.
   */
  defaultDataRoot: string | undefined;
  /** config `release.stopDocker`. */
  stopDocker: boolean;
  /** false with `docker.control: none`: the agent has no way to stop docker. */
  controlsDocker: boolean;
  labels: { prefix: string; mode: LabelModeSetting };
}

/** A managed volume attached to this instance, with what the host shows of it. */
export interface HeldVolume {
  volume: VolumeInfo;
  /** Its device on this host (serial verified), when present. */
  device?: string;
  /** Where its filesystem is mounted now. */
  mountPoints: string[];
}

/**
 * What EC2 is about to do with this instance, as observed at shutdown: its state from
 * DescribeInstances and the spot interruption notice from IMDS, each an answer or the reason
 * there is none.
 */
export interface ShutdownObservation {
  /** DescribeInstances' `State.Name` (pending, running, stopping, stopped, shutting-down, terminated). */
  instanceState: { ok: true; state: string } | { ok: false; problem: string };
  /** The notice's action (stop, hibernate, terminate); undefined: no notice (404, on-demand instances). */
  spotAction: { ok: true; action: string | undefined } | { ok: false; problem: string };
  /**
   * Whether the host's systemd is rebooting (a reboot.target job queued): EC2 shows a rebooting
   * instance `running`. Absent: not asked.
   */
  reboot?: { ok: true; queued: boolean } | { ok: false; problem: string };
}

/**
 * Why this shutdown happens. `stop`: the instance is being stopped and will start again (an
 * osparc warm buffer), or the host reboots: its volume stays attached, unexpired, for that start. `terminate`, and
 * `unknown` when it could not be learned: the full release, so that a volume is never stranded
 * without an expiry on a machine that goes away.
 */
export interface InstanceFate {
  kind: "stop" | "terminate" | "unknown";
  /** Which observation decided, in words, for the log and the dry run. */
  reason: string;
}

/** Decides the instance's fate from what was observed (pure). The instance's own state comes first. */
export function instanceFate(observed: ShutdownObservation | undefined): InstanceFate {
  if (!observed) return { kind: "unknown", reason: "not asked: no cache volume is attached to this instance" };
  const { instanceState, spotAction } = observed;
  if (instanceState.ok) {
    const state = instanceState.state;
    if (state === "stopping" || state === "stopped")
      return { kind: "stop", reason: `EC2 shows the instance '${state}'` };
    if (state === "shutting-down" || state === "terminated")
      return { kind: "terminate", reason: `EC2 shows the instance '${state}'` };
  }
  // EC2 may not have moved the state yet when the OS starts shutting down for a spot interruption.
  if (spotAction.ok && spotAction.action !== undefined) {
    if (spotAction.action === "stop" || spotAction.action === "hibernate") {
      return { kind: "stop", reason: `the spot interruption notice says '${spotAction.action}'` };
    }
    if (spotAction.action === "terminate")
      return { kind: "terminate", reason: "the spot interruption notice says 'terminate'" };
  }
  // A reboot keeps the instance and its attachments, as a stop does: the volume stays for the
  // boot that follows (no AttachVolume, no expiry).
  if (observed.reboot?.ok && observed.reboot.queued)
    return { kind: "stop", reason: "the host is rebooting (systemd has reboot.target queued)" };
  const why = [
    instanceState.ok
      ? `EC2 shows the instance '${instanceState.state}'`
      : `its state could not be learned (${instanceState.problem})`,
    spotAction.ok
      ? spotAction.action === undefined
        ? "no spot interruption notice"
        : `spot notice '${spotAction.action}' not understood`
      : `the spot notice could not be read (${spotAction.problem})`,
    ...(observed.reboot === undefined
      ? []
      : [
          observed.reboot.ok
            ? "no reboot queued"
            : `whether the host reboots could not be learned (${observed.reboot.problem})`,
        ]),
  ];
  return { kind: "unknown", reason: why.join("; ") };
}

/** What observeRelease() found. */
export interface ReleaseObservation {
  identity: Identity;
  /** What EC2 is about to do with the instance; absent when it was not asked (no volume held). */
  shutdown?: ShutdownObservation;
  /** Managed volumes attached (attaching, detaching) to this instance. */
  held: HeldVolume[];
  /**
   * Managed volumes `available` but still tagged `claimed-by` this instance: a release stopped
   * between DetachVolume and the tags (a completed release removes `claimed-by`).
   */
  untagged: VolumeInfo[];
  /** daemon.json: its data-root and the agent's engine labels, or why it could not be read. */
  daemonJson: { ok: true; dataRoot: string | undefined; agentLabels: string[] } | { ok: false; problem: string };
  /** docker: running, and on which data-root (when it answered). */
  docker: { active: boolean; dataRoot?: string };
}

export type ReleaseStep =
  /**
   * The agent's readiness labels go: engine labels from daemon.json (a docker started later must
   * not say `ready`), and node labels through the API while docker still answers (`node`).
   */
  | { step: "withdraw-labels"; prefix: string; node: boolean }
  /**
   * daemon.json `data-root` back to the host's own (`to`; absent: no `data-root` key), when it points at a cache
   * volume.
   */
  | { step: "reset-data-root"; from: string; to?: string }
  | { step: "stop-docker"; dataRoot?: string }
  | { step: "sync"; volumeId: string; mountPoints: string[] }
  /** Unmounts every mount of the volume; refused (nothing detached) when one is busy. */
  | { step: "unmount"; volumeId: string; device?: string; mountPoints: string[] }
  /** DetachVolume, never forced; refused when the volume's filesystem is still mounted. */
  | { step: "detach"; volumeId: string; device?: string; mountPoint: string }
  | { step: "wait-detached"; volumeId: string }
  /**
   * The instance is being stopped: the unmounted volume stays attached for its next start,
   * `claimed-by` kept, and any `released-at` / `expires-at` removed (a stopped instance's volume
   * must not expire under it). `setTags` / `removeTags` also bring the instance's intent (keep,
   * TTL) up to date: a stopped warm buffer may be terminated while stopped, with no release, and
   * gc then goes by these tags.
   */
  | { step: "keep-attached"; volumeId: string; setTags: Record<string, string>; removeTags: string[] }
  /**
   * `released-at` (this time, or the one an interrupted release already wrote), `expires-at`
   * (+ TTL) or `keep=true`; `claimed-by` / `claimed-at` removed while they still name this instance.
   */
  | { step: "tag-released"; volumeId: string; kind: string; keep: boolean; ttlHours: number; releasedAt?: string };

export interface ReleasePlan {
  instanceId: string;
  /** `release`: steps follow; `nothing`: already released or nothing held; `disabled`; `refused`: nothing is done. */
  decision: "release" | "nothing" | "disabled" | "refused";
  /** Why, for `nothing`, `disabled` and `refused`. */
  reason?: string;
  /** What to do about a refusal. */
  remediation?: string;
  /** The volumes this release acts on. */
  volumes: string[];
  /** Things the operator should know (daemon.json unreadable, volumes left alone when disabled). */
  warnings: string[];
  /** Stop or terminate (or unknown), and why: a stop keeps the volumes attached. */
  shutdown: InstanceFate;
  steps: ReleaseStep[];
}

/** True when `path` lies strictly below `root`. */
export function isBelow(root: string, path: string | undefined): boolean {
  const base = root.replace(/\/+$/, "");
  return path !== undefined && path.startsWith(`${base}/`) && path.length > base.length + 1;
}

/** The release time an interrupted release already tagged, when it belongs to the current claim. */
export function earlierReleaseTime(volume: VolumeInfo): string | undefined {
  const released = tagTime(volume.tags, VolumeTag.releasedAt);
  if (released === undefined) return undefined;
  const claimed = tagTime(volume.tags, VolumeTag.claimedAt);
  // A released-at older than the claim is a previous tenancy's (an older boot did not clear it).
  if (claimed !== undefined && released < claimed) return undefined;
  return volume.tags[VolumeTag.releasedAt];
}

/**
 * The tags a released volume gets (set, then removed), for one release time. `keep` applies to
 * workspace volumes only: a kept pool volume would never leave the pool's count. A keep this
 * instance's claim wrote (`keep-by` this instance) goes when the instance no longer asks it, and
 * becomes a plain keep (nobody's to take back) when it still does.
 */
export function releaseTags(options: {
  instanceId: string;
  kind: string;
  keep: boolean;
  ttlHours: number;
  releasedAt: Date;
  /** The volume's current `claimed-at`, removed only while it still has this value. */
  claimedAt?: string;
  /** The volume's current `keep-by`: the instance whose claim wrote its keep. */
  keepBy?: string;
}): { set: Record<string, string>; remove: Record<string, string>; removeKeys: string[] } {
  const keep = keepApplies(options.kind, options);
  const ownKeep = options.keepBy === options.instanceId;
  const set: Record<string, string> = { [VolumeTag.releasedAt]: options.releasedAt.toISOString() };
  const removeKeys: string[] = [];
  if (keep) {
    set[VolumeTag.keep] = "true";
    removeKeys.push(VolumeTag.expiresAt);
  } else {
    set[VolumeTag.expiresAt] = new Date(options.releasedAt.getTime() + options.ttlHours * 3_600_000).toISOString();
    // Asked at the claim, no longer now (an instance tag removed or set false since).
    if (ownKeep) removeKeys.push(VolumeTag.keep, VolumeTag.keepBy);
  }
  const remove: Record<string, string> = { [VolumeTag.claimedBy]: options.instanceId };
  if (options.claimedAt !== undefined) remove[VolumeTag.claimedAt] = options.claimedAt;
  if (keep && ownKeep) remove[VolumeTag.keepBy] = options.instanceId;
  return { set, remove, removeKeys };
}

/** Plans the release. */
export function planRelease(settings: ReleaseSettings, observed: ReleaseObservation): ReleasePlan {
  const instanceId = observed.identity.instanceId;
  const warnings: string[] = [];
  const held = [...observed.held].sort((a, b) => a.volume.volumeId.localeCompare(b.volume.volumeId));
  const untagged = observed.untagged
    .filter((v) => !held.some((h) => h.volume.volumeId === v.volumeId))
    .sort((a, b) => a.volumeId.localeCompare(b.volumeId));
  const shutdown = instanceFate(observed.shutdown);
  const base = { instanceId, volumes: [] as string[], warnings, shutdown, steps: [] as ReleaseStep[] };

  if (!settings.enabled) {
    if (held.length > 0) {
      warnings.push(
        `the agent is disabled: ${held.map((h) => h.volume.volumeId).join(", ")} stays attached (enable the ` +
          `agent and run release to give it back)`,
      );
    }
    return { ...base, decision: "disabled", reason: "disabled by configuration or instance tag: nothing is released" };
  }

  const daemon = observed.daemonJson;
  if (!daemon.ok) warnings.push(`daemon.json is left alone: ${daemon.problem}`);
  const cacheDataRoot = daemon.ok && isBelow(settings.mountRoot, daemon.dataRoot) ? daemon.dataRoot : undefined;
  const { docker } = observed;
  // Docker on a cache volume, or on a root it did not say while a volume is mounted: it must stop.
  const dockerOnCache =
    docker.active &&
    (docker.dataRoot !== undefined
      ? isBelow(settings.mountRoot, docker.dataRoot)
      : held.some((h) => h.mountPoints.length > 0));

  if (held.length === 0 && untagged.length === 0 && cacheDataRoot === undefined && !dockerOnCache) {
    return {
      ...base,
      decision: "nothing",
      reason: "no cache volume is attached to this instance and none awaits its release tags",
    };
  }
  const volumes = [...held.map((h) => h.volume.volumeId), ...untagged.map((v) => v.volumeId)];

  if (dockerOnCache && (!settings.stopDocker || !settings.controlsDocker)) {
    const why = !settings.controlsDocker ? "docker.control is none" : "release.stopDocker is false";
    return {
      ...base,
      volumes,
      decision: "refused",
      reason:
        `docker still runs on the cache volume (${docker.dataRoot ?? "data-root unknown"}) and ${why}: nothing was ` +
        `changed`,
      remediation: "stop docker first (systemctl stop docker), then run release again",
    };
  }

  const steps: ReleaseStep[] = [];
  // Labels only when the docker that would show them goes (or is gone): a docker that stays up
  // on another root keeps the labels that describe it.
  const dockerStaysUp = docker.active && !dockerOnCache;
  const hasEngineLabels = daemon.ok && daemon.agentLabels.length > 0;
  if (settings.labels.mode !== "off" && !dockerStaysUp && (hasEngineLabels || dockerOnCache)) {
    steps.push({ step: "withdraw-labels", prefix: settings.labels.prefix, node: dockerOnCache });
  }
  if (cacheDataRoot !== undefined) {
    steps.push({
      step: "reset-data-root",
      from: cacheDataRoot,
      ...(settings.defaultDataRoot !== undefined ? { to: settings.defaultDataRoot } : {}),
    });
  }
  if (dockerOnCache)
    steps.push({ step: "stop-docker", ...(docker.dataRoot !== undefined ? { dataRoot: docker.dataRoot } : {}) });

  // The keep each volume gets: the labels' word only on a workspace of their ids.
  const keepOf = (volume: VolumeInfo): boolean => {
    const decided = keepFor(volume, instanceId, settings.keep);
    if (decided.warning) warnings.push(decided.warning);
    return decided.keep;
  };
  const tag = (volume: VolumeInfo): ReleaseStep => {
    const releasedAt = earlierReleaseTime(volume);
    return {
      step: "tag-released",
      volumeId: volume.volumeId,
      kind: volume.tags[VolumeTag.kind] ?? "unknown",
      keep: keepOf(volume),
      ttlHours: settings.ttlHours,
      ...(releasedAt !== undefined ? { releasedAt } : {}),
    };
  };
  for (const { volume, device, mountPoints } of held) {
    const volumeId = volume.volumeId;
    const ours = mountPointOf(settings.mountRoot, volumeId);
    const dev = device !== undefined ? { device } : {};
    if (shutdown.kind === "stop" && volume.attachment?.state !== "detaching") {
      // Cleanly unmounted (the next start mounts it without a log replay), and left attached.
      if (mountPoints.length > 0) steps.push({ step: "sync", volumeId, mountPoints });
      steps.push({ step: "unmount", volumeId, ...dev, mountPoints: [...new Set([...mountPoints, ours])] });
      const intent = intentChanges(volume.tags, instanceId, { keep: keepOf(volume), ttlHours: settings.ttlHours });
      const removeTags = [
        ...[VolumeTag.releasedAt, VolumeTag.expiresAt].filter((key) => key in volume.tags),
        ...intent.remove,
      ];
      steps.push({ step: "keep-attached", volumeId, setTags: intent.set, removeTags });
      continue;
    }
    // A detach already under way (an interrupted release): wait for it, then tag.
    if (volume.attachment?.state !== "detaching") {
      if (mountPoints.length > 0) steps.push({ step: "sync", volumeId, mountPoints });
      steps.push({ step: "unmount", volumeId, ...dev, mountPoints: [...new Set([...mountPoints, ours])] });
      steps.push({ step: "detach", volumeId, ...dev, mountPoint: ours });
    }
    steps.push({ step: "wait-detached", volumeId });
    steps.push(tag(volume));
  }
  for (const volume of untagged) steps.push(tag(volume));
  return { ...base, volumes, decision: "release", steps };
}
