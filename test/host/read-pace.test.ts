/**
 * The background pre-warm's pacing (src/host/read-pace.ts): it runs while the device is its own,
 * stays stopped while others read (or its own reads do not drain), runs one period after a long
 * pause all the same, and runs when the counters cannot be read.
 */
import t from "tap";
import { DEFAULT_PACE, nextPace, othersReading, parseReadBytes, parseReadsInFlight } from "../../src/host/read-pace.ts";

const settings = DEFAULT_PACE;
const MiB = 1024 * 1024;
const busy = { drained: true, otherBytes: 8 * MiB, seconds: 0.1 };
const quiet = { drained: true, otherBytes: 4096, seconds: 0.1 };

t.test("alone on the device: run", async (t) => {
  t.same(nextPace(quiet, 0, settings), { runMs: settings.runMs });
  t.same(nextPace({ drained: true, otherBytes: 0, seconds: 0 }, 0, settings), { runMs: settings.runMs });
});

t.test("others reading: stay stopped, looking again every pauseMs", async (t) => {
  t.same(nextPace(busy, 0, settings), { pauseMs: settings.pauseMs });
  t.same(nextPace(busy, settings.maxPausedMs - settings.pauseMs, settings), { pauseMs: settings.pauseMs });
});

t.test("own reads not drained: others queue with them, stay stopped", async (t) => {
  t.same(nextPace({ drained: false, otherBytes: 0, seconds: 0.05 }, 0, settings), { pauseMs: settings.pauseMs });
});

t.test("stopped maxPausedMs in a row: one period of running anyway", async (t) => {
  t.same(nextPace(busy, settings.maxPausedMs, settings), { runMs: settings.runMs });
});

t.test("counters that cannot be read: run (nothing says the pre-warm is in the way)", async (t) => {
  t.same(nextPace(undefined, 0, settings), { runMs: settings.runMs });
});

t.test("a trickle of others' reads is quiet, a stream is not", async (t) => {
  t.notOk(othersReading({ drained: true, otherBytes: 512 * 1024, seconds: 1 }, settings));
  t.ok(othersReading({ drained: true, otherBytes: 2 * MiB, seconds: 1 }, settings));
  t.ok(
    othersReading({ drained: true, otherBytes: 4096, seconds: 0 }, { quietBytesPerSecond: 1024 }),
    "no division by 0",
  );
});

t.test("the device's counters from its sysfs files", async (t) => {
  const stat = "    4538        0   526064     1745      142       98    10912      265        0     1880     2011\n";
  t.equal(parseReadBytes(stat), 526064 * 512);
  t.equal(parseReadBytes(""), undefined);
  t.equal(parseReadBytes("1 2"), undefined);
  t.equal(parseReadBytes("1 2 x 4"), undefined);
  t.equal(parseReadsInFlight("       3        0\n"), 3);
  t.equal(parseReadsInFlight(""), undefined);
  t.equal(parseReadsInFlight("x 0"), undefined);
});
