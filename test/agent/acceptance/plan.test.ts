/**
 * The acceptance run's plan, pure: the volumes it creates and their cost bound, the tags that let
 * the next run and gc find and delete what a killed run left (gc's own planner judges them), the
 * clean-up of earlier runs, and the calibration file, read back by the lab's own parser of
 * schema/ebs-model.schema.json.
 */
import t from "tap";
import {
  ACCEPTANCE_TAG,
  acceptanceTags,
  calibrationOf,
  median,
  planAcceptance,
  planCleanup,
} from "../../../src/agent/acceptance/plan.ts";
import { judgeVolume } from "../../../src/agent/gc/plan.ts";
import type { VolumeInfo } from "../../../src/agent/ports.ts";
import { parseEbsModel } from "../../../src/lab/volumes/ebs-model.ts";
import { VolumeTag } from "../../../src/tags.ts";

const NOW = new Date("2026-12-06T10:00:00Z");

t.test("the plan: a volume from the snapshot and a blank one, both tagged with the run; the cost bound", async (t) => {
  const plan = planAcceptance({
    runId: "run-1",
    zone: "eu-west-1a",
    snapshot: { snapshotId: "snap-1", volumeSizeGiB: 8 },
    cloudNow: NOW,
    prices: { gibMonthUsd: 0.08 },
  });
  t.same(
    plan.volumes.map((v) => [v.role, v.sizeGiB, v.snapshotId]),
    [
      ["from-snapshot", 8, "snap-1"],
      ["blank", 1, undefined],
    ],
  );
  for (const v of plan.volumes) {
    t.equal(v.tags[ACCEPTANCE_TAG], "run-1");
    t.equal(v.tags[VolumeTag.managed], "true", "managed: the agent's policy lets it create and delete it");
    t.equal(v.tags[VolumeTag.expiresAt], "2026-12-06T11:00:00.000Z", "expires an hour after EC2's now");
  }
  t.equal(plan.costBoundUsd, (9 * 0.08) / 730, "9 GiB for one hour of a 730-hour month");
  t.match(
    plan.announcement.join("\n"),
    /8 GiB gp3 volume from snap-1[\s\S]*1 GiB gp3 volume \(blank\)[\s\S]*cost bound: \$0\.0010/,
  );
});

t.test("gc's own planner deletes a killed run's volume once it expired, not before", async (t) => {
  const volume: VolumeInfo = {
    volumeId: "vol-1",
    availabilityZone: "eu-west-1a",
    state: "available",
    sizeGiB: 1,
    tags: acceptanceTags("run-1", NOW),
  };
  const options = { ttlHours: 24 };
  t.equal(judgeVolume(volume, { ...options, now: new Date("2026-12-06T10:30:00Z") }).verdict, "not-expired");
  t.equal(judgeVolume(volume, { ...options, now: new Date("2026-12-06T11:00:01Z") }).verdict, "delete");
  t.equal(
    judgeVolume(
      { ...volume, state: "in-use", attachment: { instanceId: "i-1", device: "/dev/sdf", state: "attached" } },
      {
        ...options,
        now: new Date("2026-12-06T12:00:00Z"),
      },
    ).verdict,
    "in-use",
    "never one still attached",
  );
});

t.test("clean-up of earlier runs: detach here then delete, delete available, leave the rest", async (t) => {
  const tags = acceptanceTags("old", NOW);
  const vol = (id: string, over: Partial<VolumeInfo>): VolumeInfo => ({
    volumeId: id,
    availabilityZone: "eu-west-1a",
    state: "available",
    sizeGiB: 1,
    tags,
    ...over,
  });
  const steps = planCleanup(
    [
      vol("vol-here", { state: "in-use", attachment: { instanceId: "i-me", device: "/dev/sdf", state: "attached" } }),
      vol("vol-free", {}),
      vol("vol-other", {
        state: "in-use",
        attachment: { instanceId: "i-other", device: "/dev/sdf", state: "attached" },
      }),
      vol("vol-foreign", { tags: { [ACCEPTANCE_TAG]: "old" } }),
      vol("vol-creating", { state: "creating" }),
      vol("vol-untagged", { tags: { [VolumeTag.managed]: "true" } }),
    ],
    "i-me",
  );
  t.same(
    steps.map((s) => [s.kind, s.volumeId]),
    [
      ["detach", "vol-here"],
      ["delete", "vol-here"],
      ["delete", "vol-free"],
      ["leave", "vol-other"],
      ["leave", "vol-foreign"],
      ["leave", "vol-creating"],
    ],
  );
});

t.test("the calibration file: medians, concurrency from the IOPS ratio, and the lab's parser takes it", async (t) => {
  t.equal(median([3, 1, 2]), 2);
  t.equal(median([4, 1, 2, 3]), 2.5);
  t.throws(() => median([]));
  const file = calibrationOf(
    {
      attachSeconds: [6.2, 5.1],
      firstReadMs: { qd1: [12, 10, 11], qd8: [14, 15, 13], qd32: [40, 41, 39] },
      firstReadIops: { qd1: 90, qd32: 720 },
      warmThroughputMiBps: 250.04,
    },
    { instanceType: "m6i.large", region: "eu-west-1", date: NOW, runId: "run-1" },
  );
  const model = parseEbsModel(JSON.parse(JSON.stringify(file)), "calibration.json");
  t.match(model, {
    origin: "measured",
    attachSeconds: 5.65,
    firstReadLatencyMs: { qd1: 11, qd8: 14, qd32: 40 },
    concurrency: 8,
    warmThroughputMiBps: 250,
    instanceType: "m6i.large",
    region: "eu-west-1",
  });
  const capped = calibrationOf(
    {
      attachSeconds: [1],
      firstReadMs: { qd1: [1], qd8: [1], qd32: [1] },
      firstReadIops: { qd1: 1, qd32: 1000 },
      warmThroughputMiBps: 1,
    },
    { instanceType: "m6i.large", region: "eu-west-1", date: NOW, runId: "r" },
  );
  t.equal(capped.concurrency, 32, "never more than the depth it was measured at");
});
