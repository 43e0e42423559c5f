/**
 * Sends doctor's IAM probes (plan.ts planIamProbes), each with DryRun=true: EC2 checks the
 * permission and answers DryRunOperation (allowed) or UnauthorizedOperation (denied) without
 * doing anything. A denial's encoded message is decoded with STS when the role may.
 */
import type { Ec2Api } from "../../aws/ec2-api.ts";
import { describeError } from "../../errors.ts";
import { encodedAuthorizationMessage, type DryRunAnswer, type IamProbe } from "./plan.ts";

/** Sends one probe with DryRun=true; never throws. */
export async function sendProbe(
  ec2: Ec2Api,
  probe: IamProbe,
  decode?: (encoded: string) => Promise<string>,
): Promise<DryRunAnswer> {
  const input = { ...probe.input, DryRun: true };
  try {
    switch (probe.action) {
      case "DescribeVolumes":
        await ec2.describeVolumes(input);
        break;
      case "DescribeInstances":
        await ec2.describeInstances(input);
        break;
      case "DescribeSnapshots":
        // The first page is the call; the paginator would ask for more only after an answer.
        for await (const _page of ec2.describeSnapshotsPages(input)) break;
        break;
      case "AttachVolume":
        await ec2.attachVolume(input as unknown as Parameters<Ec2Api["attachVolume"]>[0]);
        break;
      case "DetachVolume":
        await ec2.detachVolume(input as unknown as Parameters<Ec2Api["detachVolume"]>[0]);
        break;
      case "CreateTags":
        await ec2.createTags(input as unknown as Parameters<Ec2Api["createTags"]>[0]);
        break;
      case "DeleteTags":
        await ec2.deleteTags(input as unknown as Parameters<Ec2Api["deleteTags"]>[0]);
        break;
      case "CreateVolume":
        await ec2.createVolume(input as unknown as Parameters<Ec2Api["createVolume"]>[0]);
        break;
    }
    return { kind: "performed" };
  } catch (error) {
    return dryRunAnswer(error, decode);
  }
}

/** An SDK error as doctor reads it: EC2's code and message (an answer), or no answer at all. */
export async function dryRunAnswer(
  error: unknown,
  decode?: (encoded: string) => Promise<string>,
): Promise<DryRunAnswer> {
  const e = error as { name?: unknown; message?: unknown; $fault?: unknown; Code?: unknown } | undefined;
  // An answer of EC2 carries $fault (client or server); a network failure or a timeout does not.
  if (e === undefined || e === null || typeof e !== "object" || e.$fault === undefined)
    return { kind: "unanswered", message: describeError(error) };
  const code = typeof e.Code === "string" ? e.Code : String(e.name);
  const message = typeof e.message === "string" ? e.message : "";
  if (code !== "UnauthorizedOperation" || decode === undefined) return { kind: "error", code, message };
  const encoded = encodedAuthorizationMessage(message);
  const decoded = encoded === undefined ? undefined : await decode(encoded).catch(() => undefined);
  return { kind: "error", code, message, ...(decoded !== undefined ? { decoded } : {}) };
}
