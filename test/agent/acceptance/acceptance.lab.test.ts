/**
 * `ebs-cache-agent acceptance` on a lab host, with the real adapters: the EC2 emulator through the
 * SDK, the host's IMDS, loop-device volumes found by their serial, a real read-only mount, real
 * fio, and the lab's cold layer playing EBS's lazy loading with the lab's assumed model
 * (ebs-model.default.json). The calibration it writes must come back near that model (a sane
 * band, not exact figures: the machine is shared), and the run must leave nothing: no volume, no
 * attachment, no mount; the cost bound and the volumes are printed before the first is created,
 * and the snapshot's volume is mounted read-only (the blank one never). Killed after its volume
 * was created, after it was attached and found, and after it was mounted (in process, death.ts:
 * from the kill on, no call of the killed run reaches the world), a rerun cleans up what the
 * killed run left and measures.
 */
import t, { type Test } from "tap";
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CreateSnapshotCommand, DescribeSnapshotsCommand, DescribeVolumesCommand } from "@aws-sdk/client-ec2";
import type { AcceptanceDeps } from "../../../src/agent/acceptance/deps.ts";
import { ACCEPTANCE_TAG } from "../../../src/agent/acceptance/plan.ts";
import { ACCEPTANCE_FOLDER, runAcceptance, type AcceptanceResult } from "../../../src/agent/acceptance/run.ts";
import { parseEbsModel } from "../../../src/ebs-model.ts";
import { readMountTable } from "../../../src/host/mount.ts";
import { createHostStorage } from "../../../src/host/storage.ts";
import { run } from "../../../src/exec.ts";
import { DATA_ROOT_SUBDIR, FS_LABEL } from "../../../src/layout.ts";
import { acceptanceLabDeps } from "../../../src/lab/machines/agent.ts";
import { LAB_INSTANCE_TYPE } from "../../../src/lab/types.ts";
import { coldSnapshotOptionsOf, readEbsModel } from "../../../src/lab/volumes/ebs-model.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { goldenPoolTags, mountsUnder, POOL, startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { asProcess, lived, ProcessKilled, ProcessLife, type DeathPoint } from "../../fixtures/fakes/death.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const model = await readEbsModel();
const bl = await startBootLab({ name: "test-acceptance", golden: false, coldSnapshots: coldSnapshotOptionsOf(model) });
t.teardown(() => bl.close());

// The pool's snapshot: a volume holding the agent's filesystem (as a pool snapshot does), with the pool's tags.
const poolTags = goldenPoolTags(POOL, undefined);
const source = await bl.createBlankVolume(poolTags);
await bl.withVolume(source, async (device) => {
  await createHostStorage().format(device, FS_LABEL);
  const mountPoint = await mkdtemp(join(tmpdir(), "ebs-cache-acceptance-pool-"));
  await run("mount", ["-o", "nouuid", device, mountPoint]);
  try {
    // A data-root, and 200 MiB of data in one piece (allocated, not written): the run's reads fit in the data.
    await mkdir(join(mountPoint, DATA_ROOT_SUBDIR));
    await run("fallocate", ["-l", "200MiB", join(mountPoint, DATA_ROOT_SUBDIR, "layer")]);
  } finally {
    await run("umount", [mountPoint]);
    await rm(mountPoint, { recursive: true });
  }
});
const { SnapshotId: snapshotId } = await bl.ec2.send(
  new CreateSnapshotCommand({
    VolumeId: source,
    TagSpecifications: [
      { ResourceType: "snapshot", Tags: Object.entries(poolTags).map(([Key, Value]) => ({ Key, Value })) },
    ],
  }),
);
const completed = await pollUntil(
  async () =>
    (await bl.ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [snapshotId!] }))).Snapshots?.[0]?.State ===
    "completed",
);
if (!completed) throw new Error(`the pool's snapshot ${snapshotId} did not complete`);
const host = await bl.addHost();
const instanceId = host.instance.instanceId;
const output = join(host.paths.hostRoot, "var/lib/ebs-cache-agent/ebs-model.json");

