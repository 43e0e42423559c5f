/**
 * The boot's CreateVolume token holds nothing that changes between reruns of one boot: a boot
 * that handed a volume back, then created one from the pool's snapshot and was killed before it
 * attached it, is run again; the rerun (which skips the handed-back volume, quarantined) asks
 * with the same token and takes the volume the killed run made, not a second one. On the port
 * fakes (the real adapter over the EC2 emulator, in memory), the process killed in process.
 */
import t from "tap";
import { VolumeTag } from "../../../src/tags.ts";
import { asProcess, fakeNode, ProcessKilled, ProcessLife, waitFor } from "../../fixtures/fakes/index.ts";
import { alive, boot } from "../../fixtures/kill/kill-in-process.ts";

const POOL_TAGS = { [VolumeTag.managed]: "true", [VolumeTag.kind]: "pool", [VolumeTag.pool]: "default" };

t.test(
  "killed after CreateVolume, past a volume it handed back: the rerun takes the volume the first made",
  async (t) => {
    const node = await fakeNode(t);
    const { emulator } = node.fake;
    const snapshotId = await node.fake.snapshot(POOL_TAGS);
    // The pool's one volume holds something that is not the agent's: handed back, quarantined.
    const foreign = (await node.fake.volume({ tags: POOL_TAGS })).volumeId;
    node.host.contents.set(foreign, { foreign: "ext4" });

    const killed = await asProcess(
      new ProcessLife({ kind: "call", name: "ec2.CreateVolume", nth: 1, apply: "after" }),
      () => boot(node),
    );
    t.ok(killed instanceof ProcessKilled, "the first run died with its CreateVolume applied, the answer lost");
    const fromSnapshot = () =>
      Object.values(emulator.snapshotState().volumes).filter(
        (v) => v.snapshotId === snapshotId && v.state !== "deleting",
      );
    const made = fromSnapshot().map((v) => v.volumeId);
    t.equal(made.length, 1, "it made one volume");
    t.ok(
      emulator.snapshotState().volumes[foreign]?.tags[VolumeTag.lastError],
      "and quarantined the one it handed back",
    );

    // EC2's listings do not show the new volume yet (its eventual consistency): the rerun cannot find it
    // among the pool's candidates, only through its token. EC2's clock then moves on and it shows.
    emulator.setFaults({ actions: { DescribeVolumes: { notFoundAfterCreateMs: 10 * 60_000 } } });
    const creates = () => emulator.requests.records().filter((r) => r.action === "CreateVolume" && r.status === 200);
    const before = creates().length;
    const rerun = alive(() => boot(node));
    await waitFor(async () => creates().length > before, "the rerun's CreateVolume answered");
    emulator.setClockOffset(11 * 60_000);
    emulator.setFaults({});
    const again = await rerun;

    t.equal(again.report?.outcome, "ready", "the rerun readied the node", { reason: again.report?.reason });
    t.same(
      fromSnapshot().map((v) => v.volumeId),
      made,
      "no second volume: the one the killed run made",
    );
    t.equal(again.report?.volumeId, made[0], "and the node runs on it");
  },
);
