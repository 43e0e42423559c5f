/**
 * The need-ordered pre-warm end to end on a cold volume of the lab (src/lab/volumes/cold.ts): the
 * volume's need list names the files two images read at start; with the node about to run one
 * of them, `files` reads its files first, then the other image's, then the rest of the volume.
 * Proved by the cold layer's log of first reads (the order chunks were fetched), never by time.
 */
import t from "tap";
import { join } from "node:path";
import { prewarmAtBoot } from "../../../src/agent/prewarm/apply.ts";
import { DEFAULT_PREWARM, type PrewarmTarget } from "../../../src/agent/prewarm/plan.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { run } from "../../../src/exec.ts";
import { parseFilefrag } from "../../../src/host/extents.ts";
import { createFioReader } from "../../../src/host/volume-reads.ts";
import { startLab } from "../../../src/lab/lab.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { assertLabPrerequisites } from "../../fixtures/lab/lab-prereq.ts";
import { attach, COLD, createVolume, mountXfs, NEED_FILES, needListSnapshot } from "../../fixtures/lab/prewarm-lab.ts";

await assertLabPrerequisites();

const WANTED = NEED_FILES.wanted;
const OTHER = NEED_FILES.other;

const log = createMemoryLogger("debug");
const lab = await startLab({ name: "test-need-order", coldSnapshots: COLD, log: createMemoryLogger("info") });
t.teardown(async () => {
  for (const host of lab.hosts) await run("umount", ["-R", host.paths.mountRoot], { check: false });
  await lab.close();
});
const ec2 = lab.ec2Client();
const cloud = createCloudVolumes({ client: ec2, pollMs: 100 });

// The rest of the volume first (layer-*.bin), then the images' files: device order would read them last.
const snapshotId = await needListSnapshot(lab, ec2, 32);
const host = await lab.addHost();

/** The chunks holding a file's data on the device. */
async function chunksOf(mountPoint: string, files: string[]): Promise<Set<number>> {
  const paths = files.map((f) => join(mountPoint, "docker", f));
  const { stdout } = await run("filefrag", ["-v", "-e", ...paths]);
  const chunks = new Set<number>();
  for (const ranges of parseFilefrag(stdout).values())
    for (const r of ranges)
      for (let c = Math.floor(r.start / COLD.chunkBytes); c * COLD.chunkBytes < r.end; c++) chunks.add(c);
  return chunks;
}

t.test("files reads the wanted image's files first, then the other listed image's, then the rest", async (t) => {
  const volumeId = await createVolume(ec2, host.instance.availabilityZone, { snapshotId });
  const device = await attach(lab, ec2, volumeId, host);
  const volume = (await cloud.describeVolume(volumeId))!;
  const mountPoint = await mountXfs(device, host, volumeId);
  const target: PrewarmTarget = {
    // Created just now: known cold, so no random sample warms chunks before the reads.
    volume: { volumeId, snapshotId: volume.snapshotId!, createTime: new Date(), tags: {} },
    device,
    mountPoint,
    labels: {},
    images: ["lab/want:1"],
  };
  const wanted = await chunksOf(mountPoint, WANTED);
  const other = await chunksOf(mountPoint, OTHER);
  const rest = await chunksOf(mountPoint, NEED_FILES.rest);
  const before = (await lab.cold!.fetchOrder(volumeId)).length;

  const outcome = await prewarmAtBoot(
    target,
    { ...DEFAULT_PREWARM, strategy: "files", background: false },
    {
      reader: createFioReader({ log }),
      tagVolume: (id, tags) => cloud.tagVolume(id, tags),
      clock: cloud.clock,
      stateDir: join(host.paths.hostRoot, "state-need"),
      log,
    },
  );
  t.equal(outcome.phase, "done", log.lines.filter((l) => /prewarm/.test(l)).join("\n"));
  t.ok(
    log.lines.some((l) => /prewarm\.need: reading first the 3 files/.test(l)),
    "the need list was used",
  );

  // Positions in the order of first reads, of the chunks first fetched by the pre-warm.
  const order = (await lab.cold!.fetchOrder(volumeId)).slice(before);
  const position = new Map<number, number>();
  order.forEach((chunk, index) => position.has(chunk) || position.set(chunk, index));
  const only = (mine: Set<number>, ...others: Set<number>[]) =>
    [...mine].filter((c) => others.every((o) => !o.has(c)) && position.has(c)).map((c) => position.get(c)!);
  const w = only(wanted, other, rest);
  const o = only(other, wanted, rest);
  const r = only(rest, wanted, other);
  t.ok(
    w.length >= 6 && o.length >= 3 && r.length >= 40,
    `chunks fetched by the pre-warm: ${w.length} wanted, ${o.length} other, ${r.length} rest`,
  );
  t.ok(
    Math.max(...w) < Math.min(...o),
    `the wanted image's chunks first (last at ${Math.max(...w)}, other's first at ${Math.min(...o)})`,
  );
  t.ok(
    Math.max(...o) < Math.min(...r),
    `then the other image's (last at ${Math.max(...o)}, the rest from ${Math.min(...r)})`,
  );
});
