/**
 * `ebs-cache-agent record-reads` (hidden: a golden builder's step, not a host's): records what
 * each image reads at start into the need list of the volume being built (src/host/record-reads.ts),
 * with the builder's dockerd still running on the volume's data-root (and, with the containerd
 * image store, its containerd on the volume's containerd root). The Packer template's
 * pool-volume step and the lab's golden build run it; docs/prewarm.md.
 */
import { Command, InvalidArgumentError } from "commander";
import { run, type RunOptions } from "../exec.ts";
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
      "at a golden build, run each image's entrypoint/cmd for a bounded time (no network, chrooted into its layers: " +
        "overlay2's, or with the containerd image store containerd's overlayfs snapshots, under strace) and store " +
        "the files it read, first read first, in <volume>/.ebs-cache-agent/reads.json; needs root, strace and the " +
        "builder's dockerd running on <volume>/docker (with the containerd store, its containerd's root " +
        "<volume>/containerd, and ctr)",
    )
    .argument("<images...>", "the images, as the builder pulled them")
    .requiredOption("--volume <path>", "where the volume being built is mounted (its data-root is <path>/docker)")
    .option("--docker-host <host>", "the builder's dockerd", "unix:///var/run/docker.sock")
    .option(
      "--containerd-address <socket>",
      "the containerd that dockerd keeps its images in (the containerd image store)",
      "/run/containerd/containerd.sock",
    )
    .option("--containerd-namespace <name>", "dockerd's namespace in that containerd", "moby")
    .option("--seconds <n>", "how long each image runs", seconds, DEFAULT_RECORD_SECONDS)
    .option("--work-dir <path>", "scratch space, not on an overlay", "/var/tmp")
    .action(
      async (
        images: string[],
        options: {
          volume: string;
          dockerHost: string;
          containerdAddress: string;
          containerdNamespace: string;
          seconds: number;
          workDir: string;
        },
      ): Promise<void> => {
        const log = createLogger();
        const docker = {
          docker: (args: readonly string[]) => run("docker", ["-H", options.dockerHost, ...args], { log }),
        };
        const containerd = {
          ctr: (args: readonly string[], runOptions?: RunOptions) =>
            run("ctr", ["--address", options.containerdAddress, "--namespace", options.containerdNamespace, ...args], {
              log,
              ...runOptions,
            }),
        };
        for (const image of images) {
          const files = await recordImageReads(docker, {
            image,
            volume: options.volume,
            containerd,
            workDir: options.workDir,
            seconds: options.seconds,
            log,
          });
          await writeImageReads(options.volume, image, files, log);
        }
      },
    );
}
