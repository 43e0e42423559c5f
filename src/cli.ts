/**
 * Command-line entry: the only place where real adapters are built and wired.
 */
import { Command } from "commander";

const program = new Command()
  .name("ebs-cache-agent")
  .description("Attach a pre-warmed EBS volume holding Docker's data-root at boot, release it at shutdown");

await program.parseAsync(process.argv);
