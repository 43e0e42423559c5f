/**
 * The golden snapshot: what the pool-volume Packer template produces in AWS, made in the lab.
 * A builder host gets a blank volume; the product's `snapshot build` steps (src/agent/snapshot/build.ts)
 * build the image set onto it: XFS formatted, a private dockerd on a data-root on it loading the
 * images from `docker save` tarballs, what each image reads at start recorded (the need list),
 * machine-local state stripped. Then the volume is detached and snapshotted, tagged with the
 * build's time (`ebs-cache:built-at`: with the image set, the snapshot's generation). Pool volumes
 * are then created from that snapshot, tagged for the pool.
 */
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import {
  AttachVolumeCommand,
  CreateSnapshotCommand,
  CreateVolumeCommand,
  DeleteVolumeCommand,
  DescribeVolumesCommand,
  DetachVolumeCommand,
  waitUntilSnapshotCompleted,
  waitUntilVolumeAvailable,
  type EC2Client,
  type Tag,
  type CreateVolumeCommandInput,
} from "@aws-sdk/client-ec2";
import { runVolumeBuild } from "../../agent/snapshot/build.ts";
import { planBuild, type BuildRequest } from "../../agent/snapshot/build-plan.ts";
import { volumeBuildDeps } from "../../cli/snapshot-build.ts";
import { storeTags } from "../../docker/image-store.ts";
import { createMemoryLogger, type Logger } from "../../log.ts";
import { VolumeKind, VolumeTag } from "../../tags.ts";
import { writeImageArchive } from "../docker/images.ts";
import type { Lab } from "../lab.ts";
import { snapshotImagePath, volumeImagePath } from "../reaper/labdir.ts";
import { goldenReuse, type GoldenBuilt } from "./golden-reuse.ts";
import { LAB_WAIT } from "./volumes.ts";

/** One image of the golden set. */
export interface GoldenImage {
  tag: string;
  /** Bytes of incompressible payload in the image (default 0: just busybox). */
  payloadBytes?: number;
  /** Largest payload file (default 256 MiB; see BuildImageOptions). */
  payloadFileBytes?: number;
  /** The image's CMD (default `/bin/sh`): what it reads at start, as recorded into the need list. */
  cmd?: string[];
}

/** What to build. */
export interface GoldenOptions {
  pool: string;
  imageSet: string;
  images: GoldenImage[];
  /** Size of the builder volume, hence of the snapshot (default 2 GiB). */
  sizeGiB?: number;
  availabilityZone?: string;
  /**
   * The build's time, tagged `ebs-cache:built-at` (default: when the build starts). Tests pass
   * it to make two generations of one pool without waiting between them.
   */
  builtAt?: Date;
  /**
   * The builder volume as an operator configures it (the Packer template's pool_volume_*): its
   * snapshot is then encrypted with the key, and carries the operator's tags beside the pool's.
   */
  volume?: { encrypted?: boolean; kmsKeyId?: string; tags?: Record<string, string> };
  /**
   * Record what each image reads at start into the volume's need list (src/host/record-reads.ts),
   * as the Packer template's provisioner does (default true); false: a volume without the list.
   */
  recordReads?: boolean;
  /**
   * A folder of golden builds kept for one test run (src/lab/volumes/golden-reuse.ts): a build
   * of the same inputs found there is written onto the builder volume instead of built again,
   * and a new build is kept there. Unset (the default): always built.
   */
  reuseFolder?: string;
  log?: Logger;
}

/** The CreateVolume of a golden build's builder volume (empty, gp3, encrypted as asked). */
export function builderVolumeInput(
  zone: string,
  sizeGiB: number,
  volume: GoldenOptions["volume"],
): CreateVolumeCommandInput {
  return {
    AvailabilityZone: zone,
    Size: sizeGiB,
    VolumeType: "gp3",
    ...(volume?.encrypted ? { Encrypted: true } : {}),
    ...(volume?.kmsKeyId !== undefined ? { KmsKeyId: volume.kmsKeyId } : {}),
  };
}

/** The built snapshot. */
export interface GoldenSnapshot {
  snapshotId: string;
  sizeGiB: number;
  images: string[];
  /** How the images were stored, as the builder's dockerd reported it (tagged on the snapshot and the pool volumes). */
  built: GoldenBuilt;
  /**
   * The build's time as tagged (`ebs-cache:built-at`, ISO 8601): its generation, with the image
   * set. Always set by buildGoldenSnapshot; absent for a snapshot a test made otherwise.
   */
  builtAt?: string;
}

