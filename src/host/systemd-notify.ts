/**
 * Telling systemd that a `Type=notify` unit has started (sd_notify's `READY=1`), through
 * `systemd-notify`: Node has no datagram socket of the unix family to write to $NOTIFY_SOCKET
 * itself. `--pid` names this process, the unit's main process, as the sender (root may: the
 * kernel takes the credentials it is given), so the message is attributed to the unit even when
 * `systemd-notify` has exited before systemd reads it; systemd-notify (246 and newer) also waits
 * until systemd has read it. Without $NOTIFY_SOCKET (a oneshot unit, a shell) nothing is sent.
 */
import { describeError } from "../errors.ts";
import { run } from "../exec.ts";
import type { Logger } from "../log.ts";

/** Sends READY=1 once (later calls do nothing); a failure is a warning: systemd's start timeout then decides. */
export function serviceReadyNotifier(log: Logger, env: NodeJS.ProcessEnv = process.env): () => Promise<void> {
  let sent: Promise<void> | undefined;
  return () => {
    sent ??= env.NOTIFY_SOCKET ? notifyReady(log) : Promise.resolve();
    return sent;
  };
}

async function notifyReady(log: Logger): Promise<void> {
  try {
    await run("systemd-notify", ["--ready", `--pid=${process.pid}`], {
      log,
      timeoutMs: 30_000,
      remediation: "install systemd (systemd-notify) or run the unit as Type=oneshot",
    });
    log.info("boot.notify", "systemd told the unit has started: units ordered after it (the swarm join) go on");
  } catch (error) {
    log.warning("boot.notify", `could not tell systemd the unit has started: ${describeError(error)}`);
  }
}
