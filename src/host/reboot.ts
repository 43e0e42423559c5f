/**
 * Whether the host's systemd is rebooting (not powering off): at shutdown, the queued job of
 * `reboot.target`, `kexec.target` or `soft-reboot.target`. EC2 shows a rebooting instance as
 * `running` (RebootInstances, or a reboot from inside, asks the OS for the same reboot), so the
 * release learns it here: the instance comes back with its volumes attached, like after a stop.
 */
import { run } from "../exec.ts";

/** The targets whose start means the machine comes back in this instance. */
const REBOOT_TARGETS = new Set(["reboot.target", "kexec.target", "soft-reboot.target"]);

/** Reads `systemctl list-jobs --no-legend` (`JOB UNIT TYPE STATE` per line). Pure. */
export function rebootQueuedIn(listJobs: string): boolean {
  return listJobs.split("\n").some((line) => {
    const [, unit, type] = line.trim().split(/\s+/);
    return unit !== undefined && REBOOT_TARGETS.has(unit) && type === "start";
  });
}

/** Asks the host's systemd; throws when systemctl cannot answer (the caller decides without it). */
export async function systemdRebootQueued(options: { systemctl?: string; timeoutMs?: number } = {}): Promise<boolean> {
  const result = await run(options.systemctl ?? "systemctl", ["list-jobs", "--no-legend", "--no-pager"], {
    timeoutMs: options.timeoutMs ?? 5000,
  });
  if (result.exitCode !== 0)
    throw new Error(`systemctl list-jobs exited ${result.exitCode}: ${result.stderr.trim().slice(0, 200)}`);
  return rebootQueuedIn(result.stdout);
}
