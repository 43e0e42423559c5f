/**
 * `ebs-cache-agent prewarm`: the pre-warm of this instance's cache volume (see
 * src/agent/prewarm/run.ts and docs/prewarm.md).
 */
import { Command, Option } from "commander";
import { PREWARM_STRATEGIES, type PrewarmStrategy } from "../config/index.ts";
import { runPrewarm } from "../agent/prewarm/run.ts";
import { hostContext, stopOnSignals } from "./common.ts";
import { CONFIG_OPTION } from "./options.ts";

/** Builds `ebs-cache-agent prewarm`. */
export function prewarmCommand(): Command {
  return new Command("prewarm")
    .description(
      "check or initialize the cache volume restored from a snapshot (resumes an interrupted initialization); " +
        "labels warming, then ready",
    )
    .option(...CONFIG_OPTION)
    .addOption(new Option("--strategy <strategy>", "override prewarm.strategy").choices([...PREWARM_STRATEGIES]))
    .option("--background", "the run the boot hands a long initialization to (same work; logs say so)")
    .option(
      "--from-mount",
      "the run a boot begins at the mount, before docker (ebs-cache-agent-prewarm.service): reads only a volume " +
        "known cold, publishes no label before the boot has",
    )
    .option("--json", "print the outcome as JSON")
    .addHelpText(
      "after",
      "\nExit codes: 0 done (or nothing to do), 1 the pre-warm failed (the node is still reported; the log says " +
        "why), 2 usage, 3 invalid configuration, 143 (SIGTERM) or 130 (SIGINT) stopped: the next run resumes.",
    )
    .action(
      async (opts: {
        config?: string;
        strategy?: PrewarmStrategy;
        background?: boolean;
        fromMount?: boolean;
        json?: boolean;
      }) => {
        const context = await hostContext(opts.config);
        if (opts.background || opts.fromMount)
          context.log.info(
            "prewarm.background",
            `background pre-warm run started${opts.fromMount ? " at the mount" : ""}`,
            { pid: process.pid },
          );
        // No log line of its own: the run logs how it stopped.
        const stop = stopOnSignals(undefined, "stopping the reads");
        try {
          const result = await runPrewarm(context.config, context.host, {
            ...(opts.strategy ? { strategy: opts.strategy } : {}),
            ...(opts.fromMount ? { fromMount: true } : {}),
            signal: stop.signal,
          });
          const out = (line: string) => process.stdout.write(line + "\n");
          // The JSON keeps the key it always had (`outcome`), whatever the use case calls it now.
          if (opts.json) {
            const { report, ...rest } = result;
            out(JSON.stringify({ ...rest, ...(report ? { outcome: report } : {}) }, null, 2));
          } else if (result.report) {
            out(`volume ${result.volumeId}: ${result.report.decision.action} (${result.report.decision.reason})`);
            out(
              `verdict: ${result.report.verdict}, phase: ` +
                `${result.report.phase}${result.report.error ? `, error: ${result.report.error}` : ""}`,
            );
          } else if (result.volumeId) out(`volume ${result.volumeId}: nothing to read before docker starts`);
          else out("no cache volume attached: nothing to pre-warm");
          process.exitCode = result.exitCode;
        } finally {
          stop.remove();
        }
      },
    );
}
