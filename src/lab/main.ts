#!/usr/bin/env node
/**
 * Entry of the lab (`npm run lab`, or `node dist/ebs-cache-lab.mjs`): the demo, and the janitor a
 * bundled lab starts to watch its root. A program of its own so that the agent's bundle
 * (src/cli.ts) carries no emulator, FUSE layer or janitor; test/scripts/bundle.test.ts checks that.
 */
import { tolerateClosedOutput } from "../closed-output.ts";
import { reportFatal } from "../fatal.ts";
import { createLogger } from "../log.ts";
import { labCommand } from "./command.ts";

// First: `npm run lab -- --help | head -1` must not end in a stack trace (src/closed-output.ts).
tolerateClosedOutput("lab");
try {
  await labCommand().exitOverride().parseAsync(process.argv);
} catch (error) {
  process.exitCode = reportFatal(error, createLogger(), {
    failed: "lab.failed",
    stack: "lab.stack",
    untypedIsBug: false,
  });
}
