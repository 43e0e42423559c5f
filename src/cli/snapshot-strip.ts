/**
 * `ebs-cache-agent snapshot strip`: a built pool volume's machine-local state removed, by the
 * list `snapshot build` strips its image with (src/docker/built-volume-strip.ts). Packer's
 * pool-volume flow runs it on its builder, dockerd and containerd stopped, before the snapshot.
 */
import { resolve } from "node:path";
import { Command, Option } from "commander";
import { stripBuiltVolume } from "../docker/built-volume-strip.ts";
import type { ImageStore } from "../docker/engine.ts";
import { DATA_ROOT_SUBDIR } from "../layout.ts";
import { createLogger } from "../log.ts";

export function snapshotStripCommand(): Command {
  return new Command("strip")
    .description(
      "remove a built pool volume's machine-local state (swarm, containers, the network database, engine id, " +
        "named volumes, " +
        "dockerd's build cache and scratch, containerd's instance state), as `snapshot build` does: " +
        "what Packer's pool-volume flow runs before its snapshot. dockerd and containerd must be stopped",
    )
    .requiredOption("--volume <mount-point>", `the mounted volume (its data-root is <volume>/${DATA_ROOT_SUBDIR})`)
    .addOption(
      new Option("--image-store <store>", "the volume's image store (containerd: containerd's root beside it too)")
        .choices(["graphdriver", "containerd"])
        .default("graphdriver"),
    )
    .addHelpText(
      "after",
      "\nExit codes: 0 stripped, 1 refused (no data-root there, or something mounted below it: nothing removed), " +
        "2 usage.",
    )
    .action(async (opts: { volume: string; imageStore: ImageStore }) => {
      const removed = await stripBuiltVolume(resolve(opts.volume, DATA_ROOT_SUBDIR), opts.imageStore, createLogger());
      process.stdout.write(`${opts.volume}: ${removed.length} machine-local paths stripped\n`);
    });
}
