/**
 * `ebs-cache-agent status`: the whole state of this host (src/status/): the last boot and
 * release as recorded, the pre-warm's state, and what is true now (the filesystem at the boot's
 * mount point, daemon.json's data-root, the labels docker shows). `--json` prints the document
 * of schema/status.schema.json. The exit code is a health check (statusExitCode). It reads only:
 * no EC2 call, no write.
 */
import { Command } from "commander";
import { prewarmStatus } from "../agent/prewarm/run.ts";
import { buildStatus } from "../status/document.ts";
import { observeStatus } from "../status/observe.ts";
import { renderStatus, statusExitCode } from "../status/view.ts";
import { loadCommandConfig } from "./load-config.ts";
import { CONFIG_OPTION } from "./options.ts";
import { statusSources } from "./status-wiring.ts";

/** Builds `ebs-cache-agent status`. */
export function statusCommand(): Command {
  return new Command("status")
    .description(
      "the state of this host: last boot (outcome, source, timeline), volume, mount and fill, docker's " +
        "data-root, labels, pre-warm, refresh, last release, instance-store disks",
    )
    .option(...CONFIG_OPTION)
    .option("--json", "print the document of schema/status.schema.json")
    .addHelpText(
      "after",
      "\nA health check: it reads the agent's records and the host, and changes nothing.\n" +
        ("Exit codes: 0 healthy (warnings may be listed), 1 a problem (no boot recorded, the volume not mounted, " +
          "docker's data-root\n") +
        ("not the volume's, the cache filesystem 95 % full, a release since the boot), 2 usage, 3 invalid " +
          "configuration, 4 the boot degraded."),
    )
    .action(async (opts: { config?: string; json?: boolean }) => {
      const { config, log } = await loadCommandConfig(opts.config);
      const doc = buildStatus(await observeStatus(statusSources(config, log)));
      const out = (line: string) => process.stdout.write(line + "\n");
      if (opts.json) out(JSON.stringify(doc, null, 2));
      else {
        for (const line of renderStatus(doc)) out(line);
        // The pre-warm in full: its samples, and the progress (percent, MiB/s, ETA) of an initialization.
        if (doc.prewarm) {
          out("pre-warm details:");
          for (const line of (await prewarmStatus(config.paths.stateDir)).lines) out(`  ${line}`);
        }
      }
      process.exitCode = statusExitCode(doc);
    });
}
