/**
 * The fleet bench's day (bench/fleet-schedule.ts), pure: the same seed gives the same day, the
 * day has its bursts and its quiet hours, and the figures the bench reports from it add up.
 */
import t from "tap";
import { DAY_MINUTES, arrivalsPerHour, concurrency, fleetSchedule, gibHours } from "../../bench/fleet-schedule.ts";
import { EC2_RANGES, percentile } from "../../bench/sampling.ts";

t.test("the same seed gives the same day; another seed another", async (t) => {
  const a = fleetSchedule({ seed: 11, boots: 60 });
  const b = fleetSchedule({ seed: 11, boots: 60 });
  t.same(a, b, "arrivals, lives, groups and latencies repeat");
  const c = fleetSchedule({ seed: 12, boots: 60 });
  t.not(JSON.stringify(a.map((x) => x.atMin)), JSON.stringify(c.map((x) => x.atMin)), "seed 12 differs");
});

t.test("exactly the boots asked for, in order, within the day and the ranges", async (t) => {
  for (const boots of [1, 7, 60, 300]) {
    const day = fleetSchedule({ seed: 3, boots });
    t.equal(day.length, boots, `${boots} boots`);
    t.same(
      day.map((x) => x.index),
      [...day.keys()],
      "indexed in order",
    );
    t.ok(
      day.every((x, i) => i === 0 || day[i - 1]!.atMin <= x.atMin),
      "sorted by time",
    );
    t.ok(
      day.every((x) => x.atMin >= 0 && x.atMin < DAY_MINUTES),
      "inside the day",
    );
    t.ok(
      day.every((x) => x.lifeMin >= 15 && x.lifeMin <= 480),
      "lives of 15 min to 8 h",
    );
    for (const key of ["attachMs", "deviceMs", "createMs"] as const) {
      const [lo, hi] = EC2_RANGES[key];
      t.ok(
        day.every((x) => x.ec2[key] >= lo && x.ec2[key] <= hi),
        `${key} within ${lo}-${hi}`,
      );
    }
  }
});

t.test("bursts in the morning and afternoon, a dip at lunch, a quiet night", async (t) => {
  // Several seeds, so the shape holds for the generator, not one lucky draw.
  for (const seed of [1, 2, 11, 42]) {
    const perHour = arrivalsPerHour(fleetSchedule({ seed, boots: 2000 }));
    const sum = (from: number, to: number) => perHour.slice(from, to).reduce((a, b) => a + b, 0);
    const morning = sum(8, 10) / 2;
    const afternoon = sum(14, 16) / 2;
    const lunch = sum(12, 13);
    const night = sum(0, 6) / 6;
    t.ok(morning > 2 * lunch, `seed ${seed}: morning ${morning}/h over twice lunch ${lunch}/h`);
    t.ok(afternoon > 2 * lunch, `seed ${seed}: afternoon ${afternoon}/h over twice lunch ${lunch}/h`);
    t.ok(lunch > night, `seed ${seed}: lunch ${lunch}/h above the night's ${night}/h`);
  }
});

t.test("arrivals come in groups that start together", async (t) => {
  const day = fleetSchedule({ seed: 5, boots: 200 });
  const groups = new Map<number, number[]>();
  for (const x of day) groups.set(x.group, [...(groups.get(x.group) ?? []), x.atMin]);
  t.ok(groups.size < day.length, `${groups.size} groups for ${day.length} boots`);
  t.ok(
    [...groups.values()].some((g) => g.length > 1),
    "some group has more than one instance",
  );
  t.ok(
    [...groups.values()].every((g) => Math.max(...g) - Math.min(...g) <= 2),
    "a group starts within 2 minutes",
  );
});

t.test("bad input is refused", async (t) => {
  t.throws(() => fleetSchedule({ seed: 1, boots: 0 }), /boots must be a positive integer/);
  t.throws(() => fleetSchedule({ seed: -1, boots: 5 }), /seed must be a non-negative integer/);
  t.throws(() => fleetSchedule({ seed: 1, boots: 5, medianLifeMin: 0 }), /medianLifeMin must be positive/);
});

t.test("concurrency counts an instance from its boot to its end", async (t) => {
  const one = { index: 0, group: 0, ec2: { attachMs: 1000, deviceMs: 500, createMs: 5000 } };
  const running = concurrency([
    { ...one, atMin: 10, lifeMin: 20 },
    { ...one, index: 1, atMin: 20, lifeMin: 20 },
    { ...one, index: 2, atMin: 1430, lifeMin: 60 },
  ]);
  t.equal(running[9], 0);
  t.equal(running[10], 1);
  t.equal(running[25], 2, "both at minute 25");
  t.equal(running[35], 1);
  t.equal(running[40], 0);
  t.equal(running[1439], 1, "the last one is clipped to the day");
});

t.test("percentile and GiB-hours", async (t) => {
  t.equal(percentile([], 50), undefined);
  t.equal(percentile([5, 1, 3], 50), 3);
  t.equal(percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 95), 10);
  const hour = 3_600_000;
  const lives = [
    { sizeGiB: 2, bornMs: 0, goneMs: 2 * hour }, // 2 h
    { sizeGiB: 4, bornMs: hour }, // alive to the window's end: 3 h
    { sizeGiB: 8, bornMs: -hour, goneMs: hour }, // 1 h inside the window
    { sizeGiB: 100, bornMs: 5 * hour }, // after the window
  ];
  t.equal(gibHours(lives, { fromMs: 0, toMs: 4 * hour }, 1 / hour), 2 * 2 + 4 * 3 + 8 * 1);
  t.equal(
    gibHours(lives, { fromMs: 0, toMs: 4 * hour }, 10 / hour),
    10 * (2 * 2 + 4 * 3 + 8 * 1),
    "scaled by the compression",
  );
});
