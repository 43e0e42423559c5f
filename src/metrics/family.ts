/**
 * The metric model: families of samples, as Prometheus' text format has them. Pure data, so the
 * functions that turn a use case's result into figures are tested without a file or a scrape.
 * Every name is checked against Prometheus' conventions when a family is made (units in the
 * name, `_total` on counters only, no label named twice), so a misnamed metric fails its unit
 * test instead of a dashboard query.
 */
import { AgentError } from "../errors.ts";

/** Every metric of the agent starts with this, so one `{__name__=~"ebs_cache_agent_.*"}` finds them all. */
export const METRIC_PREFIX = "ebs_cache_agent_";

export type MetricType = "gauge" | "counter";

/**
 * The unit a name ends with (before `_total` for a counter). `info`: a constant 1 whose labels
 * carry the facts; `volumes`, `actions`, `cores`, `images`: counts of things; `ratio`: 0 to 1.
 */
export type MetricUnit =
  | "seconds"
  | "bytes"
  | "ratio"
  | "info"
  | "iops"
  | "bytes_per_second"
  | "volumes"
  | "actions"
  | "cores"
  | "problems"
  | "inodes"
  | "images"
  | "runs"
  | "disks";

export type Labels = Record<string, string>;

export interface Sample {
  labels: Labels;
  value: number;
}

export interface MetricFamily {
  name: string;
  help: string;
  type: MetricType;
  unit: MetricUnit;
  samples: Sample[];
}

/** The bad name, and why; thrown for a programming error, never for a measured value. */
export class MetricNameError extends AgentError {
  constructor(name: string, why: string) {
    super(
      `metric ${JSON.stringify(name)}: ${why}`,
      "fix the metric's definition in src/metrics/: this is a bug, not a setting",
    );
  }
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** The problems of a family's name and labels against the conventions; empty when it is well named. */
export function namingProblems(family: Pick<MetricFamily, "name" | "type" | "unit" | "samples">): string[] {
  const { name, type, unit } = family;
  const problems: string[] = [];
  if (!METRIC_NAME.test(name)) problems.push("not a valid metric name");
  if (!name.startsWith(METRIC_PREFIX)) problems.push(`does not start with ${METRIC_PREFIX}`);
  if (type === "counter" && !name.endsWith(`_${unit}_total`)) problems.push(`a counter must end with _${unit}_total`);
  if (type === "gauge" && !name.endsWith(`_${unit}`)) problems.push(`a gauge in ${unit} must end with _${unit}`);
  if (type === "gauge" && name.endsWith("_total")) problems.push("_total is for counters");
  if (unit === "info" && type !== "gauge") problems.push("an info metric is a gauge");
  const seen = new Set<string>();
  for (const sample of family.samples) {
    for (const label of Object.keys(sample.labels)) {
      if (!LABEL_NAME.test(label) || label.startsWith("__"))
        problems.push(`label ${JSON.stringify(label)} is not a valid label name`);
    }
    if (unit === "info" && sample.value !== 1) problems.push("an info sample's value is 1");
    const key = seriesKey(sample.labels);
    if (seen.has(key)) problems.push(`two samples with the labels ${key}`);
    seen.add(key);
  }
  return problems;
}

/** Makes a family, refusing a name that breaks the conventions. */
export function family(
  name: string,
  type: MetricType,
  unit: MetricUnit,
  help: string,
  samples: Sample[],
): MetricFamily {
  const made = { name: METRIC_PREFIX + name, type, unit, help, samples };
  const problems = namingProblems(made);
  if (problems.length > 0) throw new MetricNameError(made.name, problems.join("; "));
  return made;
}

/** A gauge with one sample. */
export function gauge(name: string, unit: MetricUnit, help: string, value: number, labels: Labels = {}): MetricFamily {
  return family(name, "gauge", unit, help, [{ labels, value }]);
}

/** The labels in a canonical order, to tell two series apart. */
export function seriesKey(labels: Labels): string {
  return JSON.stringify(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** Seconds from milliseconds, as Prometheus wants durations. */
export function seconds(ms: number): number {
  return ms / 1000;
}

/** Seconds since the epoch of an ISO time, or undefined when it does not parse. */
export function epochSeconds(iso: string | undefined): number | undefined {
  if (iso === undefined) return undefined;
  const ms = Date.parse(iso);
  return Number.isNaN(ms) ? undefined : ms / 1000;
}

/**
 * A free-text reason as a label value: one line, bounded, so a long error does not make a
 * series nobody can read (the journal has the whole text).
 */
export function reasonLabel(reason: string | undefined, max = 160): string {
  if (!reason) return "";
  const line = reason.replace(/\s+/g, " ").trim();
  return line.length <= max ? line : `${line.slice(0, max - 1)}…`;
}

/** Sums durations of a step that ran more than once (the claim, when a volume was handed back). */
export function durationsByStep(
  timeline: ReadonlyArray<{ step: string; ms: number; skipped?: boolean }>,
): Map<string, number> {
  const byStep = new Map<string, number>();
  for (const entry of timeline) byStep.set(entry.step, (byStep.get(entry.step) ?? 0) + entry.ms);
  return byStep;
}
