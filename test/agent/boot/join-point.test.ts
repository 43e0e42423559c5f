/**
 * What holds the swarm join and what does not (runBoot against the port fakes): `dataRootFinal` (systemd's
 * READY=1 for phase 2, which cloud-final and so osparc's `docker swarm join` wait for) comes once docker runs,
 * verified, on the volume, and before the labels; a pre-warm sample still running never delays `ready`
 * (published with `prewarm=checking`, the verdict after it); a boot that ends otherwise still gets there.
 */
import t from "tap";
import type { HostAdapters } from "../../../src/agent/adapters.ts";
import type { PrewarmReader } from "../../../src/agent/ports.ts";
import { runBoot } from "../../../src/agent/boot/run.ts";
import { Label, VolumeTag } from "../../../src/tags.ts";
import { LATER, gatedReader } from "../../fixtures/lab/background-prewarm.ts";
import { WARM, fakeNode, fakeReader, waitFor, type FakeNode } from "../../fixtures/fakes/index.ts";

const IMAGES = "lab/app:1";

/** A node with one pool volume, made from a snapshot, whose images docker lists. */
async function poolNode(t: Parameters<typeof fakeNode>[0]): Promise<FakeNode> {
  const node = await fakeNode(t);
  const snapshotId = await node.fake.snapshot({ Name: "the pool's origin" });
  const volume = await node.fake.volume({
    tags: {
      [VolumeTag.managed]: "true",
      [VolumeTag.kind]: "pool",
      [VolumeTag.pool]: "default",
      [VolumeTag.images]: IMAGES,
    },
    snapshotId,
  });
  node.docker.state.images.set(`${node.config.paths.mountRoot}/${volume.volumeId}/docker`, [IMAGES]);
  return node;
}

/**
 * The host's adapters of `node` with this fio, and EC2's clock two hours on: the volume is no longer known cold by
 * its age, so the boot's real pre-warm (strategy check) takes a sample.
 */
function withPrewarm(node: FakeNode, reader: PrewarmReader): HostAdapters {
  const cloud = { ...node.fake.cloud, clock: { ...node.fake.cloud.clock, now: LATER } };
  return node.adapters({ reader, cloudFor: () => cloud });
}

t.test(
  "a running sample: ready at once with prewarm=checking, then its verdict; the join point before both",
  async (t) => {
    const node = await poolNode(t);
    const sample = gatedReader(node);
    const events: string[] = [];
    const booting = runBoot(node.config, withPrewarm(node, sample.reader), {
      dryRun: false,
      dataRootFinal: async () => {
        events.push(
          `final after ${node.script.names("docker.").length} docker calls, ${node.labels.reports.length} labels`,
        );
      },
    });
    // `ready` comes while the sample still runs: the boot would otherwise never get here.
    for (let i = 0; i < 200 && node.labels.reports.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    t.equal(node.labels.reports.length, 1, "ready published while the sample runs");
    t.equal(node.labels.reports[0]?.state, "ready");
    t.equal(node.labels.reports[0]?.details[Label.prewarm], "checking", "prewarm=checking until the verdict");
    t.match(events, [/^final after [1-9]\d* docker calls, 0 labels$/], "the join point: docker verified, no label yet");
    sample.release(); // fio's first sample reads cold
    const outcome = await booting;
    t.equal(outcome.report?.outcome, "ready");
    t.equal(node.labels.reports.length, 2, "the labels again, with the verdict");
    t.equal(node.labels.reports[1]?.state, "ready");
    // The sample found it cold: warmed by need, here inline (this host starts no background run), then sampled again.
    t.equal(node.labels.reports[1]?.details[Label.prewarm], "warm", "the verdict after the warm by need");
    t.equal(outcome.report?.prewarm?.verdict, "warm", "in the result too");
    t.equal(node.script.of("fio.initialize").length, 1, "the cold volume read by need");
    t.equal(events.length, 2, "and again at the boot's end (src/host/systemd-notify.ts sends READY=1 once)");
  },
);

t.test("a sample done by the time docker is verified: one publication, with its verdict", async (t) => {
  const node = await poolNode(t);
  const fio = fakeReader(node.script, { figures: [WARM] });
  // docker's verification waits until the sample has read and its verdict is written (the state's second write).
  node.script.before("engine.images", () =>
    waitFor(
      async () =>
        node.script.of("fio.check").length > 0 &&
        node.recorder.recorded.filter((r) => r.kind === "prewarmStateWritten").length >= 2,
      "the sample's verdict",
    ),
  );
  const outcome = await runBoot(node.config, withPrewarm(node, fio.reader), { dryRun: false });
  t.equal(outcome.report?.outcome, "ready");
  t.same(
    node.labels.reports.map((r) => [r.state, r.details[Label.prewarm]]),
    [["ready", "warm"]],
    "no `checking` in between",
  );
});

t.test(
  "a degraded boot (no volume) reaches the join point at its end, after docker is on its default root",
  async (t) => {
    const node = await fakeNode(t);
    const seen: string[] = [];
    const outcome = await runBoot(node.config, node.adapters(), {
      dryRun: false,
      dataRootFinal: async () => void seen.push(`${node.labels.current()}`),
    });
    t.equal(outcome.report?.outcome, "degraded");
    t.ok(seen.length >= 1, "the join point is reached");
    t.equal(seen.at(-1), "degraded", "after the degraded label (and docker's restart on its default root)");
  },
);
