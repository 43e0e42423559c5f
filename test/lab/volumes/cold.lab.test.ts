/**
 * The lab's cold snapshots (src/lab/volumes/cold.ts): a volume made from a snapshot reads slowly on the
 * first touch of each chunk and fast afterwards; its bytes are the snapshot's; a blank volume is
 * not cold; the FUSE mount and process go with the lab, also when the lab's owner is killed.
 * Cold and warm are told apart by what the layer counts (fetches, delayed time), never by speed.
 */
import t from "tap";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { run } from "../../../src/exec.ts";
import { listLoopDevices, listMounts } from "../../../src/lab/reaper/devices.ts";
import { startLab } from "../../../src/lab/lab.ts";
import { snapshotImagePath } from "../../../src/lab/reaper/labdir.ts";
import { runFio, writeIolog } from "../../../src/host/fio.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { assertLabPrerequisites, childEnv, pollUntil } from "../../fixtures/lab/lab-prereq.ts";
import { attach, COLD, createVolume, detach, makeDataSnapshot } from "../../fixtures/lab/prewarm-lab.ts";

await assertLabPrerequisites();

const REPO = fileURLToPath(new URL("../../..", import.meta.url));

/**
 * Loop devices left on a volume's image: a backing file under the root, or one named after the
 * volume on a mount that was detached meanwhile (the kernel then shows `/<vol>.img`).
 */
async function loopsLeft(root: string, volumeIds: string[]): Promise<string[]> {
  return (await listLoopDevices())
    .filter((l) => l.backingFile.startsWith(`${root}/`) || volumeIds.some((id) => l.backingFile.endsWith(`/${id}.img`)))
    .map((l) => `${l.device} ${l.backingFile}`);
}

/** Fetch slots of the first test's volumes (the tests' COLD has one). */
const FETCH_SLOTS = 4;

/** 4 KiB random reads over the first `spanBytes` of the device, `count` of them, 16 at a time. */
async function parallelReads(device: string, dir: string, spanBytes: number, count: number): Promise<void> {
  const reads = Array.from({ length: count }, (_, i) => ({
    offset: ((i * 7919) % (spanBytes / 4096)) * 4096,
    length: 4096,
  }));
  const iolog = join(dir, "parallel.iolog");
  await writeIolog(iolog, device, reads);
  await runFio({ name: "parallel", iolog, ioDepth: 16, runtimeSeconds: 60 });
}

async function sha256(path: string, bytes: number): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path, { start: 0, end: bytes - 1 })) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

