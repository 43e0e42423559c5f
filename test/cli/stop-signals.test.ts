/**
 * A command stops by itself on SIGTERM even while a child it started runs: the stop handler stays
 * installed (src/cli/stop-signals.ts), so execa's exit cleanup (signal-exit) does not end the
 * agent with the signal again. The `once` case shows the failure the helper exists for. The
 * commands that undo or finish their step on a stop (stopSignal) take Ctrl-C's SIGINT the same
 * way. No root.
 */
import t from "tap";
import { execa } from "execa";
import { fileURLToPath } from "node:url";

const CHILD = fileURLToPath(new URL("../fixtures/kill/stop-signals-child.ts", import.meta.url));

async function stopWhileChildRuns(mode: "stays" | "once" | "command", signal: "SIGTERM" | "SIGINT" = "SIGTERM") {
  // Through `env -u NODE_OPTIONS`: the test runner's process-info hook adds itself to every child's
  // NODE_OPTIONS at the spawn, and its exit handling hides the failure; the agent runs without it.
  const child = execa("env", ["-u", "NODE_OPTIONS", process.execPath, CHILD, mode], {
    env: Object.fromEntries(
      Object.entries(process.env).filter(([key]) => key !== "NODE_OPTIONS" && !/^_?TAP/.test(key)),
    ),
    extendEnv: false,
    reject: false,
    forceKillAfterDelay: false,
    timeout: 120_000,
  });
  await new Promise<void>((resolve) => child.stdout!.once("data", () => resolve()));
  child.kill(signal);
  return child;
}

t.test("the handler stays installed: the command ends by itself, exit 0, its child stopped", async (t) => {
  const ended = await stopWhileChildRuns("stays");
  t.equal(ended.signal, undefined, "not killed by the signal");
  t.equal(ended.exitCode, 0, String(ended.stderr));
  t.match(String(ended.stdout), /stopped by itself/);
});

t.test("a once-handler: the same SIGTERM kills the command before it can stop", async (t) => {
  const ended = await stopWhileChildRuns("once");
  t.equal(ended.signal, "SIGTERM", "signal-exit raised the signal again once no other listener was left");
  t.notMatch(String(ended.stdout), /stopped by itself/);
});

t.test("boot, release and the snapshot commands stop by themselves on SIGINT (Ctrl-C) as on SIGTERM", async (t) => {
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    const ended = await stopWhileChildRuns("command", signal);
    t.equal(ended.signal, undefined, `${signal}: not killed by the signal`);
    t.equal(ended.exitCode, 0, String(ended.stderr));
    t.match(String(ended.stdout), `stopped by itself (${signal} received)`, `${signal}: the stop names it`);
  }
});
