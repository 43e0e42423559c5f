/**
 * Readiness labels, as pure helpers: which keys the agent publishes, how they are validated, and
 * whether they go out as swarm node labels (through a manager's API) or as engine labels
 * (daemon.json `labels` + SIGHUP; managers then see them as `engine.labels.<key>`).
 */
import { AgentError, ExitCode } from "../errors.ts";

/** What the `<prefix>.state` label says about this node. */
export type ReadinessState = "ready" | "degraded" | "disabled" | "warming";

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

/** Lower-case dotted words (`io.simcore.ebs-cache`): docker's recommended key shape. */
const PREFIX = /^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$/;
/** What may follow `<prefix>.` in a key the agent owns. */
const SUFFIX = /^[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?$/;
/** Control characters (newlines included) would break daemon.json lines, logs and constraints. */
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;
const MAX_KEY = 256;
const MAX_VALUE = 1024;

/**
 * Labels other systems own on the same nodes: osparc's autoscaler sets
 * `io.simcore.osparc-services-ready` on the nodes it starts. The agent removes keys under its
 * prefix that it no longer publishes, so a prefix above one of these would fight their owner.
 */
export const FOREIGN_LABELS: readonly string[] = ["io.simcore.osparc-services-ready"];

/** Why a prefix cannot be the agent's, or undefined when it can. */
export function labelPrefixProblem(prefix: string): string | undefined {
  if (!PREFIX.test(prefix) || prefix.length > 128) return `label prefix ${JSON.stringify(prefix)} is not lower-case dotted words (e.g. io.simcore.ebs-cache)`;
  const foreign = FOREIGN_LABELS.find((key) => isUnderPrefix(prefix, key));
  if (foreign) return `label prefix ${JSON.stringify(prefix)} would make the agent own ${foreign}, which another system sets (use e.g. io.simcore.ebs-cache)`;
  return undefined;
}

/** Throws a LabelError unless `prefix` is a lower-case dotted name that owns no other system's label. */
export function validateLabelPrefix(prefix: string): void {
  const problem = labelPrefixProblem(prefix);
  if (problem) throw new LabelError(problem);
}

/** Throws a LabelError for a key docker would mangle or reject: empty, `=`, whitespace, control characters. */
export function validateLabelKey(key: string): void {
  if (key === "" || key.length > MAX_KEY || key.includes("=") || /\s/.test(key) || CONTROL.test(key)) {
    throw new LabelError(`label key ${JSON.stringify(key)} is empty, too long, or holds "=", whitespace or control characters`);
  }
}

/** Throws a LabelError for a value holding a newline or another control character, or too long. */
export function validateLabelValue(key: string, value: string): void {
  if (typeof value !== "string" || value.length > MAX_VALUE || CONTROL.test(value)) {
    throw new LabelError(`label ${key} has a value that is not a single line of at most ${MAX_VALUE} characters`);
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

/** True when `key` is `<prefix>.<something>`. */
export function isUnderPrefix(prefix: string, key: string): boolean {
  return key.startsWith(`${prefix}.`) && key.length > prefix.length + 1;
}

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
  const labels: Record<string, string> = { [`${prefix}.state`]: state };
  for (const [name, value] of Object.entries(extras)) {
    if (value === undefined) continue;
    if (!SUFFIX.test(name) || name === "state") {
      throw new LabelError(`readiness label name ${JSON.stringify(name)} is not a lower-case word (or is the reserved "state")`);
    }
    const key = `${prefix}.${name}`;
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
  for (const [key, value] of Object.entries(desired)) if (!Object.hasOwn(current, key) || current[key] !== value) add[key] = value;
  const remove = Object.keys(current).filter((key) => isUnderPrefix(prefix, key) && !Object.hasOwn(desired, key));
  return { add, remove };
}
