/**
 * Where the acceptance run reads, pure: one region per queue depth and the warm one, disjoint and
 * aligned to EBS's 512 KiB blocks, in the filesystem's data when it has enough in one piece (a
 * block never written to the snapshot may read without a fetch), else anywhere on the device.
 */
import t, { type Test } from "tap";
import {
  EBS_BLOCK_BYTES,
  FIRST_READS,
  planReads,
  WARM_BYTES,
  type ReadRegion,
} from "../../../src/agent/acceptance/reads.ts";

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const regions = (plan: ReturnType<typeof planReads>): ReadRegion[] => [...Object.values(plan.firstReads), plan.warm];

function assertDisjointAndAligned(t: Test, all: ReadRegion[]): void {
  const sorted = [...all].sort((a, b) => a.offset - b.offset);
  for (const [i, r] of sorted.entries()) {
    t.equal(r.offset % EBS_BLOCK_BYTES, 0, `region at ${r.offset} starts on a block`);
    if (i > 0) t.ok(sorted[i - 1]!.offset + sorted[i - 1]!.size <= r.offset, "regions do not overlap");
  }
}

t.test("enough data in one piece: every region in it, one block per first read", async (t) => {
  // Data from 3 MiB + 1 KiB (not on a block boundary) to 500 MiB, and a small piece elsewhere.
  const plan = planReads(
    [
      { start: 0, end: MiB },
      { start: 3 * MiB + 1024, end: 500 * MiB },
    ],
    8 * GiB,
  );
  const all = regions(plan);
  t.ok(
    all.every((r) => r.inData && r.offset >= 3 * MiB && r.offset + r.size <= 500 * MiB),
    "all in the large data range",
  );
  t.equal(plan.firstReads.qd32.size, FIRST_READS.qd32 * EBS_BLOCK_BYTES, "one block per read");
  t.equal(plan.warm.size, WARM_BYTES);
  assertDisjointAndAligned(t, all);
});

t.test("too little data: the regions on the device, said so", async (t) => {
  const plan = planReads([{ start: 0, end: 20 * MiB }], GiB);
  const all = regions(plan);
  t.ok(plan.firstReads.qd1.inData, "the first region fits in the data");
  t.notOk(plan.firstReads.qd32.inData, "the deep one does not");
  assertDisjointAndAligned(t, all);
  t.ok(
    all.every((r) => r.offset + r.size <= GiB),
    "all on the device",
  );
});

t.test("a device too small for the reads: a clear error", async (t) => {
  t.throws(() => planReads([], 100 * MiB), /too small for the acceptance run's reads \(100 MiB\)/);
});
