/**
 * The background pre-warm's pacing on a real (cold lab) device: a service that reads little but
 * often, 4 KiB at a time (far below a MiB a second, as a starting service reads its first blocks
 * and docker's metadata), stops the paced reads, counted from the pre-warm's own log
 * (`prewarm.pace`); with nobody else on the device they are never stopped. Counts, not time: the
 * foreign reader reads all along the pre-warm's run, so every look finds its requests.
 */
import t from "tap";
import { spawn } from "node:child_process";
import type { ReadTarget } from "../../src/agent/ports.ts";
import { run } from "../../src/exec.ts";
import { createFioReader } from "../../src/host/volume-reads.ts";
import { DEFAULT_PACE } from "../../src/host/read-pace.ts";
import { startLab } from "../../src/lab/lab.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { assertLabPrerequisites } from "../fixtures/lab/lab-prereq.ts";
import { attach, COLD, createVolume, mountXfs, needListSnapshot } from "../fixtures/lab/prewarm-lab.ts";

await assertLabPrerequisites();

const MiB = 1024 * 1024;
const lab = await startLab({ name: "test-pacer", coldSnapshots: COLD, log: createMemoryLogger("info") });
t.teardown(async () => {
  for (const host of lab.hosts) await run("umount", ["-R", host.paths.mountRoot], { check: false });
  await lab.close();
});
const ec2 = lab.ec2Client();
const snapshotId = await needListSnapshot(lab, ec2, 16);
const host = await lab.addHost();
let volumes = 0;

async function coldVolume(): Promise<ReadTarget> {
  const volumeId = await createVolume(ec2, host.instance.availabilityZone, { snapshotId });
  const device = await attach(lab, ec2, volumeId, host);
  return { device, mountPoint: await mountXfs(device, host, `v${++volumes}`) };
}

/** 4 KiB direct reads of the device's first block (warm since the mount), one every 5 ms, until killed. */
const SMALL_READER = `
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 4096)
print("reading", flush=True)
while True:
    os.preadv(fd, [buf], 0)
    time.sleep(0.005)
`;

/** The paced phase's pace line: how often it was stopped. */
async function backgroundRead(target: ReadTarget, drainMs?: number): Promise<{ pauses: number; looks: number }> {
  const log = createMemoryLogger("info");
  // No image named: the whole list at the fetch depth, then device order at depth 2, both paced.
  // A short longest stop keeps the run short while the reader never stops.
  const { drainMs: _drain, ...pace } = DEFAULT_PACE;
  await createFioReader({ log, ...(drainMs !== undefined ? { drainMs } : {}) }).initialize(target, "files", {
    fromOffset: 0,
    ioDepth: 32,
    maxIoBytes: MiB,
    yieldDepth: 2,
    giveWay: { ...pace, maxPausedMs: 400 },
    onProgress: () => undefined,
  });
  const line = log.lines.find((l) => /prewarm\.pace: prewarm-files: stopped \d+ times/.test(l)) ?? "";
  return {
    pauses: Number(/stopped (\d+) times/.exec(line)?.[1] ?? -1),
    looks: Number(/looks=(\d+)/.exec(line)?.[1] ?? -1),
  };
}

t.test("nobody else on the device: looked at, never stopped", async (t) => {
  // Reads in flight that take longer than the drain to complete count as others' (nobody can tell
  // them apart): on a loaded machine the cold layer's process may take a second for them, so the
  // quiet case gives them a minute. What stops the reads here can then only be another request.
  //
  // The device is the machine's, and other lab files run beside this one: in CI a run was seen
  // stopped 4 times in 24 looks with no reader of this test's (the requests came from outside it:
  // neither XFS's log nor udev, which this machine lacks, accounts for them). So up to three runs,
  // each on a fresh volume: one that is never stopped shows the pre-warm does not take its own
  // reads for others'. A pacer that did would stop in every run (it reads between all its looks).
  const runs: { pauses: number; looks: number }[] = [];
  for (let attempt = 1; attempt <= 3; attempt++) {
    const quiet = await backgroundRead(await coldVolume(), 60_000);
    runs.push(quiet);
    t.ok(quiet.looks > 0, `run ${attempt}: looked ${quiet.looks} times, stopped ${quiet.pauses} times`);
    if (quiet.pauses === 0) break;
  }
  t.equal(runs.at(-1)?.pauses, 0, `a run never stopped (runs: ${runs.map((r) => r.pauses).join(", ")} stops)`);
});

t.test("a service reading 4 KiB at a time (under 1 MiB/s): the pre-warm stops for it", async (t) => {
  const target = await coldVolume();
  const reader = spawn("python3", ["-c", SMALL_READER, target.device], { stdio: ["ignore", "pipe", "inherit"] });
  t.teardown(() => void reader.kill("SIGKILL"));
  await new Promise<void>((resolve, reject) => {
    reader.stdout.once("data", () => resolve());
    reader.once("exit", (code) => reject(new Error(`the small reader exited (${code})`)));
  });
  const busy = await backgroundRead(target);
  reader.kill("SIGKILL");
  t.ok(busy.looks > 0, `looked ${busy.looks} times`);
  t.ok(busy.pauses > 0, `stopped ${busy.pauses} times for 4 KiB reads`);
});
