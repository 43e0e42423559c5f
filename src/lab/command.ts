/**
 * The lab's command tree (src/lab/main.ts runs it): the demo, and the janitor entry a bundled
 * lab uses to watch a lab root (see janitor.ts).
 */
import { Command } from "commander";
import type { ImageStore } from "../docker/engine.ts";
import { wholeNumber } from "../cli/options.ts";
import { run } from "../exec.ts";
import { createLogger, type Level } from "../log.ts";
import { runLabDemo } from "./demo/demo.ts";
import { runEngineDemo } from "./demo/engine.ts";
import { DOCKERD } from "./docker/dockerd.ts";
import { EngineChoiceError, chooseHostEngine, parseEngine, parseStore } from "./docker/engine-choice.ts";
import type { EngineName } from "./machines/nspawn-rootfs.ts";
import { runOsparcDemo } from "./demo/osparc.ts";
import { runJanitor } from "./reaper/janitor.ts";

/** Builds `ebs-cache-lab …` (`npm run lab -- …`). */
export function labCommand(): Command {
  const lab = new Command("ebs-cache-lab")
    .description(
      "run the agent's world on this machine: EC2 + IMDS emulators, loop-device volumes, a private dockerd (root)",
    )
    .option("--pool <name>", "pool name", "lab")
    .option("--pool-size <n>", "pool volumes to create", wholeNumber, 3)
    .option("--image-mib <n>", "payload of the demo image, MiB", wholeNumber, 64)
    .option(
      "--engine <version>",
      "docker engine of the demo's host: 20, 26 or 28 (default: this machine's dockerd; another one runs the " +
        "host in a systemd-nspawn machine of the Debian release that ships it)",
      parseEngine,
    )
    .option(
      "--store <store>",
      "image store of the golden snapshot and the host's docker: graphdriver (default) or containerd (docker 26 " +
        "and 28)",
      parseStore,
    )
    .option(
      "--osparc",
      "the second demo: osparc's autoscaler (src/lab/machines/autoscaler.ts) launching, terminating, stopping and " +
        "starting agents (--image-mib ignored)",
    )
    .option("--verbose", "log every event (debug)")
    .action(
      async (opts: {
        pool: string;
        poolSize: number;
        imageMib: number;
        engine?: EngineName;
        store?: ImageStore;
        osparc?: boolean;
        verbose?: boolean;
      }) => {
        const level: Level = opts.verbose ? "debug" : "info";
        const out = (line: string) => process.stdout.write(line + "\n");
        if (opts.engine !== undefined || opts.store !== undefined) {
          if (opts.osparc)
            throw new EngineChoiceError(
              "--osparc runs on this machine's dockerd: it takes no --engine or --store",
              "drop --engine and --store, or --osparc",
            );
          const hostVersion = (await run(DOCKERD, ["--version"], { check: false }).catch(() => undefined))?.stdout;
          const choice = chooseHostEngine(
            { engine: opts.engine, store: opts.store },
            /version ([0-9][^\s,]*)/.exec(hostVersion ?? "")?.[1],
          );
          if (choice.kind === "machine") {
            await runEngineDemo({
              ...choice,
              pool: opts.pool,
              poolSize: opts.poolSize,
              imageMiB: opts.imageMib,
              log: createLogger(undefined, level),
              out,
            });
            return;
          }
        }
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
      },
    );
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
