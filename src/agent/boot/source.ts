/**
 * Where a boot's data-root came from, as operators count it (the metrics' `source`, `status`):
 * the plan's selection is only the intent; a pool claim that ran out of candidates and created a
 * volume from the snapshot is a `snapshot` boot, and a boot that ended without a volume is
 * `degraded` (or `disabled`) whatever it selected.
 */
import type { ReadinessState } from "../../tags.ts";
import type { Selection } from "./plan.ts";

/**
 * `pool` / `workspace` / `attached`: a cache hit (a volume with docker's data already on it);
 * `snapshot`: created from the pool's snapshot (warm only after initialization); `blank`: created
 * empty; `degraded` / `disabled`: no cache volume.
 */
export const BOOT_SOURCES = ["pool", "workspace", "attached", "snapshot", "blank", "degraded", "disabled"] as const;
export type BootSource = (typeof BOOT_SOURCES)[number];

/** What this boot created the volume in hand from, when it created one. */
export type CreatedFrom = "snapshot" | "blank";

/** The source of a finished boot: its outcome first, then what it created, then what it selected. */
export function bootSourceOf(
  selection: Selection,
  outcome: ReadinessState | "prepared",
  created: CreatedFrom | undefined,
): BootSource {
  if (outcome === "degraded") return "degraded";
  if (outcome === "disabled") return "disabled";
  if (created) return created;
  switch (selection.source) {
    case "attached":
    case "pool":
    case "workspace":
      return selection.source;
    case "new-workspace":
      if (selection.from === "pool") return "pool";
      return selection.create.snapshotId !== undefined ? "snapshot" : "blank";
    case "snapshot":
      return selection.create.snapshotId !== undefined ? "snapshot" : "blank";
    case "disabled":
      return "disabled";
    case "none":
      return "degraded";
  }
}
