/**
 * Pure validation: raw JSON (or raw environment values) in, a complete `AgentConfig` plus every
 * problem and warning out. Nothing stops at the first problem: the operator fixes a file once.
 * An invalid value is replaced by its default in the returned config, but a caller must not act
 * on a config that came with problems.
 */
import { quote, validateImageRef, validateLabelValue, validatePoolName } from "../inputs.ts";
import { isWorkspaceKey } from "../agent/workspace-ids.ts";
import { labelPrefixProblems } from "../docker/labels.ts";
import {
  CONFIG_KEYS,
  CONFIG_SCHEMA,
  FORMAT_DESCRIPTIONS,
  defaultOf,
  expectationOf,
  type AgentConfig,
  type Field,
  type Group,
  type StringFormat,
} from "./schema.ts";

export interface ValidationResult {
  /** Complete: defaults where a key is absent or invalid. */
  config: AgentConfig;
  /** Each names the JSON path: `timeouts.deviceSeconds: must be a number between 1 and 3600, got "x"`. */
  problems: string[];
  warnings: string[];
}

/** A value as shown in a problem: strings quoted (escaped, cut when long), objects by kind. */
export function describeValue(value: unknown): string {
  if (typeof value === "string") return quote(value);
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object" && value !== null) return "an object";
  return String(value);
}

const pattern = (format: StringFormat, regex: RegExp) => (value: string) =>
  regex.test(value) ? undefined : `must be ${FORMAT_DESCRIPTIONS[format]}, got ${quote(value)}`;

const problemOf = (check: { ok: true } | { ok: false; problem: string }) => (check.ok ? undefined : check.problem);

function checkAbsolutePath(value: string, format: StringFormat = "absolutePath"): string | undefined {
  if (!value.startsWith("/")) return `must be ${FORMAT_DESCRIPTIONS[format]}, got ${quote(value)}`;
  if (value.split("/").includes("..")) return `${quote(value)} has a ".." segment; write the path without it`;
  if (/\p{Cc}/u.test(value)) return `${quote(value)} contains a control character`;
  return undefined;
}

/** The checks behind each `StringFormat`: the problems (without the key's path), or undefined. */
const FORMAT_CHECKS: Record<StringFormat, (value: string) => string | readonly string[] | undefined> = {
  poolName: (value) => problemOf(validatePoolName(value)),
  imageSet: (value) => problemOf(validateLabelValue(value, "image set")),
  region: pattern("region", /^[a-z]{2,4}(-[a-z]+)+-\d{1,2}$/),
  url: (value) => {
    let url: URL | undefined;
    try {
      url = new URL(value);
    } catch {
      url = undefined;
    }
    const ok = url !== undefined && (url.protocol === "http:" || url.protocol === "https:") && url.hostname !== "" && !/\s/.test(value);
    return ok ? undefined : `must be ${FORMAT_DESCRIPTIONS.url}, got ${quote(value)}`;
  },
  device: pattern("device", /^\/dev\/(sd[f-p]|xvd[f-p])$/),
  absolutePath: (value) => checkAbsolutePath(value),
  dockerHost: (value) =>
    value.startsWith("unix://")
      ? checkAbsolutePath(value.slice("unix://".length), "dockerHost")
      : `must be ${FORMAT_DESCRIPTIONS.dockerHost}, got ${quote(value)}`,
  systemdUnit: pattern("systemdUnit", /^(?=.{1,255}$)[A-Za-z0-9_.@:][A-Za-z0-9_.@:-]*\.service$/),
  imageRef: (value) => problemOf(validateImageRef(value)),
  labelPrefix: (value) => {
    const shape = pattern("labelPrefix", /^[a-z0-9]+([.-][a-z0-9]+)*$/)(value);
    if (shape) return shape;
    const owned = labelPrefixProblems(value);
    return owned.length > 0 ? owned : undefined;
  },
  labelKey: (value) =>
    value.length <= 256 && /^[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?$/.test(value) ? undefined : `must be ${FORMAT_DESCRIPTIONS.labelKey}, got ${quote(value)}`,
  tagKey: (value) =>
    value.length >= 1 && value.length <= 128 && !/\p{Cc}/u.test(value) && !value.toLowerCase().startsWith("aws:")
      ? undefined
      : `must be ${FORMAT_DESCRIPTIONS.tagKey}, got ${quote(value)}`,
  workspaceKey: (value) => (isWorkspaceKey(value) ? undefined : `must be ${FORMAT_DESCRIPTIONS.workspaceKey}, got ${quote(value)}`),
};

/** Every problem of `value` against `format` (none without a format). */
function formatProblems(format: StringFormat | undefined, value: string): readonly string[] {
  const found = format ? FORMAT_CHECKS[format](value) : undefined;
  return found === undefined ? [] : typeof found === "string" ? [found] : found;
}

export type FieldCheck = { ok: true; value: unknown } | { ok: false; problems: string[] };

/**
 * Checks one value against its field. `label` starts each problem (a JSON path, or an
 * environment variable); `itemLabel` names a list item.
 */
export function checkField(
  field: Field,
  value: unknown,
  label: string,
  itemLabel: (index: number) => string = (index) => `${label}[${index}]`,
): FieldCheck {
  const mismatch = (): FieldCheck => ({ ok: false, problems: [`${label}: must be ${expectationOf(field)}, got ${describeValue(value)}`] });
  if (value === null) return "nullable" in field && field.nullable ? { ok: true, value: null } : mismatch();
  switch (field.kind) {
    case "boolean":
      return typeof value === "boolean" ? { ok: true, value } : mismatch();
    case "number": {
      const ok =
        typeof value === "number" &&
        Number.isFinite(value) &&
        (!field.integer || Number.isInteger(value)) &&
        value >= field.min &&
        value <= field.max;
      return ok ? { ok: true, value } : mismatch();
    }
    case "enum":
      return typeof value === "string" && field.values.includes(value) ? { ok: true, value } : mismatch();
    case "string": {
      if (typeof value !== "string") return mismatch();
      const problems = formatProblems(field.format, value);
      return problems.length > 0 ? { ok: false, problems: problems.map((problem) => `${label}: ${problem}`) } : { ok: true, value };
    }
    case "stringList": {
      if (!Array.isArray(value)) return mismatch();
      const problems = value.flatMap((item: unknown, index) => {
        if (typeof item !== "string") return [`${itemLabel(index)}: must be a string, got ${describeValue(item)}`];
        return formatProblems(field.itemFormat, item).map((problem) => `${itemLabel(index)}: ${problem}`);
      });
      return problems.length > 0 ? { ok: false, problems } : { ok: true, value: [...(value as string[])] };
    }
  }
}

/** Edit distance, for "did you mean". */
function distance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}