const WAIT = LAB_WAIT;

function tagList(tags: Record<string, string>): Tag[] {
  return Object.entries(tags).map(([Key, Value]) => ({ Key, Value }));
}

/**
 * The tags a pool's snapshot and volumes carry; with `built`, the image store and engine version
 * the images were built with (src/docker/image-store.ts); with `builtAt`, the build's time (the
 * generation, src/agent/volume-rules.ts).
 */
export function poolTags(
  pool: string,
  imageSet: string,
  images: string[],
  built?: GoldenSnapshot["built"],
  builtAt?: string,
): Record<string, string> {
  return {
    [VolumeTag.managed]: "true",
    [VolumeTag.kind]: VolumeKind.pool,
    [VolumeTag.pool]: pool,
    [VolumeTag.imageSet]: imageSet,
    [VolumeTag.images]: images.join(","),
    ...(built ? storeTags(built) : {}),
    ...(builtAt ? { [VolumeTag.builtAt]: builtAt } : {}),
  };
}

/** Builds the golden snapshot on a fresh builder host of the lab. */
export async function buildGoldenSnapshot(lab: Lab, options: GoldenOptions): Promise<GoldenSnapshot> {
  const { log } = options;
  const ec2 = lab.ec2Client();
  const sizeGiB = options.sizeGiB ?? 2;
  const builtAt = (options.builtAt ?? new Date()).toISOString();
  const builder = await lab.addHost({ availabilityZone: options.availabilityZone, tags: { Name: "golden-builder" } });
  const zone = builder.instance.availabilityZone;

  const created = await ec2.send(new CreateVolumeCommand(builderVolumeInput(zone, sizeGiB, options.volume)));
  const volumeId = created.VolumeId!;
  await waitUntilVolumeAvailable({ client: ec2, ...WAIT }, { VolumeIds: [volumeId] });
  // A kept build replaces the blank volume's image before it is attached (a file copy that keeps
  // holes, as a volume made from a snapshot is: writing 2 GiB through the device took seconds).
  const reuse = options.reuseFolder ? goldenReuse(options.reuseFolder, options, log) : undefined;
  const reused = await reuse?.restore(volumeImagePath(lab.backend.root, volumeId));
  await ec2.send(
    new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: builder.instance.instanceId, Device: "/dev/sdf" }),
  );
  await waitForAttached(ec2, volumeId);
  const device = await lab.backend.deviceReady(volumeId);
  log?.info("lab.golden-attach", "builder volume attached", { volume: volumeId, device });

  // Short: the build's dockerd puts its unix sockets (107 bytes at most) under it.
  const built = reused ?? (await buildOnDevice(device, join(lab.root, "g", volumeId.slice(4, 12)), options));

  const golden = await snapshotBuilderVolume(lab, volumeId, options, {
    sizeGiB,
    built,
    builtAt,
    description: `ebs-cache golden snapshot: pool ${options.pool}, image set ${options.imageSet}`,
  });
  if (reuse && !reused) await reuse.keep(snapshotImagePath(lab.backend.root, golden.snapshotId), built);
  return golden;
}

/**
 * The last part of a golden build, whatever built it: the builder's volume (its filesystem
 * already unmounted) detached, snapshotted with the pool's tags (the store, the engine and the
 * build's time included), and deleted once the snapshot is completed.
 */
