/**
 * The acceptance run's EC2 part against moto's server (which nobody on this project wrote): the
 * volumes it creates from the pool's snapshot and blank, their tags (managed, the run, expires-at an
 * hour after EC2's now), the attach to this instance, the detach and the delete; and a run killed
 * once its volume is attached (in process, death.ts), whose leftover the rerun detaches and
 * deletes. moto has no devices: the host's side (device, mount, fio) is a stand-in that answers
 * only for a volume moto shows attached to this instance, so every EC2 step is moto's.
 *
 * moto must be on the machine (scripts/setup.sh checks it): without it this test fails, it never skips.
 */
import t from "tap";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DescribeVolumesCommand, type Volume } from "@aws-sdk/client-ec2";
import type { AcceptanceDeps, TimedRead } from "../../../src/agent/acceptance/deps.ts";
import { ACCEPTANCE_TAG } from "../../../src/agent/acceptance/plan.ts";
import { runAcceptance } from "../../../src/agent/acceptance/run.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { parseEbsModel } from "../../../src/ebs-model.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { IMAGE_SET, motoVersion, POOL, REGION, seed, startBackend, ZONE_A } from "../../fixtures/lab/ec2-twice.ts";
import { asProcess, lived, ProcessKilled, ProcessLife } from "../../fixtures/fakes/death.ts";

// Fails (never skips) when the machine lacks moto.
const moto = await motoVersion();
t.comment(`moto ${moto.version} (${moto.python})`);
const backend = await startBackend("moto", { motoSeconds: 600 });
t.teardown(() => backend.close());
const { snapshot } = await seed(backend, Date.now());
const instanceId = backend.instance.instanceId;
const folder = await mkdtemp(join(tmpdir(), "ebs-cache-acceptance-moto-"));
t.teardown(() => rm(folder, { recursive: true, force: true }));
const output = join(folder, "ebs-model.json");

const describe = async (filters: Record<string, string>): Promise<Volume[]> =>
  (
    await backend.ec2.send(
      new DescribeVolumesCommand({ Filters: Object.entries(filters).map(([Name, v]) => ({ Name, Values: [v] })) }),
    )
  ).Volumes ?? [];

/** The stand-in fio's figures: first reads wait 40 ms, 8 at once; 125 MiB/s warm. */
function timing(read: TimedRead) {
  if (read.name === "initialize" || read.name === "warm") return { reads: 512, iops: 1000, medianMs: 1, mibps: 125 };
  const rounds = Math.ceil(read.ioDepth / 8);
  return { reads: 16, iops: (Math.min(read.ioDepth, 8) * 1000) / 40, medianMs: 40 * rounds, mibps: 1 };
}

interface Seen {
  /** The run's volumes as moto had them while the snapshot's was read. */
  whileRead: Volume[];
  mounts: Set<string>;
}

/** The run's parts: moto's EC2, this instance, the host's side standing in (see the header). */
function acceptanceDeps(seen: Seen): AcceptanceDeps {
  const cloud = createCloudVolumes({ client: backend.ec2, pollMs: 50 });
  const attachedHere = async (volumeId: string) =>
    (await describe({ "volume-id": volumeId }))[0]?.Attachments?.some(
      (a) => a.InstanceId === instanceId && a.State === "attached",
    ) ?? false;
  const host = {
    identify: async () => ({
      instanceId,
      region: REGION,
      availabilityZone: ZONE_A,
      tags: {},
      tagsSource: "imds" as const,
      instanceType: "t3.micro",
    }),
    mountReadOnly: async (_device: string, mountPoint: string) => void seen.mounts.add(mountPoint),
    unmount: async (mountPoint: string) => void seen.mounts.delete(mountPoint),
    mountsBelow: async (below: string) => [...seen.mounts].filter((m) => m.startsWith(`${below}/`)),
    allocatedRanges: async () => [{ start: 0, end: 2 ** 30 }],
    deviceBytes: async () => 2 ** 30,
    timeReads: async (_device: string, read: TimedRead) => {
      seen.whileRead = await describe({ [`tag-key`]: ACCEPTANCE_TAG });
      return timing(read);
    },
    writeFile: (path: string, text: string) => writeFile(path, text),
  };
  const storage: AcceptanceDeps["storage"] = {
    async waitForDevice(volumeId) {
      if (!(await attachedHere(volumeId))) throw new Error(`${volumeId} is not attached here: no device`);
      return "/dev/nvme9n1";
    },
    findDevice: async () => undefined,
    identify: async () => ({ kind: "cache", fresh: false }),
    mountPointOf: async () => undefined,
  };
  const mortal = <T extends object>(name: string, target: T): T =>
    Object.fromEntries(
      Object.entries(target).map(([key, value]) => [
        key,
        typeof value === "function"
          ? (...args: unknown[]) => lived(`${name}.${key}`, args, async () => value(...args))
          : value,
      ]),
    ) as T;
  return {
    ...mortal("host", host),
    log: createMemoryLogger("debug"),
    cloudFor: () => ({ ...mortal("ec2", { ...cloud }), clock: cloud.clock }),
    storage: mortal("storage", storage),
    say: () => undefined,
    newRunId: () => `run-${Math.random().toString(16).slice(2, 10)}`,
    settings: {
      pool: POOL,
      imageSet: IMAGE_SET,
      device: "/dev/sdf",
      mountRoot: join(folder, "mnt"),
      attachTimeoutMs: 30_000,
      deviceTimeoutMs: 30_000,
      prices: { gibMonthUsd: 0.08 },
      output,
    },
  };
}

