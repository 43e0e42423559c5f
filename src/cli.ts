/**
 * Command-line entry: the only place where real adapters are built and wired.
 */
import { Command } from "commander";
import { labCommand } from "./lab/command.ts";

const program = new Command()
  .name("ebs-cache-agent")
  .description("Attach a pre-warmed EBS volume holding Docker's data-root at boot, release it at shutdown")
  .addCommand(labCommand());

await program.parseAsync(process.argv);
