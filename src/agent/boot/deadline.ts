/**
 * The first phase's deadline (pure): the earlier of its own budget (`timeouts.bootSeconds`, from
 * the phase's start) and the autoscaler's start limit counted as the autoscaler counts it.
 *
 * osparc marks an instance broken when it is not attached `EC2_INSTANCES_MAX_START_TIME` after its
 * EC2 `LaunchTime` (`_auto_scaling_core.py` `_analyze_current_cluster` → `_terminate_broken_ec2s`,
 * before `_try_attach_pending_ec2s` in the same cycle), polled every `AUTOSCALING_POLL_INTERVAL`
 * (10 s) at a phase unrelated to the launch. `StartInstances` resets `LaunchTime`, so a warm
 * buffer's activation is counted from its start. Everything after phase 1 (docker's start, phase
 * 2 up to its join point, the user data's `docker swarm join`) and one poll must still fit, so
 * phase 1 ends at `LaunchTime + timeouts.startLimitSeconds − timeouts.joinMarginSeconds`.
 *
 * Decisions written down:
 * - LaunchTime is EC2's time: it is compared with EC2's clock (the CloudClock, learned from EC2's
 *   answers), never with the host's; only the time left is carried over to the host's clock. A
 *   host whose clock is days off gets the same deadline.
 * - LaunchTime unknown (no answer, unreadable) or EC2's time unknown: the budget alone.
 * - LaunchTime up to FUTURE_TOLERANCE_MS after EC2's now (both are whole seconds) counts as now;
 *   further in the future it is not believed: the budget alone, said in the note.
 * - The start limit already over (a reboot: LaunchTime is not reset by it; or a boot that came too
 *   late for the limit anyway): nothing left to race, the budget alone, said in the note.
 * - The limit not over but its deadline past (the margin is eaten already): the deadline is now, so
 *   the node degrades at once and the join may still make it.
 */

/** How far after EC2's now a LaunchTime may lie and still count as now (whole-second stamps on both sides). */
export const FUTURE_TOLERANCE_MS = 5_000;

export interface DeadlineInputs {
  /** When the phase started, on the host's wall clock (ms since the epoch). */
  startedMs: number;
  /** Now, on the host's wall clock (ms since the epoch). */
  hostNowMs: number;
  /** EC2's time now (CloudClock.now()); undefined when no answer of EC2 told it. */
  ec2Now: Date | undefined;
  /** EC2's LaunchTime of the instance (ISO 8601), as DescribeInstances gave it. */
  launchTime: string | undefined;
  /** timeouts.bootSeconds. */
  budgetSeconds: number;
  /** timeouts.startLimitSeconds: the autoscaler's limit from LaunchTime; 0: not counted. */
  startLimitSeconds: number;
  /** timeouts.joinMarginSeconds: the join after phase 1 and one poll of the autoscaler. */
  joinMarginSeconds: number;
}

export interface BootDeadline {
  /** The deadline on the host's wall clock (ms since the epoch), comparable with Date.now(). */
  deadlineMs: number;
  /** Which bound it is: the phase's own budget, or the start limit counted from LaunchTime. */
  bound: "budget" | "start-limit";
  /** Seconds from LaunchTime to EC2's now, when both were known and believed. */
  sinceLaunchSeconds?: number;
  /** Why the start limit does not count, for the log; absent when it counts or is turned off. */
  note?: string;
}

/** The first phase's deadline of these inputs (see the module's comment). */
export function planBootDeadline(inputs: DeadlineInputs): BootDeadline {
  const budget: BootDeadline = { deadlineMs: inputs.startedMs + inputs.budgetSeconds * 1000, bound: "budget" };
  if (inputs.startLimitSeconds <= 0) return budget;
  const launched = inputs.launchTime !== undefined ? Date.parse(inputs.launchTime) : Number.NaN;
  if (Number.isNaN(launched))
    return { ...budget, note: "EC2's LaunchTime of this instance is unknown: the start limit is not counted" };
  const ec2NowMs = inputs.ec2Now?.getTime();
  if (ec2NowMs === undefined || Number.isNaN(ec2NowMs))
    return { ...budget, note: "EC2's time is unknown: the start limit is not counted" };
  const sinceLaunchMs = ec2NowMs - launched;
  if (sinceLaunchMs < -FUTURE_TOLERANCE_MS)
    return {
      ...budget,
      note:
        `EC2's LaunchTime ${inputs.launchTime} is ${Math.round(-sinceLaunchMs / 1000)} s after EC2's own time: not ` +
        `believed, the start limit is not counted`,
    };
  const since = Math.max(0, sinceLaunchMs);
  const sinceLaunchSeconds = Math.round(since / 100) / 10;
  if (since >= inputs.startLimitSeconds * 1000)
    return {
      ...budget,
      sinceLaunchSeconds,
      note:
        `launched ${sinceLaunchSeconds} s ago (a reboot, or a start the limit of ${inputs.startLimitSeconds} s is ` +
        `over for): the start limit is not counted`,
    };
  const leftMs = Math.max(0, (inputs.startLimitSeconds - inputs.joinMarginSeconds) * 1000 - since);
  const limit = inputs.hostNowMs + leftMs;
  return limit < budget.deadlineMs
    ? { deadlineMs: limit, bound: "start-limit", sinceLaunchSeconds }
    : { ...budget, sinceLaunchSeconds };
}

/** The bound in words, for the log and the degrade reason: `the start limit (LaunchTime … + 60 s − 20 s)`. */
export function describeDeadline(
  deadline: BootDeadline,
  inputs: Pick<DeadlineInputs, "budgetSeconds" | "startLimitSeconds" | "joinMarginSeconds" | "launchTime">,
): string {
  return deadline.bound === "budget"
    ? `the boot budget of ${inputs.budgetSeconds} s`
    : `the start limit's deadline (LaunchTime ${inputs.launchTime} + ${inputs.startLimitSeconds} s − ` +
        `${inputs.joinMarginSeconds} s for the join)`;
}
