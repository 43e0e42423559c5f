/**
 * The need list's reads in the background run (src/host/read-phases.ts): in the files' order, at the
 * depth EBS fetches in parallel, the wanted files never stopped for a look, the list read first even
 * when no image is named.
 */
import t from "tap";
import { FETCH_IN_FLIGHT_BYTES, fetchDepth, needPhases } from "../../src/host/read-phases.ts";

const MiB = 1024 * 1024;
const background = { ioDepth: 32, maxIoBytes: MiB, yieldDepth: 2 };

t.test("the fetch depth keeps AWS's 4 MiB in flight in the background, the full depth inline", async (t) => {
  t.equal(FETCH_IN_FLIGHT_BYTES, 32 * 128 * 1024, "32 reads of 128 KiB, as AWS's documented initialization");
  t.equal(fetchDepth(background), 4, "1 MiB reads: 4 in flight, not 32");
  t.equal(fetchDepth({ ...background, maxIoBytes: 128 * 1024 }), 32, "128 KiB reads: 32");
  t.equal(fetchDepth({ ...background, maxIoBytes: 512 * 1024, ioDepth: 6 }), 6, "never above ioDepth");
  t.equal(fetchDepth({ ...background, maxIoBytes: 16 * MiB }), 1, "at least one");
  t.equal(fetchDepth({ ioDepth: 32, maxIoBytes: MiB }), 32, "inline (nothing else reads): ioDepth");
});

t.test("wanted files first in their own order, unpaced; the other listed files after, paced", async (t) => {
  // The wanted file lies after the other one on the device: its order, not the device's, counts.
  const wanted = [
    { start: 900 * MiB, end: 902 * MiB + 4096 },
    { start: 10 * MiB, end: 11 * MiB },
  ];
  const listed = [{ start: 100 * MiB, end: 101 * MiB }];
  const phases = needPhases(wanted, listed, { ...background, images: ["lab/want:1"] });
  t.same(
    phases.map((p) => ({ name: p.name, depth: p.depth, paced: p.paced })),
    [
      { name: "prewarm-need", depth: 4, paced: false },
      { name: "prewarm-listed", depth: 2, paced: true },
    ],
  );
  t.same(phases[0]!.reads, [
    { offset: 900 * MiB, length: MiB },
    { offset: 901 * MiB, length: MiB },
    { offset: 902 * MiB, length: 4096 },
    { offset: 10 * MiB, length: MiB },
  ]);
  t.same(phases[1]!.reads, [{ offset: 100 * MiB, length: MiB }]);
});

t.test("no image named: the whole list is read first, at the fetch depth, paced", async (t) => {
  const listed = [{ start: 5 * MiB, end: 7 * MiB }];
  const phases = needPhases([], listed, { ...background, images: [] });
  t.same(
    phases.map((p) => ({ name: p.name, depth: p.depth, paced: p.paced, reads: p.reads.length })),
    [{ name: "prewarm-listed", depth: 4, paced: true, reads: 2 }],
  );
  const unnamed = needPhases([], listed, background);
  t.equal(unnamed[0]?.depth, 4, "images absent: the same");
});

t.test("inline: full depth, never paced", async (t) => {
  const phases = needPhases([{ start: 0, end: MiB }], [{ start: MiB, end: 2 * MiB }], {
    ioDepth: 32,
    maxIoBytes: MiB,
    images: ["a"],
  });
  t.same(
    phases.map((p) => [p.depth, p.paced]),
    [
      [32, false],
      [32, false],
    ],
  );
  t.same(needPhases([], [], background), [], "nothing listed: no phase");
});
