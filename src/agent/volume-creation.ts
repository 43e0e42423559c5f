/**
 * What config `volumes` makes of every volume the agent creates (encryption, the KMS key, gp3
 * IOPS and throughput, the operator's tags). The use cases put it into the CreateVolume spec
 * they plan, so the spec's ClientToken covers it and a dry run shows the request as sent.
 */
import { createHash } from "node:crypto";
import type { AgentConfig } from "../config/index.ts";
import { splitOperatorTag } from "../config/validate.ts";
import type { VolumeCreation } from "./ports.ts";

/** Config `volumes` as a CreateVolume takes it. */
export function volumeCreation(config: Pick<AgentConfig, "volumes">): VolumeCreation {
  const v = config.volumes;
  return {
    encrypted: v.encrypted,
    ...(v.kmsKeyId !== null ? { kmsKeyId: v.kmsKeyId } : {}),
    ...(v.iops !== null ? { iops: v.iops } : {}),
    ...(v.throughputMiBps !== null ? { throughputMiBps: v.throughputMiBps } : {}),
    // Each is KEY=VALUE: the config's check refused anything else.
    tags: Object.fromEntries(
      v.tags.flatMap((text) => {
        const tag = splitOperatorTag(text);
        return tag ? [[tag.key, tag.value]] : [];
      }),
    ),
  };
}

/**
 * The CreateVolume parameters config `volumes` sends, by their EC2 names in name order, each only
 * when sent (Encrypted only when true; the operator's tags in key order): what a ClientToken
 * covers of it. Named and omitted when unsent, so a later agent that knows a setting more sends,
 * for a pool that leaves it unset, the same request under the same token: two keepers of two
 * versions agree on the slot's token and EC2 makes one volume, not two.
 * src/aws/ec2.ts createVolumeInput sends them (test/agent/volume-creation.test.ts holds the two
 * together).
 */
export function sentCreationParameters(creation: VolumeCreation | undefined): [string, unknown][] {
  if (!creation) return [];
  const sent: [string, unknown][] = [];
  if (creation.encrypted) sent.push(["Encrypted", true]);
  if (creation.iops !== undefined) sent.push(["Iops", creation.iops]);
  if (creation.kmsKeyId !== undefined) sent.push(["KmsKeyId", creation.kmsKeyId]);
  const tags = Object.entries(creation.tags).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (tags.length > 0) sent.push(["Tags", tags]);
  if (creation.throughputMiBps !== undefined) sent.push(["Throughput", creation.throughputMiBps]);
  return sent;
}

/**
 * The token after `token`, for the same intent once the volume `token` made is no longer of use
 * (deleted since, or handed back): the same prefix and length (EC2 allows 64 ASCII characters),
 * the rest a digest of the token and the volume it replaces. EC2 remembers a token for a day at
 * least and answers it with the volume it made first, gone or not; this is how a slot or a boot
 * gets a new volume for the same intent, and every keeper that met the same answer gets the same
 * next token (derived from EC2's answer, never from a clock).
 */
export function replacingToken(token: string, replaced: string): string {
  const cut = token.lastIndexOf("-") + 1;
  const length = Math.max(16, token.length - cut);
  const digest = createHash("sha256").update(`${token}\0replaces\0${replaced}`).digest("hex").slice(0, length);
  return `${token.slice(0, cut)}${digest}`;
}
