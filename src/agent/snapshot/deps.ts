/**
 * What the snapshot upload takes: the EBS direct APIs, EC2 on the snapshot it made and the build machine's files, in
 * a module
 * of their own beside run.ts.
 */
import type { ProgressOutputs } from "../../progress.ts";
import type { Logger } from "../../log.ts";
import type { SnapshotBlockReader, SnapshotBlockWriter, UploadedSnapshots } from "../ports.ts";
import type { SnapshotManifest } from "./manifest.ts";

/** What the image is, as far as the upload must know before any call (src/host/pool-image.ts). */
export interface InspectedImage {
  /** The file's size in bytes. */
  bytes: number;
  /** The XFS file system's size (its superblock's data blocks × block size). */
  fsBytes: number;
  /** The text of the image set record the build left on it; undefined when it has none. */
  imageSetRecord: string | undefined;
}

/** What the upload takes: the EBS direct APIs and the build machine's files. */
export interface SnapshotUploadDeps {
  writer: SnapshotBlockWriter;
  /** Reads snapshots back from EBS: a parent's blocks (without its manifest), the read-back check of the upload. */
  reader: SnapshotBlockReader;
  /** EC2 on the snapshot it made: its `ebs-cache:unverified` tag removed once read back, or the snapshot deleted. */
  snapshots: UploadedSnapshots;
  /**
   * Refuses (typed, nothing read from EBS) anything but a pool image: a regular file holding an
   * XFS file system with the agent's label and the layout a boot accepts.
   */
  inspectImage(path: string): Promise<InspectedImage>;
  /** The image's blocks holding data (index → base64 SHA-256), found by seeking its data, not reading its holes. */
  scanImage(
    path: string,
    blockSize: number,
    onProgress?: (blocksRead: number, blocksToRead: number) => void,
  ): Promise<{ bytes: number; blocks: Map<number, string> }>;
  readBlock(path: string, index: number, blockSize: number): Promise<Uint8Array>;
  /** The manifest file's JSON, undefined when there is none (src/host/snapshot-manifest.ts). */
  readManifestJson(path: string): Promise<unknown>;
  writeManifestJson(path: string, manifest: SnapshotManifest): Promise<void>;
  sha256(data: Uint8Array): Uint8Array;
  zeroBlockHash(blockSize: number): string;
  log: Logger;
  /** ms since the epoch (progress rates, the wait for a snapshot to become readable). */
  now?: () => number;
  /** Stops the upload between blocks (SIGTERM): the manifest keeps what was put. */
  signal?: AbortSignal;
  /** Where the progress line goes besides the log: a terminal's line, systemd's STATUS= (src/progress.ts). */
  progress?: Pick<ProgressOutputs, "terminal" | "status">;
}
