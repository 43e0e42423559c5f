/**
 * What the snapshot upload takes: the EBS direct APIs and the build machine's files, in a module
 * of their own beside run.ts.
 */
import type { Logger } from "../../log.ts";
import type { SnapshotBlockReader, SnapshotBlockWriter } from "../ports.ts";
import type { SnapshotManifest } from "./manifest.ts";

/** What the upload takes: the EBS direct APIs and the build machine's files. */
export interface SnapshotUploadDeps {
  writer: SnapshotBlockWriter;
  /** Reads a parent snapshot's blocks from EBS (`parentSnapshotId`, when its manifest is not at hand). */
  reader?: SnapshotBlockReader;
  scanImage(path: string, blockSize: number): Promise<{ bytes: number; blocks: Map<number, string> }>;
  readBlock(path: string, index: number, blockSize: number): Promise<Uint8Array>;
  /** The manifest file's JSON, undefined when there is none (src/host/snapshot-manifest.ts). */
  readManifestJson(path: string): Promise<unknown>;
  writeManifestJson(path: string, manifest: SnapshotManifest): Promise<void>;
  sha256(data: Uint8Array): Uint8Array;
  zeroBlockHash(blockSize: number): string;
  log: Logger;
  /** ms since the epoch (progress rates). */
  now?: () => number;
  /** Stops the upload between blocks (SIGTERM): the manifest keeps what was put. */
  signal?: AbortSignal;
}
