/**
 * Signalling a command while it runs (src/exec.ts, RunningCommand): the signals reach it through
 * its child handle while it runs, and once it has exited and been reaped none is sent at all, so
 * a stop meant for it can never reach a process that took its id since. No root: `sleep`.
 */
import { readFile } from "node:fs/promises";
import t from "tap";
import { run, type RunningCommand } from "../src/exec.ts";
import { waitFor } from "./fixtures/builders/wait-for.ts";

/** The state letter of /proc/<pid>/stat (`T`: stopped), undefined once the process is gone. */
async function stateOf(pid: number): Promise<string | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined);
  return stat?.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
}

t.test("a running command is stopped and continued through its handle; an exited one is sent nothing", async (t) => {
  let command: RunningCommand | undefined;
  const finished = run("sleep", ["60"], { check: false, onSpawn: (c) => (command = c) });
  if (!command) throw new Error("onSpawn was not called");
  const { pid } = command;

  t.equal(command.signal("SIGSTOP"), true, "SIGSTOP sent");
  await waitFor(async () => (await stateOf(pid)) === "T", "the stop");
  t.equal(command.signal("SIGCONT"), true, "SIGCONT sent");
  await waitFor(async () => (await stateOf(pid)) !== "T", "the continue");
  t.equal(command.signal("SIGTERM"), true, "SIGTERM sent");

  // A command ended by a signal is a CommandError (no exit code).
  await t.rejects(finished, { message: /SIGTERM/ }, "sleep ended by the signal");
  t.equal(command.signal("SIGSTOP"), false, "after the exit: nothing is sent (no process.kill of a bare pid)");
  t.equal(command.signal("SIGCONT"), false, "nor a continue");
});
