/**
 * `ebs-cache-agent refresh`: pulls the images the attached pool volume lacks (see
 * src/agent/refresh/ and docs/operations.md). The boot starts it with `--background` after
 * `ready` when config refresh.enabled is true; by hand it runs whatever that setting says.
 */
import { Command } from "commander";
import { renderRefresh, runRefresh } from "../agent/refresh/run.ts";
import { hostContext, stopOnSignals } from "./common.ts";
import { CONFIG_OPTION } from "./options.ts";

/** Builds `ebs-cache-agent refresh`. */
export function refreshCommand(): Command {
  return new Command("refresh")
    .description(
      "pull the images of the pool's current generation and of osparc's pre_pulled_images instance tag that the " +
        "cache volume lacks; tag the volume current when it holds them all",
    )
    .option(...CONFIG_OPTION)
    .option("--dry-run", "observe and print the plan; pull nothing, tag nothing")
    .option("--json", "print the plan and the final state as JSON")
    .option("--background", "the run a boot starts after ready (same work; logs say so)")
    .addHelpText(
      "after",
      "\nA failed pull is a warning: the node's readiness labels never change. Only pool volumes are refreshed.\n" +
        ("Exit codes: 0 done (pulls may have failed: see the output or `status`), 1 the refresh could not run " +
          "(EC2 or docker unreachable) or was stopped (SIGTERM, SIGINT: the rest is pulled by the next run), " +
          "2 usage, 3 invalid configuration."),
    )
    .action(async (opts: { config?: string; dryRun?: boolean; json?: boolean; background?: boolean }) => {
      const context = await hostContext(opts.config);
      if (opts.background)
        context.log.info("refresh.background", "background refresh run started", { pid: process.pid });
      const stop = stopOnSignals(context.log, "stopping the pulls in flight");
      try {
        const outcome = await runRefresh(context.config, context.host, {
          dryRun: opts.dryRun ?? false,
          signal: stop.signal,
        });
        const out = (line: string) => process.stdout.write(line + "\n");
        if (opts.json) out(JSON.stringify({ plan: outcome.plan, state: outcome.state ?? null }, null, 2));
        else for (const line of renderRefresh(outcome)) out(line);
        process.exitCode = outcome.exitCode;
      } finally {
        stop.remove();
      }
    });
}
