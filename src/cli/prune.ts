/**
 * `ebs-cache-agent prune`: removes images outside the pool's current generation from a pool
 * volume fuller than `prune.thresholdPercent` (src/agent/prune/: the decisions are planned in
 * plan.ts). The boot starts it in the background after it came up (`--after-boot`);
 * ebs-cache-agent-prune.timer runs it every hour while the node runs (`--timer`): a hot buffer or
 * a long-lived node pulls images for days and its disk would fill otherwise.
 */
import { recordingFailure, startDetached } from "./common.ts";
import { loadCommandConfig } from "./load-config.ts";
import { Command, Option } from "commander";
import { pruneExitCode, pruneDeps, runPrune, type PruneReport } from "../agent/prune/run.ts";
import { hostWiringOptions, wireAdapters } from "./wiring.ts";
import { AgentError, describeError } from "../errors.ts";
import { readFilesystemFill } from "../host/fill.ts";
import { CONFIG_OPTION } from "./options.ts";

const MiB = 2 ** 20;

/** The outcome for people: the verdict, then each image and what became of it. */
export function renderPrune(outcome: PruneReport): string[] {
  const { plan } = outcome;
  const percent = (ratio: number | undefined) => (ratio === undefined ? "?" : `${(ratio * 100).toFixed(1)} %`);
  const lines = [`${outcome.dryRun ? "dry run: " : ""}${plan.verdict}: ${plan.reason}`];
  if (plan.volumeId)
    lines.push(
      `volume ${plan.volumeId} at ${plan.mountPoint ?? "?"}; current images from ` +
        `${plan.currentSource}${plan.generation ? ` (${plan.generation})` : ""}`,
    );
  const done = new Map(outcome.removals.map((r) => [r.id, r]));
  for (const image of plan.images) {
    const result = done.get(image.id);
    const name = image.references.join(",") || image.id.slice(0, 19);
    lines.push(
      `  ${image.verdict.padEnd(14)} ${name}  ${(image.freesBytes / MiB).toFixed(1)} MiB  ` +
        `${image.reason}${result ? `  -> ${result.done}${result.error ? ` (${result.error})` : ""}` : ""}`,
    );
  }
  if (plan.verdict === "prune") {
    lines.push(
      outcome.dryRun
        ? `would remove ${plan.removals.length} image(s): fill ${percent(plan.usedRatio)} -> about ` +
            `${percent(plan.projectedUsedRatio)}`
        : `${outcome.removed} removed, ${outcome.failed} failed: fill ${percent(outcome.usedRatioBefore)} -> ` +
            `${percent(outcome.usedRatioAfter)}`,
    );
  }
  return lines;
}

export function pruneCommand(): Command {
  return new Command("prune")
    .description(
      "on a pool volume fuller than prune.thresholdPercent, remove images outside the pool's current generation " +
        "until the fill is below prune.targetPercent; never on a workspace volume, never an image a container uses " +
        "(running or stopped), never forced",
    )
    .option(...CONFIG_OPTION)
    .option("--dry-run", "print what would be removed; change nothing")
    .option("--json", "print the plan and what was done as JSON")
    .option(
      "--timer",
      "the run ebs-cache-agent-prune.timer starts while the node runs: only when prune.periodic; a fill below " +
        "prune.thresholdPercent asks nothing of EC2 or docker",
    )
    .addOption(
      new Option(
        "--after-boot",
        "the run a boot starts: only when prune.afterBoot, a failure is a warning, exit 0",
      ).hideHelp(),
    )
    .addHelpText(
      "after",
      "\nExit codes: 0 done (or nothing to do), 1 some removal failed or docker/EC2 could not be asked, 2 usage, " +
        "3 invalid configuration.",
    )
    .action(
      async (opts: { config?: string; dryRun?: boolean; json?: boolean; afterBoot?: boolean; timer?: boolean }) => {
        const { config, log } = await loadCommandConfig(opts.config);
        if (opts.afterBoot && !config.prune.afterBoot) return;
        if (opts.timer && !config.prune.periodic) {
          log.info("prune.off", "prune.periodic is false: the timer's run does nothing");
          return;
        }
        const host = wireAdapters(hostWiringOptions(config, log, async () => undefined));
        const { recorder } = host;
        const dryRun = opts.dryRun ?? false;
        const trigger = opts.afterBoot ? "boot" : opts.timer ? "timer" : "manual";
        const run = recordingFailure(recorder, { useCase: "prune", trigger, dryRun }, () =>
          runPrune(pruneDeps(config, host), {
            settings: { thresholdPercent: config.prune.thresholdPercent, targetPercent: config.prune.targetPercent },
            imageSet: config.imageSet,
            prePulledImagesTag: config.refresh.prePulledImagesTag,
            dryRun,
            trigger,
            recorder,
          }),
        );
        if (opts.afterBoot) {
          // Off the boot's path: whatever happens here, the node's readiness stands.
          await run.catch((error: unknown) =>
            log.warning(
              "prune.failed",
              `the prune after the boot failed: ${describeError(error)}; readiness is unchanged`,
              {
                remediation: error instanceof AgentError ? error.remediation : undefined,
              },
            ),
          );
          return;
        }
        const outcome = await run;
        const out = (line: string) => process.stdout.write(line + "\n");
        if (opts.json) out(JSON.stringify(outcome, null, 2));
        else for (const line of renderPrune(outcome)) out(line);
        process.exitCode = pruneExitCode(outcome);
      },
    );
}

/**
 * Starts `ebs-cache-agent prune --after-boot` detached once the boot came up, only when the cache
 * filesystem is fuller than the threshold: below it a prune would start a process and ask EC2
 * only to stop, on every boot.
 */
export async function startPruneAfterBoot(
  configPath: string | undefined,
  mountPoint: string | undefined,
  thresholdPercent: number,
): Promise<boolean> {
  const fill = mountPoint === undefined ? undefined : await readFilesystemFill(mountPoint);
  if (!fill || fill.usedRatio * 100 <= thresholdPercent) return false;
  await startDetached(["prune", "--after-boot"], configPath);
  return true;
}
