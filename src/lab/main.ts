#!/usr/bin/env node
/**
 * Entry of the lab (`npm run lab`, or `node dist/ebs-cache-lab.mjs`): the demo, and the janitor a
 * bundled lab starts to watch its root. A program of its own so that the agent's bundle
 * (src/cli.ts) carries no emulator, FUSE layer or janitor; test/bundle.test.ts checks that.
 */
import { CommanderError } from "commander";
import { AgentError, ExitCode, describeError } from "../errors.ts";
import { createLogger } from "../log.ts";
import { labCommand } from "./command.ts";

try {
  await labCommand().exitOverride().parseAsync(process.argv);
} catch (error) {
  const log = createLogger();
  if (error instanceof CommanderError) {
    process.exitCode = error.exitCode === 0 ? ExitCode.ok : ExitCode.usage;
  } else {
    log.error("lab", describeError(error), error instanceof AgentError ? { remediation: error.remediation } : {});
    if (error instanceof Error && error.stack) log.debug("lab", error.stack);
    process.exitCode = error instanceof AgentError ? error.exitCode : ExitCode.failure;
  }
}
