/**
 * The golden snapshot: what the pool-volume Packer template produces in AWS, made in the lab.
 * A builder host gets a blank volume, formats it XFS, runs a private dockerd on a data-root on
 * it, imports the image set, records what each image reads at start (the need list), stops
 * docker, drops machine-local state (`swarm/`), detaches it and snapshots it, tagged with the build's time
 * (`ebs-cache:built-at`: with the image set, the
 * snapshot's generation). Pool volumes are then created from that snapshot, tagged for the pool.
 */
import { rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
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
import { detectImageStore, type ImageStore } from "../../docker/engine.ts";
import { storeTags } from "../../docker/image-store.ts";
import { run } from "../../exec.ts";
import { recordImageReads, writeImageReads } from "../../host/record-reads.ts";
import { DATA_ROOT_SUBDIR, FS_LABEL, MACHINE_LOCAL_STATE } from "../../layout.ts";
import type { Logger } from "../../log.ts";
import { VolumeKind, VolumeTag } from "../../tags.ts";
import { buildImage } from "../docker/images.ts";
import type { Lab, LabHost } from "../lab.ts";

/** One image of the golden set. */
export interface GoldenImage {
  tag: string;
  /** Bytes of incompressible payload in the image (default 0: just busybox). */
  payloadBytes?: number;
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
  built: { store: ImageStore; engineVersion: string };
  /**
   * The build's time as tagged (`ebs-cache:built-at`, ISO 8601): its generation, with the image
   * set. Always set by buildGoldenSnapshot; absent for a snapshot a test made otherwise.
   */
  builtAt?: string;
}

const WAIT = { minDelay: 1, maxDelay: 2, maxWaitTime: 120 };

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
  await ec2.send(
    new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: builder.instance.instanceId, Device: "/dev/sdf" }),
  );
  await waitForAttached(ec2, volumeId);
  const device = await lab.backend.deviceReady(volumeId);
  log?.info("lab.golden-attach", "builder volume attached", { volume: volumeId, device });

  const mountPoint = join(builder.paths.mountRoot, "golden");
  await run("mkfs.xfs", ["-q", "-L", FS_LABEL, "-m", "crc=1", "-n", "ftype=1", device], { log });
  await run("mkdir", ["-p", mountPoint]);
  await run("mount", ["-o", "noatime", device, mountPoint], { log });
  let built: GoldenSnapshot["built"];
  try {
    built = await importImages(builder, join(mountPoint, DATA_ROOT_SUBDIR), options);
    for (const local of MACHINE_LOCAL_STATE) {
      await rm(join(mountPoint, DATA_ROOT_SUBDIR, local), { recursive: true, force: true });
    }
  } finally {
    await run("umount", [mountPoint], { log });
  }

  return snapshotBuilderVolume(lab, volumeId, options, {
    sizeGiB,
    built,
    builtAt,
    description: `ebs-cache golden snapshot: pool ${options.pool}, image set ${options.imageSet}`,
  });
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
 * Runs the builder's dockerd on a data-root on the volume, imports the image set into it and
 * records what each image reads at start (the volume's need list); returns the store and version that dockerd reported.
 */
async function importImages(
  builder: LabHost,
  dataRoot: string,
  options: GoldenOptions,
): Promise<GoldenSnapshot["built"]> {
  await writeFile(builder.paths.daemonJson, JSON.stringify({ "data-root": dataRoot }, null, 2) + "\n");
  const dockerd = await builder.startDocker();
  try {
    const info = await dockerd.info();
    const built = { store: detectImageStore(info), engineVersion: info.ServerVersion };
    for (const image of options.images) {
      await buildImage(dockerd, {
        tag: image.tag,
        workDir: join(builder.paths.hostRoot, "tmp"),
        payloadBytes: image.payloadBytes ?? 0,
        log: options.log,
      });
    }
    if (options.recordReads ?? true) {
      for (const image of options.images) {
        const files = await recordImageReads(dockerd, {
          image: image.tag,
          dataRoot,
          workDir: join(builder.paths.hostRoot, "tmp"),
          log: options.log,
        });
        await writeImageReads(dirname(dataRoot), image.tag, files, options.log);
      }
    }
    return built;
  } finally {
    await dockerd.stop();
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
