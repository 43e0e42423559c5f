/**
 * Pure validation: raw JSON (or raw environment values) in, a complete `AgentConfig` plus every
 * problem and warning out. Nothing stops at the first problem: the operator fixes a file once.
 * An invalid value is replaced by its default in the returned config, but a caller must not act
 * on a config that came with problems.
 *
 * The JSON Schema checks shape, types, ranges, enums and unknown keys (ajv, compiled ahead of
 * time into schema-validator.generated.ts); this module turns its findings into sentences that
 * name the key, what it accepts and the bad value, and adds what a schema cannot say: the
 * named formats' own checks, a "did you mean" for unknown keys, and the checks across keys.
 */
import type { ErrorObject } from "ajv";
import { labelPrefixProblems } from "../label-prefix.ts";
import { instanceTypePoolProblems, parseInstanceTypePool, parseInstanceTypePools } from "./instance-type-pools.ts";
import { quote, validateImageRef, validatePoolName, validateTagValue } from "../inputs.ts";
import { MAX_OPERATOR_TAGS, MAX_TAG_KEY, MAX_TAG_VALUE, TAG_PREFIX } from "../tags.ts";
import {
  CONFIG_KEYS,
  CONFIG_SCHEMA,
  FORMATS,
  SCHEMA_KEY,
  defaultConfig,
  expectationOf,
  isGroup,
  itemExpectationOf,
  type AgentConfig,
  type FieldSchema,
  type GroupSchema,
  type StringFormat,
} from "./schema.ts";
import generatedValidator from "./schema-validator.generated.ts";

const validateSchema = generatedValidator as unknown as { (data: unknown): boolean; errors?: ErrorObject[] | null };

export interface ValidationResult {
  /** Complete: defaults where a key is absent or invalid. */
  config: AgentConfig;
  /** Each names the JSON path: `timeouts.deviceSeconds: must be a number between 1 and 3600, got "x"`. */
  problems: string[];
  warnings: string[];
}

/** A value as shown in a problem: strings quoted (escaped, cut when long), objects by kind. */
function describeValue(value: unknown): string {
  if (typeof value === "string") return quote(value);
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object" && value !== null) return "an object";
  return String(value);
}

const problemOf = (check: { ok: true } | { ok: false; problem: string }) => (check.ok ? undefined : check.problem);

function checkAbsolutePath(value: string, format: StringFormat = "absolutePath"): string | undefined {
  if (!value.startsWith("/")) return `must be ${FORMATS[format].description}, got ${quote(value)}`;
  if (value.split("/").includes("..")) return `${quote(value)} has a ".." segment; write the path without it`;
  if (/\p{Cc}/u.test(value)) return `${quote(value)} contains a control character`;
  return undefined;
}

/**
 * The formats whose check is more than the schema's pattern: this code decides and words the
 * problem (the pattern's own finding is dropped). The other formats are their pattern (or enum).
 */
const FORMAT_CHECKS: Partial<Record<StringFormat, (value: string) => string | readonly string[] | undefined>> = {
  poolName: (value) => problemOf(validatePoolName(value)),
  imageSet: (value) => problemOf(validateTagValue(value, "image set")),
  url: (value) => {
    let url: URL | undefined;
    try {
      url = new URL(value);
    } catch {
      url = undefined;
    }
    const ok =
      url !== undefined &&
      (url.protocol === "http:" || url.protocol === "https:") &&
      url.hostname !== "" &&
      !/\s/.test(value);
    return ok ? undefined : `must be ${FORMATS.url.description}, got ${quote(value)}`;
  },
  absolutePath: (value) => checkAbsolutePath(value),
  dockerHost: (value) =>
    value.startsWith("unix://")
      ? checkAbsolutePath(value.slice("unix://".length), "dockerHost")
      : `must be ${FORMATS.dockerHost.description}, got ${quote(value)}`,
  imageRef: (value) => problemOf(validateImageRef(value)),
  operatorTag: (value) => operatorTagProblem(value),
  instanceTypePool: (value) => {
    const parsed = parseInstanceTypePool(value);
    return parsed.ok ? undefined : parsed.problem;
  },
  labelPrefix: (value) => {
    if (!/^[a-z0-9]+([.-][a-z0-9]+)*$/.test(value))
      return `must be ${FORMATS.labelPrefix.description}, got ${quote(value)}`;
    const owned = labelPrefixProblems(value);
    return owned.length > 0 ? owned : undefined;
  },
};

