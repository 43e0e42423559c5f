/**
 * Volumes held by stopped instances (src/agent/pool/stopped.ts) and what the keeper does with
 * them: EC2's StateTransitionReason read for the stop's time (the emulator writes it as EC2 does,
 * read back through the real SDK); `pool` shows which volumes sleep on stopped instances; the
 * keeper counts them apart from stock, and only with `keeper.reclaimStoppedAfterDays` set detaches
 * one (never forced) from an instance still `stopped` right before the call, then tags it
 * released: a pool volume back in stock. A stop whose time EC2 does not give is never old enough;
 * an instance started since the plan keeps its volume; a workspace volume is never the keeper's.
 */
import t from "tap";
import { CreateVolumeCommand, AttachVolumeCommand, StopInstancesCommand } from "@aws-sdk/client-ec2";
import { runKeeper } from "../../../src/agent/keeper/run.ts";
import { planKeeper, type KeeperSettings } from "../../../src/agent/keeper/plan.ts";
import { keeperMetrics } from "../../../src/metrics/keeper.ts";
import { keeperFacts } from "../../../src/agent/keeper/run.ts";
import { observePool } from "../../../src/agent/pool/observe.ts";
import { poolReport, poolViewSettingsFrom } from "../../../src/agent/pool/summary.ts";
import { renderPoolReport } from "../../../src/agent/pool/view.ts";
import { stoppedSince, volumesHeldByStopped } from "../../../src/agent/pool/stopped.ts";
import type { InstanceInfo, VolumeInfo } from "../../../src/agent/ports.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { validateConfig } from "../../../src/config/index.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { attachmentState, poll, startLab, volumeState } from "../../lab/ec2/helpers.ts";

const DAY = 86_400_000;
const poolTags = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "p" };
const settings: KeeperSettings = {
  pool: "p",
  imageSet: null,
  volumeType: "gp3",
  zones: ["us-east-1a"],
  minAvailable: 0,
  maxAvailable: 10,
  maxVolumes: 10,
  maxGiB: 1000,
  initializationRateMiBps: null,
  quarantineHours: 6,
};

t.test("StateTransitionReason: the time of a user-initiated stop, nothing from other words", async (t) => {
  t.equal(stoppedSince("User initiated (2026-01-02 03:04:05 GMT)")?.toISOString(), "2026-01-02T03:04:05.000Z");
  t.equal(stoppedSince("Server.ScheduledStop: Stopped due to scheduled retirement"), undefined);
  t.equal(stoppedSince(""), undefined);
  t.equal(stoppedSince(undefined), undefined);
});

function volume(id: string, instanceId?: string, tags: Record<string, string> = poolTags): VolumeInfo {
  return {
    volumeId: id,
    availabilityZone: "us-east-1a",
    state: instanceId ? "in-use" : "available",
    sizeGiB: 50,
    tags,
    ...(instanceId ? { attachment: { instanceId, device: "/dev/sdf", state: "attached" as const } } : {}),
  };
}
const instance = (id: string, state: string, reason = ""): InstanceInfo => ({
  instanceId: id,
  state,
  tags: {},
  volumes: [],
  stateTransitionReason: reason,
});

t.test(
  "the keeper counts volumes on stopped instances apart, and reclaims only when asked and old enough",
  async (t) => {
    const now = new Date("2026-03-01T00:00:00Z");
    const volumes = [
      volume("vol-run", "i-run"),
      volume("vol-old", "i-old"),
      volume("vol-new", "i-new"),
      volume("vol-why", "i-why"),
      volume("vol-free"),
    ];
    const instances = [
      instance("i-run", "running"),
      instance("i-old", "stopped", "User initiated (2026-02-01 00:00:00 GMT)"),
      instance("i-new", "stopped", "User initiated (2026-02-28 00:00:00 GMT)"),
      instance("i-why", "stopped", "Server.InternalError"),
    ];
    const held = volumesHeldByStopped(volumes, instances, now);
    t.same(
      held.map((h) => [h.volumeId, h.stoppedDays]),
      [
        ["vol-old", 28],
        ["vol-new", 1],
        ["vol-why", null],
      ],
    );
    const observed = { now, volumes, snapshots: [], initialization: {}, instances };
    const off = planKeeper(settings, observed);
    t.equal(off.zones[0]?.heldByStopped, 3);
    t.equal(off.zones[0]?.oldestStoppedDays, 28);
    t.equal(off.zones[0]?.available, 1, "only the free volume is stock");
    t.same(
      off.steps.filter((s) => s.step === "reclaim"),
      [],
      "off by default",
    );
    const on = planKeeper({ ...settings, reclaimStoppedAfterDays: 7 }, observed);
    t.same(
      on.steps.filter((s) => s.step === "reclaim").map((s) => ("volumeId" in s ? s.volumeId : "")),
      ["vol-old"],
      "only the one stopped longer than 7 days; a stop of unknown age never",
    );
    const facts = keeperFacts({ plan: off, final: off, results: [], rounds: 1, failed: 0, unread: [] }, now);
    const families = keeperMetrics(facts);
    t.same(families.find((f) => f.name.endsWith("keeper_held_by_stopped_volumes"))?.samples, [
      { labels: { pool: "p" }, value: 3 },
    ]);
    t.same(families.find((f) => f.name.endsWith("keeper_held_by_stopped_oldest_seconds"))?.samples, [
      { labels: { pool: "p" }, value: 28 * 86_400 },
    ]);
  },
);

