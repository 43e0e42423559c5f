/**
 * The refresh (runRefresh) in process against the port fakes: on a node booted on a pool volume
 * of an older generation, it pulls what the pool's newer snapshot lists and docker lacks, and a
 * pull that fails is reported, not fatal. No root, no registry.
 */
import t from "tap";
import { runBoot } from "../../../src/agent/boot/run.ts";
import { processStartTime } from "../../../src/agent/process-identity.ts";
import type { HostAdapters } from "../../../src/agent/adapters.ts";
import { refreshStatus, runRefresh } from "../../../src/agent/refresh/run.ts";
import { writeRefreshState } from "../../../src/agent/refresh/state.ts";
import type { ImagePuller } from "../../../src/agent/ports.ts";
import { StopSignalReceived } from "../../../src/errors.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { fakeNode, fakePuller, type FakeNode } from "../../fixtures/fakes/index.ts";

const POOL = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "default" };

async function bootedOnOldGeneration(t: Parameters<typeof fakeNode>[0]): Promise<FakeNode> {
  const node = await fakeNode(t);
  await node.fake.volume({
    tags: { ...POOL, [VolumeTag.images]: "lab/app:1", [VolumeTag.builtAt]: "2026-01-01T00:00:00.000Z" },
  });
  node.docker.state.images.set("*", ["lab/app:1"]);
  const booted = await runBoot(node.config, node.adapters(), { dryRun: false });
  if (booted.report?.outcome !== "ready") throw new Error(`boot: ${booted.report?.reason}`);
  await node.fake.snapshot({
    ...POOL,
    [VolumeTag.images]: "lab/app:1,lab/app:2",
    [VolumeTag.builtAt]: "2026-06-01T00:00:00.000Z",
  });
  return node;
}

const refreshDeps = (node: FakeNode, puller: ImagePuller): HostAdapters => node.adapters({ puller });

t.test("pulls what the newer generation lists and docker lacks, nothing else", async (t) => {
  const node = await bootedOnOldGeneration(t);
  const outcome = await runRefresh(node.config, refreshDeps(node, fakePuller(node.script)), { dryRun: false });
  t.equal(outcome.exitCode, 0);
  t.same(
    node.script.of("pull.pull").map((c) => c.args[0]),
    ["lab/app:2"],
    "only the missing image pulled",
  );
  t.ok(
    node.recorder.recorded.some((r) => r.kind === "refreshStateWritten"),
    "its state's metrics written",
  );
});

t.test("a dry run pulls nothing; a failed pull is reported and the run ends", async (t) => {
  const node = await bootedOnOldGeneration(t);
  const dry = await runRefresh(node.config, refreshDeps(node, fakePuller(node.script)), { dryRun: true });
  t.equal(dry.exitCode, 0);
  t.equal(node.script.of("pull.pull").length, 0, "dry run: no pull");
  node.script.failNext("pull.pull", new Error("pull access denied (scripted)"));
  const outcome = await runRefresh(node.config, refreshDeps(node, fakePuller(node.script)), { dryRun: false });
  t.equal(outcome.exitCode, 0, "a failed pull does not fail the node");
  t.match(JSON.stringify(outcome.state), /pull access denied/, "the failure is in the state");
});

t.test("a refresh stopped by a signal pulls nothing more, says stopped and exits 1", async (t) => {
  const node = await bootedOnOldGeneration(t);
  const stop = new AbortController();
  stop.abort(new StopSignalReceived("SIGINT"));
  const outcome = await runRefresh(node.config, refreshDeps(node, fakePuller(node.script)), {
    dryRun: false,
    signal: stop.signal,
  });
  t.equal(outcome.state?.phase, "stopped");
  t.match(outcome.state?.images, [
    { image: "lab/app:1", phase: "present" },
    { image: "lab/app:2", phase: "pending" },
  ]);
  t.equal(outcome.exitCode, 1, "not done: a script or an operator's shell must not read it as success");
  t.match(node.log.lines.join("\n"), /stopped by SIGINT: no further pull/, "the log names the signal that came");
});

/** A state left `running` by a refresh whose process was `pid` (started at `pidStart`). */
async function leftRunning(node: FakeNode, pid: number, pidStart?: string): Promise<void> {
  const now = new Date().toISOString();
  await writeRefreshState(node.config.paths.stateDir, {
    version: 1,
    pid,
    ...(pidStart !== undefined ? { pidStart } : {}),
    volumeId: null,
    generation: null,
    phase: "running",
    images: [],
    markedCurrent: null,
    warnings: [],
    startedAt: now,
    updatedAt: now,
  });
}

t.test("a killed refresh's pid reused by another process does not stop the next refresh", async (t) => {
  // The parent process (the test runner) lives: it plays the unrelated process the pid now names.
  const other = process.ppid;
  const start = await processStartTime(other);
  t.ok(start, "the other process's start time is readable");
  const node = await bootedOnOldGeneration(t);
  const { stateDir } = node.config.paths;

  await leftRunning(node, other, `${Number(start) + 1}`);
  t.equal((await refreshStatus(stateDir)).running, false, "a live pid that started at another time: not running");
  const outcome = await runRefresh(node.config, refreshDeps(node, fakePuller(node.script)), { dryRun: false });
  t.equal(outcome.state?.phase, "done", "the next refresh runs");
  t.same(
    node.script.of("pull.pull").map((c) => c.args[0]),
    ["lab/app:2"],
  );
  t.equal(outcome.state?.pidStart, await processStartTime(process.pid), "it records its own start time");

  await leftRunning(node, other, start);
  t.equal((await refreshStatus(stateDir)).running, true, "the same pid and start time: running");
  const skipped = await runRefresh(node.config, refreshDeps(node, fakePuller(node.script)), { dryRun: false });
  t.equal(skipped.state?.pid, other, "a refresh that runs is left alone");
  t.equal(node.script.of("pull.pull").length, 1, "no second pull");

  await leftRunning(node, other);
  t.equal((await refreshStatus(stateDir)).running, true, "an older agent's state (no start time): a live pid runs");
});
