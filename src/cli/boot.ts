/**
 * `ebs-cache-agent boot`: the CLI face of src/agent/boot/run.ts with the real adapters
 * (EC2 and IMDS of this instance, systemd's docker.service) wired in src/cli/wiring.ts.
 */
import { Command } from "commander";
import { runBoot, type BootOutcome } from "../agent/boot/run.ts";
import { serviceReadyNotifier } from "../host/systemd-notify.ts";
import { hostContext, recordingFailure, stopSignal } from "./common.ts";
import { CONFIG_OPTION } from "./options.ts";

export interface BootCliOptions {
  config?: string;
  dryRun?: boolean;
  json?: boolean;
  /** commander's negated --no-docker: false when given. */
  docker: boolean;
  /** commander's negated --no-claim: false when given. */
  claim: boolean;
}

/**
 * A step's arguments for people, one `name: value` a line (`--json` keeps the JSON): a nested
 * object's keys are joined with dots, a list of plain values with commas, a tag map as key=value.
 */
export function stepArguments(detail: Record<string, unknown>, prefix = ""): string[] {
  const lines: string[] = [];
  for (const [key, value] of Object.entries(detail)) {
    const name = `${prefix}${key}`;
    if (value === undefined) continue;
    if (Array.isArray(value)) {
      if (value.every((item) => item === null || typeof item !== "object"))
        lines.push(`${name}: ${value.length === 0 ? "(none)" : value.map(String).join(", ")}`);
      else value.forEach((item, i) => lines.push(...stepArguments(item as Record<string, unknown>, `${name}[${i}].`)));
    } else if (value !== null && typeof value === "object") {
      const entries = Object.entries(value);
      if (entries.length > 0 && entries.every(([, v]) => typeof v === "string"))
        lines.push(`${name}: ${entries.map(([k, v]) => `${k}=${v as string}`).join(", ")}`);
      else lines.push(...stepArguments(value as Record<string, unknown>, `${name}.`));
    } else lines.push(`${name}: ${String(value)}`);
  }
  return lines;
}

/** Prints the outcome for people (or as JSON) on stdout. */
export function printOutcome(outcome: BootOutcome, json: boolean, out: (line: string) => void): void {
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
  out(`instance ${plan.instanceId} in ${plan.availabilityZone}`);
  out(
    `source: ${plan.selection.source}` +
      ("candidates" in plan.selection
        ? ` (${plan.selection.candidates.length} candidates: ${plan.selection.candidates.join(" ")})`
        : ""),
  );
  if (!report) {
    out("plan (dry run, nothing changed):");
    for (const [i, step] of plan.steps.entries()) {
      const { step: name, ...detail } = step;
      out(`  ${String(i + 1).padStart(2)}. ${name}`);
      for (const line of stepArguments(detail)) out(`        ${line}`);
    }
    return;
  }
  out(`outcome: ${report.outcome}${report.reason ? ` (${report.reason})` : ""}`);
  if (report.volumeId)
    out(`volume: ${report.volumeId} on ${report.device ?? "?"} mounted at ${report.mountPoint ?? "?"}`);
  for (const { step, ms } of report.timeline) out(`  ${step.padEnd(20)} ${(ms / 1000).toFixed(2)} s`);
}

/** Builds `ebs-cache-agent boot`. */
export function bootCommand(): Command {
  return new Command("boot")
    .description(
      "claim, attach and mount a cache volume, point docker's data-root at it, start docker, report readiness",
    )
    .option(...CONFIG_OPTION)
    .option("--dry-run", "observe and print the plan; change nothing")
    .option("--json", "print the plan and result as JSON")
    .option(
      "--no-docker",
      "first boot phase (before docker.service): stop once daemon.json points at the volume; no docker start, no " +
        "labels",
    )
    .addHelpText(
      "after",
      "\nExit codes: 0 ready (or disabled), 1 failure, 2 usage, 3 invalid configuration or ebs-cache:* instance " +
        "tags (nothing changed),\n4 degraded (no cache volume: docker on its default data-root).",
    )
    .option(
      "--no-claim",
      "second boot phase (after docker.service): only reuse a volume already attached; never claim or create one",
    )
    .action(async (opts: BootCliOptions) => {
      const { host, log, config, recorder } = await hostContext(opts.config);
      const signal = stopSignal(log);
      const dryRun = opts.dryRun ?? false;
      const run = () =>
        runBoot(config, host, {
          dryRun,
          withDocker: opts.docker,
          mayClaim: opts.claim,
          signal,
          // Under a Type=notify unit (phase 2), its start ends here: the swarm join waits for no more of the boot.
          dataRootFinal: serviceReadyNotifier(log),
        });
      // A dry run records nothing, failed or not.
      const outcome = dryRun ? await run() : await recordingFailure(recorder, { useCase: "boot" }, run);
      printOutcome(outcome, opts.json ?? false, (line) => process.stdout.write(line + "\n"));
      process.exitCode = outcome.exitCode;
      // The prune runs detached, after the node is up and only on a full disk: it never delays or
      // changes the boot's outcome.
      const up = outcome.report?.outcome === "ready" || outcome.report?.outcome === "warming";
      if (up && config.prune.afterBoot) {
        await (
          await import("./prune.ts")
        )
          .startPruneAfterBoot(opts.config, outcome.report?.mountPoint, config.prune.thresholdPercent)
          .catch((error: unknown) => log.warning("prune.start", `could not start the prune: ${String(error)}`));
      }
      // The run's last line: its unit started earlier (READY=1), so only this tells the run is over.
      log.info("boot.done", `the boot ended: ${outcome.report?.outcome ?? "planned only"}`, {
        exitCode: outcome.exitCode,
      });
    });
}
