/**
 * What the benches that draw EC2's latencies share: the ranges (bench/boot-latency.ts's header
 * says where each comes from), a seeded generator so a run's draws can be repeated, and the
 * nearest-rank percentile their tables report. Pure.
 */

/**
 * EC2's latencies: AttachVolume → `attached` 1-4 s, the NVMe device 0.5-3 s after it,
 * CreateVolume from a snapshot → `available` 5-20 s, one API request 50-300 ms.
 */
export const EC2_RANGES = {
  attachMs: [1000, 4000],
  deviceMs: [500, 3000],
  createMs: [5000, 20000],
  apiMs: [50, 300],
} as const;

/**
 * EC2's own start, RunInstances (`LaunchTime`) to the agent's first unit, which osparc's start
 * limit counts and the lab does not have: `pending` → `running`, then the guest's kernel and
 * systemd up to network-online.target. Anchored on one published measurement (Colin Percival,
 * "EC2 boot time benchmarking", daemonology.net, 2021-08-12, ec2-boot-bench on c5.xlarge:
 * pending → running 4.9 s, running → the guest's network answering 17.2 s, then 5.6 s to sshd),
 * widened for other AMIs and types: drawn from 4–8 s and 12–25 s. An assumption, not a figure
 * of osparc's AMI.
 */
export const EC2_START_RANGES = {
  pendingToRunningMs: [4000, 8000],
  runningToUnitsMs: [12000, 25000],
} as const;

/** mulberry32: a small seeded generator. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Nearest-rank percentile (p in 0..100); undefined for no values. */
export function percentile(values: readonly number[], p: number): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)];
}
