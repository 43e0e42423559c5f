/**
 * The lab's command tree (src/lab/main.ts runs it): the demo, and the janitor entry a bundled
 * lab uses to watch a lab root (see janitor.ts).
 */
import { Command, InvalidArgumentError } from "commander";
import { createLogger, type Level } from "../log.ts";
import { runLabDemo } from "./demo.ts";
import { runOsparcDemo } from "./demo-osparc.ts";
import { runJanitor } from "./janitor.ts";

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError("expected a whole number");
  return n;
}

/** Builds `ebs-cache-lab …` (`npm run lab -- …`). */
export function labCommand(): Command {
  const lab = new Command("ebs-cache-lab")
    .description("run the agent's world on this machine: EC2 + IMDS emulators, loop-device volumes, a private dockerd (root)")
    .option("--pool <name>", "pool name", "lab")
    .option("--pool-size <n>", "pool volumes to create", positiveInt, 3)
    .option("--image-mib <n>", "payload of the demo image, MiB", positiveInt, 64)
    .option("--osparc", "the second demo: osparc's autoscaler (src/lab/autoscaler.ts) launching, terminating, stopping and starting agents (--image-mib ignored)")
    .option("--verbose", "log every event (debug)")
    .action(async (opts: { pool: string; poolSize: number; imageMib: number; osparc?: boolean; verbose?: boolean }) => {
      const level: Level = opts.verbose ? "debug" : "info";
      const out = (line: string) => process.stdout.write(line + "\n");
      if (opts.osparc) {
        await runOsparcDemo({ pool: opts.pool, poolSize: opts.poolSize, log: createLogger(undefined, level), out });
        return;
      }
      await runLabDemo({
        pool: opts.pool,
        poolSize: opts.poolSize,
        imageMiB: opts.imageMib,
        log: createLogger(undefined, level),
        out,
      });
    });
  lab
    .command("janitor <root>", { hidden: true })
    .description("watch a lab root and reap it when its owner dies (started by the lab itself)")
    .action(async (root: string) => {
      process.stdout.on("error", () => undefined);
      process.stderr.on("error", () => undefined);
      const outcome = await runJanitor(root, { log: createLogger(undefined, "debug") });
      process.exit(outcome === "failed" ? 1 : 0);
    });
  return lab;
}
