/**
 * Writing a use case's figures for node_exporter's textfile collector:
 * `<dir>/ebs_cache_agent_<use-case>.prom`, one file per use case so a release does not erase the
 * boot's figures. The collector may read the folder at any moment, so the file is replaced
 * whole: a temp file in the same folder (the collector reads only `*.prom`), fsync, rename,
 * fsync of the folder, so a crash leaves the old file or the new one, never half of one.
 */
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { AgentError } from "../errors.ts";
import { writeFileAtomic } from "../fs-atomic.ts";
import type { Labels, MetricFamily } from "./family.ts";
import { renderSeries, renderTextFormat } from "./render.ts";

export type MetricsUseCase = "boot" | "prewarm" | "release" | "gc" | "keeper" | "host" | "fill" | "prune" | "refresh";

/** The file a use case writes. */
export function textfilePath(dir: string, useCase: MetricsUseCase): string {
  return join(dir, `ebs_cache_agent_${useCase}.prom`);
}

export class MetricsWriteError extends AgentError {
  constructor(path: string, cause: unknown) {
    super(
      `could not write the metrics file ${path}: ${(cause as Error)?.message ?? String(cause)}`,
      "check that metrics.textfileDir is a folder root can create and write (or set it to another folder, or to " +
        "null to write no metrics)",
      undefined,
      { cause },
    );
  }
}

/**
 * Counters of this run plus the values the previous file holds for the same series, so a
 * counter keeps counting over the runs of a timer (gc, the keeper). A series of a counter this
 * run did not add to (no `create` this time, a run that failed before it counted anything) keeps
 * its value: a series that vanished and came back would read as a reset. A previous file that is
 * missing or unreadable starts the counters from this run, which Prometheus reads as a reset.
 */
export function carryCounters(families: readonly MetricFamily[], previousText: string | undefined): MetricFamily[] {
  if (!previousText) return [...families];
  const previous = new Map<string, number>();
  for (const line of previousText.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const space = line.lastIndexOf(" ");
    const value = Number(line.slice(space + 1));
    if (space > 0 && Number.isFinite(value) && value >= 0) previous.set(line.slice(0, space), value);
  }
  return families.map((f) => {
    if (f.type !== "counter") return f;
    const now = new Set(f.samples.map((s) => renderSeries(f.name, s.labels)));
    const kept = [...previous].flatMap(([series, value]) => {
      const parsed = now.has(series) ? undefined : parseSeries(series);
      return parsed?.name === f.name ? [{ labels: parsed.labels, value }] : [];
    });
    return {
      ...f,
      samples: [
        ...f.samples.map((s) => ({ ...s, value: s.value + (previous.get(renderSeries(f.name, s.labels)) ?? 0) })),
        ...kept,
      ],
    };
  });
}

const LABEL_PAIR = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)/y;

/** A series as renderSeries writes it (`name{label="value",…}`) read back; undefined when it is not one. */
export function parseSeries(series: string): { name: string; labels: Labels } | undefined {
  const brace = series.indexOf("{");
  if (brace < 0) return { name: series, labels: {} };
  if (!series.endsWith("}")) return undefined;
  const body = series.slice(brace + 1, -1);
  const labels: Labels = {};
  LABEL_PAIR.lastIndex = 0;
  while (LABEL_PAIR.lastIndex < body.length) {
    const match = LABEL_PAIR.exec(body);
    if (!match) return undefined;
    labels[match[1]!] = match[2]!.replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
  }
  return { name: series.slice(0, brace), labels };
}

/** Replaces the use case's file atomically; returns its path. `carry`: add the previous file's counters. */
export async function writeTextfile(
  dir: string,
  useCase: MetricsUseCase,
  families: readonly MetricFamily[],
  options: { carry?: boolean } = {},
): Promise<string> {
  const path = textfilePath(dir, useCase);
  try {
    const previous = options.carry ? await readFile(path, "utf8").catch(() => undefined) : undefined;
    const text = renderTextFormat(options.carry ? carryCounters(families, previous) : families);
    await mkdir(dir, { recursive: true });
    await writeFileAtomic(path, text);
    return path;
  } catch (error) {
    throw new MetricsWriteError(path, error);
  }
}
