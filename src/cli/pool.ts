/** `ebs-cache-agent pool`: the managed volumes, as a table or JSON; `pool fill`: the keeper (src/agent/keeper/). */
import { Command } from "commander";
import { keeperExitCode, keeperSettingsForPools, runKeepers, type KeeperReport } from "../agent/keeper/run.ts";
import { renderPoolView, runPoolView } from "../agent/pool/run.ts";
import { progressOutputs, recordingFailure } from "./common.ts";
import { fleetAccess, fleetContext, fleetOptions } from "./fleet.ts";
import { CONFIG_OPTION, poolNameOption } from "./options.ts";

interface PoolOptions {
  config?: string;
  pool?: string;
  json?: boolean;
  wide?: boolean;
  profile?: string;
  region?: string;
}

export function poolCommand(): Command {
  const pool = new Command("pool")
    .description(
      "list the pool and workspace volumes the agent manages: per zone by state and generation with their GiB, " +
        "estimated monthly cost " +
        ("(config cost.*) and the keeper's target; then each volume: state, GiB, age, claimed-by, generation " +
          "(--wide: expiry, cost, workspace, last error)"),
    )
    .option(...CONFIG_OPTION)
    .option("--pool <name>", "only this pool", poolNameOption)
    .option("--json", "JSON for scripts (schema/pool.schema.json): every field")
    .option("--wide", "the volume table with every column (expiry, cost, workspace, last error)");
  for (const option of fleetOptions()) pool.addOption(option);
  pool
    .addHelpText(
      "after",
      "\nCosts are estimates at the prices in config cost.* (us-east-1 list prices by default); snapshots count " +
        "at their volume size, the most they can cost." +
        "\nCredentials: the AWS SDK's chain (--profile, the environment, SSO, ~/.aws, the instance profile last): " +
        "runs on a workstation, a management host or a CI job as on a node (docs/operations.md)." +
        "\nExit codes: 0 listed, 1 EC2 could not be asked (or no credentials), 2 usage (a bad --pool name too), 3 " +
        "invalid configuration (or no region).",
    )
    .action(async (opts: PoolOptions) => {
      const context = await fleetContext(opts.config, fleetAccess(opts));
      const cloud = await context.cloud();
      const report = await runPoolView(context.config, cloud, opts.pool !== undefined ? { pool: opts.pool } : {});
      process.stdout.write(renderPoolView(report, { json: opts.json ?? false, wide: opts.wide ?? false }) + "\n");
    });
  pool.addCommand(fillCommand());
  return pool;
}

function fillCommand(): Command {
  return (
    new Command("fill")
      // `pool`'s --config, --json, --profile and --region count here too: listed in `pool fill --help`.
      .configureHelp({ showGlobalOptions: true })
      .description(
        "the pool keeper: in each zone of keeper.zones, create volumes from the pool's newest snapshot up to " +
          "keeper.minAvailable available " +
          ("(within keeper.maxVolumes and keeper.maxGiB for the whole pool), delete available ones beyond " +
            "keeper.maxAvailable (oldest first; ") +
          ("never one in use, kept or not managed), and tag ebs-cache:initialized the volumes EBS reports fully " +
            "initialized; the same for each pool of instanceTypePools, at its size"),
      )
      .option(...CONFIG_OPTION)
      .option("--dry-run", "print the plan; change nothing")
      .option(
        "--json",
        "print the plan and what was done as JSON: an object whose `pools` lists one outcome per pool stocked " +
          "(`pool`, then each pool of instanceTypePools), one pool or several alike",
      )
      .addHelpText(
        "after",
        "\nSafe to run on several hosts at once, whatever their clocks: each new volume's ClientToken names its " +
          "slot and what its zone holds (never the time), and the pool is counted again before each further " +
          "volume." +
          "\nExit codes: 0 done (or nothing to do), 1 some step failed (or a pool's size is below its " +
          "snapshot's, or no credentials), 2 usage, 3 invalid configuration (keeper.zones empty, or no region).",
      )
      .action(async (_opts: unknown, command: Command) => {
        // `pool`'s own --config and --json are parsed by `pool` wherever they stand (`pool fill --json`).
        const opts = command.optsWithGlobals<{
          config?: string;
          dryRun?: boolean;
          json?: boolean;
          profile?: string;
          region?: string;
        }>();
        const context = await fleetContext(opts.config, fleetAccess(opts));
        const pools = keeperSettingsForPools(context.config);
        const dryRun = opts.dryRun ?? false;
        // A dry run writes no metrics, failed or not.
        const recorder = dryRun ? { runFailed: async () => undefined } : context.recorder;
        const outcomes = await recordingFailure(recorder, { useCase: "keeper" }, async () =>
          runKeepers(
            {
              cloud: await context.cloud(),
              log: context.log,
              recorder: context.recorder,
              progress: progressOutputs(context.log),
            },
            pools,
            { dryRun },
          ),
        );
        // Under `pools` however many there are (as `pool --json` lists them): a script reads one shape,
        // and a pool added to instanceTypePools does not change it.
        process.stdout.write(
          (opts.json
            ? JSON.stringify({ pools: outcomes }, null, 2)
            : outcomes.map((outcome) => renderKeeperReport(outcome, opts.dryRun ?? false)).join("\n")) + "\n",
        );
        process.exitCode = Math.max(...outcomes.map(keeperExitCode));
      })
  );
}

/** The plan and what was done, for people. */
function renderKeeperReport(outcome: KeeperReport, dryRun: boolean): string {
  const { plan, final } = outcome;
  const lines = [
    `pool ${plan.pool}: ${plan.totals.volumes} volumes, ${plan.totals.gib} GiB (cap ${plan.totals.maxVolumes} ` +
      `volumes, ${plan.totals.maxGiB} GiB); snapshot ` +
      `${plan.snapshotId ?? "none"}${plan.generation ? ` (generation ${plan.generation})` : ""}`,
  ];
  for (const z of plan.zones) {
    const todo =
      [z.create > 0 ? `create ${z.create}` : "", z.trim > 0 ? `trim ${z.trim}` : ""].filter(Boolean).join(", ") ||
      "nothing to do";
    lines.push(
      `  ${z.zone}: ${z.available} available + ${z.creating} creating, ${z.superseded} superseded, ` +
        `${z.heldByStopped} held by stopped ` +
        `instances${z.oldestStoppedDays !== null ? ` (longest ${z.oldestStoppedDays.toFixed(1)} days)` : ""}, ` +
        `${z.total} in all: ${todo}${z.short ? ` (short: ${z.short})` : ""}`,
    );
  }
  if (dryRun) {
    for (const s of plan.steps)
      lines.push(
        `  would ${s.step} ` +
          `${"volumeId" in s ? s.volumeId : `slot ${s.slot} from ${s.snapshotId} (${s.sizeGiB} GiB)`} in ${s.zone}`,
      );
    lines.push("dry run: nothing changed");
    return lines.join("\n");
  }
  for (const r of outcome.results)
    lines.push(`  ${r.step} ${r.volumeId ?? ""} in ${r.zone}: ${r.done}${r.error ? ` (${r.error})` : ""}`);
  lines.push(
    `after ${outcome.rounds} rounds: ` +
      `${final.zones.map((z) => `${z.zone} ${z.available + z.creating}`).join(", ")} in stock; ${outcome.failed} ` +
      `failed`,
  );
  return lines.join("\n");
}