export async function snapshotBuilderVolume(
  lab: Lab,
  volumeId: string,
  options: Pick<GoldenOptions, "pool" | "imageSet" | "images" | "log" | "volume">,
  build: { sizeGiB: number; built: GoldenSnapshot["built"]; builtAt: string; description: string },
): Promise<GoldenSnapshot> {
  const ec2 = lab.ec2Client();
  const { built, builtAt } = build;
  await ec2.send(new DetachVolumeCommand({ VolumeId: volumeId }));
  await waitUntilVolumeAvailable({ client: ec2, ...WAIT }, { VolumeIds: [volumeId] });
  const images = options.images.map((image) => image.tag);
  const snapshot = await ec2.send(
    new CreateSnapshotCommand({
      VolumeId: volumeId,
      Description: build.description,
      // The operator's tags first: the pool's own win.
      TagSpecifications: [
        {
          ResourceType: "snapshot",
          Tags: tagList({
            ...options.volume?.tags,
            ...poolTags(options.pool, options.imageSet, images, built, builtAt),
          }),
        },
      ],
    }),
  );
  const snapshotId = snapshot.SnapshotId!;
  await waitUntilSnapshotCompleted({ client: ec2, ...WAIT }, { SnapshotIds: [snapshotId] });
  await ec2.send(new DeleteVolumeCommand({ VolumeId: volumeId }));
  options.log?.info("lab.golden-snapshot", "golden snapshot ready", {
    snapshot: snapshotId,
    images: images.join(","),
    store: built.store,
    engine: built.engineVersion,
    builtAt,
  });
  return { snapshotId, sizeGiB: build.sizeGiB, images, built, builtAt };
}

/** Polls the attachment itself (the SDK's waiters look at the volume state, not the attachment). */
export async function waitForAttached(ec2: EC2Client, volumeId: string): Promise<void> {
  const deadline = Date.now() + WAIT.maxWaitTime * 1000;
  while (Date.now() < deadline) {
    const found = await ec2.send(new DescribeVolumesCommand({ VolumeIds: [volumeId] }));
    if (found.Volumes?.[0]?.Attachments?.[0]?.State === "attached") return;
    await sleep(100);
  }
  throw new Error(`${volumeId} was not attached within ${WAIT.maxWaitTime} s`);
}

/**
 * The image set built onto the builder volume's device by the product's own build (`snapshot
 * build`'s plan and steps, src/agent/snapshot/build.ts): formatted, the images loaded from
 * `docker save` tarballs by its private dockerd, their reads recorded, machine-local state
 * stripped, unmounted and identified as the agent would. Returns the store and version it built with.
 */
async function buildOnDevice(
  device: string,
  workDir: string,
  options: GoldenOptions,
): Promise<GoldenSnapshot["built"]> {
  const log = options.log ?? createMemoryLogger("warning");
  const archives = join(workDir, "archives");
  const load: string[] = [];
  for (const image of options.images) {
    const archive = join(archives, `${load.length}.tar`);
    await writeImageArchive(archive, {
      tag: image.tag,
      workDir: archives,
      payloadBytes: image.payloadBytes ?? 0,
      ...(image.payloadFileBytes !== undefined ? { payloadFileBytes: image.payloadFileBytes } : {}),
      ...(image.cmd ? { cmd: image.cmd } : {}),
      log: options.log,
    });
    load.push(archive);
  }
  const request: BuildRequest = {
    target: { device },
    workDir,
    images: options.images.map((image) => image.tag),
    load,
    pull: false,
    imageStore: "graphdriver",
    recordReads: options.recordReads ?? true,
  };
  const planned = planBuild(request);
  if ("problems" in planned) throw new Error(`golden build: ${planned.problems.join("; ")}`);
  try {
    const report = await runVolumeBuild(volumeBuildDeps(log), request, planned.steps);
    return { store: report.imageStore, engineVersion: report.engineVersion };
  } finally {
    await rm(workDir, { recursive: true, force: true });
  }
}

/** Creates `count` pool volumes from the snapshot, tagged for the pool, and waits until available. */
export async function createPoolVolumes(
  lab: Lab,
  golden: GoldenSnapshot,
  options: { pool: string; imageSet: string; count: number; availabilityZone?: string },
): Promise<string[]> {
  const ec2 = lab.ec2Client();
  const zone = options.availabilityZone ?? `${lab.region}a`;
  const tags = tagList(poolTags(options.pool, options.imageSet, golden.images, golden.built, golden.builtAt));
  const ids: string[] = [];
  for (let i = 0; i < options.count; i++) {
    const created = await ec2.send(
      new CreateVolumeCommand({
        AvailabilityZone: zone,
        SnapshotId: golden.snapshotId,
        VolumeType: "gp3",
        TagSpecifications: [{ ResourceType: "volume", Tags: tags }],
      }),
    );
    ids.push(created.VolumeId!);
  }
  if (ids.length > 0) await waitUntilVolumeAvailable({ client: ec2, ...WAIT }, { VolumeIds: ids });
  return ids;
}
