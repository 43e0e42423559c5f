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

/**
 * Tells systemd where a long task stands (`STATUS=`, shown by `systemctl status`), or undefined
 * without $NOTIFY_SOCKET (a shell, a unit that takes no notifications). One message at a time: a
 * status given while the previous one is still being sent is dropped, the next one says more. A
 * failure is logged once at debug level: the status is a courtesy, the journal has the progress.
 */
export function serviceStatusNotifier(
  log: Logger,
  env: NodeJS.ProcessEnv = process.env,
): ((text: string) => void) | undefined {
  if (!env.NOTIFY_SOCKET) return undefined;
  let sending = false;
  let failed = false;
  return (text) => {
    if (sending) return;
    sending = true;
    run("systemd-notify", [`--status=${text}`, `--pid=${process.pid}`], { log, timeoutMs: 10_000 })
      .catch((error: unknown) => {
        if (!failed) log.debug("host.notify", `could not tell systemd the status: ${describeError(error)}`);
        failed = true;
      })
      .finally(() => (sending = false));
  };
}
