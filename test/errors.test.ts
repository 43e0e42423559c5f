/**
 * One error hierarchy: every typed error is an AgentError (remediation + exit code), and one
 * function maps anything thrown to the exit code both entry points end with.
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { CommanderError } from "commander";
import t from "tap";
import { RetryDeadlineError } from "../src/aws/retry.ts";
import { AgentError, ConfigError, ExitCode, remediationOr } from "../src/errors.ts";
import { exitCodeFor, reportFatal } from "../src/fatal.ts";
import { createMemoryLogger } from "../src/log.ts";

t.test("exitCodeFor: usage 2, help 0, an AgentError its own code, anything else 1", async (t) => {
  t.equal(exitCodeFor(new CommanderError(1, "commander.unknownOption", "unknown option")), ExitCode.usage);
  t.equal(exitCodeFor(new CommanderError(0, "commander.helpDisplayed", "(outputHelp)")), ExitCode.ok);
  t.equal(exitCodeFor(new ConfigError(["pool: missing"])), ExitCode.config);
  t.equal(exitCodeFor(new AgentError("x", "y", ExitCode.degraded)), ExitCode.degraded);
  t.equal(exitCodeFor(new Error("boom")), ExitCode.failure);
  t.equal(exitCodeFor("a string"), ExitCode.failure);
});

t.test("reportFatal logs once, with the remediation, under the entry point's event", async (t) => {
  const log = createMemoryLogger("info");
  t.equal(
    reportFatal(new ConfigError(["pool: missing"]), log, {
      failed: "agent.failed",
      stack: "agent.stack",
      untypedIsBug: true,
    }),
    ExitCode.config,
  );
  t.same(log.lines, [
    '<3>agent.failed: invalid configuration: pool: missing remediation="fix the listed settings and run again"',
  ]);

  const bug = createMemoryLogger("info");
  t.equal(
    reportFatal(new TypeError("x is undefined"), bug, {
      failed: "agent.failed",
      stack: "agent.stack",
      untypedIsBug: true,
    }),
    ExitCode.failure,
  );
  t.match(bug.lines, [/^<3>agent\.failed: unexpected failure: x is undefined remediation="report this as a bug/]);

  const lab = createMemoryLogger("info");
  t.equal(
    reportFatal(new Error("loop devices missing"), lab, {
      failed: "lab.failed",
      stack: "lab.stack",
      untypedIsBug: false,
    }),
    ExitCode.failure,
  );
  t.same(lab.lines, ["<3>lab.failed: loop devices missing"]);

  const usage = createMemoryLogger("info");
  t.equal(
    reportFatal(new CommanderError(1, "commander.unknownOption", "unknown option"), usage, {
      failed: "agent.failed",
      stack: "agent.stack",
      untypedIsBug: true,
    }),
    ExitCode.usage,
  );
  t.same(usage.lines, [], "commander printed its message already");
});

t.test("remediation is read without a cast; a retry that ran out keeps its last error's", async (t) => {
  t.equal(remediationOr(new AgentError("x", "do this"), "fallback"), "do this");
  t.equal(remediationOr(new Error("x"), "fallback"), "fallback");
  t.equal(remediationOr({ remediation: "not an AgentError" }, "fallback"), "fallback");
  const spent = new RetryDeadlineError(3, new AgentError("IMDS down", "check the hop limit", ExitCode.degraded));
  t.type(spent, AgentError);
  t.equal(spent.remediation, "check the hop limit");
  t.equal(spent.exitCode, ExitCode.degraded);
  t.equal(new RetryDeadlineError(2, new Error("reset")).exitCode, ExitCode.failure);
});

/** Error classes that are no agent error on purpose, and why. */
const NOT_AGENT_ERRORS: Record<string, string> = {
  "errors.ts:AgentError": "the root",
  // A stop's abort reason (the signal's name), as the plain Error it replaced was: each command
  // wraps a stop in an error of its own (the boot's CancelledError, the build's VolumeBuildError).
  "errors.ts:StopSignalReceived": "an abort's reason",
  // Control flow inside the JSON parser's error position search; never leaves the function.
  "config/load.ts:JsonStop": "internal",
  // The EC2 emulator's wire errors: what EC2 answers, turned into the SDK's exceptions by the client.
  "lab/ec2/ec2-error.ts:Ec2Error": "EC2's, not the agent's",
  // The EBS direct emulator's wire errors, likewise: what EBS answers.
  "lab/ec2/ebs-direct.ts:EbsError": "EBS's, not the agent's",
};

t.test("every error class in src/ extends AgentError (or an AgentError subclass)", async (t) => {
  const src = join(import.meta.dirname, "..", "src");
  const direct: string[] = [];
  for (const entry of await readdir(src, { recursive: true })) {
    if (!entry.endsWith(".ts")) continue;
    for (const match of (await readFile(join(src, entry), "utf8")).matchAll(/class (\w+) extends Error\b/g))
      direct.push(`${entry}:${match[1]}`);
  }
  t.ok(direct.length > 0, "the scan finds classes");
  t.same(direct.sort(), Object.keys(NOT_AGENT_ERRORS).sort(), "only the listed exceptions extend Error directly");
});
