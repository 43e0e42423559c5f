/**
 * A stop (SIGTERM, SIGINT) that came while the pre-warm command was still asking EC2 and deciding,
 * before its long run began: the run stops at once, its state `pending` (resumable), the volume
 * untagged. The command's signal had fired before the run's own stop listened to it, and an
 * aborted signal fires no event again: the reads ran to their end and the volume was tagged, the
 * stop ignored. Against the port fakes: no root, no fio.
 */
import t from "tap";
import { runBoot } from "../../../src/agent/boot/run.ts";
import { readPrewarmState } from "../../../src/agent/prewarm/state.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { POOL, withBackgroundPrewarm } from "../../fixtures/lab/background-prewarm.ts";
import { fakeNode, fakeReader } from "../../fixtures/fakes/index.ts";

t.test("a stop before the background run began: it reads nothing, tags nothing, and stays resumable", async (t) => {
  const node = await fakeNode(t, { config: { prewarm: { strategy: "files" } } });
  await node.fake.snapshot({ ...POOL });
  const stop = new AbortController();
  stop.abort(new Error("stopped by a signal"));
  const fio = fakeReader(node.script);
  const wired = withBackgroundPrewarm(node, fio.reader, { signal: stop.signal });

  const booted = await runBoot(node.config, wired.adapters, { dryRun: false });
  t.equal(booted.report?.outcome, "warming", booted.report?.reason ?? "warming");
  const background = wired.background();
  if (!background) throw new Error("the initialization was not handed to the background run");
  const outcome = await background;

  t.equal(outcome.phase, "pending", "interrupted, not done");
  const state = await readPrewarmState(node.config.paths.stateDir);
  t.equal(state?.phase, "pending", "the state file says the next run resumes it");
  t.equal(state?.progress, undefined, "not a byte read (the fake's reads check the signal before each step)");
  const volumeId = booted.report?.volumeId;
  if (!volumeId) throw new Error("the boot attached no volume");
  const volume = await node.fake.describe(volumeId);
  t.equal(volume.tags[VolumeTag.initialized], undefined, "the volume is not tagged initialized");
});