/** Every call of `target`'s methods goes through the process's life (death.ts): a dead run's calls throw. */
function mortal<T extends object>(name: string, target: T): T {
  return new Proxy(target, {
    get(object, key) {
      const value: unknown = Reflect.get(object, key);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) =>
        lived(`${name}.${String(key)}`, args, async () => (value as (...a: unknown[]) => unknown).apply(object, args));
    },
  });
}

interface Run {
  deps: AcceptanceDeps;
  said: string[];
  /** The order of the run's lines and EC2 calls that change something. */
  order: string[];
  /** Whether each read-only mount was read-only in the mount table. */
  readOnly: boolean[];
}

function acceptanceRun(): Run {
  const said: string[] = [];
  const order: string[] = [];
  const readOnly: boolean[] = [];
  const real = acceptanceLabDeps(bl.lab, host, {
    overrides: { pool: POOL },
    log: createMemoryLogger("debug"),
    output,
    say: (line) => {
      said.push(line);
      order.push(`say ${line}`);
    },
  });
  const deps: AcceptanceDeps = {
    ...mortal("host", real),
    log: real.log,
    say: real.say,
    newRunId: real.newRunId,
    settings: real.settings,
    storage: mortal("storage", real.storage),
    cloudFor: (region) => {
      const cloud = real.cloudFor(region);
      const createVolume: typeof cloud.createVolume = async (spec, options) => {
        order.push(`create ${spec.snapshotId ?? "blank"}`);
        return cloud.createVolume(spec, options);
      };
      return mortal("ec2", { ...cloud, createVolume, clock: cloud.clock });
    },
    mountReadOnly: (device, mountPoint) =>
      lived("mountReadOnly", [device, mountPoint], async () => {
        await real.mountReadOnly(device, mountPoint);
        const entry = (await readMountTable()).find((e) => e.target === mountPoint);
        readOnly.push(entry !== undefined && entry.options.split(",").includes("ro"));
      }),
  };
  return { deps, said, order, readOnly };
}

/** What the runs left: volumes tagged by a run, volumes attached to the host, mounts below its mount root. */
async function leftBehind(): Promise<{ tagged: string[]; attached: string[]; mounts: string[] }> {
  const tagged = await bl.ec2.send(
    new DescribeVolumesCommand({ Filters: [{ Name: "tag-key", Values: [ACCEPTANCE_TAG] }] }),
  );
  const attached = await bl.ec2.send(
    new DescribeVolumesCommand({ Filters: [{ Name: "attachment.instance-id", Values: [instanceId] }] }),
  );
  return {
    // A volume EC2 is deleting is gone as far as the run goes (DeleteVolume was accepted; nothing is billed).
    tagged: (tagged.Volumes ?? []).filter((v) => v.State !== "deleting").map((v) => `${v.VolumeId} ${v.State}`),
    attached: (attached.Volumes ?? []).map((v) => v.VolumeId!),
    mounts: await mountsUnder(host.paths.mountRoot),
  };
}

async function assertNothingLeft(t: Test): Promise<void> {
  t.same(await leftBehind(), { tagged: [], attached: [], mounts: [] }, "no volume, attachment or mount left");
}

/** The cost bound and volumes printed before the first is made; the snapshot's mounted read-only, the blank never. */
function assertAnnouncedAndReadOnly(t: Test, run: Run): void {
  const firstCreate = run.order.findIndex((line) => line.startsWith("create "));
  const costLine = run.order.findIndex((line) => /cost bound: \$/.test(line));
  t.ok(costLine >= 0 && costLine < firstCreate, "the cost bound is printed before the first volume is created");
  t.match(run.said.join("\n"), new RegExp(`GiB gp3 volume from ${snapshotId}[\\s\\S]*1 GiB gp3 volume \\(blank\\)`));
  t.same(
    run.order.filter((line) => line.startsWith("create ")),
    [`create ${snapshotId}`, "create blank"],
  );
  t.same(run.readOnly, [true], "the snapshot's volume mounted read-only, the blank one never mounted");
}

