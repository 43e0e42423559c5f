/** `status` for a person: the document in lines, and the exit code a health check reads. */
import { ExitCode } from "../errors.ts";
import type { StatusDocument } from "./document.ts";

/** 0 healthy; 4 the boot degraded (docker on its default data-root); 1 any other problem. */
export function statusExitCode(doc: StatusDocument): number {
  if (doc.healthy) return ExitCode.ok;
  return doc.boot?.outcome === "degraded" ? ExitCode.degraded : ExitCode.failure;
}

const GiB = 1024 ** 3;

/** The document in words, the verdict first. */
export function renderStatus(doc: StatusDocument): string[] {
  const lines = [`health:   ${doc.healthy ? "healthy" : "UNHEALTHY"}`];
  for (const p of doc.problems) lines.push(`  problem: ${p}`);
  for (const w of doc.warnings) lines.push(`  warning: ${w}`);
  const b = doc.boot;
  if (b) {
    lines.push(
      `boot:     ${b.outcome} from ${b.source} at ${b.finishedAt}, ${b.durationSeconds.toFixed(1)} ` +
        `s${b.reason ? ` (${b.reason})` : ""}`,
    );
    const byStep = new Map<string, number>();
    for (const s of b.timeline) byStep.set(s.step, (byStep.get(s.step) ?? 0) + s.seconds);
    const slowest = [...byStep]
      .map(([step, seconds]) => ({ step, seconds }))
      .sort((x, y) => y.seconds - x.seconds)
      .slice(0, 3);
    if (slowest.length > 0)
      lines.push(`          slowest steps: ${slowest.map((s) => `${s.step} ${s.seconds.toFixed(1)} s`).join(", ")}`);
  } else lines.push("boot:     none recorded");
  if (doc.volume) {
    const hw = [doc.volume.model, doc.volume.serial].filter(Boolean).join(", serial ");
    lines.push(`volume:   ${doc.volume.volumeId} on ${doc.volume.device ?? "?"}${hw ? ` (${hw})` : ""}`);
  }
  const m = doc.mount;
  if (m) {
    if (!m.mounted) lines.push(`mount:    ${m.mountPoint}: NOT MOUNTED`);
    else {
      const size = m.sizeBytes !== null ? `${(m.sizeBytes / GiB).toFixed(1)} GiB` : "?";
      const inodes =
        m.inodes && m.freeInodes !== null
          ? `, ${(((m.inodes - m.freeInodes) / m.inodes) * 100).toFixed(1)} % of inodes`
          : "";
      const used = m.usedRatio !== null ? `${(m.usedRatio * 100).toFixed(1)} % used${inodes}` : "";
      lines.push(`mount:    ${m.mountPoint} (${m.fsType ?? "?"}, ${size}, ${used})`);
    }
  }
  if (doc.dataRoot)
    lines.push(
      `data-root: ` +
        `${doc.dataRoot.current ?? "docker's default"}${doc.dataRoot.matches ? "" : ` (expected ${doc.dataRoot.expected})`}`,
    );
  if (doc.labels && Object.keys(doc.labels.published).length > 0) {
    lines.push(
      `labels:   ${Object.entries(doc.labels.published)
        .map(([k, v]) => `${k}=${v}`)
        .join(" ")}`,
    );
  }
  const p = doc.prewarm;
  if (p) {
    const progress = p.progress && p.progress.percent < 100 ? `, ${p.progress.percent.toFixed(1)} % read` : "";
    lines.push(
      `pre-warm: ${p.verdict}, ${p.phase}${p.running ? " (running)" : ""}${progress} (${p.strategy}: ${p.reason})`,
    );
  }
  const f = doc.refresh;
  if (f) {
    const counts =
      f.phase === "skipped"
        ? (f.reason ?? "")
        : `${f.pulled + f.failed} of ${f.wanted - f.present} pulls done: ${f.pulled} pulled, ${f.failed} failed, ` +
          `${f.present} present${f.markedCurrent ? ", volume tagged current" : ""}`;
    lines.push(
      `refresh:  ${f.phase}${f.running ? " (running)" : ""}${f.generation ? ` toward ${f.generation}` : ""}${counts ? ` (${counts})` : ""}`,
    );
  }
  const disks = doc.instanceStore;
  if (disks && disks.length > 0)
    lines.push(
      `instance-store: ${disks.map((d) => `${d.device} ${(d.sizeBytes / GiB).toFixed(1)} GiB`).join(", ")} ` +
        "(NVMe, left alone by the agent)",
    );
  const r = doc.lastRelease;
  if (r)
    lines.push(
      `release:  ${r.outcome} at ` +
        `${r.finishedAt}${r.afterBoot ? " (after this boot)" : ""}${r.reason ? `: ${r.reason}` : ""}`,
    );
  return lines;
}
