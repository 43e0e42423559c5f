/**
 * A full volume is not a broken one: what a failed step on the volume turns out to be, from the
 * error's class and the volume's fill read right after it.
 */
import t from "tap";
import { describeFill, FULL_BELOW_BYTES, isFilesystemFull, judgeSpace } from "../../../src/agent/boot/volume-space.ts";
import type { FilesystemFill } from "../../../src/agent/ports.ts";

const GiB = 1024 ** 3;
function fill(availableBytes: number, freeInodes = 1000): FilesystemFill {
  const sizeBytes = 2 * GiB;
  const usedBytes = sizeBytes - availableBytes;
  return {
    mountPoint: "/m",
    device: "/dev/nvme1n1",
    sizeBytes,
    usedBytes,
    availableBytes,
    usedRatio: usedBytes / sizeBytes,
    inodes: 2000,
    freeInodes,
  };
}

t.test("full: less than the floor free, or no free inode", async (t) => {
  t.ok(isFilesystemFull(fill(0)));
  t.ok(isFilesystemFull(fill(FULL_BELOW_BYTES - 1)));
  t.notOk(isFilesystemFull(fill(FULL_BELOW_BYTES)));
  t.ok(isFilesystemFull(fill(GiB, 0)), "no inode left with room to spare");
  t.notOk(isFilesystemFull({ availableBytes: GiB, inodes: 0, freeInodes: 0 }), "a filesystem without inode counts");
  t.equal(describeFill(fill(12 * 1024 ** 2)), "12 MiB free of 2.0 GiB");
});

t.test("on a volume step, no space is the volume's whatever df says", async (t) => {
  t.match(judgeSpace("no-space", fill(0), { onVolume: true }), { kind: "volume-full", detail: /full \(0 MiB free/ });
  t.match(
    judgeSpace("no-space", fill(GiB), { onVolume: true }),
    { kind: "volume-full", detail: /has no space left \(1024 MiB free of 2\.0 GiB\)/ },
    "XFS refuses an inode chunk on fragmented free space",
  );
  t.match(judgeSpace("no-space", undefined, { onVolume: true }), { kind: "volume-full" }, "fill unknown");
  t.match(judgeSpace(undefined, fill(0), { onVolume: true }), { kind: "volume-full" }, "any failure on a full volume");
});

t.test("docker on the volume: no space is the volume's only when the volume is full, or unmeasured", async (t) => {
  t.match(judgeSpace("no-space", fill(0), { onVolume: false }), { kind: "volume-full" });
  t.match(judgeSpace("no-space", undefined, { onVolume: false }), { kind: "volume-full" });
  t.match(
    judgeSpace("no-space", fill(GiB), { onVolume: false }),
    { kind: "host-full", detail: /on the host, not on the volume/ },
    "the volume has room: the host's disk",
  );
  t.match(
    judgeSpace(undefined, fill(FULL_BELOW_BYTES / 2), { onVolume: false }),
    { kind: "volume-full" },
    "docker did not start on a full data-root, whatever its error says",
  );
});

t.test("read-only is a broken volume on a volume step; anything else is not space", async (t) => {
  t.match(judgeSpace("read-only", fill(GiB), { onVolume: true }), { kind: "read-only" });
  t.match(judgeSpace("read-only", fill(0), { onVolume: true }), { kind: "read-only" }, "read-only beats full");
  t.equal(judgeSpace("read-only", fill(GiB), { onVolume: false }), undefined, "docker's read-only: not told apart");
  t.equal(judgeSpace(undefined, fill(GiB), { onVolume: true }), undefined);
  t.equal(judgeSpace(undefined, undefined, { onVolume: false }), undefined);
});