async function assertCalibration(t: Test, result: AcceptanceResult): Promise<void> {
  const written = parseEbsModel(JSON.parse(await readFile(output, "utf8")), output);
  t.same(written, result.calibration, "the file holds what the run returned, and parses as a model");
  t.equal(written.origin, "measured");
  t.equal(written.region, bl.lab.region);
  t.equal(written.instanceType, LAB_INSTANCE_TYPE, "the instance type IMDS gives");
  t.match(
    written.source,
    new RegExp(`acceptance run ${result.runId}: a volume from ${snapshotId} .*, first reads in the filesystem's data`),
  );
  const l = written.firstReadLatencyMs;
  // The cold layer waits the model's delay at least; a loaded machine adds to it, never takes away.
  t.ok(l.qd1 >= model.firstReadLatencyMs.qd1 * 0.8 && l.qd1 < model.firstReadLatencyMs.qd1 * 10, `qd1 ${l.qd1} ms`);
  t.ok(l.qd32 >= l.qd1 * 2, `qd32 ${l.qd32} ms: reads beyond the layer's ${model.concurrency} wait their turn`);
  t.ok(
    written.concurrency >= model.concurrency / 4 && written.concurrency <= model.concurrency * 2,
    `concurrency ${written.concurrency} near the layer's ${model.concurrency}`,
  );
  t.ok(
    written.warmThroughputMiBps > 5 && written.warmThroughputMiBps <= model.warmThroughputMiBps * 1.5,
    `warm ${written.warmThroughputMiBps} MiB/s, under the layer's cap of ${model.warmThroughputMiBps}`,
  );
  t.ok(written.attachSeconds > 0 && written.attachSeconds < 60, `attach ${written.attachSeconds} s`);
}

const KILLS: Array<{ at: string; point: DeathPoint; left: (l: Awaited<ReturnType<typeof leftBehind>>) => boolean }> = [
  {
    at: "after its volume was created",
    point: { kind: "call", name: "ec2.createVolume", nth: 1, apply: "after" },
    left: (l) => l.tagged.length === 1 && l.attached.length === 0,
  },
  {
    at: "after its volume was attached and its device found",
    point: { kind: "call", name: "storage.waitForDevice", nth: 1, apply: "after" },
    left: (l) => l.attached.length === 1 && l.mounts.length === 0,
  },
  {
    at: "after its volume was mounted",
    point: { kind: "call", name: "mountReadOnly", nth: 1, apply: "after" },
    left: (l) => l.attached.length === 1 && l.mounts.some((m) => m.includes(`/${ACCEPTANCE_FOLDER}/`)),
  },
];

for (const kill of KILLS) {
  t.test(`killed ${kill.at}: the rerun cleans up what it left, measures, and leaves nothing`, async (t) => {
    const killed = await asProcess(new ProcessLife(kill.point), () => runAcceptance(acceptanceRun().deps));
    t.ok(killed instanceof ProcessKilled, "the run died there", { outcome: killed });
    const left = await leftBehind();
    t.ok(kill.left(left), "the killed run left its volume as it was at the kill", left);
    const rerun = acceptanceRun();
    const result = await runAcceptance(rerun.deps);
    const leftover = left.tagged[0]!.split(" ")[0]!;
    t.same(
      result.cleaned.filter((o) => o.step.volumeId === leftover).map((o) => o.done),
      left.attached.length > 0 ? ["detached", "deleted"] : ["deleted"],
      `the rerun took ${leftover} away`,
    );
    t.match(rerun.said.join("\n"), new RegExp(`earlier run: ${leftover} deleted`));
    assertAnnouncedAndReadOnly(t, rerun);
    await assertCalibration(t, result);
    await assertNothingLeft(t);
  });
}
