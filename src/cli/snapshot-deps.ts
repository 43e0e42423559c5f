/**
 * The snapshot upload's adapters as `snapshot upload` wires them (src/cli/snapshot.ts), and the
 * tests that run the upload in process: the EBS direct APIs and EC2 through the given clients,
 * the host's image inspection, block scan and manifest files.
 */
import type { EBSClient } from "@aws-sdk/client-ebs";
import type { EC2Client } from "@aws-sdk/client-ec2";
import type { SnapshotUploadDeps } from "../agent/snapshot/deps.ts";
import { snapshotBlockReader, snapshotBlockWriter } from "../aws/ebs.ts";
import { uploadedSnapshots } from "../aws/uploaded-snapshots.ts";
import { readImageBlock, scanImage, sha256, zeroBlockHash } from "../host/image-blocks.ts";
import { inspectPoolImage } from "../host/pool-image.ts";
import { readManifestJson, writeManifestJson } from "../host/snapshot-manifest.ts";
import type { Logger } from "../log.ts";

/** The upload's deps over `clients` (EBS for the blocks, EC2 for the snapshot's tags and listing). */
export function snapshotUploadDeps(clients: { ebs: EBSClient; ec2: EC2Client }, log: Logger): SnapshotUploadDeps {
  return {
    writer: snapshotBlockWriter(clients.ebs),
    reader: snapshotBlockReader(clients.ebs),
    snapshots: uploadedSnapshots(clients.ec2),
    inspectImage: (image) => inspectPoolImage(image, { log }),
    scanImage: (image, blockSize, onProgress) =>
      scanImage(image, blockSize, { log, ...(onProgress ? { onProgress } : {}) }),
    readBlock: readImageBlock,
    readManifestJson,
    writeManifestJson,
    sha256,
    zeroBlockHash,
    log,
  };
}
