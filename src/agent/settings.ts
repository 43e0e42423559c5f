/**
 * From the loaded configuration and the instance's identity to the settings a boot acts on:
 * the allowed instance-tag overrides, what osparc's labels tag says (workspace ids, keep,
 * enabled), and every tag-borne value validated before it can reach a path, a label or a
 * command. Pure.
 *
 * The `ebs-cache:*` instance tags are the agent's own: a bad one refuses the boot (exit 3). The
 * labels tag is the autoscaler's: whatever is wrong with it is a warning and the boot goes on
 * without it (the pool).
 */
import type { AgentConfig } from "../config/index.ts";
import {
  applyInstanceTags,
  applyLabelSwitches,
  readLabelSwitches,
  type EffectiveSettings,
} from "../config/overrides.ts";
import { InstanceTag } from "../tags.ts";
import { parseInstanceTypePools, ruleForInstanceType } from "../config/instance-type-pools.ts";
import { validatePoolName } from "../inputs.ts";
import { readLabelsTag } from "./labels-tag.ts";
import type { BootSettings } from "./boot/plan.ts";
import type { ReleaseSettings } from "./release/plan.ts";
import type { Identity } from "./ports.ts";
import { describeWorkspace, workspaceIdsFromLabels, type WorkspaceIds } from "./workspace-ids.ts";
import type { WorkspaceRecord } from "./workspace-record.ts";
import { volumeCreation } from "./volume-creation.ts";
import type { KeepAsked } from "./volume-intent.ts";

/** What osparc's labels tag asked of this instance, from the tag itself or from the first phase's record. */
export interface OsparcRequest {
  ids?: WorkspaceIds;
  keep?: boolean;
  enabled?: boolean;
  keepMalformed: boolean;
  /** Where it came from, for the log: the tag (whole or chunked), the record, or nowhere. */
  origin: string;
  /** It came from the record (then phase 1 leaves the record as it is). */
  fromRecord: boolean;
  /** The labels' word is known: the tag was read whole, or the record was. False: no tag, or an unusable one. */
  known: boolean;
  /** Problems with the tag: each is one warning line; the part it concerns is not used. */
  warnings: string[];
  /** Worth an info line (ids below workspace.minimumKeys). */
  notes: string[];
}

/**
 * Reads what the labels tag asks. The first boot phase (`fromTag`) reads the tag; later runs
 * (phase 2, the release) read the first phase's record of this instance when there is one,
 * since the autoscaler deletes the tag after the join and may write another for a later task:
 * what the mounted volume was chosen for is what phase 1 saw. Without the tag, the first phase
 * too goes by the record (a reboot after the join: the tag is gone, the volume still attached).
 * A boot passes only a record of the current activation (observeIdentity): one left before a
 * stop and start proves nothing about the current tenant.
 */
export function readOsparcRequest(
  config: AgentConfig,
  identity: Identity,
  options: { fromTag: boolean; recorded?: WorkspaceRecord | undefined },
): OsparcRequest {
  const recorded = options.recorded?.instanceId === identity.instanceId ? options.recorded : undefined;
  const fromRecord = (record: WorkspaceRecord): OsparcRequest => ({
    ...(record.ids ? { ids: record.ids } : {}),
    ...(record.keep !== undefined ? { keep: record.keep } : {}),
    ...(record.enabled !== undefined ? { enabled: record.enabled } : {}),
    keepMalformed: false,
    origin: `recorded by the first boot phase at ${record.recordedAt}${onVolume(record)}`,
    fromRecord: true,
    known: true,
    warnings: [],
    notes: [],
  });
  if (!options.fromTag && recorded) return fromRecord(recorded);
  const tag = config.workspace.labelsTag;
  const read = readLabelsTag(identity.tags, tag);
  const none = (origin: string, warnings: string[] = []): OsparcRequest => ({
    keepMalformed: false,
    origin,
    fromRecord: false,
    known: false,
    warnings,
    notes: [],
  });
  if (!read.found) return recorded ? fromRecord(recorded) : none(`no instance tag ${tag}`);
  if (!read.ok)
    return none(`instance tag ${tag} (unusable)`, [
      `${read.problem}: the tag is ignored; no workspace (the pool is used), no keep or enabled from it`,
    ]);

  const origin = `instance tag ${tag}${read.form === "chunked" ? ` in ${read.chunks} chunks` : ""}`;
  const request: OsparcRequest = {
    keepMalformed: false,
    origin,
    fromRecord: false,
    known: true,
    warnings: [],
    notes: [],
  };
  const workspace = workspaceIdsFromLabels(read.labels, config.workspace);
  if (!workspace.ok) request.warnings.push(`${origin}: ${workspace.problem}: no workspace, the pool is used`);
  else {
    if (workspace.ids) request.ids = workspace.ids;
    if (workspace.note) request.notes.push(`${origin}: ${workspace.note}`);
  }
  const switches = readLabelSwitches(read.labels, config.labels.prefix);
  request.warnings.push(...switches.warnings.map((warning) => `${origin}: ${warning}`));
  if (switches.keep !== undefined) request.keep = switches.keep;
  if (switches.enabled !== undefined) request.enabled = switches.enabled;
  request.keepMalformed = switches.keepMalformed;
  return request;
}