/** 4 KiB random reads over the first `spanBytes` of the device, `count` of them, one at a time. */
async function randomReads(
  device: string,
  dir: string,
  spanBytes: number,
  count: number,
  seed: number,
): Promise<{ iops: number; reads: number }> {
  let x = seed;
  const random = () => (x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  const reads = Array.from({ length: count }, () => ({
    offset: Math.floor(random() * (spanBytes / 4096)) * 4096,
    length: 4096,
  }));
  const iolog = join(dir, `reads-${seed}.iolog`);
  await writeIolog(iolog, device, reads);
  const report = await runFio({ name: "sample", iolog, ioDepth: 1, runtimeSeconds: 20 });
  return { iops: report.read.iops, reads: report.read.totalIos };
}

t.test("a volume from a snapshot is cold on first read, warm after; its bytes are the snapshot's", async (t) => {
  const log = createMemoryLogger("debug");
  const lab = await startLab({ name: "test-cold", coldSnapshots: { ...COLD, fetchConcurrency: FETCH_SLOTS }, log });
  t.teardown(() => lab.close());
  const ec2 = lab.ec2Client();
  const snapshotId = await makeDataSnapshot(lab, ec2, { sizeGiB: 1, dataMiB: 32, files: 4 });
  const host = await lab.addHost();
  const zone = host.instance.availabilityZone;

  const coldId = await createVolume(ec2, zone, { snapshotId });
  const blankId = await createVolume(ec2, zone, { sizeGiB: 1 });
  t.ok(lab.cold?.isCold(coldId), "made from a snapshot: cold");
  t.notOk(lab.cold?.isCold(blankId), "blank: not cold");

  const device = await attach(lab, ec2, coldId, host);
  const backing = (await listLoopDevices()).find((loop) => loop.device === device)?.backingFile;
  t.equal(backing, join(lab.cold!.mountPoint, `${coldId}.img`), "the loop device reads through the FUSE layer");

  const span = 64 * 1024 * 1024;
  const first = await randomReads(device, lab.root, span, 150, 1);
  const statusAfterFirst = await lab.cold!.volumeStatus(coldId);
  const again = await randomReads(device, lab.root, span, 150, 1); // the same offsets: now warm
  t.ok(
    statusAfterFirst!.fetches > 0 &&
      statusAfterFirst!.delayedMs >= COLD.firstReadDelayMs * statusAfterFirst!.fetches * 0.9,
    `${first.reads} first reads waited for their chunks (${statusAfterFirst!.fetches} fetches)`,
  );
  // Warm means the layer makes a read wait for nothing: what it counts, not how fast fio went
  // (a speed ratio fails on a loaded machine).
  t.equal(again.reads, 150, "the re-read read them all");
  const statusAfterAgain = await lab.cold!.volumeStatus(coldId);
  t.equal(statusAfterAgain!.fetches, statusAfterFirst!.fetches, "re-reading fetched nothing");
  t.equal(statusAfterAgain!.delayedMs, statusAfterFirst!.delayedMs, "re-reading waited for no first-read delay");
  t.equal(statusAfterAgain!.mostFetchesInFlight, 1, "one read at a time: one fetch at a time");

  // Byte for byte the snapshot, through the layer (where the data is, and holes after it).
  const size = 96 * 1024 * 1024;
  t.equal(
    await sha256(device, size),
    await sha256(snapshotImagePath(lab.root, snapshotId), size),
    "device = snapshot image",
  );
  const read = await lab.cold!.volumeStatus(coldId);
  t.ok(read!.warmChunks >= size / COLD.chunkBytes, "reading it warmed every chunk read");

  // Writes land in the volume's image and survive a detach/attach.
  await run("dd", [
    "if=/dev/urandom",
    `of=${device}`,
    "bs=4096",
    "count=1",
    "seek=10000",
    "oflag=direct",
    "status=none",
  ]);
  const written = await sha256(device, size);
  await detach(ec2, coldId, host);
  // The volume's device from here on: the loop device it had may be another test's by now (the
  // lab files run side by side and take the lowest free loop device).
  const reattached = await attach(lab, ec2, coldId, host);
  t.equal(await sha256(reattached, size), written, "the write is kept");

  // A blank volume reads at full speed at once: the layer is not in its path, so no first-read delay.
  const blankDevice = await attach(lab, ec2, blankId, host);
  const blank = await randomReads(blankDevice, lab.root, span, 150, 2);
  t.equal(blank.reads, 150, "the blank volume read them all");
  const blankBacking = (await listLoopDevices()).find((loop) => loop.device === blankDevice)?.backingFile;
  t.ok(
    blankBacking !== undefined && !blankBacking.startsWith(`${lab.cold!.mountPoint}/`),
    `the blank volume's loop device reads its own image (${blankBacking}), not the layer`,
  );
  t.equal(await lab.cold!.volumeStatus(blankId), undefined, "the layer serves nothing of it");

  // Reads in parallel reach the layer in parallel (the loop device's direct I/O), and the
  // volume's fetch slots bound them.
  await lab.cold!.cool(coldId);
  const logged = (await lab.cold!.fetches(coldId)).length;
  await parallelReads(reattached, lab.root, span, 400);
  const parallel = await lab.cold!.volumeStatus(coldId);
  t.ok(
    parallel!.mostFetchesInFlight > 1 && parallel!.mostFetchesInFlight <= FETCH_SLOTS,
    `parallel reads: ${parallel!.mostFetchesInFlight} fetches in flight at most (1 < n <= ${FETCH_SLOTS})`,
  );
  // The fetch log says how each fetch was asked for: by reads here, each with its wait for a slot.
  const byReads = (await lab.cold!.fetches(coldId)).slice(logged);
  t.ok(byReads.length > 0 && byReads.every((f) => f.by === "read" && f.queuedMs >= 0), "asked for by reads");
  // A write to part of a cold chunk fetches the chunk first: by a write.
  const partialAt = 90 * 1024 * 1024 + 4096;
  const beforeWrite = (await lab.cold!.fetches(coldId)).length;
  await run("dd", [
    "if=/dev/zero",
    `of=${reattached}`,
    "bs=4096",
    "count=1",
    `seek=${partialAt / 4096}`,
    "oflag=direct",
    "status=none",
  ]);
  t.ok(
    (await lab.cold!.fetches(coldId))
      .slice(beforeWrite)
      .some((f) => f.by === "write" && f.chunk === Math.floor(partialAt / COLD.chunkBytes)),
    "a 4 KiB write into a cold chunk: fetched by a write",
  );

  // A volume's own first-read delay (setFirstReadDelay): the layer's status says it. (That such a
  // volume's reads still fetch and warm every chunk: test/agent/prewarm/prewarm.lab.test.ts, whose
  // full device read runs with a delay of 0 from a cold start. Here the kernel's page cache may
  // serve the chunks read earlier without asking the layer.)
  await lab.cold!.setFirstReadDelay(coldId, 0);
  t.equal((await lab.cold!.volumeStatus(coldId))!.firstReadDelayMs, 0, "the volume's first-read delay is its own");

  // VolumeInitializationRate: the layer warms the volume in the background at that rate.
  const rated = await createVolume(ec2, zone, { snapshotId, rate: 300 });
  const warmed = await pollUntil(async () => {
    const s = await lab.cold!.volumeStatus(rated);
    return s !== undefined && s.warmChunks === s.chunks;
  }, 30_000);
  t.ok(warmed, "a provisioned-rate volume warms itself (1 GiB at 300 MiB/s)");
  t.equal(
    (await lab.cold!.volumeStatus(rated))!.firstReadDelayMs,
    COLD.firstReadDelayMs,
    "another volume keeps the lab's first-read delay",
  );
});

t.test("close, and a killed owner's janitor, leave no FUSE mount, loop device or process", async (t) => {
  const base = join("/var/tmp", `ebs-cache-cold-test-${process.pid}`);
  t.teardown(() => run("rm", ["-rf", base], { check: false }));
  // 1. close() of a lab with a cold volume attached and mounted.
  const lab = await startLab({ base, name: "close", coldSnapshots: COLD });
  const ec2 = lab.ec2Client();
  const snapshotId = await makeDataSnapshot(lab, ec2, { sizeGiB: 1, dataMiB: 4, files: 1 });
  const host = await lab.addHost();
  const volumeId = await createVolume(ec2, host.instance.availabilityZone, { snapshotId });
  const device = await attach(lab, ec2, volumeId, host);
  await run("mkdir", ["-p", join(host.paths.mountRoot, "v")]);
  await run("mount", ["-o", "nouuid", device, join(host.paths.mountRoot, "v")]);
  const root = lab.root;
  await lab.close();
  t.notOk(existsSync(root), "root removed");
  t.same(
    (await listMounts()).filter((m) => m.target.startsWith(root)),
    [],
    "no mount left",
  );
  t.same(await loopsLeft(root, [volumeId]), [], "no loop device left");
  t.equal((await run("pgrep", ["-f", root], { check: false })).stdout, "", "no process left");

  // 2. The owner is killed with SIGKILL: the janitor reaps (FUSE process killed, all unmounted).
  const child = spawn(process.execPath, [join(REPO, "test/fixtures/lab/cold-lab-owner.ts"), base], {
    cwd: REPO,
    env: childEnv(),
    stdio: ["ignore", "pipe", "inherit"],
  });
  const line = await new Promise<string>((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes("\n")) resolve(out.split("\n")[0]!);
    });
    child.on("exit", (code) => reject(new Error(`owner exited early (${code})`)));
  });
  const made = JSON.parse(line) as { root: string; mountPoint: string; fuse: string; volumeId: string };
  t.ok(
    (await listMounts()).some((m) => m.target === made.fuse),
    "the FUSE layer is mounted",
  );
  t.ok(
    (await listMounts()).some((m) => m.target === made.mountPoint),
    "an XFS volume is mounted on a cold device",
  );
  child.kill("SIGKILL");
  const reaped = await pollUntil(async () => !existsSync(made.root), 90_000, 250);
  t.ok(reaped, "the janitor reaped the root");
  t.same(
    (await listMounts()).filter((m) => m.target.startsWith(made.root)),
    [],
    "no mount left (FUSE included)",
  );
  t.same(await loopsLeft(made.root, [made.volumeId]), [], "no loop device left (none on a detached FUSE mount either)");
  t.equal(
    (await run("pgrep", ["-f", made.root], { check: false })).stdout,
    "",
    "no process left (the FUSE process included)",
  );
});
