/**
 * The golden snapshot built by an engine machine's docker (nspawn-docker.ts) with a chosen image
 * store: what the pool Packer template does on an AMI with that engine. As golden.ts, with the
 * builder's dockerd inside the machine: the volume formatted by the agent's rule, mounted in the
 * machine, docker's data-root (and, for the containerd store, containerd's root) on it, the image
 * set imported, the need list recorded (what each image reads at start, as the Packer template's
 * builder records it), machine-local state dropped, snapshotted and tagged with
 * the store and engine version the machine's docker reported.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { AttachVolumeCommand, CreateVolumeCommand, waitUntilVolumeAvailable } from "@aws-sdk/client-ec2";
import { CONTAINERD_MACHINE_LOCAL_STATE } from "../../docker/containerd-store.ts";
import type { ImageStore } from "../../docker/engine.ts";
import { AgentError } from "../../errors.ts";
import { run, type RunOptions, type RunResult } from "../../exec.ts";
import { recordImageReads, writeImageReads, type ContainerdCli, type DockerCli } from "../../host/record-reads.ts";
import { CONTAINERD_ROOT_SUBDIR, DATA_ROOT_SUBDIR, FS_LABEL, MACHINE_LOCAL_STATE } from "../../layout.ts";
import {
  builderVolumeInput,
  snapshotBuilderVolume,
  waitForAttached,
  type GoldenOptions,
  type GoldenSnapshot,
} from "../volumes/golden.ts";
import { buildImage } from "../docker/images.ts";
import type { Lab } from "../lab.ts";
import {
  dockerOnlyMachine,
  dockerOnVolume,
  inMachine,
  machineDockerClient,
  machineEngineVersion,
} from "./nspawn-docker.ts";
import type { Machine } from "./nspawn.ts";
import { CACHE_BASE } from "./nspawn-rootfs.ts";
import { LAB_WAIT } from "../volumes/volumes.ts";

/** Where the builder machine mounts the volume. */
const BUILDER_MOUNT = "/mnt/golden";
const WAIT = LAB_WAIT;

/** What to build, and with which engine machine. */
export interface EngineGoldenOptions extends GoldenOptions {
  /** The engine's cached root file system (nspawn-rootfs.ts cachedRootfs). */
  rootfs: string;
  /** The agent bundle the machine gets (its units are held back in the builder). */
  bundle: string;
  store: ImageStore;
  /**
   * Runs in the builder machine once the golden images are in and before its docker stops (the
   * machine's docker on the volume, running): e.g. a test's own build beside it.
   */
  inBuilder?: (m: Machine) => Promise<void>;
}

