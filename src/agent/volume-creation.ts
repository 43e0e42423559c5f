/**
 * What config `volumes` makes of every volume the agent creates (encryption, the KMS key, gp3
 * IOPS and throughput, the operator's tags). The use cases put it into the CreateVolume spec
 * they plan, so the spec's ClientToken covers it and a dry run shows the request as sent.
 */
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
