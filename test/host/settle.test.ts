/**
 * settleFilesystem's freeze-and-thaw sequence, with a fake command runner: the thaw is attempted
 * whenever the freeze may have taken effect, never to undo a freeze that was not ours, and a
 * failed thaw is an error that says how to thaw by hand. No root (the real fsfreeze on a live
 * filesystem: test/host/filesystem.lab.test.ts).
 */
import t from "tap";
import { AgentError, CommandError } from "../../src/errors.ts";
import type { RunResult } from "../../src/exec.ts";
import { settleFilesystem, type CommandRunner } from "../../src/host/mount.ts";

const MP = "/var/lib/ebs-cache/build";

/** What the fake's fsfreeze does for one action: a result, or a thrown error. */
type Outcome = RunResult | Error;

const ok: RunResult = { exitCode: 0, stdout: "", stderr: "" };
const notFrozen: RunResult = { exitCode: 1, stdout: "", stderr: `fsfreeze: ${MP}: unfreeze failed: Invalid argument` };
const ioError: RunResult = { exitCode: 1, stdout: "", stderr: `fsfreeze: ${MP}: unfreeze failed: Input/output error` };
/** Killed at its timeout: run gives no exit code. */
const killed = () => new CommandError(["fsfreeze", "--freeze", MP], undefined, "timed out after 300000 ms", "check");
/** FIFREEZE refused (EBUSY: frozen by someone else): fsfreeze exited 1, so run with check threw. */
const refused = () => new CommandError(["fsfreeze", "--freeze", MP], 1, "Device or resource busy", "check");

/** A runner that answers fsfreeze by action and records the command lines it was given. */
function fakeRunner(outcomes: { freeze: Outcome; thaw: Outcome }): { runCommand: CommandRunner; calls: string[] } {
  const calls: string[] = [];
  const runCommand: CommandRunner = async (file, args, options = {}) => {
    calls.push([file, ...args].join(" "));
    const outcome = args[0] === "--freeze" ? outcomes.freeze : outcomes.thaw;
    if (outcome instanceof Error) throw outcome;
    if (outcome.exitCode !== 0 && options.check !== false)
      throw new CommandError([file, ...args], outcome.exitCode, outcome.stderr, "check");
    return outcome;
  };
  return { runCommand, calls };
}

const FREEZE = `fsfreeze --freeze ${MP}`;
const THAW = `fsfreeze --unfreeze ${MP}`;

t.test("frozen then thawed: both, in that order", async (t) => {
  const { runCommand, calls } = fakeRunner({ freeze: ok, thaw: ok });
  await settleFilesystem(MP, { runCommand });
  t.same(calls, [FREEZE, THAW]);
});

t.test("the thaw fails after a freeze: an error saying the filesystem may be frozen and how to thaw it", async (t) => {
  for (const thaw of [ioError, new CommandError(["fsfreeze"], undefined, "spawn ENOENT", "check")]) {
    const { runCommand, calls } = fakeRunner({ freeze: ok, thaw });
    const error = await settleFilesystem(MP, { runCommand }).catch((e: unknown) => e);
    if (!(error instanceof AgentError)) return t.fail(`rejects with an AgentError, not ${String(error)}`);
    t.notOk(error instanceof CommandError, "not the bare command failure");
    t.match(error.message, /may be left frozen/);
    t.match(error.remediation, `thaw it by hand: fsfreeze --unfreeze ${MP}`);
    t.same(calls, [FREEZE, THAW]);
  }
});

t.test("after a freeze that found the filesystem not frozen-by-it (exit 1, EBUSY): no thaw", async (t) => {
  const { runCommand, calls } = fakeRunner({ freeze: refused(), thaw: ok });
  await t.rejects(settleFilesystem(MP, { runCommand }), { message: /Device or resource busy/ });
  t.same(calls, [FREEZE], "another's freeze is not undone");
});

t.test("a freeze killed at its timeout may have frozen: thawed, and the freeze's failure reported", async (t) => {
  for (const thaw of [ok, notFrozen]) {
    const { runCommand, calls } = fakeRunner({ freeze: killed(), thaw });
    await t.rejects(settleFilesystem(MP, { runCommand }), { message: /timed out/ });
    t.same(calls, [FREEZE, THAW]);
  }
});

t.test("a killed freeze whose thaw fails: the error says how to thaw by hand", async (t) => {
  const { runCommand, calls } = fakeRunner({ freeze: killed(), thaw: ioError });
  await t.rejects(settleFilesystem(MP, { runCommand }), {
    message: /may be left frozen/,
    remediation: new RegExp(`fsfreeze --unfreeze ${MP}`),
  });
  t.same(calls, [FREEZE, THAW]);
});

t.test("an invalid mount point runs nothing", async (t) => {
  const { runCommand, calls } = fakeRunner({ freeze: ok, thaw: ok });
  await t.rejects(settleFilesystem("relative/path", { runCommand }), AgentError);
  t.same(calls, []);
});
