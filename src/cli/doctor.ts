/**
 * `ebs-cache-agent doctor`: every precondition of a boot on this host, one line each with its
 * verdict and remediation (src/agent/doctor/). An invalid configuration is one of the lines: the
 * other checks run on the defaults.
 */
import { Command } from "commander";
import { renderDoctor, runDoctor } from "../agent/doctor/run.ts";
import { wireDoctor } from "../agent/doctor/wire.ts";
import { defaultConfig, loadConfig } from "../config/index.ts";
import { CONFIG_PATH_ENV, DEFAULT_CONFIG_PATH } from "../config/schema.ts";
import { ConfigError, describeError } from "../errors.ts";
import { createLogger, type Level } from "../log.ts";
import { CONFIG_OPTION } from "./options.ts";

/** doctor's exit codes (--help says them). */
export const DoctorExit = { ok: 0, failed: 1, couldNotRun: 2 } as const;

export function doctorCommand(): Command {
  return new Command("doctor")
    .description(
      "check every precondition of a boot on this host, one line each with a verdict and a remediation: Node, " +
        "fio, xfsprogs, blkid, docker and its image store, daemon.json and dockerd's flags, the agent's systemd " +
        "units, the config; then IMDS (token, tags, hop limit), region and zone, the credentials and their role, " +
        "the pool's current snapshot, available volumes in this zone, free device names, and the IAM permission " +
        "of every EC2 call a boot and a release make, each sent with DryRun=true against the real volumes and " +
        "this instance. Changes nothing",
    )
    .option(...CONFIG_OPTION)
    .option("--host-only", "only the host's checks: no IMDS, credentials or EC2 (Packer's AMI build runs this)")
    .option("--json", "print the checks as JSON")
    .addHelpText(
      "after",
      "\nExit codes: 0 every check passed (warnings allowed), 1 a check failed, 2 doctor could not run (or usage).",
    )
    .action(async (opts: { config?: string; hostOnly?: boolean; json?: boolean }) => {
      const out = (line: string) => process.stdout.write(line + "\n");
      try {
        const configPath = opts.config ?? (process.env[CONFIG_PATH_ENV] || DEFAULT_CONFIG_PATH);
        let config = defaultConfig();
        let problems: string[] = [];
        try {
          config = (await loadConfig(opts.config ? { path: opts.config } : {})).config;
        } catch (error) {
          if (!(error instanceof ConfigError)) throw error;
          problems = error.problems;
        }
        const log = createLogger(undefined, (problems.length === 0 ? config.logLevel : "warning") as Level);
        const deps = wireDoctor({
          config,
          configFile: { path: configPath, problems },
          log,
          hostOnly: opts.hostOnly ?? false,
        });
        const report = await runDoctor(deps);
        if (opts.json) out(JSON.stringify(report, null, 2));
        else for (const line of renderDoctor(report)) out(line);
        process.exitCode = report.exitCode;
      } catch (error) {
        process.stderr.write(`doctor could not run: ${describeError(error)}\n`);
        process.exitCode = DoctorExit.couldNotRun;
      }
    });
}
