/**
 * The fleet simulation's day (bench/fleet.ts): which instances boot when, how long each lives,
 * and the EC2 latencies its boot meets. Pure and seeded: the same seed gives the same day, so
 * the keeper-off and keeper-on runs face the very same arrivals and two bench runs compare.
 *
 * Shape of the day (simulated minutes 0..1440, midnight to midnight): quiet night, a morning
 * burst (08-10), a lunch dip (12-13), an afternoon burst (14-16), a quieter evening. Arrivals
 * come in groups (an autoscaler scales up several machines at once for one burst of jobs), more
 * instances to a group in the busy hours.
 */
import { EC2_RANGES, seededRandom } from "./sampling.ts";

export const DAY_MINUTES = 24 * 60;

/**
 * Relative arrival rate of each hour of the day (index = hour). Busy hours are a study's
 * working day; the numbers only set the shape, `boots` sets the total.
 */
export const HOURLY_WEIGHT: readonly number[] = [
  0.2,
  0.2,
  0.2,
  0.2,
  0.2,
  0.2, // 00-06 night
  0.5,
  1.5, // 06-08 waking up
  4,
  4, // 08-10 morning burst
  1.5,
  1.5, // 10-12
  0.5, // 12-13 lunch dip
  1.2, // 13-14
  3.5,
  3.5, // 14-16 afternoon burst
  1.2,
  1.2, // 16-18
  0.6,
  0.6, // 18-20
  0.3,
  0.3,
  0.3,
  0.3, // 20-24 night
];

/** One instance of the day. */
export interface FleetArrival {
  /** 0-based, in order of arrival. */
  index: number;
  /** Boot time, simulated minutes since midnight. */
  atMin: number;
  /** How long it runs before its shutdown (release), simulated minutes. */
  lifeMin: number;
  /** The arrival group it came in (instances of one scale-up). */
  group: number;
  /** EC2 latencies of this instance's boot at full length (ms of real time). */
  ec2: { attachMs: number; deviceMs: number; createMs: number };
}

export interface ScheduleOptions {
  seed: number;
  /** Instances booted over the day. */
  boots: number;
  /** Median life of an instance, simulated minutes (default 90). */
  medianLifeMin?: number;
}

/** A minute of the day drawn from HOURLY_WEIGHT (inverse of its piecewise-constant CDF). */
function drawMinute(random: () => number): number {
  const total = HOURLY_WEIGHT.reduce((a, b) => a + b, 0);
  let u = random() * total;
  for (let hour = 0; hour < 24; hour++) {
    const w = HOURLY_WEIGHT[hour]!;
    if (u < w) return hour * 60 + (u / w) * 60;
    u -= w;
  }
  return DAY_MINUTES - 1e-6;
}

/** Box-Muller: one standard normal draw. */
function normal(random: () => number): number {
  const u = Math.max(random(), 1e-12);
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
}

const between = (random: () => number, [lo, hi]: readonly [number, number]) => Math.round(lo + (hi - lo) * random());

/**
 * The day's arrivals, sorted by time. Exactly `boots` instances; a group's instances start
 * within 2 simulated minutes of each other; lives are log-normal around the median (σ 0.8),
 * between 15 minutes and 8 hours.
 */
export function fleetSchedule(options: ScheduleOptions): FleetArrival[] {
  if (!Number.isInteger(options.boots) || options.boots < 1)
    throw new Error(`boots must be a positive integer, not ${options.boots}`);
  if (!Number.isInteger(options.seed) || options.seed < 0)
    throw new Error(`seed must be a non-negative integer, not ${options.seed}`);
  const medianLife = options.medianLifeMin ?? 90;
  if (!(medianLife > 0)) throw new Error(`medianLifeMin must be positive, not ${medianLife}`);
  const random = seededRandom(options.seed);
  const peak = Math.max(...HOURLY_WEIGHT);
  const drafts: Array<Omit<FleetArrival, "index">> = [];
  for (let group = 0; drafts.length < options.boots; group++) {
    const start = drawMinute(random);
    const weight = HOURLY_WEIGHT[Math.floor(start / 60)]!;
    // 1 instance at night, up to 4 at the peak of a burst.
    const size = Math.min(options.boots - drafts.length, 1 + Math.floor(random() * (1 + 3 * (weight / peak))));
    for (let i = 0; i < size; i++) {
      const atMin = Math.min(DAY_MINUTES - 1e-6, start + random() * 2);
      const lifeMin = Math.min(480, Math.max(15, medianLife * Math.exp(0.8 * normal(random))));
      drafts.push({
        atMin: round3(atMin),
        lifeMin: round3(lifeMin),
        group,
        ec2: {
          attachMs: between(random, EC2_RANGES.attachMs),
          deviceMs: between(random, EC2_RANGES.deviceMs),
          createMs: between(random, EC2_RANGES.createMs),
        },
      });
    }
  }
  return drafts.sort((a, b) => a.atMin - b.atMin || a.group - b.group).map((draft, index) => ({ index, ...draft }));
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** Instances running at each minute boundary (an instance counts from its boot to its end, clipped to the day). */
export function concurrency(schedule: readonly FleetArrival[]): number[] {
  const out = new Array<number>(DAY_MINUTES).fill(0);
  for (const a of schedule) {
    const end = Math.min(DAY_MINUTES, a.atMin + a.lifeMin);
    for (let m = Math.ceil(a.atMin); m < end; m++) out[m]!++;
  }
  return out;
}

/** Arrivals per hour of the day. */
export function arrivalsPerHour(schedule: readonly FleetArrival[]): number[] {
  const out = new Array<number>(24).fill(0);
  for (const a of schedule) out[Math.floor(a.atMin / 60)]!++;
  return out;
}

/**
 * GiB-hours of volumes from their lives: each volume's size times the part of its life inside
 * [from, to] (ms of the same clock), in hours of that clock times `hoursPerMs`.
 */
export function gibHours(
  lives: ReadonlyArray<{ sizeGiB: number; bornMs: number; goneMs?: number }>,
  window: { fromMs: number; toMs: number },
  hoursPerMs: number,
): number {
  let sum = 0;
  for (const life of lives) {
    const start = Math.max(life.bornMs, window.fromMs);
    const end = Math.min(life.goneMs ?? window.toMs, window.toMs);
    if (end > start) sum += life.sizeGiB * (end - start) * hoursPerMs;
  }
  return sum;
}
