/**
 * The background pre-warm's pacing (src/host/read-pace.ts): full depth while the device is its
 * own, the yielding depth for the wanted images' files while others read, a pause for the rest,
 * and progress after a long pause all the same.
 */
import t from "tap";
import {
  batchesOf,
  DEFAULT_PACE,
  nextPace,
  othersReading,
  parseReadBytes,
  type PaceSettings,
} from "../../src/host/read-pace.ts";

const settings: PaceSettings = { ...DEFAULT_PACE, fullDepth: 32, yieldDepth: 2 };
const MiB = 1024 * 1024;
const busy = { otherBytes: 8 * MiB, seconds: 0.5 };
const quiet = { otherBytes: 4096, seconds: 0.5 };

t.test("alone on the device: full depth, whatever is read", async (t) => {
  t.same(nextPace("wanted", quiet, 0, settings), { depth: 32 });
  t.same(nextPace("rest", quiet, 0, settings), { depth: 32 });
  t.same(nextPace("rest", { otherBytes: 0, seconds: 0 }, 0, settings), { depth: 32 }, "an empty window is quiet");
});

t.test("others reading: the wanted images' files at the yielding depth, the rest pauses", async (t) => {
  t.same(nextPace("wanted", busy, 0, settings), { depth: 2 });
  t.same(nextPace("rest", busy, 0, settings), { pauseMs: settings.pauseMs });
  t.same(nextPace("rest", busy, settings.maxPausedMs - settings.pauseMs, settings), { pauseMs: settings.pauseMs });
});

t.test("paused for maxPausedMs in a row: one batch at the yielding depth", async (t) => {
  t.same(nextPace("rest", busy, settings.maxPausedMs, settings), { depth: 2 });
});

t.test("counters that cannot be read: the yielding depth, never a pause or full depth", async (t) => {
  t.same(nextPace("rest", undefined, 0, settings), { depth: 2 });
  t.same(nextPace("wanted", undefined, 0, settings), { depth: 2 });
});

t.test("a trickle of others' reads is quiet, a stream is not", async (t) => {
  t.notOk(othersReading({ otherBytes: 512 * 1024, seconds: 1 }, settings));
  t.ok(othersReading({ otherBytes: 2 * MiB, seconds: 1 }, settings));
  t.ok(othersReading({ otherBytes: 4096, seconds: 0 }, { quietBytesPerSecond: 1024 }), "no division by zero");
});

t.test("the device's read count from its stat line", async (t) => {
  const line = "    4538        0   526064     1745      142       98    10912      265        0     1880     2011\n";
  t.equal(parseReadBytes(line), 526064 * 512);
  t.equal(parseReadBytes(""), undefined);
  t.equal(parseReadBytes("1 2"), undefined);
  t.equal(parseReadBytes("1 2 x 4"), undefined);
});

t.test("batches: at most batchBytes each, in order, a large read alone", async (t) => {
  const reads = [1, 1, 2, 5, 1].map((mib, i) => ({ offset: i * 8 * MiB, length: mib * MiB }));
  const batches = batchesOf(reads, 4 * MiB);
  t.same(
    batches.map((b) => b.map((r) => r.length / MiB)),
    [[1, 1, 2], [5], [1]],
  );
  t.same(batches.flat(), reads, "every read once, in order");
  t.same(batchesOf([], 4 * MiB), []);
});
