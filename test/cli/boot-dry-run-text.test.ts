/** `boot --dry-run` for people: each step's arguments one a line, readable, never a JSON blob. */
import t from "tap";
import { stepArguments } from "../../src/cli/boot.ts";

t.test("a step's arguments, one a line", async (t) => {
  const lines = stepArguments({
    volumeId: "vol-0123456789abcdef0",
    candidates: ["vol-1", "vol-2"],
    tags: { "ebs-cache:claimed-by": "i-0abc", "ebs-cache:ttl-hours": "24" },
    create: { sizeGiB: 50, snapshotId: "snap-1", throughput: null, encrypted: false },
    devices: [{ name: "/dev/sdf" }, { name: "/dev/sdg" }],
    none: [],
  });
  t.same(lines, [
    "volumeId: vol-0123456789abcdef0",
    "candidates: vol-1, vol-2",
    "tags: ebs-cache:claimed-by=i-0abc, ebs-cache:ttl-hours=24",
    "create.sizeGiB: 50",
    "create.snapshotId: snap-1",
    "create.throughput: null",
    "create.encrypted: false",
    "devices[0].name: /dev/sdf",
    "devices[1].name: /dev/sdg",
    "none: (none)",
  ]);
  t.notOk(
    lines.some((line) => /[{}"]/.test(line)),
    "no JSON punctuation",
  );
});
