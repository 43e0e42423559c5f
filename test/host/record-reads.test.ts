/**
 * Removing the read-only view the containerd store's recording makes: ctr makes it under no
 * lease, so containerd's garbage collector may remove it first, and "not found" is then the
 * state wanted; any other failure is an error. No root (the recording itself:
 * test/host/record-reads.lab.test.ts).
 */
import t from "tap";
import { AgentError } from "../../src/errors.ts";
import type { RunOptions, RunResult } from "../../src/exec.ts";
import { removeView, type ContainerdCli } from "../../src/host/record-reads.ts";

const ARGS = ["snapshots", "--snapshotter", "overlayfs", "rm", "ebs-cache-record-reads-1"];

/** A ctr that answers every command with `result` and records what it was asked. */
function fakeCtr(result: RunResult): {
  cli: ContainerdCli;
  calls: Array<{ args: readonly string[]; options?: RunOptions }>;
} {
  const calls: Array<{ args: readonly string[]; options?: RunOptions }> = [];
  return {
    calls,
    cli: {
      ctr: async (args, options) => {
        calls.push({ args, ...(options ? { options } : {}) });
        if (result.exitCode !== 0 && options?.check !== false) throw new Error("a check the caller did not want");
        return result;
      },
    },
  };
}

t.test("the view removed", async (t) => {
  const ctr = fakeCtr({ exitCode: 0, stdout: "", stderr: "" });
  await removeView(ctr.cli, ARGS, undefined);
  t.same(
    ctr.calls.map((c) => c.args),
    [ARGS],
  );
  t.equal(ctr.calls[0]?.options?.check, false, "the exit code is read, not thrown");
});

t.test("the view already collected by containerd's garbage collector", async (t) => {
  const stderr =
    'ctr: failed to remove "ebs-cache-record-reads-1": snapshot ebs-cache-record-reads-1 does not exist: not found';
  const ctr = fakeCtr({ exitCode: 1, stdout: "", stderr });
  await t.resolves(removeView(ctr.cli, ARGS, undefined));
});

t.test("any other failure is an error naming the command", async (t) => {
  const ctr = fakeCtr({ exitCode: 1, stdout: "", stderr: "ctr: connection refused\n" });
  const error = await removeView(ctr.cli, ARGS, undefined).catch((e: unknown) => e);
  t.ok(error instanceof AgentError);
  t.match((error as AgentError).message, /ctr snapshots --snapshotter overlayfs rm ebs-cache-record-reads-1 exited 1/);
  t.match((error as AgentError).message, /connection refused$/);
});
