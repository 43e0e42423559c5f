/**
 * Overrides on top of the file: environment variables (every scalar key and the image list),
 * then an allowed subset of instance tags. Both are pure: values in, a new config plus problems
 * out. Precedence: defaults < file < environment < instance tags.
 */
import { quote, validatePoolName } from "../inputs.ts";
import { InstanceTag, labelKey, RequestLabel, TAG_PREFIX } from "../tags.ts";
import {
  CONFIG_KEYS,
  CONFIG_PATH_ENV,
  ENV_PREFIX,
  envVarName,
  isNullable,
  kindOf,
  type AgentConfig,
  type FieldSchema,
} from "./schema.ts";
import { readValues, suggest, withValues, type Labels } from "./validate.ts";

export type Env = Readonly<Record<string, string | undefined>>;

export interface OverrideResult<C> {
  config: C;
  problems: string[];
  warnings: string[];
}

/** A copy of `object` with the value at `segments` set (missing groups are created). */
function withValue(
  object: Record<string, unknown>,
  segments: readonly string[],
  value: unknown,
): Record<string, unknown> {
  const [head, ...rest] = segments;
  if (head === undefined) return object;
  const inner =
    rest.length === 0 ? value : withValue((object[head] as Record<string, unknown> | undefined) ?? {}, rest, value);
  return { ...object, [head]: inner };
}

const NUMBER_TEXT = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/;

/**
 * Turns an environment string into the raw value its field expects; text that does not parse is
 * returned as-is so that validation reports it ("must be a number …, got "x"").
 */
function parseEnvValue(field: FieldSchema, text: string): unknown {
  const trimmed = text.trim();
  if (isNullable(field) && (trimmed === "" || trimmed === "null")) return null;
  switch (kindOf(field)) {
    case "boolean":
      if (/^(true|1|yes|on)$/i.test(trimmed)) return true;
      if (/^(false|0|no|off)$/i.test(trimmed)) return false;
      return text;
    case "number":
      return NUMBER_TEXT.test(trimmed) ? Number(trimmed) : text;
    case "stringList":
      return trimmed
        .split(",")
        .map((item) => item.trim())
        .filter((item) => item !== "");
    case "enum":
    case "string":
      return trimmed;
  }
}

const KNOWN_ENV = new Set([CONFIG_PATH_ENV, ...CONFIG_KEYS.map((key) => key.envVar)]);

/** Problems about the environment name the variable and the key: `EBS_CACHE_AGENT_POOL (pool): …`. */
const ENV_LABELS: Labels = {
  key: (segments) => `${envVarName(segments)} (${segments.join(".")})`,
  item: (segments, index) => `${envVarName(segments)} (${segments.join(".")}) item ${index + 1}`,
};

/**
 * Applies `EBS_CACHE_AGENT_*` variables (see CONFIG_KEYS for the names). Bad values are problems
 * that name the variable; variables with the prefix that match no key are warnings (with a
 * suggestion), since other tools may share the prefix.
 */
export function applyEnvOverrides(config: AgentConfig, env: Env): OverrideResult<AgentConfig> {
  const warnings: string[] = [];
  let overlay: Record<string, unknown> = {};
  for (const key of CONFIG_KEYS) {
    const text = env[key.envVar];
    if (text !== undefined) overlay = withValue(overlay, key.segments, parseEnvValue(key.field, text));
  }
  const { values, problems } = readValues(overlay, ENV_LABELS);
  for (const name of Object.keys(env)) {
    if (!name.startsWith(ENV_PREFIX) || KNOWN_ENV.has(name) || env[name] === undefined) continue;
    const meant = suggest(name.slice(ENV_PREFIX.length), [...KNOWN_ENV], (known) => known.slice(ENV_PREFIX.length));
    warnings.push(
      `environment variable ${name} matches no setting and is ignored${meant ? ` (did you mean ${meant}?)` : ""}`,
    );
  }
  return { config: withValues(config, values), problems, warnings };
}

/**
 * The settings the agent acts on: the config after env and instance tags, plus what only an
 * instance tag can say. `keep`: the workspace volume released by this instance is never expired by gc.
 */
export type EffectiveSettings = AgentConfig & { readonly keep: boolean };

export interface InstanceTagResult extends OverrideResult<EffectiveSettings> {
  /** What the tags changed, for the log: `pool = "gpu" (instance tag ebs-cache:pool)`. */
  applied: string[];
}

function parseTagBoolean(text: string): boolean | undefined {
  const value = text.trim().toLowerCase();
  return value === "true" ? true : value === "false" ? false : undefined;
}

/**
 * Applies the allowed instance tags (`ebs-cache:enabled`, `ebs-cache:pool`, `ebs-cache:keep`,
 * `ebs-cache:ttl-hours`). A malformed value is a problem and is not applied; callers must treat
 * any problem as an error that changes nothing.
 */
