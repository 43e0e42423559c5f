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
import type { MetricFamily } from "./family.ts";
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
 * counter keeps counting over the runs of a timer (gc, the keeper). A previous file that is
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
  return families.map((f) =>
    f.type !== "counter"
      ? f
      : {
          ...f,
          samples: f.samples.map((s) => ({
            ...s,
            value: s.value + (previous.get(renderSeries(f.name, s.labels)) ?? 0),
          })),
        },
  );
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