/** An operator tag `KEY=VALUE` split at its first `=`, or undefined without one. */
export function splitOperatorTag(value: string): { key: string; value: string } | undefined {
  const at = value.indexOf("=");
  return at < 0 ? undefined : { key: value.slice(0, at), value: value.slice(at + 1) };
}

/** What EC2 would refuse in an operator tag, or what would collide with the agent's own tags. */
function operatorTagProblem(text: string): string | undefined {
  const tag = splitOperatorTag(text);
  if (!tag) return `must be KEY=VALUE, got ${quote(text)}`;
  if (tag.key.length === 0 || tag.key.length > MAX_TAG_KEY)
    return `the key of ${quote(text)} must be 1 to ${MAX_TAG_KEY} characters (EC2's limit)`;
  if (/^aws:/i.test(tag.key))
    return `the key of ${quote(text)} starts with aws:, which EC2 reserves for AWS's own tags`;
  if (tag.key.startsWith(TAG_PREFIX))
    return `the key of ${quote(text)} is in the agent's own ${TAG_PREFIX} namespace: choose another key`;
  if (tag.value.length > MAX_TAG_VALUE)
    return `the value of ${quote(text)} is longer than ${MAX_TAG_VALUE} characters (EC2's limit)`;
  if (/\p{Cc}/u.test(text)) return `${quote(text)} contains a control character`;
  return undefined;
}

