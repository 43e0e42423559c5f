/**
 * ebs-cache-agent-prewarm.service through systemctl: the pre-warm run the boot begins at the mount
 * (`ebs-cache-agent prewarm --from-mount`). Why a unit of its own: the first boot phase is a oneshot,
 * and under the default KillMode=control-group whatever it started ends with it, at the moment
 * docker starts, which is when the reads matter most. A unit started by the first phase lives on,
 * and systemd orders its stop before the release's (the unit file says how).
 */
import type { PrewarmFromMount } from "../agent/ports.ts";
import { AgentError, describeError } from "../errors.ts";
import { run } from "../exec.ts";
import type { Logger } from "../log.ts";

export const PREWARM_UNIT = "ebs-cache-agent-prewarm.service";

/** systemctl could not start or stop the pre-warm's unit. */
export class PrewarmUnitError extends AgentError {}

export function createPrewarmUnit(options: { log?: Logger; systemctl?: string; unit?: string } = {}): PrewarmFromMount {
  const systemctl = options.systemctl ?? "systemctl";
  const unit = options.unit ?? PREWARM_UNIT;
  const act = async (args: string[], nothingToStop = false) => {
    const result = await run(systemctl, [...args, unit], { check: false, log: options.log, timeoutMs: 120_000 }).catch(
      (cause: unknown) => {
        throw new PrewarmUnitError(
          `could not run ${systemctl} ${args.join(" ")} ${unit}: ${describeError(cause)}`,
          "check that systemd runs this host",
          undefined,
          { cause },
        );
      },
    );
    // systemctl's EXIT_NOTINSTALLED: a host installed before this unit existed (or without it) has
    // no run to stop, and a release must not be refused for it.
    if (nothingToStop && result.exitCode === 5 && /not loaded/.test(result.stderr)) {
      options.log?.debug("prewarm.unit", `${unit} is not installed: no run to stop`);
      return;
    }
    if (result.exitCode !== 0) {
      const detail = (result.stderr || result.stdout).trim().split("\n").slice(-2).join(" | ");
      throw new PrewarmUnitError(
        `systemctl ${args.join(" ")} ${unit} exited with ${result.exitCode}${detail ? `: ${detail}` : ""}`,
        `check that scripts/install.sh installed ${unit} (systemctl cat ${unit}; journalctl -u ${unit})`,
      );
    }
  };
  return {
    // --no-block: the first phase (ordered before docker) only queues the start; the unit waits for nothing.
    start: () => act(["start", "--no-block"]),
    // Waits for the stop job: the run stops fio and writes its resume point, so the volume is free once it returns.
    stop: () => act(["stop"], true),
  };
}