/** Builds the golden snapshot with the engine machine's docker on `store`. */
export async function buildEngineGoldenSnapshot(lab: Lab, options: EngineGoldenOptions): Promise<GoldenSnapshot> {
  const { log } = options;
  const ec2 = lab.ec2Client();
  const sizeGiB = options.sizeGiB ?? 2;
  const builder = await lab.addHost({ availabilityZone: options.availabilityZone, tags: { Name: "golden-builder" } });
  const created = await ec2.send(
    new CreateVolumeCommand(builderVolumeInput(builder.instance.availabilityZone, sizeGiB, options.volume)),
  );
  const volumeId = created.VolumeId!;
  await waitUntilVolumeAvailable({ client: ec2, ...WAIT }, { VolumeIds: [volumeId] });
  await ec2.send(
    new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: builder.instance.instanceId, Device: "/dev/sdf" }),
  );
  await waitForAttached(ec2, volumeId);
  const device = await lab.backend.deviceReady(volumeId);
  await run("mkfs.xfs", ["-q", "-L", FS_LABEL, "-m", "crc=1", "-n", "ftype=1", device], { log });

  let machine: Machine | undefined;
  const work = await mkdtemp(join(CACHE_BASE, "golden-"));
  let built: GoldenSnapshot["built"];
  try {
    const m = await dockerOnlyMachine({
      rootfs: options.rootfs,
      bundle: options.bundle,
      store: options.store,
      onBooted: (booted) => (machine = booted),
    });
    await inMachine(m, ["mkdir", "-p", BUILDER_MOUNT]);
    await inMachine(m, ["mount", "-o", "noatime", device, BUILDER_MOUNT]);
    const engine = await dockerOnVolume(m, BUILDER_MOUNT, options.store);
    const info = await engine.info();
    if (info.imageStore !== options.store) {
      throw new AgentError(
        `the builder's docker ${info.serverVersion} uses the ${info.imageStore} image store, not ${options.store}`,
        "the containerd image store needs docker 24 or later (features.containerd-snapshotter)",
      );
    }
    built = { store: info.imageStore, engineVersion: await machineEngineVersion(m) };
    for (const image of options.images) {
      await buildImage(machineDockerClient(m), {
        tag: image.tag,
        workDir: work,
        payloadBytes: image.payloadBytes ?? 0,
        log,
      });
    }
    if (options.recordReads ?? true) await recordNeedList(m, device, work, options);
    await options.inBuilder?.(m);
    await inMachine(m, [
      "systemctl",
      "stop",
      "docker.service",
      "docker.socket",
      ...(options.store === "containerd" ? ["containerd.service"] : []),
    ]);
    // What a host must not inherit from the builder (swarm identity, containerd's task state).
    for (const local of MACHINE_LOCAL_STATE)
      await inMachine(m, ["rm", "-rf", join(BUILDER_MOUNT, DATA_ROOT_SUBDIR, local)]);
    if (options.store === "containerd") {
      for (const local of CONTAINERD_MACHINE_LOCAL_STATE)
        await inMachine(m, ["rm", "-rf", join(BUILDER_MOUNT, CONTAINERD_ROOT_SUBDIR, local)]);
    }
    await inMachine(m, ["umount", BUILDER_MOUNT]);
    await m.poweroff(120_000);
  } finally {
    await (machine as Machine | undefined)?.destroy();
    await rm(work, { recursive: true, force: true });
  }

  return snapshotBuilderVolume(lab, volumeId, options, {
    sizeGiB,
    built,
    builtAt: (options.builtAt ?? new Date()).toISOString(),
    description:
      `ebs-cache golden snapshot: pool ${options.pool}, image set ${options.imageSet}, docker ` +
      `${built.engineVersion} (${built.store})`,
  });
}

/**
 * The volume's need list (src/host/record-reads.ts), recorded with the machine's dockerd still up:
 * the host mounts the same device (the kernel shares the filesystem with the machine's mount),
 * asks the machine's docker for each image's layers and config (and, with the containerd store,
 * the machine's containerd for the image's snapshots: `ctr` in the machine), their paths
 * rewritten from the machine's mount to the host's, runs each image's start under strace on the
 * host and writes the list, as Packer's builder does.
 */
async function recordNeedList(
  m: Machine,
  device: string,
  work: string,
  options: Pick<EngineGoldenOptions, "images" | "store" | "log">,
): Promise<void> {
  const { log } = options;
  const hostMount = join(work, "volume");
  await mkdir(hostMount);
  await run("mount", ["-o", "noatime", device, hostMount], { log });
  try {
    const docker = machineDockerClient(m);
    const toHost = (result: RunResult): RunResult => ({
      ...result,
      stdout: result.stdout.split(`${BUILDER_MOUNT}/`).join(`${hostMount}/`),
    });
    const cli: DockerCli = {
      docker: async (args: readonly string[], runOptions?: RunOptions) => toHost(await docker.docker(args, runOptions)),
    };
    const containerd: ContainerdCli = {
      ctr: async (args: readonly string[], runOptions?: RunOptions) => {
        const command = ["ctr", "--address", "/run/containerd/containerd.sock", "--namespace", "moby", ...args];
        const result = await m.exec(command, 120_000);
        if (result.exitCode !== 0 && runOptions?.check !== false)
          throw new AgentError(`${command.join(" ")} exited ${result.exitCode} in ${m.name}: ${result.stderr}`, "");
        return toHost(result);
      },
    };
    for (const image of options.images) {
      const files = await recordImageReads(cli, {
        image: image.tag,
        volume: hostMount,
        workDir: join(work, "record"),
        log,
        ...(options.store === "containerd" ? { containerd } : {}),
      });
      await writeImageReads(hostMount, image.tag, files, log);
    }
  } finally {
    await run("umount", [hostMount], { log });
  }
}
