/**
 * `ebs-cache-agent gc`: deletes expired managed volumes and superseded pool volumes (src/agent/gc/: the verdicts are
 * planned in plan.ts).
 */
import { Command } from "commander";
import { gcExitCode, runGc } from "../agent/gc/run.ts";
import type { GcReport } from "../agent/outcomes.ts";
import { recordingFailure } from "./common.ts";
import { fleetAccess, fleetContext, fleetOptions } from "./fleet.ts";
import { CONFIG_OPTION, wholeNumber } from "./options.ts";

export function gcCommand(): Command {
  const gc = new Command("gc")
    .description(
      "delete managed volumes that are available, past ebs-cache:expires-at and not kept, and available pool " +
        "volumes of a superseded generation once gc.supersededGraceHours have passed; never touches other volumes " +
        "or snapshots. Every time is judged in EC2's time (the Date of its answers), never the host's clock",
    )
    .option(...CONFIG_OPTION)
    .option(
      "--dry-run",
      "print what would be done (its last line: would delete N, would tag N to expire); change nothing",
    )
    .option("--max-deletes <n>", "delete at most this many volumes per run", wholeNumber, 10)
    .option("--json", "print the decisions as JSON");
  for (const option of fleetOptions()) gc.addOption(option);
  return gc
    .addHelpText(
      "after",
      "\nCredentials: the AWS SDK's chain (--profile, the environment, SSO, ~/.aws, the instance profile last): " +
        "runs on a workstation, a management host or a CI job as on a node (docs/operations.md)." +
        "\nExit codes: 0 done (or nothing to do), 1 some deletion failed (or EC2 could not be asked, or no " +
        "credentials), 2 usage, 3 invalid configuration (or no region).",
    )
    .action(async (opts: GcOptions) => {
      const context = await fleetContext(opts.config, fleetAccess(opts));
      const dryRun = opts.dryRun ?? false;
      const outcome = await recordingFailure(context.recorder, { useCase: "gc", dryRun }, async () =>
        runGc(
          { cloud: await context.cloud(), log: context.log, recorder: context.recorder },
          {
            dryRun,
            maxDeletes: opts.maxDeletes,
            ttlHours: context.config.ttlHours,
            retire: {
              graceHours: context.config.gc.supersededGraceHours,
              quarantineHours: context.config.claim.quarantineHours,
              pool: { name: context.config.pool, imageSet: context.config.imageSet },
            },
          },
        ),
      );
      const out = (line: string) => process.stdout.write(line + "\n");
      if (opts.json) out(JSON.stringify(outcome, null, 2));
      else {
        for (const d of outcome.decisions)
          out(`${d.volumeId}  ${d.verdict.padEnd(13)} ${d.reason}${d.done ? `  -> ${d.done}` : ""}`);
        out(gcSummary(outcome, opts.dryRun ?? false));
      }
      process.exitCode = gcExitCode(outcome);
    });
}

interface GcOptions {
  config?: string;
  dryRun?: boolean;
  maxDeletes: number;
  json?: boolean;
  profile?: string;
  region?: string;
}

/**
 * gc's last line: a dry run says what it would do (`would delete N`), a real run what it did. Both
 * end `… failed, N managed volumes seen` (a dry run fails nothing).
 */
export function gcSummary(report: GcReport, dryRun: boolean): string {
  const overCap = report.overCap > 0 ? `, ${report.overCap} over this run's cap (next run)` : "";
  const seen = `${report.failed} failed, ${report.decisions.length} managed volumes seen`;
  if (dryRun)
    return (
      `dry run, nothing changed: would delete ${report.wouldDelete}, would tag ${report.wouldTag} to expire` +
      `${overCap}; ${seen}`
    );
  const tagged = report.decisions.filter((d) => d.done === "tagged").length;
  return `${report.deleted} deleted, ${report.spared} spared, ${tagged} tagged to expire${overCap}, ${seen}`;
}
