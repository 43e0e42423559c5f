/**
 * Prometheus' text exposition format (version 0.0.4), what node_exporter's textfile collector
 * reads: `# HELP` and `# TYPE` before each family's samples, label values escaped, no
 * timestamps (the collector refuses them).
 */
import type { Labels, MetricFamily } from "./family.ts";

/** `\\`, `"` and newlines escaped, as the format wants inside a label value. */
export function escapeLabelValue(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/** HELP text escapes only `\\` and newlines. */
export function escapeHelp(text: string): string {
  return text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

/** A sample value: Go's float syntax, with the format's spellings of the special values. */
export function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}

/** A sample's name and labels as a line of the format starts (what a carried counter is matched by). */
export function renderSeries(name: string, labels: Labels): string {
  const entries = Object.entries(labels);
  if (entries.length === 0) return name;
  return `${name}{${entries.map(([label, value]) => `${label}="${escapeLabelValue(value)}"`).join(",")}}`;
}

/** The families as one text document; a family without samples is left out (no HELP for nothing). */
export function renderTextFormat(families: readonly MetricFamily[]): string {
  const names = new Set<string>();
  const lines: string[] = [];
  for (const f of families) {
    if (f.samples.length === 0) continue;
    // Two families of one name would be two HELP lines: the collector rejects the whole file.
    if (names.has(f.name)) throw new Error(`metric ${f.name} rendered twice`);
    names.add(f.name);
    lines.push(`# HELP ${f.name} ${escapeHelp(f.help)}`, `# TYPE ${f.name} ${f.type}`);
    for (const s of f.samples) lines.push(`${renderSeries(f.name, s.labels)} ${formatValue(s.value)}`);
  }
  return lines.length === 0 ? "" : lines.join("\n") + "\n";
}
