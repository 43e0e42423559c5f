/**
 * Readiness labels, as pure helpers: which keys the agent publishes, how they are validated, and
 * whether they go out as swarm node labels (through a manager's API) or as engine labels
 * (daemon.json `labels` + SIGHUP; managers then see them as `engine.labels.<key>`).
 */
import { AgentError, ExitCode } from "../errors.ts";
import { labelPrefixProblems } from "../label-prefix.ts";
import {
  Label,
  labelKey,
  RequestLabel,
  VolumeKind,
  WORKSPACE_KEYS,
  workspaceLabel,
  type ReadinessState,
  type WorkspaceKey,
} from "../tags.ts";

/** How the operator asked labels to be published. */
export type LabelModeSetting = "auto" | "node" | "engine" | "off";
/** How they are published on this node. */
export type LabelMode = "node" | "engine" | "off";

/** A label key, prefix or value the agent refuses to publish; nothing was changed. */
export class LabelError extends AgentError {
  constructor(message: string, remediation = "fix the label prefix or the value it came from (config or tags)") {
    super(message, remediation, ExitCode.config);
  }
}

/** What may follow `<prefix>.` in a key the agent owns. */
const SUFFIX = /^[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?$/;
/**
 * Control and format characters (newlines, DEL, C1 controls, zero-width and bidi overrides) would
 * break daemon.json lines, logs and constraints, or make a value read differently than it is.
 */
const UNPRINTABLE = /[\p{Cc}\p{Cf}]/u;
const MAX_KEY = 256;
/**
 * The longest label value the agent publishes. Docker sets no limit; this bound keeps daemon.json
 * and node specs readable. Values that come from tags (pool, kind, workspace ids) are already
 * shorter: EC2 caps a tag value at MAX_TAG_VALUE (src/tags.ts), and src/inputs.ts checks them
 * against that when they are read.
 */
export const MAX_LABEL_VALUE = 1024;

/** Throws a LabelError unless `prefix` is a lower-case dotted name that owns no other system's label. */
export function validateLabelPrefix(prefix: string): void {
  const problems = labelPrefixProblems(prefix);
  if (problems.length > 0)
    throw new LabelError(problems.join("; "), "set labels.prefix to a name of its own, e.g. io.simcore.ebs-cache");
}

/** Throws a LabelError for a key docker would mangle or reject: empty, `=`, whitespace, control characters. */
export function validateLabelKey(key: string): void {
  if (key === "" || key.length > MAX_KEY || key.includes("=") || /\s/.test(key) || UNPRINTABLE.test(key)) {
    throw new LabelError(
      `label key ${JSON.stringify(key)} is empty, too long, or holds "=", whitespace or control characters`,
    );
  }
}

/**
 * The one check of a label value the agent publishes (readiness labels, node-label updates): one
 * printable line (no control or format characters) of at most MAX_LABEL_VALUE characters.
 * Throws a LabelError otherwise.
 */
export function validateLabelValue(key: string, value: string): void {
  if (typeof value !== "string" || value.length > MAX_LABEL_VALUE || UNPRINTABLE.test(value)) {
    throw new LabelError(
      `label ${key} has a value that is not a single printable line of at most ${MAX_LABEL_VALUE} characters`,
    );
  }
}

/** Validates every entry and that every key sits under `<prefix>.` (the agent owns nothing else). */
export function validateOwnedLabels(prefix: string, labels: Record<string, string>): void {
  validateLabelPrefix(prefix);
  for (const [key, value] of Object.entries(labels)) {
    validateLabelKey(key);
    if (!isUnderPrefix(prefix, key)) throw new LabelError(`label ${key} is not under the agent's prefix ${prefix}.`);
    validateLabelValue(key, value);
  }
}

/**
 * Throws a LabelError when a node-label update would write or remove a key outside `<prefix>.`:
 * the last check before the manager's API, so no planning mistake can touch a label the agent
 * does not own (osparc's readiness and placement labels live on the same node).
 */
export function assertOwnedUpdate(prefix: string, add: Record<string, string>, remove: readonly string[]): void {
  validateOwnedLabels(prefix, add);
  for (const key of remove) {
    validateLabelKey(key);
    if (!isUnderPrefix(prefix, key))
      throw new LabelError(`refusing to remove label ${key}: it is not under the agent's prefix ${prefix}.`);
  }
}

/**
 * The `workspace.<key>` readiness extras for the ids a workspace volume records, so a scheduler
 * can tell whose data a node holds; a pool volume (or one without ids) gives none. `idOf` reads
 * one recorded id (the volume's `ebs-cache:<key>` tag).
 */
export function workspaceLabelExtras(
  kind: string | undefined,
  idOf: (key: WorkspaceKey) => string | undefined,
): Record<string, string> {
  if (kind !== VolumeKind.workspace) return {};
  const extras: Record<string, string> = {};
  for (const key of WORKSPACE_KEYS) {
    const value = idOf(key);
    if (value !== undefined && value !== "") extras[workspaceLabel(key)] = value;
  }
  return extras;
}

/**
 * One engine label entry as daemon.json's `labels` and `docker info`'s `Labels` hold it
 * (`key=value`, split at the first `=`): the value is undefined when there is no `=`, which
 * dockerd refuses.
 */
export function parseEngineLabel(entry: string): { key: string; value: string | undefined } {
  const eq = entry.indexOf("=");
  return eq < 0 ? { key: entry, value: undefined } : { key: entry.slice(0, eq), value: entry.slice(eq + 1) };
}

/** Engine label entries as a record (a later entry wins, as docker's dedup keeps one); malformed ones left out. */
export function engineLabelRecord(entries: readonly string[]): Record<string, string> {
  const record: Record<string, string> = {};
  for (const entry of entries) {
    const { key, value } = parseEngineLabel(entry);
    if (key !== "" && value !== undefined) record[key] = value;
  }
  return record;
}

/** True when `key` is `<prefix>.<something>`. */
export function isUnderPrefix(prefix: string, key: string): boolean {
  return (
    key.startsWith(`${prefix}.`) &&
    key.length > prefix.length + 1 &&
    !REQUEST_LABELS.includes(key.slice(prefix.length + 1))
  );
}

/**
 * Names under the prefix that are requests to the agent (`<prefix>.keep`, `<prefix>.enabled`,
 * carried by osparc's labels tag), not labels of the agent's: should the autoscaler copy them
 * onto the node, the agent neither replaces nor withdraws them.
 */
export const REQUEST_LABELS: readonly string[] = Object.values(RequestLabel);

/**
 * The labels that tell the scheduler about this node: `<prefix>.state` plus one `<prefix>.<name>`
 * per extra (`volume-id`, `pool`, `kind`, `prewarm`, …); extras set to undefined are left out.
 */
export function readinessLabels(
  prefix: string,
  state: ReadinessState,
  extras: Record<string, string | undefined> = {},
): Record<string, string> {
  validateLabelPrefix(prefix);
  const labels: Record<string, string> = { [labelKey(prefix, Label.state)]: state };
  for (const [name, value] of Object.entries(extras)) {
    if (value === undefined) continue;
    if (!SUFFIX.test(name) || name === Label.state) {
      throw new LabelError(
        `readiness label name ${JSON.stringify(name)} is not a lower-case word (or is the reserved "${Label.state}")`,
      );
    }
    const key = labelKey(prefix, name);
    validateLabelValue(key, value);
    labels[key] = value;
  }
  return labels;
}

/**
 * Where labels go on this node: `node` when asked, or in `auto` when this engine is a reachable
 * swarm manager (it can update its own node); otherwise `engine` (a worker, or not in a swarm yet);
 * `off` publishes nothing.
 */
export function chooseLabelMode(
  mode: LabelModeSetting,
  info: { swarm: { controlAvailable: boolean; state: string } },
): LabelMode {
  switch (mode) {
    case "off":
    case "node":
    case "engine":
      return mode;
    case "auto":
      return info.swarm.state === "active" && info.swarm.controlAvailable ? "node" : "engine";
  }
}

/**
 * The node-label update that makes the labels under `prefix` equal `desired`: what to add or
 * change, and which of the agent's keys to drop. Labels outside the prefix are never touched.
 */
export function nodeLabelChanges(
  prefix: string,
  current: Record<string, string>,
  desired: Record<string, string>,
): { add: Record<string, string>; remove: string[] } {
  validateOwnedLabels(prefix, desired);
  const add: Record<string, string> = {};
  for (const [key, value] of Object.entries(desired))
    if (!Object.hasOwn(current, key) || current[key] !== value) add[key] = value;
  const remove = Object.keys(current).filter((key) => isUnderPrefix(prefix, key) && !Object.hasOwn(desired, key));
  return { add, remove };
}
