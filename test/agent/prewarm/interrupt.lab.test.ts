/**
 * An initialization killed half-way (SIGKILL, as when the agent is killed) leaves the volume
 * untagged and a resume point in the state file; the next run takes the dead run's lock over,
 * resumes there, and tags the volume only once everything was read.
 */
import t from "tap";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { execa } from "execa";
import { DEFAULT_PREWARM, type PrewarmSettings } from "../../../src/agent/prewarm/plan.ts";
import { isAlive } from "../../../src/agent/process-identity.ts";
import { readPrewarmState, renderPrewarmStatus } from "../../../src/agent/prewarm/state.ts";
import { createCloudVolumes } from "../../../src/aws/ec2.ts";
import { createFioReader } from "../../../src/host/volume-reads.ts";
import { run } from "../../../src/exec.ts";
import { startLab } from "../../../src/lab/lab.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { assertLabPrerequisites, childEnv, pollUntil } from "../../fixtures/lab/lab-prereq.ts";
import {
  attach,
  COLD,
  COLD_IOPS_CEILING,
  createVolume,
  makeDataSnapshot,
  mountXfs,
} from "../../fixtures/lab/prewarm-lab.ts";

await assertLabPrerequisites();

const REPO = fileURLToPath(new URL("../../..", import.meta.url));
const RUNNER = join(REPO, "test/fixtures/lab/prewarm-runner.ts");

t.test("killed half-way: not tagged, resumed by the next run, tagged at the end", async (t) => {
  const lab = await startLab({ name: "test-prewarm-kill", coldSnapshots: COLD, log: createMemoryLogger("info") });
  t.teardown(async () => {
    for (const host of lab.hosts) await run("umount", ["-R", host.paths.mountRoot], { check: false });
    await lab.close();
  });
  const ec2 = lab.ec2Client();
  const cloud = createCloudVolumes({ client: ec2, pollMs: 100 });
  // 160 MiB: about 13 s of cold reads in all (20 ms a chunk, one at a time), time enough to kill the first run
  // between 20 % and the end however fast the machine.
  const snapshotId = await makeDataSnapshot(lab, ec2, { sizeGiB: 1, dataMiB: 160, files: 10 });
  const host = await lab.addHost();
  const volumeId = await createVolume(ec2, host.instance.availabilityZone, { snapshotId });
  const device = await attach(lab, ec2, volumeId, host);
  const mountPoint = await mountXfs(device, host, volumeId);
  const stateDir = join(host.paths.hostRoot, "var/lib/ebs-cache-agent");
  const settings: PrewarmSettings = {
    ...DEFAULT_PREWARM,
    strategy: "files",
    check: { seconds: 2, reads: 200, ioDepth: 16, blockBytes: 4096 },
    thresholds: { minIops: COLD_IOPS_CEILING, maxMedianLatencyMs: null },
    initialize: { ...DEFAULT_PREWARM.initialize, progressSeconds: 1 },
  };
  const input = JSON.stringify({
    endpoint: lab.ec2.endpoint,
    region: lab.region,
    volumeId,
    snapshotId,
    device,
    mountPoint,
    stateDir,
    settings,
  });

  const first = spawn(process.execPath, [RUNNER, input], {
    cwd: REPO,
    env: childEnv(),
    stdio: ["ignore", "ignore", "pipe"],
  });
  let firstLog = "";
  first.stderr.on("data", (chunk: Buffer) => (firstLog += chunk.toString()));
  const midway = await pollUntil(
    async () => {
      const state = await readPrewarmState(stateDir);
      return (state?.progress?.percent ?? 0) >= 20 && (state?.cursor?.offset ?? 0) > 0;
    },
    120_000,
    50,
  );
  t.ok(midway, "the first run got under way");
  first.kill("SIGKILL");
  await new Promise((resolve) => first.once("exit", resolve));
  const killed = (await readPrewarmState(stateDir))!;
  t.ok(killed.progress!.percent < 100, `killed at ${killed.progress!.percent} %`);
  t.equal(killed.phase, "initializing");
  t.notOk(await isAlive(killed.pid, killed.pidStart), "its process is gone");
  t.match(renderPrewarmStatus(killed, false).join("\n"), /interrupted/, "status says interrupted");
  t.notOk((await cloud.describeVolume(volumeId))!.tags[VolumeTag.initialized], "not tagged after the kill");
  t.match(firstLog, /prewarm\.progress/, "progress was logged");

  const second = await execa(process.execPath, [RUNNER, input], {
    cwd: REPO,
    env: childEnv(),
    extendEnv: false,
    reject: false,
  });
  t.equal(second.exitCode, 0, second.stderr);
  t.match(second.stderr, new RegExp(`resuming at .*volume=${volumeId}`), "resumed from the resume point");
  const outcome = JSON.parse(second.stdout) as { verdict: string; phase: string };
  t.match(outcome, { verdict: "warm", phase: "done" });
  t.ok((await cloud.describeVolume(volumeId))!.tags[VolumeTag.initialized], "tagged at the end");
  const done = (await readPrewarmState(stateDir))!;
  t.match(done, { phase: "done", progress: { percent: 100 } });
  // Warm is what the cold layer counts, not how much faster fio went (a speed ratio fails on a loaded
  // machine): a sample like the run's last one, taken again, fetches nothing and waits for no delay.
  const warmBefore = (await lab.cold!.volumeStatus(volumeId))!;
  const again = await createFioReader().check({ device, mountPoint }, settings.check);
  const warmAfter = (await lab.cold!.volumeStatus(volumeId))!;
  t.ok(again.reads > 0, `the sample read (${again.reads} reads)`);
  t.same(
    [warmAfter.fetches - warmBefore.fetches, warmAfter.delayedMs - warmBefore.delayedMs],
    [0, 0],
    "a sample after the resumed initialization reads a warmed volume: no fetch, no delay",
  );
});