t.test("the config's key: off by default, a number of days when set", async (t) => {
  t.equal(validateConfig({}).config?.keeper.reclaimStoppedAfterDays, null);
  t.equal(validateConfig({ keeper: { reclaimStoppedAfterDays: 14 } }).config?.keeper.reclaimStoppedAfterDays, 14);
  t.ok(validateConfig({ keeper: { reclaimStoppedAfterDays: 0 } }).problems.length, "0 days is refused");
});

/** The emulator on a settable clock, EC2 through the real SDK, and its steps: a tagged volume attached, a stop. */
async function stoppedLab(t: { teardown(fn: () => unknown): void }) {
  const clock = { now: Date.parse("2026-03-01T00:00:00Z") };
  const lab = await startLab(t, {
    clock: () => clock.now,
    delays: { createMs: 10, attachMs: 10, detachMs: 10, stopMs: 10 },
  });
  const ec2 = lab.client();
  const cloud = createCloudVolumes({ client: ec2, pollMs: 10 });
  const attached = async (tags: Record<string, string>, device: string) => {
    const id = (
      await ec2.send(
        new CreateVolumeCommand({
          AvailabilityZone: "us-east-1a",
          Size: 1,
          TagSpecifications: [
            { ResourceType: "volume", Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) },
          ],
        }),
      )
    ).VolumeId!;
    await volumeState(ec2, id, "available");
    await ec2.send(new AttachVolumeCommand({ VolumeId: id, InstanceId: lab.a.instanceId, Device: device }));
    await attachmentState(ec2, id, "attached");
    return id;
  };
  const stop = async () => {
    await ec2.send(new StopInstancesCommand({ InstanceIds: [lab.a.instanceId] }));
    await poll(
      () => cloud.describeInstance(lab.a.instanceId),
      (i) => i.state === "stopped",
    );
  };
  return { clock, lab, cloud, attached, stop };
}

t.test(
  "against the emulator: pool shows the sleeping volume; the reclaim re-checks, detaches, tags released",
  async (t) => {
    const { clock, lab, cloud, attached, stop } = await stoppedLab(t);
    const poolVolume = await attached(poolTags, "/dev/sdf");
    const workspace = await attached({ ...poolTags, [VolumeTag.kind]: "workspace" }, "/dev/sdg");
    await stop();
    const described = await cloud.describeInstance(lab.a.instanceId);
    t.match(
      described.stateTransitionReason,
      /^User initiated \(2026-03-01 00:00:\d\d GMT\)$/,
      "EC2's words, via the SDK",
    );

    clock.now += 10 * DAY;

    const observed = await observePool(cloud, { pool: "p" });
    const report = poolReport(
      observed,
      poolViewSettingsFrom({ ...validateConfig({ pool: "p" }).config!, pool: "p" }),
      new Date(clock.now),
    );
    const row = report.volumes.find((v) => v.volumeId === poolVolume);
    t.equal(row?.heldByStopped?.instanceId, lab.a.instanceId);
    t.ok(row?.heldByStopped?.days !== null && row!.heldByStopped!.days! >= 9.99, "stopped for ten days");
    t.match(renderPoolReport(report), /held by stopped instances: 2 volumes/);

    // Asked, but the instance started since the plan: nothing is detached.
    const log = createMemoryLogger();
    const reclaiming = { ...settings, reclaimStoppedAfterDays: 7, ttlHours: 24 };
    // The keeper reckons in EC2's time, learned from the emulator's answers: ten days on.
    const dry = await runKeeper({ cloud, log }, reclaiming, { dryRun: true });
    t.same(
      dry.plan.steps.filter((s) => s.step === "reclaim").map((s) => ("volumeId" in s ? s.volumeId : "")),
      [poolVolume],
      "the pool volume only: a workspace volume is never the keeper's",
    );

    const outcome = await runKeeper({ cloud, log }, reclaiming, { dryRun: false });
    const result = outcome.results.find((r) => r.step === "reclaim");
    t.equal(result?.done, "reclaimed", JSON.stringify(outcome.results));
    const after = await cloud.describeVolume(poolVolume);
    t.equal(after?.state, "available");
    t.notOk(after?.attachment);
    t.ok(after?.tags[VolumeTag.releasedAt], "tagged released");
    t.ok(after?.tags[VolumeTag.expiresAt], "with the TTL a release gives");
    t.equal((await cloud.describeVolume(workspace))?.attachment?.instanceId, lab.a.instanceId, "the workspace stays");
    t.notOk(
      lab.emu.snapshotState().events.some((e) => e.kind === "force-detach"),
      "never forced",
    );
  },
);

t.test("the reclaim leaves the volume when the instance is no longer stopped right before the call", async (t) => {
  const { clock, lab, cloud, attached, stop } = await stoppedLab(t);
  const id = await attached(poolTags, "/dev/sdf");
  await stop();
  clock.now += 10 * DAY;
  // The instance starts between the keeper's look and its step: a describe that answers `running`.
  const raced = {
    ...cloud,
    describeInstance: async (instanceId: string) => ({
      ...(await cloud.describeInstance(instanceId)),
      state: "pending",
    }),
  };
  const outcome = await runKeeper(
    { cloud: raced, log: createMemoryLogger() },
    { ...settings, reclaimStoppedAfterDays: 7 },
    { dryRun: false },
  );
  t.equal(outcome.results.find((r) => r.step === "reclaim")?.done, "skipped");
  t.equal((await cloud.describeVolume(id))?.attachment?.instanceId, lab.a.instanceId, "still attached");
});
