/**
 * Command-line entry. Errors end here: an AgentError is logged once with its remediation and
 * mapped to its exit code; anything else is a bug (exit 1, with the stack at debug).
 */
import { Command, CommanderError } from "commander";
import { bootCommand } from "./commands/boot.ts";
import { gcCommand } from "./commands/gc.ts";
import { poolCommand } from "./commands/pool.ts";
import { prewarmCommand, statusCommand } from "./commands/prewarm.ts";
import { releaseCommand } from "./commands/release.ts";
import { AgentError, ExitCode, describeError } from "./errors.ts";
import { labCommand } from "./lab/command.ts";
import { createLogger } from "./log.ts";

const program = new Command()
  .name("ebs-cache-agent")
  .description("Attach a pre-warmed EBS volume holding Docker's data-root at boot, release it at shutdown")
  .exitOverride()
  .addCommand(bootCommand())
  .addCommand(releaseCommand())
  .addCommand(prewarmCommand())
  .addCommand(statusCommand())
  .addCommand(gcCommand())
  .addCommand(poolCommand())
  .addCommand(labCommand());

try {
  await program.parseAsync(process.argv);
} catch (error) {
  const log = createLogger();
  if (error instanceof CommanderError) {
    process.exitCode = error.exitCode === 0 ? ExitCode.ok : ExitCode.usage;
  } else if (error instanceof AgentError) {
    log.error("agent", error.message, { remediation: error.remediation });
    process.exitCode = error.exitCode;
  } else {
    log.error("agent", `unexpected failure: ${describeError(error)}`, { remediation: "report this as a bug with the log above" });
    if (error instanceof Error && error.stack) log.debug("agent", error.stack);
    process.exitCode = ExitCode.failure;
  }
}