/** Volumes a run tagged that moto still has (deleting counts as gone), and what is attached to the instance. */
async function leftBehind() {
  const tagged = (await describe({ "tag-key": ACCEPTANCE_TAG })).filter((v) => v.State !== "deleting");
  const attached = (await describe({ "attachment.instance-id": instanceId }))
    .map((v) => v.VolumeId!)
    .filter((id) => id !== backend.rootVolume);
  return { tagged: tagged.map((v) => v.VolumeId!), attached };
}

t.test("a run: both volumes created, tagged and attached here, then detached and deleted", async (t) => {
  const seen: Seen = { whileRead: [], mounts: new Set() };
  const result = await runAcceptance(acceptanceDeps(seen));
  const [fromSnapshot] = seen.whileRead;
  t.equal(seen.whileRead.length, 1, "one volume existed while the snapshot's was read: the blank comes after");
  t.equal(fromSnapshot?.SnapshotId, snapshot, "made from the pool's snapshot");
  t.equal(fromSnapshot?.AvailabilityZone, ZONE_A);
  t.equal(fromSnapshot?.Attachments?.[0]?.InstanceId, instanceId, "attached to this instance");
  const tags = Object.fromEntries((fromSnapshot?.Tags ?? []).map((tag) => [tag.Key!, tag.Value!]));
  t.equal(tags[ACCEPTANCE_TAG], result.runId);
  t.equal(tags[VolumeTag.managed], "true");
  const expiresIn = Date.parse(tags[VolumeTag.expiresAt] ?? "") - Date.now();
  t.ok(expiresIn > 55 * 60_000 && expiresIn <= 61 * 60_000, `expires in about an hour (${expiresIn} ms)`);
  const written = parseEbsModel(JSON.parse(await readFile(output, "utf8")), output);
  t.same(
    [written.firstReadLatencyMs, written.concurrency, written.warmThroughputMiBps, written.region],
    [{ qd1: 40, qd8: 40, qd32: 160 }, 8, 125, REGION],
    "the model's numbers from what was read",
  );
  t.same(await leftBehind(), { tagged: [], attached: [] }, "nothing left in moto");
  t.same([...seen.mounts], [], "nothing left mounted");
});

t.test("killed once attached: the rerun detaches and deletes the leftover, and measures", async (t) => {
  const seen: Seen = { whileRead: [], mounts: new Set() };
  const point = { kind: "call", name: "storage.waitForDevice", nth: 1, apply: "after" } as const;
  const killed = await asProcess(new ProcessLife(point), () => runAcceptance(acceptanceDeps(seen)));
  t.ok(killed instanceof ProcessKilled, "the run died there");
  const left = await leftBehind();
  t.equal(left.attached.length, 1, "it left its volume attached here", left);
  const result = await runAcceptance(acceptanceDeps(seen));
  t.same(
    result.cleaned.filter((o) => o.step.volumeId === left.attached[0]).map((o) => o.done),
    ["detached", "deleted"],
  );
  t.same(await leftBehind(), { tagged: [], attached: [] }, "nothing left in moto");
});
