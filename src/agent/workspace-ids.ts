/**
 * A workspace's identity: the ids osparc's node labels carry for the task (whichever of
 * `user-id`, `project-id`, `node-id`, `wallet-id`, `product-name` its operator configured), and
 * how a volume records them. A volume serves an instance when its recorded ids equal the
 * instance's for exactly the same keys: a user-level workspace (only `user-id`) never serves a
 * project's node, and a project-level one never serves a user-level request. Pure.
 */
import { VolumeTag, WORKSPACE_ID_TAG, WORKSPACE_KEYS, type WorkspaceKey } from "../tags.ts";
import { quote, validateWorkspaceId } from "../inputs.ts";

/** The ids of a workspace, by label key; the keys present are the workspace's level. */
export type WorkspaceIds = Readonly<Partial<Record<WorkspaceKey, string>>>;

/** config `workspace.idKeys` / `workspace.minimumKeys`. */
export interface WorkspaceKeySettings {
  idKeys: readonly string[];
  minimumKeys: readonly string[];
}

export function isWorkspaceKey(key: string): key is WorkspaceKey {
  return (WORKSPACE_KEYS as readonly string[]).includes(key);
}

/** The keys present, in WORKSPACE_KEYS order. */
export function workspaceKeysOf(ids: WorkspaceIds): WorkspaceKey[] {
  return WORKSPACE_KEYS.filter((key) => ids[key] !== undefined);
}

/** `user-id=42 project-id=p-1`, for the log. */
export function describeWorkspace(ids: WorkspaceIds): string {
  return workspaceKeysOf(ids)
    .map((key) => `${key}=${ids[key]!}`)
    .join(" ");
}

/**
 * The tags that record a workspace on its volume: one per id plus `ebs-cache:workspace-keys`
 * naming exactly the keys it was made for. Also the server-side filter that finds it: a
 * volume of the same ids at another level differs in the keys tag.
 */
export function workspaceIdTags(ids: WorkspaceIds): Record<string, string> {
  const keys = workspaceKeysOf(ids);
  const tags: Record<string, string> = Object.fromEntries(keys.map((key) => [WORKSPACE_ID_TAG[key], ids[key]!]));
  tags[VolumeTag.workspaceKeys] = keys.join(",");
  return tags;
}

/** Whether a volume's tags record exactly these ids (same keys, same values). */
export function volumeMatchesWorkspace(volumeTags: Readonly<Record<string, string>>, ids: WorkspaceIds): boolean {
  const wanted = workspaceIdTags(ids);
  if (Object.entries(wanted).some(([tag, value]) => volumeTags[tag] !== value)) return false;
  // A stray id tag the keys tag does not name would make the volume's level ambiguous.
  return WORKSPACE_KEYS.every((key) => ids[key] !== undefined || volumeTags[WORKSPACE_ID_TAG[key]] === undefined);
}

/** The ids a workspace volume records, read back from its tags (undefined: no usable record). */
export function workspaceIdsOfVolume(volumeTags: Readonly<Record<string, string>>): WorkspaceIds | undefined {
  const keys = (volumeTags[VolumeTag.workspaceKeys] ?? "").split(",").filter((key) => key !== "");
  if (keys.length === 0 || !keys.every(isWorkspaceKey)) return undefined;
  const ids: Partial<Record<WorkspaceKey, string>> = {};
  for (const key of keys) {
    const check = validateWorkspaceId(volumeTags[WORKSPACE_ID_TAG[key]], key);
    if (!check.ok) return undefined;
    ids[key] = check.value;
  }
  return ids;
}

export type WorkspaceIdsResult =
  /** `ids` absent: no workspace (the pool); `note` says why when the labels named some ids. */
  { ok: true; ids?: WorkspaceIds; note?: string } | { ok: false; problem: string };

/**
 * The workspace ids in osparc's node labels, for the configured keys: a label `<key>` or one
 * ending in `.<key>` (`io.simcore.runtime.user-id`); each a string, compared as exact text (a
 * number from the tag arrives as its source text, see readLabelsTag). No id
 * at all: no workspace. Ids present but not every key of `minimumKeys`: no workspace, with a
 * note. A value that is not a usable id, or one key with two values: a problem (the caller
 * warns and uses the pool).
 */
export function workspaceIdsFromLabels(
  labels: Readonly<Record<string, unknown>>,
  settings: WorkspaceKeySettings,
): WorkspaceIdsResult {
  const problems: string[] = [];
  const ids: Partial<Record<WorkspaceKey, string>> = {};
  for (const key of WORKSPACE_KEYS) {
    if (!settings.idKeys.includes(key)) continue;
    const entries = Object.entries(labels).filter(([name]) => name === key || name.endsWith(`.${key}`));
    if (entries.length === 0) continue;
    // Compared as the text osparc wrote: readLabelsTag gives numbers as their source text, and
    // a JS number (its text lost to a double) is refused as no string.
    if (new Set(entries.map(([, value]) => (typeof value === "string" ? value : JSON.stringify(value)))).size > 1) {
      problems.push(`conflicting ${key} values under ${entries.map(([name]) => quote(name)).join(", ")}`);
      continue;
    }
    const [name, raw] = entries[0]!;
    const check = validateWorkspaceId(raw, key);
    if (check.ok) ids[key] = check.value;
    else problems.push(name === key ? check.problem : `label ${quote(name)}: ${check.problem}`);
  }
  if (problems.length > 0) return { ok: false, problem: problems.join("; ") };
  const present = workspaceKeysOf(ids);
  if (present.length === 0) return { ok: true };
  const missing = settings.minimumKeys.filter((key) => !isWorkspaceKey(key) || ids[key] === undefined);
  if (missing.length > 0) {
    return {
      ok: true,
      note:
        `the labels name ${present.join(", ")} but not ${missing.join(", ")} (workspace.minimumKeys): no ` +
        `workspace, the pool is used`,
    };
  }
  return { ok: true, ids };
}