/** ` on vol-…` for the copy a volume carries (volume-record.ts), nothing for the state folder's. */
function onVolume(record: WorkspaceRecord): string {
  return record.volumeId ? ` on ${record.volumeId}` : "";
}

/** The record phase 1 leaves for the later runs (without its time, which the caller adds). */
export function recordOf(identity: Identity, request: OsparcRequest): Omit<WorkspaceRecord, "recordedAt"> {
  const keep = request.keepMalformed ? true : request.keep;
  return {
    instanceId: identity.instanceId,
    ...(request.ids ? { ids: request.ids } : {}),
    ...(keep !== undefined ? { keep } : {}),
    ...(request.enabled !== undefined ? { enabled: request.enabled } : {}),
  };
}

export interface ResolvedSettings {
  effective: EffectiveSettings;
  boot: BootSettings;
  /** What instance tags (and the labels tag) changed, for the log. */
  applied: string[];
  warnings: string[];
  /** Info lines: where the workspace request came from, and what it was. */
  notes: string[];
  /** What the labels tag asked; phase 1 records it (`recordOf`) for the later runs. */
  request: OsparcRequest;
}

/** Resolves the settings, or returns the problems (then nothing may be changed). */
export function resolveSettings(
  config: AgentConfig,
  identity: Identity,
  options: { withDocker: boolean; mayClaim?: boolean; recorded?: WorkspaceRecord | undefined },
): { ok: true; value: ResolvedSettings } | { ok: false; problems: string[] } {
  const tagged = applyInstanceTags(config, identity.tags);
  const problems = [...tagged.problems];
  const pool = validatePoolName(tagged.config.pool);
  if (!pool.ok) problems.push(`pool: ${pool.problem}`);
  if (problems.length > 0) return { ok: false, problems };
  const mayClaim = options.mayClaim ?? true;
  const byType = poolOfInstanceType(tagged.config, identity);
  const request = readOsparcRequest(byType.config, identity, { fromTag: mayClaim, recorded: options.recorded });
  const switched = applyLabelSwitches(byType.config, request, identity.tags, request.origin);
  const effective = switched.config;
  const workspace = request.ids;
  const notes = [
    ...byType.notes,
    ...request.notes,
    workspace ? `workspace ${describeWorkspace(workspace)} (${request.origin})` : `no workspace: ${request.origin}`,
  ];

  const boot: BootSettings = {
    enabled: effective.enabled,
    pool: effective.pool,
    ...(byType.sizeGiB !== undefined ? { poolSizeGiB: byType.sizeGiB } : {}),
    imageSet: effective.imageSet,
    createFromSnapshot: effective.createFromSnapshot,
    volumeType: effective.volumeType,
    initializationRateMiBps: effective.initializationRateMiBps,
    device: effective.device,
    mountRoot: effective.paths.mountRoot,
    withDocker: options.withDocker && effective.docker.control !== "none",
    mayClaim,
    prewarm: effective.prewarm.strategy,
    claim: { ...effective.claim },
    workspaceCreate: effective.workspace.create,
    workspaceSizeGiB: effective.workspace.sizeGiB,
    requireEncryptedWorkspace: effective.workspace.requireEncrypted,
    volumeCreation: volumeCreation(effective),
    ...(workspace ? { workspace } : {}),
    // A malformed instance tag refused the boot above; a malformed keep in the labels tag keeps.
    intent: { keep: keepAsked(effective, request, identity.tags), ttlHours: effective.ttlHours },
  };
  return {
    ok: true,
    value: {
      effective,
      boot,
      applied: [...tagged.applied, ...switched.applied],
      warnings: [...tagged.warnings, ...request.warnings],
      notes,
      request,
    },
  };
}

/**
 * The pool by the instance type (config `instanceTypePools`), unless an `ebs-cache:pool` instance
 * tag chose one (the tag names this machine; a rule names its kind), and the size of the pool's
 * volumes when a rule gives one.
 */
