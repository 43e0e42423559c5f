/**
 * From the loaded configuration and the instance's identity to the settings a boot acts on:
 * the allowed instance-tag overrides, the workspace ids, and every tag-borne value validated
 * before it can reach a path, a label or a command. Pure.
 */
import type { AgentConfig } from "../config/index.ts";
import { applyInstanceTags, type EffectiveSettings } from "../config/overrides.ts";
import { parseWorkspaceIds, validatePoolName } from "./inputs.ts";
import type { BootSettings } from "./plan.ts";
import type { Identity } from "./ports.ts";

export interface ResolvedSettings {
  effective: EffectiveSettings;
  boot: BootSettings;
  /** What instance tags changed, for the log. */
  applied: string[];
  warnings: string[];
}

/** Resolves the settings, or returns the problems (then nothing may be changed). */
export function resolveSettings(config: AgentConfig, identity: Identity, options: { withDocker: boolean }): { ok: true; value: ResolvedSettings } | { ok: false; problems: string[] } {
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
    ...(workspace.ok && workspace.ids ? { workspace: workspace.ids } : {}),
  };
  return { ok: true, value: { effective, boot, applied: tagged.applied, warnings: tagged.warnings } };
}
