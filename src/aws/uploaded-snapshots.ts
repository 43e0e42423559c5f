/**
 * What `snapshot upload` asks of EC2 about the snapshot it made (UploadedSnapshots): DeleteTags of
 * the `ebs-cache:unverified` tag StartSnapshot set, once the snapshot was read back; DeleteSnapshot
 * of one found not to hold the image. The builder's calls only, apart from the agent's (ec2-api.ts,
 * whose calls are the nodes' policy): the build role's policy,
 * iam/ebs-cache-snapshot-builder-policy.json, grants exactly these two (test/agent/snapshot/builder-iam.test.ts),
 * DeleteSnapshot only on a pool snapshot still tagged unverified. Runs where the operator's CI runs:
 * the SDK's default credential chain and region, as the EBS client (ebs.ts).
 */
import { DeleteSnapshotCommand, DeleteTagsCommand, EC2Client } from "@aws-sdk/client-ec2";
import type { UploadedSnapshots } from "../agent/ports.ts";
import { SnapshotTag } from "../tags.ts";
import type { EbsClientOptions } from "./ebs.ts";
import { classifyEc2Error, Ec2CallError, type Ec2Failure } from "./errors.ts";

/** The builder's EC2 client: as the EBS client is built, with EC2's endpoint (`--ec2-endpoint`) when given. */
export function builderEc2Client(options: EbsClientOptions): EC2Client {
  return new EC2Client({
    region: options.region,
    ...(options.endpoint !== undefined ? { endpoint: options.endpoint } : {}),
    ...(options.credentials ? { credentials: options.credentials } : {}),
    maxAttempts: options.maxAttempts ?? 10,
    requestHandler: { connectionTimeout: 5_000, requestTimeout: 30_000, throwOnRequestTimeout: true },
  });
}

/** What to do when one of the builder's EC2 calls failed, by kind; `then` says what the rerun does. */
function remediation(action: string, failure: Ec2Failure, then: string): string {
  switch (failure.kind) {
    case "unauthorized":
      return (
        `grant the build role ec2:${action} on pool snapshots (iam/ebs-cache-snapshot-builder-policy.json), or fix ` +
        `the credentials; then ${then}`
      );
    case "credentials-unavailable":
      return `no AWS credentials were found to sign with (environment, profile, SSO, an instance role); then ${then}`;
    case "throttled":
    case "server":
    case "network":
      return `EC2 did not answer after the SDK's retries: check the route to it (--ec2-endpoint, DNS); then ${then}`;
    default:
      return `check --region and --ec2-endpoint (EC2's, not EBS direct's); then ${then}`;
  }
}

async function call(action: string, then: string, send: () => Promise<unknown>): Promise<void> {
  try {
    await send();
  } catch (error) {
    const failure = classifyEc2Error(error);
    throw new Ec2CallError(action, failure, error, remediation(action, failure, then));
  }
}

export function uploadedSnapshots(client: EC2Client): UploadedSnapshots {
  return {
    async markVerified(snapshotId) {
      // The key alone: whatever its value, the tag goes (a reader passes over any value). EC2 takes
      // a DeleteTags of a key the snapshot lacks as done, so a rerun repeats it safely.
      await call(
        "DeleteTags",
        "run the same command again: it reads the snapshot back again and removes the tag (until then no keeper, " +
          "boot or refresh takes it)",
        () => client.send(new DeleteTagsCommand({ Resources: [snapshotId], Tags: [{ Key: SnapshotTag.unverified }] })),
      );
    },
    async discard(snapshotId) {
      try {
        await call("DeleteSnapshot", `delete it (aws ec2 delete-snapshot --snapshot-id ${snapshotId})`, () =>
          client.send(new DeleteSnapshotCommand({ SnapshotId: snapshotId })),
        );
      } catch (error) {
        // Gone already (an earlier run deleted it, or a person did): what was asked holds.
        if (error instanceof Ec2CallError && error.kind === "not-found") return;
        throw error;
      }
    },
  };
}
