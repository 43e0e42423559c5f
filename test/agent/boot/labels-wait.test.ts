/**
 * No wait that cannot help: phase 1's wait for the activation's tags (observeIdentity) against an
 * in-memory identity source. osparc activates a warm buffer with StartInstances and then one
 * CreateTags (`_try_start_warm_buffer_instances`); a boot that runs before it waits, unless a
 * pool volume is attached here (it is reused whatever the tags say), and never once the
 * activation's `warm_buffer_machine=false` is there (nothing more comes, labels or not).
 */
import t from "tap";
import { observeIdentity, type IdentitySource } from "../../../src/agent/boot/observe.ts";
import { BufferTag } from "../../../src/agent/buffer-tags.ts";
import type { Identity } from "../../../src/agent/ports.ts";
import { VolumeKind, VolumeTag } from "../../../src/tags.ts";
import { writeWorkspaceRecord } from "../../../src/agent/workspace-record.ts";
import { defaultConfig } from "../../../src/config/schema.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { tempFolders } from "../../fixtures/builders/temp-folders.ts";

const folder = await tempFolders("labels-wait-");
const INSTANCE = "i-0123456789abcdef0";
const LABELS = "io.simcore.autoscaling.ec2_instance.docker_node_labels";

/**
 * A source whose tags change after `afterReads` reads (the CreateTags landing); `reused` is a pool
 * volume EC2 shows attached here. Counts the reads (each one a DescribeInstances on a node without IMDS tags).
 */
async function source(options: {
  tags: Record<string, string>;
  later?: Record<string, string>;
  afterReads?: number;
  reused?: string;
  mode?: "warm-buffer" | "always" | "never";
  startedBefore?: boolean;
}) {
  const stateDir = await folder();
  // A record of an earlier activation: the instance ran before (a stopped buffer started again).
  if (options.startedBefore ?? true)
    await writeWorkspaceRecord(stateDir, {
      instanceId: INSTANCE,
      launchTime: "2026-12-01T08:00:00.000Z",
      recordedAt: "2026-12-01T08:00:05.000Z",
    });
  const base = defaultConfig();
  const config = {
    ...base,
    paths: { ...base.paths, stateDir },
    workspace: { ...base.workspace, waitForLabelsTag: options.mode ?? "warm-buffer", waitForLabelsTagSeconds: 15 },
  };
  const log = createMemoryLogger("debug");
  let reads = 0;
  const identity = (tags: Record<string, string>): Identity => ({
    instanceId: INSTANCE,
    region: "eu-west-1",
    availabilityZone: "eu-west-1a",
    tags,
    tagsSource: "ec2",
  });
  const src: IdentitySource = {
    config,
    log,
    identify: async () => {
      reads += 1;
      const landed = options.later && reads > (options.afterReads ?? 1);
      return identity(landed ? { ...options.tags, ...options.later } : options.tags);
    },
    launchTime: async () => "2026-12-01T10:00:00.000Z",
    cloudFor: () => ({
      describeInstance: async (instanceId) => ({
        instanceId,
        state: "running",
        tags: {},
        volumes: options.reused ? [{ volumeId: options.reused, device: "/dev/sdf", status: "attached" }] : [],
      }),
      findVolumes: async (query) =>
        options.reused && query.volumeIds?.includes(options.reused)
          ? [
              {
                volumeId: options.reused,
                availabilityZone: "eu-west-1a",
                state: "in-use",
                sizeGiB: 50,
                tags: { [VolumeTag.managed]: "true", [VolumeTag.kind]: VolumeKind.pool },
                attachment: { instanceId: INSTANCE, device: "/dev/sdf", state: "attached" },
              },
            ]
          : [],
    }),
  };
  return { src, log, reads: () => reads };
}

t.test("a stopped warm buffer started again with its pool volume attached: no wait", async (t) => {
  const { src, log, reads } = await source({
    tags: { [BufferTag.warm]: "true" },
    later: { [BufferTag.warm]: "false", [LABELS]: '{"user-id":"1"}' },
    afterReads: 100,
    reused: "vol-0aaaaaaaaaaaaaaaa",
  });
  const seen = await observeIdentity(src, { mayClaim: true });
  t.equal(reads(), 1, "one read of the tags, no polling");
  t.equal(seen.identity.tags[BufferTag.warm], "true", "the tags as they were");
  t.match(log.lines.join("\n"), /not waited for: vol-0aaaaaaaaaaaaaaaa is attached here and reused/);
  t.notMatch(log.lines.join("\n"), /waiting up to/);
});

t.test("the same buffer without a volume attached: waits until the activation's CreateTags lands", async (t) => {
  const { src, log, reads } = await source({
    tags: { [BufferTag.warm]: "true" },
    later: { [BufferTag.warm]: "false", [LABELS]: '{"user-id":"1"}' },
    afterReads: 1,
  });
  const seen = await observeIdentity(src, { mayClaim: true });
  t.equal(reads(), 2, "read again once");
  t.equal(seen.identity.tags[LABELS], '{"user-id":"1"}', "the labels it waited for");
  t.match(log.lines.join("\n"), /waiting up to 15 s[\s\S]*the labels tag arrived/);
});

t.test("an activation without labels (a hot-buffer refill) ends the wait at once", async (t) => {
  const { src, log, reads } = await source({
    tags: { [BufferTag.warm]: "true" },
    later: { [BufferTag.warm]: "false" },
    afterReads: 1,
  });
  await observeIdentity(src, { mayClaim: true });
  t.equal(reads(), 2);
  t.match(log.lines.join("\n"), /activated without a labels tag/);
});

t.test("`false` already there: no wait in any mode, the legacy key beside it included", async (t) => {
  for (const mode of ["warm-buffer", "always"] as const)
    for (const tags of [
      { [BufferTag.warm]: "false" },
      { [BufferTag.legacyWarm]: "true", [BufferTag.warm]: "false" },
      { [BufferTag.warm]: "false", [BufferTag.hot]: "true" },
    ] as Array<Record<string, string>>) {
      const { src, log, reads } = await source({ tags, mode });
      await observeIdentity(src, { mayClaim: true });
      t.equal(reads(), 1, `${mode} ${JSON.stringify(tags)}: one read`);
      t.notMatch(log.lines.join("\n"), /waiting up to/);
    }
});

t.test("a legacy buffer's activation (only the new key flips) ends the wait", async (t) => {
  const { src, reads } = await source({
    tags: { [BufferTag.legacyWarm]: "true" },
    later: { [BufferTag.warm]: "false" },
    afterReads: 1,
  });
  await observeIdentity(src, { mayClaim: true });
  t.equal(reads(), 2, "stops when `warm_buffer_machine=false` arrives beside the legacy `true`");
});
