/**
 * `ebs-cache-agent acceptance`: the one-command answer to "does EBS work here, and how fast?" on a
 * real account (src/agent/acceptance/). It creates, attaches and deletes volumes, so it runs only
 * with --yes; without, it says so in one line and touches nothing.
 */
import { Command } from "commander";
import { ACCEPTANCE_LIFETIME_HOURS, runAcceptance } from "../agent/acceptance/run.ts";
import { wireAcceptance } from "../agent/acceptance/wire.ts";
import { ExitCode } from "../errors.ts";
import { hostContext } from "./common.ts";
import { CONFIG_OPTION } from "./options.ts";

/** The one line of a run without --yes. */
export const REFUSAL =
  "acceptance creates two EBS volumes (one from the pool's snapshot, one blank), attaches them here and deletes " +
  "them: run it again with --yes";

export function acceptanceCommand(): Command {
  return new Command("acceptance")
    .description(
      "on this instance, with the agent's role: create a small volume from the pool's current snapshot and a blank " +
        "one (tagged ebs-cache:acceptance=<run id>, managed, expiring in " +
        `${ACCEPTANCE_LIFETIME_HOURS} h), attach each here, find its device by NVMe serial, mount the snapshot's ` +
        "read-only, time attach-to-device and first reads of never-read blocks at queue depths 1, 8 and 32 and the " +
        "throughput once initialized (fio), then unmount, detach (never forced) and delete everything it made, and " +
        "write the calibration file (schema/ebs-model.schema.json; benches take it with --ebs-model). It prints the " +
        "cost bound and every volume before it starts, and first cleans up what an earlier, killed run left",
    )
    .option(...CONFIG_OPTION)
    .option("--yes", "create, attach and delete the volumes (without it the command refuses and changes nothing)")
    .option("--output <file>", "where to write the calibration (default <paths.stateDir>/ebs-model.json)")
    .addHelpText(
      "after",
      "\nNeeds the agent's role (iam/ebs-cache-agent-policy.json grants every call it makes), root (mount), fio and " +
        "xfsprogs.\nExit codes: 0 the calibration was written and nothing was left behind, 1 the run failed or left " +
        "something (the message says what; the next run or gc deletes it), 2 usage (--yes missing), 3 invalid " +
        "configuration.",
    )
    .action(async (opts: { config?: string; yes?: boolean; output?: string }) => {
      if (!opts.yes) {
        process.stderr.write(`${REFUSAL}\n`);
        process.exitCode = ExitCode.usage;
        return;
      }
      const out = (line: string) => process.stdout.write(line + "\n");
      const context = await hostContext(opts.config);
      const deps = wireAcceptance(context.config, context.host, {
        ...(opts.output ? { output: opts.output } : {}),
        say: out,
      });
      const result = await runAcceptance(deps);
      const c = result.calibration;
      const l = c.firstReadLatencyMs;
      out(
        `measured: attach ${c.attachSeconds} s, first read ${l.qd1} / ${l.qd8} / ${l.qd32} ms at depth 1 / 8 / 32, ` +
          `${c.concurrency} at once, warm ` +
          `${c.warmThroughputMiBps} MiB/s`,
      );
      out(`every volume of run ${result.runId} deleted; calibration written to ${result.output}`);
    });
}
