/** Which blocks an upload puts (src/agent/snapshot/plan.ts), pure. */
import { createHash } from "node:crypto";
import t from "tap";
import {
  SnapshotPlanError,
  checkWritten,
  linearAggregate,
  planSnapshotUpload,
} from "../../../src/agent/snapshot/plan.ts";

const Z = "zero";
const m = (entries: [number, string][]) => new Map(entries);

t.test("a full upload puts the blocks holding data, in index order", async (t) => {
  const plan = planSnapshotUpload({
    image: m([
      [9, "c"],
      [0, "a"],
      [4, "b"],
    ]),
    zeroHash: Z,
    volumeBlocks: 2048,
  });
  t.same(
    plan.put.map((b) => b.index),
    [0, 4, 9],
  );
  t.equal(plan.changedBlocks, 3);
  t.equal(plan.unchanged, 0);
});

t.test("an incremental upload puts what differs from the parent, zeros over what was cleared", async (t) => {
  const plan = planSnapshotUpload({
    image: m([
      [0, "a"],
      [1, "B"],
      [5, "new"],
    ]),
    parent: m([
      [0, "a"],
      [1, "b"],
      [2, "gone"],
    ]),
    zeroHash: Z,
    volumeBlocks: 2048,
  });
  t.same(plan.put, [
    { index: 1, hash: "B", zeros: false },
    { index: 2, hash: Z, zeros: true },
    { index: 5, hash: "new", zeros: false },
  ]);
  t.equal(plan.unchanged, 1);
  t.equal(plan.changedBlocks, 3);
});

t.test("a resumed upload skips blocks put with the same hash, puts again one put with another", async (t) => {
  const plan = planSnapshotUpload({
    image: m([
      [0, "a"],
      [1, "b"],
      [2, "c"],
    ]),
    alreadyPut: m([
      [0, "a"],
      [1, "old"],
    ]),
    zeroHash: Z,
    volumeBlocks: 2048,
  });
  t.same(
    plan.put.map((b) => b.index),
    [1, 2],
  );
  t.equal(plan.resumed, 1);
  t.equal(plan.changedBlocks, 3, "every block written to the snapshot counts once");
});

t.test("an image the same as its parent puts nothing", async (t) => {
  const same = m([[3, "x"]]);
  const plan = planSnapshotUpload({ image: same, parent: same, zeroHash: Z, volumeBlocks: 2048 });
  t.same(plan.put, []);
  t.equal(plan.changedBlocks, 0);
});

t.test("the LINEAR aggregate is SHA-256 over the digests in index order", async (t) => {
  const sha = (d: Uint8Array) => createHash("sha256").update(d).digest();
  const a = sha(Buffer.from("a")).toString("base64");
  const b = sha(Buffer.from("b")).toString("base64");
  const expected = sha(Buffer.concat([Buffer.from(a, "base64"), Buffer.from(b, "base64")])).toString("base64");
  t.equal(
    linearAggregate(
      m([
        [7, b],
        [2, a],
      ]),
      sha,
    ),
    expected,
  );
});

t.test("an index that is not a whole number within the volume is refused, never planned", async (t) => {
  // What a server answering BlockIndex as the string "5" would have made of a parent: "5" beside 5.
  const stringKeyed = new Map<number, string>([["5" as unknown as number, "p"]]);
  t.throws(
    () => planSnapshotUpload({ image: m([[5, "a"]]), parent: stringKeyed, zeroHash: Z, volumeBlocks: 2048 }),
    { name: "SnapshotPlanError", message: /a parent block "5" \(string\)/, exitCode: 1 },
    "a string index: refused before any put",
  );
  for (const index of [-1, 2048, 1.5, Number.NaN, 2 ** 60])
    t.throws(
      () => planSnapshotUpload({ image: m([[index, "a"]]), zeroHash: Z, volumeBlocks: 2048 }),
      SnapshotPlanError,
      `image block ${index} of a 2048-block volume`,
    );
  t.throws(
    () => planSnapshotUpload({ image: m([[1, "a"]]), alreadyPut: m([[4096, "x"]]), zeroHash: Z, volumeBlocks: 2048 }),
    SnapshotPlanError,
    "a resumed block outside the volume",
  );
  t.throws(() => planSnapshotUpload({ image: m([]), zeroHash: Z, volumeBlocks: 0 }), SnapshotPlanError);
});

t.test("each index is planned once, and what the plan wants is what completion checks", async (t) => {
  const plan = planSnapshotUpload({
    image: m([
      [0, "a"],
      [2, "c"],
    ]),
    parent: m([
      [0, "a"],
      [1, "b"],
      [2, "old"],
    ]),
    zeroHash: Z,
    volumeBlocks: 8,
  });
  t.same(
    [...plan.wanted].sort(([a], [b]) => a - b),
    [
      [1, Z],
      [2, "c"],
    ],
  );
  t.equal(new Set(plan.put.map((b) => b.index)).size, plan.put.length, "no index twice");
  t.doesNotThrow(() => checkWritten(plan.wanted, plan.wanted, 8), "every wanted block written as wanted");
  t.throws(() => checkWritten(plan.wanted, m([[2, "c"]]), 8), { message: /block 1 never put/ });
  t.throws(
    () =>
      checkWritten(
        plan.wanted,
        m([
          [1, Z],
          [2, "other"],
        ]),
        8,
      ),
    { message: /block 2 put with another hash/ },
  );
  t.throws(
    () =>
      checkWritten(
        plan.wanted,
        m([
          [1, Z],
          [2, "c"],
          [9, "x"],
        ]),
        8,
      ),
    { message: /a written block 9/ },
  );
});
