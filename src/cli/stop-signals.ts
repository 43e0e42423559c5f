/**
 * A command's stop on SIGTERM (systemd's stop, or its timeouts) and SIGINT: the handler stays
 * installed for as long as the command runs, never `process.once`. The reason: execa's `cleanup`
 * (on by default) kills a command's children when the agent exits through signal-exit, which
 * handles the same signals and, seeing no other listener left on a signal when it arrives, ends
 * the process with that signal again itself. With a once-listener removed by the signal that
 * fired it, a child started after the handler (a `docker pull`, fio) thus turned one SIGTERM into
 * the agent's death by SIGTERM, before the command could stop by itself (the refresh left its
 * state `running`). A second signal while stopping is ignored: systemd's SIGKILL still follows
 * after its timeout.
 */
export type StopSignal = "SIGTERM" | "SIGINT";

/** Calls `stop` once, at the first of `signals`; returns the function that removes the handler. */
export function onStopSignals(
  stop: (signal: StopSignal) => void,
  signals: readonly StopSignal[] = ["SIGTERM", "SIGINT"],
): () => void {
  let stopped = false;
  const handler = (signal: StopSignal) => {
    if (stopped) return;
    stopped = true;
    stop(signal);
  };
  for (const signal of signals) process.on(signal, handler);
  return () => {
    for (const signal of signals) process.off(signal, handler);
  };
}
