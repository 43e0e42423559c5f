/**
 * `pool` for people: per pool a table of its zones by kind and generation, the totals, then one line per volume. Pure.
 */
import { formatUsd } from "./cost.ts";
import type { GenerationGroup, PoolReport, PoolSummary, PoolVolume, StateCounts, ZoneKeeper } from "./summary.ts";

/** Columns padded to their widest cell, two spaces apart. */
function table(header: readonly string[], cells: readonly string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: readonly string[]) =>
    c
      .map((cell, i) => cell.padEnd(widths[i]!))
      .join("  ")
      .trimEnd();
  return [line(header), ...cells.map(line)];
}

function age(hours: number | null): string {
  if (hours === null) return "?";
  if (hours < 1) return `${Math.round(hours * 60)}m`;
  if (hours < 48) return `${hours.toFixed(1)}h`;
  return `${(hours / 24).toFixed(1)}d`;
}

const stateCells = (s: StateCounts) => [s.available, s.inUse, s.creating, s.other, s.quarantined].map(String);

function generationCell(generation: GenerationGroup): string {
  return `${generation.generation}${generation.current ? " (current)" : generation.superseded ? " (superseded)" : ""}`;
}

function keeperCell(keeper: ZoneKeeper | null): string {
  if (!keeper) return "-";
  const verdict =
    keeper.belowMin > 0 ? `${keeper.belowMin} short` : keeper.aboveMax > 0 ? `${keeper.aboveMax} over` : "on target";
  return `${keeper.minAvailable}..${keeper.maxAvailable} available: has ${keeper.stock}, ${verdict}`;
}

/** One pool: what it costs, its zones by kind and generation, the keeper's caps. */
export function renderPoolSummary(summary: PoolSummary): string[] {
  const lines = [
    `pool ${summary.pool || "-"}: current generation ` +
      `${summary.currentGeneration?.generation ?? "none (no completed snapshot)"}; ` +
      (`${summary.volumes} volumes, ${summary.gib} GiB, USD ${formatUsd(summary.volumesMonthlyUsd)}/month + ` +
        `${summary.snapshots.completed} snapshots `) +
      (`(${summary.snapshots.gib} GiB at most) USD ${formatUsd(summary.snapshotsMonthlyUsd)}/month = USD ` +
        `${formatUsd(summary.monthlyUsd)}/month`),
  ];
  for (const u of summary.snapshots.unverified)
    lines.push(
      `  unverified snapshot ${u.snapshotId} (${u.state}, generation ${u.generation}): never current until its ` +
        "upload reads it back (running, killed before its check, or found wrong: the upload's rerun checks it or " +
        "deletes it)",
    );
  const cells: string[][] = [];
  for (const z of summary.zones) {
    for (const g of z.generations)
      cells.push([
        z.zone,
        g.kind,
        generationCell(g),
        ...stateCells(g.states),
        String(g.gib),
        formatUsd(g.monthlyUsd),
        "",
      ]);
    cells.push([
      z.zone,
      "all",
      "",
      ...stateCells(z.states),
      String(z.gib),
      formatUsd(z.monthlyUsd),
      keeperCell(z.keeper),
    ]);
  }
  if (cells.length > 0) {
    lines.push(
      ...table(
        [
          "ZONE",
          "KIND",
          "GENERATION",
          "AVAILABLE",
          "IN-USE",
          "CREATING",
          "OTHER",
          "QUARANTINED",
          "GiB",
          "USD/MONTH",
          "KEEPER",
        ],
        cells,
      ).map((l) => `  ${l}`),
    );
  }
  if (summary.keeper) {
    const keeper = summary.keeper;
    const size = keeper.sizeGiB !== null ? `${keeper.sizeGiB} GiB volumes` : "volumes of the snapshot's size";
    lines.push(
      `  keeper: ${keeper.minAvailable}..${keeper.maxAvailable} available in each of ` +
        `${keeper.zones.join(", ")}, ${size}; ` +
        `caps ${keeper.maxVolumes} volumes / ${keeper.maxGiB} GiB, the pool has ${keeper.volumes} / ${keeper.gib}`,
    );
  }
  return lines;
}

