/**
 * `ebs-cache-agent release`: the CLI face of src/agent/release/run.ts with the real adapters
 * (EC2 and IMDS of this instance, systemd's docker.service) wired in src/cli/wiring.ts.
 * systemd runs it as the ExecStop of ebs-cache-agent-release.service, after docker.service has
 * stopped; see docs/release.md.
 */
import { Command } from "commander";
import { runRelease, type ReleaseOutcome } from "../agent/release/run.ts";
import { hostContext, recordingFailure, stopSignal } from "./common.ts";
import { CONFIG_OPTION } from "./options.ts";

export interface ReleaseCliOptions {
  config?: string;
  dryRun?: boolean;
  json?: boolean;
}

/** Prints the outcome for people (or as JSON) on stdout. */
export function printReleaseOutcome(outcome: ReleaseOutcome, json: boolean, out: (line: string) => void): void {
  if (json) {
    out(
      JSON.stringify(
        { instanceId: outcome.identity.instanceId, plan: outcome.plan, result: outcome.report ?? null },
        null,
        2,
      ),
    );
    return;
  }
  const { plan, report } = outcome;
  out(`instance ${plan.instanceId}`);
  out(
    `decision: ${plan.decision}${plan.reason ? ` (${plan.reason})` : ""}` +
      `${plan.volumes.length ? `: ${plan.volumes.join(" ")}` : ""}`,
  );
  out(`shutdown: ${plan.shutdown.kind} (${plan.shutdown.reason})`);
  for (const warning of plan.warnings) out(`warning: ${warning}`);
  if (!report) {
    if (plan.steps.length > 0) out("plan (dry run, nothing changed):");
    for (const [i, step] of plan.steps.entries()) {
      const { step: name, ...detail } = step;
      out(`  ${String(i + 1).padStart(2)}. ${name}${Object.keys(detail).length ? ` ${JSON.stringify(detail)}` : ""}`);
    }
    if (plan.remediation) out(`to do: ${plan.remediation}`);
    return;
  }
  out(`outcome: ${report.outcome}${report.released.length ? ` (${report.released.join(" ")})` : ""}`);
  if (report.kept.length > 0) out(`kept attached over the stop: ${report.kept.join(" ")}`);
  for (const problem of report.problems) out(`${problem.kind}: ${problem.message}\n  to do: ${problem.remediation}`);
  for (const { step, volumeId, ms, skipped } of report.timeline) {
    out(`  ${step.padEnd(16)} ${(volumeId ?? "").padEnd(22)} ${skipped ? "skipped" : `${(ms / 1000).toFixed(2)} s`}`);
  }
}

/** Builds `ebs-cache-agent release`. */
export function releaseCommand(): Command {
  return new Command("release")
    .description(
      "give the cache volume back (at shutdown): labels off, data-root reset, unmount, detach, tag released-at / " +
        "expires-at; " +
        "when the instance is being stopped, the volume is unmounted and stays attached",
    )
    .option(...CONFIG_OPTION)
    .option("--dry-run", "observe and print the plan; change nothing")
    .option("--json", "print the plan and result as JSON")
    .addHelpText(
      "after",
      "\nExit codes: 0 released (or nothing to release, or disabled), 1 refused or failed (the log says what to " +
        "do; nothing\n" +
        "mounted was detached), 2 usage, 3 invalid configuration file (nothing changed).",
    )
    .action(async (opts: ReleaseCliOptions) => {
      const { host, config, log, recorder } = await hostContext(opts.config);
      const dryRun = opts.dryRun ?? false;
      const run = () => runRelease(config, host, { dryRun, signal: stopSignal(log) });
      // A dry run records nothing, failed or not.
      const outcome = dryRun ? await run() : await recordingFailure(recorder, { useCase: "release" }, run);
      printReleaseOutcome(outcome, opts.json ?? false, (line) => process.stdout.write(line + "\n"));
      process.exitCode = outcome.exitCode;
    });
}
