/**
 * From the loaded configuration and the instance's identity to the settings a boot acts on:
 * the allowed instance-tag overrides, the workspace ids, and every tag-borne value validated
 * before it can reach a path, a label or a command. Pure.
 */
import type { AgentConfig } from "../config/index.ts";
import { applyInstanceTags, InstanceTag, type EffectiveSettings } from "../config/overrides.ts";
import { parseWorkspaceIds, validatePoolName } from "./inputs.ts";
import type { BootSettings } from "./plan.ts";
import type { ReleaseSettings } from "./release-plan.ts";
import type { Identity } from "./ports.ts";

export interface ResolvedSettings {
  effective: EffectiveSettings;
  boot: BootSettings;
  /** What instance tags changed, for the log. */
  applied: string[];
  warnings: string[];
}

/** Resolves the settings, or returns the problems (then nothing may be changed). */
export function resolveSettings(config: AgentConfig, identity: Identity, options: { withDocker: boolean; mayClaim?: boolean }): { ok: true; value: ResolvedSettings } | { ok: false; problems: string[] } {
  const tagged = applyInstanceTags(config, identity.tags);
  const problems = [...tagged.problems];
  const effective = tagged.config;
  const pool = validatePoolName(effective.pool);
  if (!pool.ok) problems.push(`pool: ${pool.problem}`);
  const workspace = parseWorkspaceIds(identity.tags, effective.workspace.labelsTag);
  if (!workspace.ok) problems.push(workspace.problem);
  if (problems.length > 0) return { ok: false, problems };

  const boot: BootSettings = {
    enabled: effective.enabled,
    pool: effective.pool,
    imageSet: effective.imageSet,
    createFromSnapshot: effective.createFromSnapshot,
    volumeType: effective.volumeType,
    initializationRateMiBps: effective.initializationRateMiBps,
    device: effective.device,
    mountRoot: effective.paths.mountRoot,
    withDocker: options.withDocker && effective.docker.control !== "none",
    mayClaim: options.mayClaim ?? true,
    prewarm: effective.prewarm.strategy,
    claim: { ...effective.claim },
    workspaceCreate: effective.workspace.create,
    workspaceSizeGiB: effective.workspace.sizeGiB,
    ...(workspace.ok && workspace.ids ? { workspace: workspace.ids } : {}),
  };
  return { ok: true, value: { effective, boot, applied: tagged.applied, warnings: tagged.warnings } };
}

/** The settings a release acts on, with what instance tags changed and what was wrong with them. */
export interface ResolvedReleaseSettings {
  effective: EffectiveSettings;
  release: ReleaseSettings;
  applied: string[];
  warnings: string[];
}

/**
 * Resolves the release's settings. Unlike a boot, a release is not refused for a malformed
 * instance tag: at shutdown, a refusal would leave the volume attached to a machine that goes
 * away. A malformed tag is not applied (the config's value holds) and is reported as a warning;
 * a malformed `ebs-cache:keep` counts as keep (the volume is not expired on a guess).
 */
export function resolveReleaseSettings(config: AgentConfig, identity: Identity, options: { defaultDataRoot: string | undefined }): ResolvedReleaseSettings {
  const tagged = applyInstanceTags(config, identity.tags);
  const effective = tagged.config;
  const warnings = [...tagged.warnings, ...tagged.problems.map((problem) => `${problem} (not applied)`)];
  const keepText = identity.tags[InstanceTag.keep];
  const keepMalformed = keepText !== undefined && !/^\s*(true|false)\s*$/i.test(keepText);
  if (keepMalformed) warnings.push(`instance tag ${InstanceTag.keep} is not true or false: the released workspace volume is kept (never expired) rather than risk its data`);
  const release: ReleaseSettings = {
    enabled: effective.enabled,
    keep: effective.keep || keepMalformed,
    ttlHours: effective.ttlHours,
    mountRoot: effective.paths.mountRoot,
    defaultDataRoot: options.defaultDataRoot,
    stopDocker: effective.release.stopDocker,
    controlsDocker: effective.docker.control !== "none",
    labels: { prefix: effective.labels.prefix, mode: effective.labels.mode },
  };
  return { effective, release, applied: tagged.applied, warnings };
}