const normalize = (name: string) => name.toLowerCase().replace(/[-_.\s]/g, "");

/** The candidate `name` was most likely meant to be, or undefined when none is close. */
export function suggest(name: string, candidates: readonly string[], nameOf: (candidate: string) => string = (c) => c): string | undefined {
  let best: { candidate: string; score: number } | undefined;
  for (const candidate of candidates) {
    const target = nameOf(candidate);
    const score = normalize(target) === normalize(name) ? 0 : distance(name.toLowerCase(), target.toLowerCase());
    if (score <= Math.max(1, Math.floor(target.length / 3)) && (best === undefined || score < best.score)) best = { candidate, score };
  }
  return best?.candidate;
}

/** Every path a key can have, for keys written at the wrong level (`deviceSeconds` at the top). */
const ALL_PATHS = [...CONFIG_KEYS.map((key) => key.path), ...Object.keys(CONFIG_SCHEMA.fields)];

function unknownKeyProblem(key: string, segments: readonly string[], group: Group): string {
  const path = [...segments, key].join(".");
  const sibling = suggest(key, Object.keys(group.fields));
  const elsewhere = sibling === undefined ? suggest(key, ALL_PATHS, (p) => p.split(".").pop()!) : undefined;
  const meant = sibling !== undefined ? [...segments, sibling].join(".") : elsewhere;
  if (meant !== undefined) return `${path}: unknown key (did you mean "${meant}"?)`;
  const known = Object.keys(group.fields).join(", ");
  return `${path}: unknown key (${segments.length > 0 ? `keys of ${segments.join(".")}` : "top-level keys"}: ${known})`;
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

function readGroup(group: Group, raw: unknown, segments: readonly string[], problems: string[]): Record<string, unknown> {
  if (!isPlainObject(raw)) {
    const where = segments.length > 0 ? segments.join(".") : "the configuration";
    problems.push(`${where}: must be a JSON object, got ${describeValue(raw)}`);
    return defaultOf(group) as Record<string, unknown>;
  }
  for (const key of Object.keys(raw)) {
    if (!Object.hasOwn(group.fields, key)) problems.push(unknownKeyProblem(key, segments, group));
  }
  const out: Record<string, unknown> = {};
  for (const [name, node] of Object.entries(group.fields)) {
    const path = [...segments, name];
    if (!Object.hasOwn(raw, name)) {
      out[name] = defaultOf(node);
      continue;
    }
    if (node.kind === "group") {
      out[name] = readGroup(node, raw[name], path, problems);
      continue;
    }
    const check = checkField(node, raw[name], path.join("."));
    if (check.ok) out[name] = check.value;
    else {
      problems.push(...check.problems);
      out[name] = defaultOf(node);
    }
  }
  return out;
}

/** Settings that are valid one by one but do not make sense together. */
export function crossCheck(config: AgentConfig): string[] {
  const warnings: string[] = [];
  if (config.initializationRateMiBps !== null && !config.createFromSnapshot && config.workspace.create !== "snapshot") {
    warnings.push(
      "initializationRateMiBps is set but no volume is ever created from a snapshot (createFromSnapshot is false and workspace.create is not \"snapshot\"): it has no effect",
    );
  }
  return warnings;
}

/**
 * Problems that only show with two keys together: a workspace minimum key outside the id keys,
 * and a label prefix that collides with one of `labels.protectedKeys` (its collisions with
 * osparc's own labels are the prefix's own problems).
 */
export function crossProblems(config: AgentConfig): string[] {
  const problems: string[] = [];
  const outside = config.workspace.minimumKeys.filter((key) => !config.workspace.idKeys.includes(key));
  if (outside.length > 0) {
    problems.push(`workspace.minimumKeys: ${outside.map((key) => JSON.stringify(key)).join(", ")} not in workspace.idKeys, so no workspace could ever be used; add it to idKeys or remove it`);
  }
  const alone = new Set(labelPrefixProblems(config.labels.prefix));
  problems.push(
    ...labelPrefixProblems(config.labels.prefix, config.labels.protectedKeys)
      .filter((problem) => !alone.has(problem))
      .map((problem) => `labels.prefix: ${problem}`),
  );
  return problems;
}

/**
 * Validates raw configuration (parsed JSON; undefined = no file = all defaults). Pure; collects
 * every problem (unknown keys with a suggestion, wrong types, out-of-range numbers, bad enums).
 */
export function validateConfig(raw: unknown): ValidationResult {
  const problems: string[] = [];
  const config = (raw === undefined ? defaultOf(CONFIG_SCHEMA) : readGroup(CONFIG_SCHEMA, raw, [], problems)) as AgentConfig;
  return { config, problems: [...problems, ...crossProblems(config)], warnings: crossCheck(config) };
}
