/** Which attached volume is the cache volume: pure, tested with plain objects. */
import t from "tap";
import { attachedCacheVolume } from "../../src/agent/volume-rules.ts";
import type { VolumeInfo } from "../../src/agent/ports.ts";
import { VolumeKind, VolumeTag } from "../../src/tags.ts";

function attached(id: string, kind: VolumeKind, instanceId: string): VolumeInfo {
  return {
    volumeId: id,
    availabilityZone: "eu-west-1a",
    state: "in-use",
    sizeGiB: 10,
    tags: { [VolumeTag.managed]: "true", [VolumeTag.kind]: kind },
    attachment: { instanceId, device: "/dev/sdf", state: "attached" },
  };
}

t.test("a workspace volume comes before a pool volume, whatever the order listed", async (t) => {
  const pool = attached("vol-pool", VolumeKind.pool, "i-1");
  const workspace = attached("vol-ws", VolumeKind.workspace, "i-1");
  t.equal(attachedCacheVolume([pool, workspace], "i-1")?.volumeId, "vol-ws");
  t.equal(attachedCacheVolume([workspace, pool], "i-1")?.volumeId, "vol-ws");
  t.equal(attachedCacheVolume([pool], "i-1")?.volumeId, "vol-pool");
});

t.test("only volumes attached to this instance count", async (t) => {
  const elsewhere = attached("vol-ws", VolumeKind.workspace, "i-2");
  const mine = attached("vol-pool", VolumeKind.pool, "i-1");
  t.equal(attachedCacheVolume([elsewhere, mine], "i-1")?.volumeId, "vol-pool");
  t.equal(attachedCacheVolume([elsewhere], "i-1"), undefined);
  t.equal(
    attachedCacheVolume([{ ...mine, attachment: undefined }] as VolumeInfo[], "i-1"),
    undefined,
    "a detached volume is nobody's",
  );
  t.equal(attachedCacheVolume([], "i-1"), undefined);
});
