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
  const boot = doc.boot;
  if (boot) {
    lines.push(
      `boot:     ${boot.outcome} from ${boot.source} at ${boot.finishedAt}, ${boot.durationSeconds.toFixed(1)} ` +
        `s${boot.reason ? ` (${boot.reason})` : ""}`,
    );
    const byStep = new Map<string, number>();
    for (const s of boot.timeline) byStep.set(s.step, (byStep.get(s.step) ?? 0) + s.seconds);
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
  const mount = doc.mount;
  if (mount) {
    if (!mount.mounted) lines.push(`mount:    ${mount.mountPoint}: NOT MOUNTED`);
    else {
      const size = mount.sizeBytes !== null ? `${(mount.sizeBytes / GiB).toFixed(1)} GiB` : "?";
      const inodes =
        mount.inodes && mount.freeInodes !== null
          ? `, ${(((mount.inodes - mount.freeInodes) / mount.inodes) * 100).toFixed(1)} % of inodes`
          : "";
      const used = mount.usedRatio !== null ? `${(mount.usedRatio * 100).toFixed(1)} % used${inodes}` : "";
      lines.push(`mount:    ${mount.mountPoint} (${mount.fsType ?? "?"}, ${size}, ${used})`);
    }
  }
  if (doc.dataRoot)
    lines.push(
      `data-root: ` +
        `${doc.dataRoot.current ?? "docker's default"}` +
        `${doc.dataRoot.matches ? "" : ` (expected ${doc.dataRoot.expected})`}`,
    );
  if (doc.labels && Object.keys(doc.labels.published).length > 0) {
    lines.push(
      `labels:   ${Object.entries(doc.labels.published)
        .map(([k, v]) => `${k}=${v}`)
        .join(" ")}`,
    );
  }
  const prewarm = doc.prewarm;
  if (prewarm) {
    const progress =
      prewarm.progress && prewarm.progress.percent < 100 ? `, ${prewarm.progress.percent.toFixed(1)} % read` : "";
    lines.push(
      `pre-warm: ${prewarm.verdict}, ${prewarm.phase}${prewarm.running ? " (running)" : ""}${progress} ` +
        `(${prewarm.strategy}: ${prewarm.reason})`,
    );
  }
  const refresh = doc.refresh;
  if (refresh) {
    const counts =
      refresh.phase === "skipped"
        ? (refresh.reason ?? "")
        : `${refresh.pulled + refresh.failed} of ${refresh.wanted - refresh.present} pulls done: ${refresh.pulled} ` +
          `pulled, ${refresh.failed} failed, ` +
          `${refresh.present} present${refresh.markedCurrent ? ", volume tagged current" : ""}`;
    lines.push(
      `refresh:  ${refresh.phase}${refresh.running ? " (running)" : ""}` +
        `${refresh.generation ? ` toward ${refresh.generation}` : ""}${counts ? ` (${counts})` : ""}`,
    );
  }
  const disks = doc.instanceStore;
  if (disks && disks.length > 0)
    lines.push(
      `instance-store: ${disks.map((d) => `${d.device} ${(d.sizeBytes / GiB).toFixed(1)} GiB`).join(", ")} ` +
        "(NVMe, left alone by the agent)",
    );
  const release = doc.lastRelease;
  if (release)
    lines.push(
      `release:  ${release.outcome} at ` +
        `${release.finishedAt}${release.afterBoot ? " (after this boot)" : ""}` +
        `${release.reason ? `: ${release.reason}` : ""}`,
    );
  return lines;
}
