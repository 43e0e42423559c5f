/**
 * The refresh's figures (`ebs_cache_agent_refresh.prom`), rewritten with its state file as each
 * pull starts and ends: the images of the last refresh by phase, the bytes it pulled, its phase.
 * Gauges of the last run, not counters: a refresh's file is rewritten many times per run.
 */
import type { RefreshState } from "../agent/refresh/state.ts";
import { epochSeconds, family, gauge, type MetricFamily } from "./family.ts";

const IMAGE_PHASES = ["present", "pending", "pulling", "pulled", "failed"] as const;

/** The refresh's families. */
export function refreshMetrics(state: RefreshState): MetricFamily[] {
  const counts = new Map<string, number>(IMAGE_PHASES.map((phase) => [phase, 0]));
  let bytes = 0;
  for (const image of state.images) {
    counts.set(image.phase, (counts.get(image.phase) ?? 0) + 1);
    if (image.phase === "pulled") bytes += image.bytes ?? 0;
  }
  const families: MetricFamily[] = [
    gauge(
      "refresh_info",
      "info",
      "The last refresh of the cache volume's images: its phase (running, done, stopped, skipped) and the " +
        "generation it followed.",
      1,
      {
        volume_id: state.volumeId ?? "",
        phase: state.phase,
        generation: state.generation ?? "",
      },
    ),
    family(
      "refresh_images",
      "gauge",
      "images",
      "Images the last refresh wanted, by phase: present (already there), pending, pulling, pulled, failed.",
      [...counts].map(([phase, value]) => ({ labels: { phase }, value })),
    ),
    gauge(
      "refresh_pulled_bytes",
      "bytes",
      "Size of the images the last refresh pulled, as docker reports them.",
      bytes,
    ),
  ];
  const updated = epochSeconds(state.updatedAt);
  if (updated !== undefined)
    families.push(
      gauge(
        "refresh_timestamp_seconds",
        "seconds",
        "When the refresh's state last changed (seconds since the epoch).",
        updated,
      ),
    );
  return families;
}
