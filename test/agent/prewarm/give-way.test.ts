/**
 * `prewarm.giveWay` reaches the reads: `ebs-cache-agent prewarm` (runPrewarm, against the port
 * fakes) hands the configured pacing to the reader with the yielding depth, and with giving way
 * off reads at full depth, never paced. The pacing loop itself is test/host/read-pacer.test.ts.
 * No root, no fio.
 */
import t, { type Test } from "tap";
import { runBoot } from "../../../src/agent/boot/run.ts";
import type { InitializeOptions } from "../../../src/agent/ports.ts";
import { runPrewarm } from "../../../src/agent/prewarm/run.ts";
import { YIELD_IO_DEPTH } from "../../../src/agent/prewarm/plan.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { COLD, WARM, fakeNode, fakeReader } from "../../fixtures/fakes/index.ts";

const POOL = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "default" };

/** `prewarm --strategy files` on a node booted from the pool's snapshot; the options the reader was given. */
async function filesRead(t: Test, giveWay: Record<string, unknown>) {
  const node = await fakeNode(t, { config: { prewarm: { strategy: "off", giveWay } } });
  await node.fake.snapshot({ ...POOL });
  const booted = await runBoot(node.config, node.adapters(), { dryRun: false });
  if (booted.report?.outcome !== "ready") throw new Error(`boot: ${booted.report?.reason}`);
  const reader = fakeReader(node.script, { figures: [COLD, WARM] });
  const outcome = await runPrewarm(node.config, node.adapters({ reader: reader.reader }), { strategy: "files" });
  t.equal(outcome.report?.phase, "done", outcome.report?.error ?? "initialized");
  const reads = node.script.of("fio.initialize");
  t.equal(reads.length, 1, "one initialization");
  return reads[0]?.args[2] as InitializeOptions;
}

t.test("the configured pacing reaches the reader", async (t) => {
  const options = await filesRead(t, { runMs: 400, pauseMs: 50, maxPausedMs: 2000, settleMs: 300, othersIops: 4 });
  t.equal(options.yieldDepth, YIELD_IO_DEPTH, "the yielding depth");
  t.same(options.giveWay, { runMs: 400, pauseMs: 50, maxPausedMs: 2000, settleMs: 300, quietIops: 4 });
});

t.test("giving way off: full depth, never paced", async (t) => {
  const options = await filesRead(t, { enabled: false, runMs: 400 });
  t.equal(options.yieldDepth, undefined, "no yielding depth: the reader never stops fio");
  t.equal(options.giveWay, undefined);
  t.equal(options.ioDepth, 32, "prewarm.initialize.ioDepth throughout");
});