/**
 * The volumes, one a line: by default the columns a person scans (about 130 characters); `wide`
 * adds the expiry, the monthly cost, the workspace and the last error (`--wide`; `--json` has all).
 */
export function renderPoolTable(rows: readonly PoolVolume[], options: { wide?: boolean } = {}): string {
  const wide = options.wide ?? false;
  const header = ["VOLUME", "KIND", "POOL", "ZONE", "STATE", "GiB", "AGE", "CLAIMED-BY", "GENERATION"];
  if (wide) header.push("EXPIRES", "USD/MONTH", "WORKSPACE", "LAST-ERROR");
  const cells = rows.map((r) => {
    const narrow = [
      r.volumeId,
      r.kind,
      r.pool,
      r.zone,
      (r.heldByStopped
        ? `${r.state}, instance stopped ` +
          `${r.heldByStopped.days !== null ? `${r.heldByStopped.days.toFixed(1)} d` : "(since ?)"}`
        : r.state) + (!wide && r.lastError?.quarantined ? ", quarantined" : ""),
      String(r.sizeGiB),
      age(r.ageHours),
      r.claimedBy ?? "-",
      `${r.generation}${r.superseded ? " (superseded)" : ""}`,
    ];
    if (!wide) return narrow;
    return [
      ...narrow,
      r.expires ?? "-",
      formatUsd(r.monthlyUsd),
      r.workspace
        ? Object.entries(r.workspace)
            .map(([key, id]) => `${key}=${id}`)
            .join(",")
        : "-",
      r.lastError ? `${r.lastError.quarantined ? "quarantined: " : ""}${r.lastError.message}` : "-",
    ];
  });
  return table(header, cells).join("\n");
}

/** How many volumes sleep on stopped instances (warm buffers, leaked machines), and the longest stop. */
function heldByStoppedLine(rows: readonly PoolVolume[]): string[] {
  const held = rows.filter((r) => r.heldByStopped);
  if (held.length === 0) return [];
  const days = held.flatMap((r) => (r.heldByStopped?.days != null ? [r.heldByStopped.days] : []));
  return [
    `held by stopped instances: ${held.length} volumes, ${held.reduce((sum, r) => sum + r.sizeGiB, 0)} GiB` +
      (days.length > 0 ? `, the longest stopped ${Math.max(...days).toFixed(1)} days` : ""),
  ];
}

/** The whole report: each pool, the total and the prices it was made with, any notes, then the volumes. */
export function renderPoolReport(report: PoolReport, options: { wide?: boolean } = {}): string {
  const { total, prices } = report;
  const lines = report.pools.flatMap((p) => [...renderPoolSummary(p), ""]);
  lines.push(
    `total: ${total.volumes} volumes, ${total.gib} GiB, USD ${formatUsd(total.volumesMonthlyUsd)}/month; ` +
      `${total.snapshots} snapshots, ` +
      (`${total.snapshotGiB} GiB at most, USD ${formatUsd(total.snapshotsMonthlyUsd)}/month; USD ` +
        `${formatUsd(total.monthlyUsd)}/month in all`),
    `prices (config cost.*, USD): ${prices.gibMonthUsd}/GiB-month, ${prices.iopsMonthUsd}/IOPS-month above gp3's ` +
      `3000, ` +
      `${prices.throughputMonthUsd}/MiB/s-month above gp3's 125, snapshots ${prices.snapshotGibMonthUsd}/GiB-month`,
    ...report.notes.map((n) => `note: ${n}`),
    ...heldByStoppedLine(report.volumes),
    "",
    renderPoolTable(report.volumes, options),
  );
  return lines.join("\n");
}