export function applyInstanceTags(config: AgentConfig, tags: Readonly<Record<string, string>>): InstanceTagResult {
  const problems: string[] = [];
  const warnings: string[] = [];
  const applied: string[] = [];
  let out: EffectiveSettings = { ...config, keep: false };
  const note = (setting: string, value: unknown, tag: string) =>
    applied.push(`${setting} = ${JSON.stringify(value)} (instance tag ${tag})`);
  const bad = (tag: string, problem: string) => problems.push(`instance tag ${tag}: ${problem}`);

  for (const setting of ["enabled", "keep"] as const) {
    const tag = InstanceTag[setting];
    const text = tags[tag];
    if (text === undefined) continue;
    const value = parseTagBoolean(text);
    if (value === undefined) bad(tag, `must be true or false, got ${quote(text)}`);
    else {
      out = { ...out, [setting]: value };
      note(setting, value, tag);
    }
  }

  const pool = tags[InstanceTag.pool];
  if (pool !== undefined) {
    const check = validatePoolName(pool);
    if (check.ok) {
      out = { ...out, pool: check.value };
      note("pool", check.value, InstanceTag.pool);
    } else bad(InstanceTag.pool, check.problem);
  }

  const ttl = tags[InstanceTag.ttlHours];
  if (ttl !== undefined) {
    const trimmed = ttl.trim();
    const label = `instance tag ${InstanceTag.ttlHours}`;
    const check = readValues(
      { ttlHours: NUMBER_TEXT.test(trimmed) ? Number(trimmed) : ttl },
      { key: () => label, item: () => label },
    );
    if (check.problems.length === 0) {
      out = { ...out, ttlHours: check.values.ttlHours as number };
      note("ttlHours", check.values.ttlHours, InstanceTag.ttlHours);
    } else problems.push(...check.problems);
  }

  const allowed = new Set<string>(Object.values(InstanceTag));
  for (const tag of Object.keys(tags)) {
    if (tag.startsWith(TAG_PREFIX) && !allowed.has(tag)) {
      warnings.push(
        `instance tag ${quote(tag)} is not one of the tags that override settings (${[...allowed].join(", ")}) ` +
          `and is ignored`,
      );
    }
  }
  return { config: out, problems, warnings, applied };
}

/**
 * `keep` and `enabled` as osparc can carry them without a change to its autoscaler: keys
 * `<labels.prefix>.keep` / `<labels.prefix>.enabled` in the labels tag (a service label →
 * director-v2's placement labels → the instance's labels tag). Values: JSON booleans or the
 * strings `true` / `false` (docker labels are strings).
 */
export interface LabelSwitches {
  keep?: boolean;
  enabled?: boolean;
  /** `<prefix>.keep` present but neither true nor false: the release keeps the volume rather than guess. */
  keepMalformed: boolean;
  warnings: string[];
}

function labelSwitchKeys(prefix: string): { keep: string; enabled: string } {
  return { keep: labelKey(prefix, RequestLabel.keep), enabled: labelKey(prefix, RequestLabel.enabled) };
}

/** Reads the switches from the labels tag's object. */
export function readLabelSwitches(labels: Readonly<Record<string, unknown>>, prefix: string): LabelSwitches {
  const out: LabelSwitches = { keepMalformed: false, warnings: [] };
  const keys = labelSwitchKeys(prefix);
  for (const setting of ["keep", "enabled"] as const) {
    const raw = labels[keys[setting]];
    if (raw === undefined) continue;
    const value = typeof raw === "boolean" ? raw : typeof raw === "string" ? parseTagBoolean(raw) : undefined;
    if (value !== undefined) out[setting] = value;
    else {
      const got = typeof raw === "string" ? quote(raw) : (JSON.stringify(raw) ?? String(raw));
      if (setting === "keep") out.keepMalformed = true;
      out.warnings.push(
        `label ${keys[setting]} in the labels tag must be true or false, got ${got}: not ` +
          `applied${setting === "keep" ? " (a released workspace volume is kept rather than expired on a guess)" : ""}`,
      );
    }
  }
  return out;
}

/**
 * Applies `keep` / `enabled` from the labels where no instance tag (`ebs-cache:keep`,
 * `ebs-cache:enabled`) says otherwise: the instance tag wins.
 */
export function applyLabelSwitches(
  settings: EffectiveSettings,
  switches: Pick<LabelSwitches, "keep" | "enabled">,
  tags: Readonly<Record<string, string>>,
  origin: string,
): { config: EffectiveSettings; applied: string[] } {
  let out = settings;
  const applied: string[] = [];
  for (const setting of ["keep", "enabled"] as const) {
    const value = switches[setting];
    if (value === undefined || tags[InstanceTag[setting]] !== undefined) continue;
    out = { ...out, [setting]: value };
    applied.push(`${setting} = ${JSON.stringify(value)} (${origin})`);
  }
  return { config: out, applied };
}
