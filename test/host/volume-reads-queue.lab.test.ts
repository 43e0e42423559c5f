/**
 * The look at the wanted files' queue (src/host/volume-reads.ts, read-pace.ts holdsOthersUp) on cold lab volumes
 * whose throughput binds: warm blocks' reads, timed with dd while the wanted files are read, wait behind them, and
 * from then on they give way to others' reads (the pacer stops their fio, --thread, while another reader reads).
 * Where the fetches bind instead, the same look finds warm reads passing and they read on unpaced
 * (volume-reads-need.lab.test.ts, one fetch at a time). Proved by the reader's log and the pacer's own tally, not by
 * time: the lab's cap of 8 MiB/s makes the wait some 250 ms, fifty times the line.
 */
import t from "tap";
import { setTimeout as sleep } from "node:timers/promises";
import type { ReadTarget } from "../../src/agent/ports.ts";
import { run } from "../../src/exec.ts";
import { createFioReader } from "../../src/host/volume-reads.ts";
import { timeWarmRead, WARM_READ_BYTES } from "../../src/host/warm-read.ts";
import { startLab } from "../../src/lab/lab.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { assertLabPrerequisites } from "../fixtures/lab/lab-prereq.ts";
import { attach, createVolume, makeDataSnapshot, mountXfs, writeNeedListFiles } from "../fixtures/lab/prewarm-lab.ts";

await assertLabPrerequisites();

const KiB = 1024;
/** Fetches are quick and many at once; the volume's throughput is what binds. */
const CAPPED = { firstReadDelayMs: 5, chunkBytes: 256 * KiB, fetchConcurrency: 8, throughputMiBps: 8 };
const WANTED = "overlay2/want/diff/big.bin";

const lab = await startLab({ name: "test-reads-queue", coldSnapshots: CAPPED, log: createMemoryLogger("info") });
t.teardown(async () => {
  for (const host of lab.hosts) await run("umount", ["-R", host.paths.mountRoot], { check: false });
  await lab.close();
});
const ec2 = lab.ec2Client();
const snapshotId = await makeDataSnapshot(lab, ec2, {
  sizeGiB: 1,
  dataMiB: 4,
  files: 1,
  // 24 MiB: three seconds of the cap, far longer than the look takes.
  addContent: (mountPoint) => writeNeedListFiles(mountPoint, [{ image: "lab/want:1", files: [WANTED] }], 24),
});
const host = await lab.addHost();

async function coldVolume(): Promise<ReadTarget> {
  const volumeId = await createVolume(ec2, host.instance.availabilityZone, { snapshotId });
  const device = await attach(lab, ec2, volumeId, host);
  return { device, mountPoint: await mountXfs(device, host, "v1") };
}

t.test("the wanted files' reads hold a warm read up where the throughput binds: paced from then on", async (t) => {
  const target = await coldVolume();
  const log = createMemoryLogger("debug");
  const reader = createFioReader({ log, drainMs: 5_000, pageCacheBudget: async () => 0 });
  // Another reader of the device (a service, say): small direct reads of the volume's first 4 MiB, until two seconds
  // after the look found the queue holding reads up (the pacer looks at the device at once then).
  let reading = true;
  const other = (async () => {
    let verdictAt: number | undefined;
    for (let block = 0; reading; block = (block + 1) % 1024) {
      await timeWarmRead(target.device, block * WARM_READ_BYTES);
      await sleep(20);
      if (verdictAt === undefined && log.lines.some((l) => l.includes("prewarm.pace: prewarm-need: a warm read")))
        verdictAt = Date.now();
      if (verdictAt !== undefined && Date.now() - verdictAt > 2_000) break;
    }
  })();
  t.teardown(() => {
    reading = false;
  });
  await reader.initialize(target, "files", {
    fromOffset: 0,
    ioDepth: 8,
    maxIoBytes: 256 * KiB,
    yieldDepth: 2,
    images: ["lab/want:1"],
    onProgress: () => undefined,
  });
  reading = false;
  await other;
  const lines = log.lines;
  const need = lines.find((l) => l.includes("exec.run") && l.includes("--name=prewarm-need "));
  t.match(need, /--iodepth=8 /, "8 reads of 256 KiB in flight (2 MiB, under the fetch bytes' 4 MiB)");
  t.match(need, /--thread/, "one process, to stop and continue");
  t.match(need, /--status-interval=100ms/, "fio reports every 100 ms");
  const dd = lines.filter((l) => l.includes("exec.run") && /\bdd if=\/dev\/\S+ of=\/dev\/null bs=4096 count=1/.test(l));
  t.equal(dd.length, 5, "warm reads timed once, at 5 blocks");
  t.ok(
    dd.every((l) => l.includes("iflag=direct")),
    "direct: past the page cache, to the device",
  );
  const verdict = lines.find((l) => l.includes("prewarm.pace: prewarm-need:") && l.includes("warm read"));
  t.match(verdict, /a warm read waits behind these \(the volume's throughput binds\)/, "held up: the throughput binds");
  const warm =
    /warmReadMs="?([0-9. ]+)"?/
      .exec(verdict ?? "")?.[1]
      ?.trim()
      .split(" ")
      .map(Number) ?? [];
  const median = [...warm].sort((a, b) => a - b)[(warm.length - 1) >> 1]!;
  t.ok(warm.length === 5 && median >= 5, `the warm reads waited (${warm.join(", ")} ms)`);
  const stops = /prewarm\.pace: prewarm-need: stopped (\d+) times while others read or wrote the device/.exec(
    lines.join("\n"),
  );
  t.ok(stops && Number(stops[1]) >= 1, `the pacer stopped the wanted files' fio for the other reader (${stops?.[1]})`);
  t.comment(lines.filter((l) => /prewarm\.(pace|read): prewarm-need/.test(l)).join("\n"));
  t.ok(
    lines.some((l) => /prewarm\.read: prewarm-need: 96 reads, 24 MiB at depth 8/.test(l)),
    "and every wanted read was made",
  );
});
