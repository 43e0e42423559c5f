/** Which blocks an upload puts (src/agent/snapshot/plan.ts), pure. */
import { createHash } from "node:crypto";
import t from "tap";
import { linearAggregate, planSnapshotUpload } from "../../../src/agent/snapshot/plan.ts";

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
  const plan = planSnapshotUpload({ image: same, parent: same, zeroHash: Z });
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
