/**
 * The prune while the node runs: ebs-cache-agent-prune.timer and its service (what they run, how
 * often, no mount namespace), the timer's run that answers from statfs alone below the threshold
 * (neither EC2 nor docker asked), and above it the same plan as any prune (current generation and
 * images containers use kept); the metrics tell the timer's runs apart.
 */
import { readFile } from "node:fs/promises";
import t from "tap";
import { runPrune, type PruneDeps } from "../../../src/agent/prune/run.ts";
import type { FilesystemFill, ImageEntry } from "../../../src/agent/ports.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import type { PruneFacts } from "../../../src/agent/outcomes.ts";
import { pruneMetrics } from "../../../src/metrics/prune.ts";
import { VolumeTag } from "../../../src/tags.ts";

const MiB = 2 ** 20;
const volume = {
  volumeId: "vol-1",
  mountPoint: "/var/lib/ebs-cache/vol-1",
  dataRoot: "/var/lib/ebs-cache/vol-1/docker",
};
const settings = { thresholdPercent: 85, targetPercent: 75 };

function fillAt(percent: number): FilesystemFill {
  const size = 1000 * MiB;
  return {
    mountPoint: volume.mountPoint,
    device: "/dev/nvme1n1",
    sizeBytes: size,
    usedBytes: (percent / 100) * size,
    availableBytes: ((100 - percent) / 100) * size,
    usedRatio: percent / 100,
    inodes: 1000,
    freeInodes: 500,
  };
}

function image(id: string, tag: string, created: number, mib: number): ImageEntry {
  return { id, repoTags: [tag], repoDigests: [], created, sizeBytes: mib * MiB, uniqueBytes: mib * MiB };
}

/** In-memory adapters that count every question asked of EC2 and docker. */
function deps(percent: number) {
  const asked: string[] = [];
  const removed: string[] = [];
  const images = [
    image("sha256:" + "a".repeat(64), "lab/current:1", 300, 100),
    image("sha256:" + "b".repeat(64), "lab/old:1", 100, 150),
    image("sha256:" + "c".repeat(64), "lab/used:1", 50, 150),
  ];
  const d: PruneDeps = {
    log: createMemoryLogger(),
    lastBoot: async () => ({ outcome: "ready", ...volume }),
    fill: async () => fillAt(percent - (removed.length > 0 ? 15 : 0)),
    cloud: {
      describeVolume: async (id) => {
        asked.push(`ec2:DescribeVolumes ${id}`);
        return {
          volumeId: id,
          state: "in-use" as const,
          sizeGiB: 1,
          availabilityZone: "az-1",
          tags: {
            [VolumeTag.managed]: "true",
            [VolumeTag.kind]: "pool",
            [VolumeTag.pool]: "p",
            [VolumeTag.images]: "lab/current:1",
          },
        };
      },
      findSnapshots: async () => {
        asked.push("ec2:DescribeSnapshots");
        return [];
      },
    },
    docker: {
      info: async () => {
        asked.push("docker:info");
        return { dockerRootDir: volume.dataRoot };
      },
      imageEntries: async () => {
        asked.push("docker:images");
        return images;
      },
      containerImageIds: async () => {
        asked.push("docker:containers");
        return ["sha256:" + "c".repeat(64)];
      },
      removeImage: async (reference) => {
        removed.push(reference);
        return { untagged: [reference], deleted: [] };
      },
    },
  };
  return { d, asked, removed };
}

/** A run as the timer starts it, with the facts it records. */
async function timerRun(d: PruneDeps) {
  let facts: PruneFacts | undefined;
  const outcome = await runPrune(d, {
    settings,
    imageSet: null,
    dryRun: false,
    trigger: "timer",
    recorder: { pruneFinished: async (f) => void (facts = f) },
  });
  return { outcome, facts };
}

t.test("below the threshold, the timer's run reads statfs only", async (t) => {
  const { d, asked, removed } = deps(60);
  const { outcome, facts } = await timerRun(d);
  t.equal(outcome.plan.verdict, "below-threshold");
  t.same(asked, [], "neither EC2 nor docker was asked anything");
  t.same(removed, []);
  t.equal(facts?.trigger, "timer");
  t.equal(outcome.usedRatioBefore, 0.6, "the fill is still reported");
});

t.test("a manual run below the threshold looks at everything (the operator sees the whole plan)", async (t) => {
  const { d, asked } = deps(60);
  const outcome = await runPrune(d, { settings, imageSet: null, dryRun: true });
  t.equal(outcome.plan.verdict, "below-threshold");
  t.ok(asked.includes("ec2:DescribeVolumes vol-1") && asked.includes("docker:info"), "it described the volume");
});

t.test("above the threshold, the timer's run prunes like any other: never current, never in use", async (t) => {
  const { d, removed } = deps(90);
  const { outcome, facts } = await timerRun(d);
  t.equal(outcome.plan.verdict, "prune");
  t.same(removed, ["lab/old:1"], "only the old image no container uses");
  t.equal(facts?.removedImages, 1);
  const families = pruneMetrics(facts!);
  const runs = families.find((f) => f.name.endsWith("prune_runs_total"));
  t.same(runs?.samples, [{ labels: { trigger: "timer" }, value: 1 }], "the run is counted under its trigger");
  const info = families.find((f) => f.name.endsWith("prune_info"));
  t.equal(info?.samples[0]?.labels.trigger, "timer");
  t.equal(
    pruneMetrics({ ...facts!, dryRun: true }).find((f) => f.name.endsWith("prune_runs_total"))?.samples[0]?.value,
    0,
  );
});

/** A unit file as section -> key -> last value. */
async function unit(name: string): Promise<Record<string, Record<string, string>>> {
  const out: Record<string, Record<string, string>> = {};
  let section = "";
  for (const raw of (await readFile(`systemd/${name}`, "utf8")).split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const header = /^\[(.+)\]$/.exec(line);
    if (header) section = header[1]!;
    else (out[section] ??= {})[line.slice(0, line.indexOf("="))] = line.slice(line.indexOf("=") + 1);
  }
  return out;
}

t.test("the timer runs `prune --timer` every hour of uptime, on every node", async (t) => {
  const service = await unit("ebs-cache-agent-prune.service");
  t.match(service.Service?.ExecStart, / prune --timer$/);
  t.equal(service.Service?.Type, "oneshot");
  t.notOk(service.Install, "started by its timer only");
  for (const key of ["PrivateMounts", "ProtectSystem", "PrivateTmp", "PrivateDevices", "MountFlags"])
    t.notOk(service.Service?.[key], `no ${key}=: statfs must see the host's mount of the volume`);
  const timer = await unit("ebs-cache-agent-prune.timer");
  t.equal(timer.Timer?.OnUnitActiveSec, "1h");
  t.ok(timer.Timer?.OnBootSec, "a first run after the boot");
  t.ok(timer.Timer?.RandomizedDelaySec, "spread over the fleet");
  t.equal(timer.Install?.WantedBy, "timers.target");
  const install = await readFile("scripts/install.sh", "utf8");
  t.match(install, /enable_unit ebs-cache-agent-prune\.timer timers\.target/, "install.sh enables it");
});
