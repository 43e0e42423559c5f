/**
 * `ebs-cache-agent record-reads` (hidden: a golden builder's step, not a host's): records what
 * each image reads at start into the need list of the volume being built (src/host/record-reads.ts),
 * with the builder's dockerd still running on the volume's data-root. The Packer template's
 * pool-volume step and the lab's golden build run it; docs/prewarm.md.
 */
import { Command, InvalidArgumentError } from "commander";
import { run } from "../exec.ts";
import { DEFAULT_RECORD_SECONDS, recordImageReads, writeImageReads } from "../host/record-reads.ts";
import { createLogger } from "../log.ts";

function seconds(value: string): number {
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < 1 || parsed > 3600)
    throw new InvalidArgumentError("a whole number of seconds from 1 to 3600");
  return parsed;
}

export function recordReadsCommand(): Command {
  return new Command("record-reads")
    .description(
      "at a golden build, run each image's entrypoint/cmd for a bounded time (no network, chrooted into its overlay2 " +
        "layers, under strace) and store the files it read, first read first, in " +
        "<volume>/.ebs-cache-agent/reads.json; needs root, strace and the builder's dockerd running on " +
        "<volume>/docker",
    )
    .argument("<images...>", "the images, as the builder pulled them")
    .requiredOption("--volume <path>", "where the volume being built is mounted (its data-root is <path>/docker)")
    .option("--docker-host <host>", "the builder's dockerd", "unix:///var/run/docker.sock")
    .option("--seconds <n>", "how long each image runs", seconds, DEFAULT_RECORD_SECONDS)
    .option("--work-dir <path>", "scratch space, not on an overlay", "/var/tmp")
    .action(
      async (
        images: string[],
        options: { volume: string; dockerHost: string; seconds: number; workDir: string },
      ): Promise<void> => {
        const log = createLogger();
        const docker = {
          docker: (args: readonly string[]) => run("docker", ["-H", options.dockerHost, ...args], { log }),
        };
        for (const image of images) {
          const files = await recordImageReads(docker, {
            image,
            volume: options.volume,
            workDir: options.workDir,
            seconds: options.seconds,
            log,
          });
          await writeImageReads(options.volume, image, files, log);
        }
      },
    );
}