function poolOfInstanceType(
  config: EffectiveSettings,
  identity: Identity,
): { config: EffectiveSettings; sizeGiB?: number; notes: string[] } {
  const rules = parseInstanceTypePools(config.instanceTypePools);
  if (rules.length === 0) return { config, notes: [] };
  const rule =
    identity.tags[InstanceTag.pool] === undefined ? ruleForInstanceType(rules, identity.instanceType) : undefined;
  const chosen = rule ? { ...config, pool: rule.pool } : config;
  const sizeGiB = rules.find((r) => r.pool === chosen.pool)?.sizeGiB;
  const type = identity.instanceType ?? "unknown (IMDS gave none)";
  const notes = [
    rule
      ? `pool ${rule.pool} (${rule.sizeGiB} GiB volumes): instance type ${type} matches ${rule.pattern} ` +
        "(instanceTypePools)"
      : `pool ${chosen.pool}${sizeGiB !== undefined ? ` (${sizeGiB} GiB volumes)` : ""}: ` +
        (identity.tags[InstanceTag.pool] !== undefined
          ? `instance tag ${InstanceTag.pool} wins over instanceTypePools`
          : `instance type ${type} matches no rule of instanceTypePools`),
  ];
  return { config: chosen, ...(sizeGiB !== undefined ? { sizeGiB } : {}), notes };
}

/**
 * Whether the instance asks keep, for the claim and the release alike: the effective setting
 * (instance tag, else the labels tag), or a malformed keep in the labels tag where no instance
 * tag says (the volume is kept rather than expired on a guess).
 */
function keepAsked(
  effective: Pick<EffectiveSettings, "keep">,
  request: Pick<OsparcRequest, "keepMalformed">,
  tags: Readonly<Record<string, string>>,
): boolean {
  return effective.keep || (tags[InstanceTag.keep] === undefined && request.keepMalformed);
}

/**
 * Who asks keep at the release (volume-intent.ts keepFor decides per volume): the instance tag
 * when there is one (malformed: keep), else the labels when their word is known (the record, or
 * the tag read whole; a malformed keep there counts as keep), else nobody.
 */
function releaseKeep(
  effective: Pick<EffectiveSettings, "keep">,
  request: OsparcRequest,
  tags: Readonly<Record<string, string>>,
  keepTagMalformed: boolean,
): KeepAsked {
  if (keepTagMalformed) return { by: "instance", keep: true };
  if (tags[InstanceTag.keep] !== undefined) return { by: "instance", keep: effective.keep };
  if (!request.known) return { by: "nobody" };
  return {
    by: "labels",
    keep: request.keep === true || request.keepMalformed,
    ...(request.ids ? { ids: request.ids } : {}),
    origin: request.origin,
  };
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
 * a malformed `ebs-cache:keep` counts as keep (the volume is not expired on a guess). `keep` from
 * the labels tag comes from the first boot phase's record (`recorded`; the autoscaler has deleted
 * the tag by now), from the tag without one; the instance tag wins over both.
 */
export function resolveReleaseSettings(
  config: AgentConfig,
  identity: Identity,
  options: { defaultDataRoot: string | undefined; recorded?: WorkspaceRecord | undefined },
): ResolvedReleaseSettings {
  const tagged = applyInstanceTags(config, identity.tags);
  const request = readOsparcRequest(tagged.config, identity, { fromTag: false, recorded: options.recorded });
  const switched = applyLabelSwitches(tagged.config, request, identity.tags, request.origin);
  const effective = switched.config;
  const warnings = [
    ...tagged.warnings,
    ...tagged.problems.map((problem) => `${problem} (not applied)`),
    ...request.warnings,
  ];
  const keepText = identity.tags[InstanceTag.keep];
  const keepTagMalformed = keepText !== undefined && !/^\s*(true|false)\s*$/i.test(keepText);
  if (keepTagMalformed)
    warnings.push(
      `instance tag ${InstanceTag.keep} is not true or false: the released workspace volume is kept (never ` +
        `expired) rather than risk its data`,
    );
  const release: ReleaseSettings = {
    enabled: effective.enabled,
    keep: releaseKeep(effective, request, identity.tags, keepTagMalformed),
    ttlHours: effective.ttlHours,
    mountRoot: effective.paths.mountRoot,
    defaultDataRoot: options.defaultDataRoot,
    stopDocker: effective.release.stopDocker,
    controlsDocker: effective.docker.control !== "none",
    labels: { prefix: effective.labels.prefix, mode: effective.labels.mode },
  };
  return { effective, release, applied: [...tagged.applied, ...switched.applied], warnings };
}
