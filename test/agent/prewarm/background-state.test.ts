/**
 * The state file of a background initialization while its first sample runs (beginPrewarmAtBoot
 * in runBoot, the background run in process, against the port fakes): from the moment the run
 * starts it shows the run's process and phase (`checking`), not the boot's `pending`, so that
 * `ebs-cache-agent status` shows a running pre-warm; and a run that died in its sample is shown
 * as interrupted. The sample ends only when the test releases it. No root, no fio.
 */
import t from "tap";
import { runBoot } from "../../../src/agent/boot/run.ts";
import { prewarmStatus } from "../../../src/agent/prewarm/run.ts";
import {
  isInterrupted,
  readPrewarmState,
  renderPrewarmStatus,
  type PrewarmState,
} from "../../../src/agent/prewarm/state.ts";
import { POOL, gatedReader, withBackgroundPrewarm } from "../../fixtures/lab/background-prewarm.ts";
import { fakeNode, waitFor } from "../../fixtures/fakes/index.ts";

t.test("during the background run's first sample the state shows its process, checking", async (t) => {
  const node = await fakeNode(t, { config: { prewarm: { strategy: "files" } } });
  await node.fake.snapshot({ ...POOL });
  const fio = gatedReader(node);
  const wired = withBackgroundPrewarm(node, fio.reader);
  const stateDir = node.config.paths.stateDir;

  const booted = await runBoot(node.config, wired.adapters, { dryRun: false });
  t.equal(booted.report?.outcome, "warming", booted.report?.reason ?? "warming");
  const background = wired.background();
  if (!background) throw new Error("the initialization was not handed to the background run");
  await waitFor(async () => fio.sampling() === 1, "the background run's sample", 30_000);

  const during = await readPrewarmState(stateDir);
  t.match(during, { phase: "checking", pid: process.pid, verdict: "unknown" }, "the run, sampling");
  t.ok(during?.pidStart, "with its start time (a reused pid is not taken for it)");
  t.equal(during?.before, undefined, "no figures yet");
  const status = await prewarmStatus(stateDir);
  t.equal(status.running, true, "status sees a process working on it");
  t.ok(status.lines.includes(`phase:    checking (pid ${process.pid})`), status.lines.join("\n"));

  fio.release();
  const outcome = await background;
  t.equal(outcome.phase, "done", outcome.error ?? "done");
  t.match(await readPrewarmState(stateDir), { phase: "done", pid: process.pid, verdict: "warm" });
});

t.test("a run that died in its first sample is interrupted; a boot's own sample (no pid) is not", async (t) => {
  const state: PrewarmState = {
    version: 1,
    volumeId: "vol-0123456789abcdef0",
    device: "/dev/nvme1n1",
    mountPoint: "/var/lib/ebs-cache/vol-0123456789abcdef0",
    strategy: "files",
    action: "initialize",
    mode: "files",
    reason: "prewarm.strategy is files",
    phase: "checking",
    verdict: "unknown",
    labels: {},
    pid: 4_000_000,
    startedAt: "2026-12-02T07:00:00.000Z",
    updatedAt: "2026-12-02T07:00:01.000Z",
  };
  t.equal(isInterrupted(state, false), true);
  t.match(renderPrewarmStatus(state, false), [/./, /./, /^phase: {4}checking, interrupted/]);
  t.equal(isInterrupted(state, true), false, "running: not interrupted");
  const { pid: _pid, ...bootSample } = state;
  t.equal(isInterrupted(bootSample, false), false, "the boot's sample is the boot's, without a pid of its own");
  t.equal(isInterrupted({ ...state, phase: "initializing" }, false), true);
  t.equal(isInterrupted({ ...state, phase: "pending" }, false), false, "pending: handed on, nothing runs yet");
});
