/**
 * The EBS direct APIs (StartSnapshot, PutSnapshotBlock, CompleteSnapshot) as the snapshot
 * builder's SnapshotBlockWriter, and ListSnapshotBlocks, GetSnapshotBlock as its reader of a
 * parent snapshot and of the one it uploaded (SnapshotBlockReader). Runs where the operator's CI
 * runs, not on an instance: the fleet commands' credential chain (fleet-credentials.ts: profile,
 * environment, SSO, an instance role last) and region. The boundary: every answer is checked
 * against the API before it is returned (ebs-answers.ts), and every failure leaves here typed
 * (ebs-errors.ts).
 */
import {
  CompleteSnapshotCommand,
  EBSClient,
  GetSnapshotBlockCommand,
  ListSnapshotBlocksCommand,
  PutSnapshotBlockCommand,
  StartSnapshotCommand,
} from "@aws-sdk/client-ebs";
import type { AwsCredentialIdentityProvider } from "@smithy/types";
import type { SnapshotBlockReader, SnapshotBlockWriter } from "../agent/ports.ts";
import { checkBlock, checkCompleted, checkListPage, checkPut, checkStarted, newListState } from "./ebs-answers.ts";
import { ebsCallError, type EbsCall } from "./ebs-errors.ts";

export interface EbsClientOptions {
  region: string;
  /** The EBS direct endpoint (the lab's emulator); absent: the SDK's for the region. */
  endpoint?: string;
  /** Attempts per call: throttling (PutSnapshotBlock's rate is per snapshot) is retried with backoff. */
  maxAttempts?: number;
  /**
   * Fixed credentials (the lab's), or a provider (the fleet commands' chain, fleet-credentials.ts);
   * absent: the SDK's default chain.
   */
  credentials?: { accessKeyId: string; secretAccessKey: string } | AwsCredentialIdentityProvider;
}

export function ebsClient(options: EbsClientOptions): EBSClient {
  return new EBSClient({
    region: options.region,
    ...(options.endpoint !== undefined ? { endpoint: options.endpoint } : {}),
    ...(options.credentials ? { credentials: options.credentials } : {}),
    // Many puts run at once; throttling answers are expected under load and retried.
    maxAttempts: options.maxAttempts ?? 10,
    retryMode: "adaptive",
    requestHandler: { connectionTimeout: 5_000, requestTimeout: 60_000, throwOnRequestTimeout: true },
  });
}

/** Runs one EBS call: what it throws comes out typed (ebs-errors.ts). */
async function call<T>(action: EbsCall, snapshotId: string | undefined, send: () => Promise<T>): Promise<T> {
  try {
    return await send();
  } catch (error) {
    throw ebsCallError(action, snapshotId, error);
  }
}

export function snapshotBlockWriter(client: EBSClient): SnapshotBlockWriter {
  return {
    async start(request) {
      const answer = await call("StartSnapshot", request.parentSnapshotId, () =>
        client.send(
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
        ),
      );
      return checkStarted(answer, request);
    },
    async putBlock(snapshotId, index, data, sha256) {
      const answer = await call("PutSnapshotBlock", snapshotId, () =>
        client.send(
          new PutSnapshotBlockCommand({
            SnapshotId: snapshotId,
            BlockIndex: index,
            BlockData: data,
            DataLength: data.length,
            Checksum: sha256,
            ChecksumAlgorithm: "SHA256",
          }),
        ),
      );
      checkPut(answer, snapshotId, index, sha256);
    },
    async complete(snapshotId, changedBlocks, aggregateSha256) {
      const answer = await call("CompleteSnapshot", snapshotId, () =>
        client.send(
          new CompleteSnapshotCommand({
            SnapshotId: snapshotId,
            ChangedBlocksCount: changedBlocks,
            Checksum: aggregateSha256,
            ChecksumAlgorithm: "SHA256",
            ChecksumAggregationMethod: "LINEAR",
          }),
        ),
      );
      return checkCompleted(answer, snapshotId);
    },
  };
}

export function snapshotBlockReader(client: EBSClient): SnapshotBlockReader {
  return {
    async listBlocks(snapshotId) {
      const state = newListState();
      let nextToken: string | undefined;
      do {
        const token = nextToken;
        const page = await call("ListSnapshotBlocks", snapshotId, () =>
          client.send(
            new ListSnapshotBlocksCommand({
              SnapshotId: snapshotId,
              MaxResults: 10_000,
              ...(token ? { NextToken: token } : {}),
            }),
          ),
        );
        nextToken = checkListPage(page, snapshotId, state);
      } while (nextToken);
      return { volumeSizeGiB: state.volumeSizeGiB!, blocks: state.blocks };
    },
    async getBlock(snapshotId, index, token) {
      return call("GetSnapshotBlock", snapshotId, async () => {
        const answer = await client.send(
          new GetSnapshotBlockCommand({ SnapshotId: snapshotId, BlockIndex: index, BlockToken: token }),
        );
        // The body is read whole either way: it holds the connection.
        const data = (await answer.BlockData?.transformToByteArray()) ?? new Uint8Array();
        return { data, sha256: checkBlock(answer, data, snapshotId, index) };
      });
    },
  };
}
