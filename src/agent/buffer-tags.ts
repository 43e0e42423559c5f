/**
 * osparc's buffer machines as their instance tags say (services/autoscaling `constants.py`):
 * which role the autoscaler gave this instance. Pure.
 *
 * - warm buffer: `warm_buffer_machine=true` while it waits stopped (`get_deactivated_warm_buffer_ec2_tags`),
 *   `false` once `_try_start_warm_buffer_instances` started it (`get_activated_warm_buffer_ec2_tags`,
 *   written in the same CreateTags as the task's labels). Buffers launched before osparc's rename carry the
 *   legacy `buffer_machine=true`; the activation writes the new key only, so the legacy `true` stays.
 * - hot buffer: `hot_buffer_machine=true` on a running, drained node kept for whatever task comes
 *   (`_sync_hot_buffer_ec2_tags`).
 */

export const BufferTag = {
  warm: "io.simcore.autoscaling.warm_buffer_machine",
  legacyWarm: "io.simcore.autoscaling.buffer_machine",
  hot: "io.simcore.autoscaling.hot_buffer_machine",
  /** `INSTANCE_PRE_PULLED_IMAGES_EC2_TAG_KEY`: the images pulled onto a buffer (`dump_pre_pulled_images_as_tags`). */
  prePulledImages: "io.simcore.autoscaling.pre_pulled_images",
} as const;

/** The role osparc's tags give the instance; undefined: none (a cold-launched node, or not osparc). */
export type BufferRole = "warm-dormant" | "warm-activated" | "hot";

export function bufferRole(tags: Readonly<Record<string, string>>): BufferRole | undefined {
  // The new key decides when present: an activated legacy buffer still carries `buffer_machine=true`.
  const warm = tags[BufferTag.warm] ?? tags[BufferTag.legacyWarm];
  if (warm === "true") return "warm-dormant";
  if (tags[BufferTag.hot] === "true") return "hot";
  if (warm === "false") return "warm-activated";
  return undefined;
}

/** Whether the tags hold `key`, whole or in `dump_as_ec2_tags` chunks (`<key>_0`, `<key>_1`, …). */
export function hasChunkedTag(tags: Readonly<Record<string, string>>, key: string): boolean {
  return Object.keys(tags).some(
    (name) => name === key || (name.startsWith(`${key}_`) && /^\d+$/.test(name.slice(key.length + 1))),
  );
}