/** Every problem of a string `value` against `format` (none without a format). */
function formatProblems(format: StringFormat | undefined, value: string): readonly string[] {
  const found = format ? FORMAT_CHECKS[format]?.(value) : undefined;
  return found === undefined ? [] : typeof found === "string" ? [found] : found;
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
export function suggest(
  name: string,
  candidates: readonly string[],
  nameOf: (candidate: string) => string = (c) => c,
): string | undefined {
  let best: { candidate: string; score: number } | undefined;
  for (const candidate of candidates) {
    const target = nameOf(candidate);
    const score = normalize(target) === normalize(name) ? 0 : distance(name.toLowerCase(), target.toLowerCase());
    if (score <= Math.max(1, Math.floor(target.length / 3)) && (best === undefined || score < best.score))
      best = { candidate, score };
  }
  return best?.candidate;
}

/** Every path a key can have, for keys written at the wrong level (`deviceSeconds` at the top). */
const ALL_PATHS = [...CONFIG_KEYS.map((key) => key.path), ...Object.keys(CONFIG_SCHEMA.properties)];

function unknownKeyProblem(key: string, segments: readonly string[], group: GroupSchema): string {
  const path = [...segments, key].join(".");
  const sibling = suggest(key, Object.keys(group.properties));
  const elsewhere = sibling === undefined ? suggest(key, ALL_PATHS, (p) => p.split(".").pop()!) : undefined;
  const meant = sibling !== undefined ? [...segments, sibling].join(".") : elsewhere;
  if (meant !== undefined) return `${path}: unknown key (did you mean "${meant}"?)`;
  const known = Object.keys(group.properties).join(", ");
  return `${path}: unknown key (${segments.length > 0 ? `keys of ${segments.join(".")}` : "top-level keys"}: ${known})`;
}

/** How problems name where a value came from: a JSON path, an environment variable, a tag. */
export interface Labels {
  key(segments: readonly string[]): string;
  item(segments: readonly string[], index: number): string;
}

const FILE_LABELS: Labels = {
  key: (segments) => segments.join("."),
  item: (segments, index) => `${segments.join(".")}[${index}]`,
};

export interface Reading {
  /** The valid values found, nested as in the config; an invalid or absent key is absent. */
  values: Record<string, unknown>;
  problems: string[];
}

/** ajv's findings by the JSON Pointer of the value they are about. */
function findingsByPath(raw: unknown): Map<string, ErrorObject[]> {
  const byPath = new Map<string, ErrorObject[]>();
  if (validateSchema(raw)) return byPath;
  for (const error of validateSchema.errors ?? [])
    byPath.set(error.instancePath, [...(byPath.get(error.instancePath) ?? []), error]);
  return byPath;
}

const hasCheck = (format: StringFormat | undefined) => format !== undefined && FORMAT_CHECKS[format] !== undefined;

/** A finding the code of a format replaces: its pattern. */
const relevant = (findings: readonly ErrorObject[] | undefined, format: StringFormat | undefined) =>
  (findings ?? []).filter((finding) => !(finding.keyword === "pattern" && hasCheck(format)));

function fieldProblems(
  field: FieldSchema,
  value: unknown,
  segments: readonly string[],
  byPath: Map<string, ErrorObject[]>,
  labels: Labels,
): string[] {
  const pointer = `/${segments.join("/")}`;
  const label = labels.key(segments);
  const own = relevant(byPath.get(pointer), field["x-format"]);
  if (own.length > 0) {
    // A string that only fails its pattern is described by the format alone, as the format's own checks do.
    const format = field["x-format"];
    const expected =
      own.every((finding) => finding.keyword === "pattern") && format
        ? FORMATS[format].description
        : expectationOf(field);
    return [`${label}: must be ${expected}, got ${describeValue(value)}`];
  }
  if (Array.isArray(value)) {
    const format = field.items?.["x-format"];
    return value.flatMap((item: unknown, index) => {
      const itemLabel = labels.item(segments, index);
      const found = relevant(byPath.get(`${pointer}/${index}`), format);
      if (found.some((finding) => finding.keyword === "type"))
        return [`${itemLabel}: must be a string, got ${describeValue(item)}`];
      if (found.length > 0) return [`${itemLabel}: must be ${itemExpectationOf(field)}, got ${describeValue(item)}`];
      return formatProblems(format, item as string).map((problem) => `${itemLabel}: ${problem}`);
    });
  }
  return typeof value === "string"
    ? formatProblems(field["x-format"], value).map((problem) => `${label}: ${problem}`)
    : [];
}

function readGroup(
  group: GroupSchema,
  raw: unknown,
  segments: readonly string[],
  byPath: Map<string, ErrorObject[]>,
  labels: Labels,
  reading: Reading,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const findings = byPath.get(segments.length > 0 ? `/${segments.join("/")}` : "") ?? [];
  if (findings.some((finding) => finding.keyword === "type")) {
    const where = segments.length > 0 ? labels.key(segments) : "the configuration";
    reading.problems.push(`${where}: must be a JSON object, got ${describeValue(raw)}`);
    return out;
  }
  for (const finding of findings) {
    if (finding.keyword === "additionalProperties") {
      reading.problems.push(
        unknownKeyProblem(
          String((finding.params as { additionalProperty: string }).additionalProperty),
          segments,
          group,
        ),
      );
    }
  }
  const record = raw as Record<string, unknown>;
  if (segments.length === 0 && byPath.has(`/${SCHEMA_KEY}`)) {
    reading.problems.push(
      `${SCHEMA_KEY}: must be a string (the path or URL of the config's JSON Schema, for editors), got ` +
        `${describeValue(record[SCHEMA_KEY])}`,
    );
  }
  for (const [name, node] of Object.entries(group.properties)) {
    if (!Object.hasOwn(record, name)) continue;
    const path = [...segments, name];
    if (isGroup(node)) {
      out[name] = readGroup(node, record[name], path, byPath, labels, reading);
      continue;
    }
    const problems = fieldProblems(node, record[name], path, byPath, labels);
    if (problems.length > 0) reading.problems.push(...problems);
    else out[name] = Array.isArray(record[name]) ? [...(record[name] as unknown[])] : record[name];
  }
  return out;
}

/**
 * Checks `raw` (a config, or a part of one: no key is required) against the schema: the valid
 * values, and every problem in schema order, each starting with the label of where it came from.
 */
export function readValues(raw: unknown, labels: Labels = FILE_LABELS): Reading {
  const reading: Reading = { values: {}, problems: [] };
  reading.values = readGroup(CONFIG_SCHEMA, raw, [], findingsByPath(raw), labels, reading);
  return reading;
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** A copy of `base` with `values` (as readValues returns them) laid over it. */
export function withValues<T>(base: T, values: Readonly<Record<string, unknown>>): T {
  const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [name, value] of Object.entries(values))
    out[name] = isPlainObject(value) ? withValues(out[name], value) : value;
  return out as T;
}

/** Settings that are valid one by one but do not make sense together. */
export function crossCheck(config: AgentConfig): string[] {
  const warnings: string[] = [];
  if (config.initializationRateMiBps !== null && !config.createFromSnapshot && config.workspace.create !== "snapshot") {
    warnings.push(
      "initializationRateMiBps is set but no volume is ever created from a snapshot (createFromSnapshot is false " +
        'and workspace.create is not "snapshot"): it has no effect',
    );
  }
  return warnings;
}

/**
 * Problems that only show with two keys together: a workspace minimum key outside the id keys,
 * a keeper whose lower bound is above its upper one, a prune target not below its threshold, a join margin that
 * leaves the start limit no time, a pre-warm that could
 * never stay stopped (maxPausedMs below pauseMs), and a label prefix that
 * collides with one of `labels.protectedKeys` (its collisions with
 * osparc's own labels are the prefix's own problems).
 */
export function crossProblems(config: AgentConfig): string[] {
  const problems: string[] = [];
  const outside = config.workspace.minimumKeys.filter((key) => !config.workspace.idKeys.includes(key));
  if (outside.length > 0) {
    problems.push(
      `workspace.minimumKeys: ${outside.map((key) => JSON.stringify(key)).join(", ")} not in workspace.idKeys, ` +
        `so no workspace could ever be used; add it to idKeys or remove it`,
    );
  }
  if (config.keeper.minAvailable > config.keeper.maxAvailable) {
    problems.push(
      `keeper.maxAvailable: ${config.keeper.maxAvailable} is below keeper.minAvailable ` +
        `(${config.keeper.minAvailable}), so the keeper would create volumes and delete them again; raise it or ` +
        `lower minAvailable`,
    );
  }
  if (config.prune.targetPercent >= config.prune.thresholdPercent) {
    problems.push(
      `prune.targetPercent: ${config.prune.targetPercent} is not below prune.thresholdPercent ` +
        `(${config.prune.thresholdPercent}), so a prune could never reach its target; lower it`,
    );
  }
  const { startLimitSeconds, joinMarginSeconds } = config.timeouts;
  if (startLimitSeconds > 0 && joinMarginSeconds >= startLimitSeconds) {
    problems.push(
      `timeouts.joinMarginSeconds: ${joinMarginSeconds} is not below timeouts.startLimitSeconds ` +
        `(${startLimitSeconds}), so the first phase would have no time at all; lower it, or set startLimitSeconds ` +
        `to the autoscaler's limit (0: not counted)`,
    );
  }
  const giveWay = config.prewarm.giveWay;
  if (giveWay.enabled && giveWay.maxPausedMs < giveWay.pauseMs) {
    problems.push(
      `prewarm.giveWay.maxPausedMs: ${giveWay.maxPausedMs} is below prewarm.giveWay.pauseMs ` +
        `(${giveWay.pauseMs}), so fio would never stay stopped while others read; raise it, or set ` +
        `prewarm.giveWay.enabled to false`,
    );
  }
  problems.push(...volumeProblems(config));
  // Each rule's own problem is the item's (FORMAT_CHECKS); here what only the list as a whole shows.
  const rules = parseInstanceTypePools(config.instanceTypePools);
  const ruleTexts = rules.map((rule) => rule.text);
  problems.push(...instanceTypePoolProblems(ruleTexts).map((problem) => `instanceTypePools: ${problem}`));
  const alone = new Set(labelPrefixProblems(config.labels.prefix));
  problems.push(
    ...labelPrefixProblems(config.labels.prefix, config.labels.protectedKeys)
      .filter((problem) => !alone.has(problem))
      .map((problem) => `labels.prefix: ${problem}`),
  );
  return problems;
}

/** gp3's IOPS per GiB and MiB/s per IOPS ceilings, and its baseline IOPS (EC2's CreateVolume rules). */
export const GP3 = { maxIopsPerGiB: 500, maxMiBpsPerIops: 0.25, baselineIops: 3000 } as const;

/** The `volumes` keys that only make sense together, with `volumeType` and the workspace's. */
function volumeProblems(config: AgentConfig): string[] {
  const problems: string[] = [];
  const v = config.volumes;
  if (v.kmsKeyId !== null && !v.encrypted) {
    problems.push(
      "volumes.kmsKeyId: set, but volumes.encrypted is false, and EC2 takes a KmsKeyId only with Encrypted=true; " +
        "set volumes.encrypted to true or remove the key",
    );
  }
  if (config.workspace.requireEncrypted && !v.encrypted) {
    problems.push(
      "workspace.requireEncrypted: true, but volumes.encrypted is false, so a workspace volume the agent creates " +
        "could be refused at the next boot; set volumes.encrypted to true",
    );
  }
  for (const key of ["iops", "throughputMiBps"] as const) {
    if (v[key] !== null && config.volumeType !== "gp3")
      problems.push(
        `volumes.${key}: set, but volumeType is ${JSON.stringify(config.volumeType)}; the agent provisions IOPS ` +
          `and throughput on gp3 only`,
      );
  }
  const iops = v.iops ?? GP3.baselineIops;
  if (v.throughputMiBps !== null && v.throughputMiBps > iops * GP3.maxMiBpsPerIops) {
    problems.push(
      `volumes.throughputMiBps: ${v.throughputMiBps} MiB/s is more than ${GP3.maxMiBpsPerIops} MiB/s per IOPS of ` +
        `${iops} IOPS (${iops * GP3.maxMiBpsPerIops}), which EC2 refuses; raise volumes.iops or lower the ` +
        `throughput`,
    );
  }
  if (v.iops !== null && config.workspace.create === "blank" && v.iops > config.workspace.sizeGiB * GP3.maxIopsPerGiB) {
    problems.push(
      `volumes.iops: ${v.iops} is more than ${GP3.maxIopsPerGiB} per GiB of a blank workspace volume of ` +
        `workspace.sizeGiB ${config.workspace.sizeGiB} (${config.workspace.sizeGiB * GP3.maxIopsPerGiB}), which ` +
        `EC2 refuses; lower it or raise workspace.sizeGiB`,
    );
  }
  const keys = v.tags.map((text) => splitOperatorTag(text)?.key).filter((key) => key !== undefined);
  const twice = [...new Set(keys.filter((key, i) => keys.indexOf(key) !== i))];
  if (twice.length > 0)
    problems.push(
      `volumes.tags: ${twice.map((key) => JSON.stringify(key)).join(", ")} given more than once; a tag has one value`,
    );
  if (v.tags.length > MAX_OPERATOR_TAGS) {
    problems.push(
      `volumes.tags: ${v.tags.length} tags, more than the ${MAX_OPERATOR_TAGS} a volume can take beside the ` +
        `agent's own (EC2 allows 50 tags on a resource)`,
    );
  }
  return problems;
}

/**
 * Validates raw configuration (parsed JSON; undefined = no file = all defaults). Pure; collects
 * every problem (unknown keys with a suggestion, wrong types, out-of-range numbers, bad enums).
 * A top-level `$schema` (for editors) is accepted and ignored.
 */
export function validateConfig(raw: unknown): ValidationResult {
  if (raw === undefined) return { config: defaultConfig(), problems: [], warnings: [] };
  const { values, problems } = readValues(raw);
  const config = withValues(defaultConfig(), values);
  return { config, problems: [...problems, ...crossProblems(config)], warnings: crossCheck(config) };
}
