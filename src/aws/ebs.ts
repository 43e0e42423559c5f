/**
 * The EBS direct APIs (StartSnapshot, PutSnapshotBlock, CompleteSnapshot) as the snapshot
 * builder's SnapshotBlockWriter, and ListSnapshotBlocks, GetSnapshotBlock as its reader of a
 * parent snapshot (SnapshotBlockReader). Runs where the operator's CI runs, not on an instance: the
 * SDK's default credential chain (environment, profile, SSO, an instance role) and region.
 */
import { createHash } from "node:crypto";
import {
  CompleteSnapshotCommand,
  EBSClient,
  GetSnapshotBlockCommand,
  ListSnapshotBlocksCommand,
  PutSnapshotBlockCommand,
  StartSnapshotCommand,
} from "@aws-sdk/client-ebs";
import type { SnapshotBlockReader, SnapshotBlockWriter } from "../agent/ports.ts";

export interface EbsClientOptions {
  region: string;
  /** The EBS direct endpoint (the lab's emulator); absent: the SDK's for the region. */
  endpoint?: string;
  /** Attempts per call: throttling (PutSnapshotBlock's rate is per snapshot) is retried with backoff. */
  maxAttempts?: number;
  /** Fixed credentials (the lab's); absent: the SDK's default chain. */
  credentials?: { accessKeyId: string; secretAccessKey: string };
}

export function ebsClient(options: EbsClientOptions): EBSClient {
  return new EBSClient({
    region: options.region,
    ...(options.endpoint !== undefined ? { endpoint: options.endpoint } : {}),
    ...(options.credentials ? { credentials: options.credentials } : {}),
    // Many puts run at once; throttling answers are expected under load and retried.
    maxAttempts: options.maxAttempts ?? 10,
    retryMode: "adaptive",
    requestHandler: { connectionTimeout: 5_000, requestTimeout: 60_000 },
  });
}

export function snapshotBlockWriter(client: EBSClient): SnapshotBlockWriter {
  return {
    async start(request) {
      const answer = await client.send(
        new StartSnapshotCommand({
          VolumeSize: request.volumeSizeGiB,
          ...(request.parentSnapshotId ? { ParentSnapshotId: request.parentSnapshotId } : {}),
          ClientToken: request.clientToken,
          Description: request.description,
          Tags: Object.entries(request.tags).map(([Key, Value]) => ({ Key, Value })),
          Timeout: request.timeoutMinutes,
          ...(request.encrypted ? { Encrypted: true } : {}),
          ...(request.kmsKeyArn ? { KmsKeyArn: request.kmsKeyArn } : {}),
        }),
      );
      if (!answer.SnapshotId || !answer.BlockSize)
        throw new Error("StartSnapshot answered without SnapshotId or BlockSize");
      return { snapshotId: answer.SnapshotId, blockSize: answer.BlockSize, status: answer.Status ?? "pending" };
    },
    async putBlock(snapshotId, index, data, sha256) {
      await client.send(
        new PutSnapshotBlockCommand({
          SnapshotId: snapshotId,
          BlockIndex: index,
          BlockData: data,
          DataLength: data.length,
          Checksum: sha256,
          ChecksumAlgorithm: "SHA256",
        }),
      );
    },
    async complete(snapshotId, changedBlocks, aggregateSha256) {
      const answer = await client.send(
        new CompleteSnapshotCommand({
          SnapshotId: snapshotId,
          ChangedBlocksCount: changedBlocks,
          Checksum: aggregateSha256,
          ChecksumAlgorithm: "SHA256",
          ChecksumAggregationMethod: "LINEAR",
        }),
      );
      return answer.Status ?? "pending";
    },
  };
}

export function snapshotBlockReader(client: EBSClient): SnapshotBlockReader {
  return {
    async listBlocks(snapshotId) {
      const blocks = new Map<number, string>();
      let volumeSizeGiB = 0;
      let nextToken: string | undefined;
      do {
        const page = await client.send(
          new ListSnapshotBlocksCommand({
            SnapshotId: snapshotId,
            MaxResults: 10_000,
            ...(nextToken ? { NextToken: nextToken } : {}),
          }),
        );
        volumeSizeGiB = page.VolumeSize ?? volumeSizeGiB;
        for (const block of page.Blocks ?? []) {
          if (block.BlockIndex !== undefined && block.BlockToken) blocks.set(block.BlockIndex, block.BlockToken);
        }
        nextToken = page.NextToken;
      } while (nextToken);
      return { volumeSizeGiB, blocks };
    },
    async blockChecksum(snapshotId, index, token) {
      const answer = await client.send(
        new GetSnapshotBlockCommand({ SnapshotId: snapshotId, BlockIndex: index, BlockToken: token }),
      );
      // The body is read either way (it holds the connection): without a checksum, it is hashed.
      const data = (await answer.BlockData?.transformToByteArray()) ?? new Uint8Array();
      if (answer.Checksum && answer.ChecksumAlgorithm === "SHA256") return answer.Checksum;
      return createHash("sha256").update(data).digest("base64");
    },
  };
}
