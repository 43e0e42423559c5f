/**
 * Phase 1's deadline (deadline.ts): the earlier of its budget and osparc's start limit counted from
 * EC2's LaunchTime (`_auto_scaling_core.py` `_terminate_broken_ec2s`: not attached
 * EC2_INSTANCES_MAX_START_TIME after LaunchTime is broken), with the join and one poll kept free.
 * LaunchTime is compared with EC2's clock only; the host's clock only carries the time left.
 */
import t from "tap";
import {
  FUTURE_TOLERANCE_MS,
  describeDeadline,
  planBootDeadline,
  type DeadlineInputs,
} from "../../../src/agent/boot/deadline.ts";

const EC2_NOW = Date.parse("2026-12-06T12:00:30.500Z");
const HOST_NOW = Date.parse("2026-12-06T12:00:30.500Z");

/** A phase 1 that started 2 s ago on a host whose clock agrees with EC2's; osparc's defaults. */
function inputs(overrides: Partial<DeadlineInputs> = {}): DeadlineInputs {
  return {
    startedMs: HOST_NOW - 2_000,
    hostNowMs: HOST_NOW,
    ec2Now: new Date(EC2_NOW),
    launchTime: "2026-12-06T12:00:12.000Z",
    budgetSeconds: 40,
    startLimitSeconds: 60,
    joinMarginSeconds: 20,
    ...overrides,
  };
}

t.test("a cold launch 18.5 s ago: LaunchTime + 60 − 20 s, sooner than the budget", async (t) => {
  const planned = planBootDeadline(inputs());
  t.equal(planned.bound, "start-limit");
  t.equal(planned.deadlineMs - HOST_NOW, 21_500, "40 s after LaunchTime, 18.5 s of which are gone");
  t.equal(planned.sinceLaunchSeconds, 18.5);
  t.notOk(planned.note);
  t.match(
    describeDeadline(planned, inputs()),
    "the start limit's deadline (LaunchTime 2026-12-06T12:00:12.000Z + 60 s − 20 s for the join)",
  );
});

t.test("a fast launch: the budget is the earlier bound", async (t) => {
  const planned = planBootDeadline(inputs({ launchTime: "2026-12-06T12:00:30.000Z", budgetSeconds: 10 }));
  t.equal(planned.bound, "budget");
  t.equal(planned.deadlineMs, HOST_NOW - 2_000 + 10_000, "the budget counts from the phase's start");
  t.equal(describeDeadline(planned, inputs({ budgetSeconds: 10 })), "the boot budget of 10 s");
});

t.test("a host clock days off gives the same deadline: LaunchTime is compared with EC2's time", async (t) => {
  const skew = 3 * 86_400_000;
  for (const offset of [skew, -skew]) {
    const planned = planBootDeadline(inputs({ hostNowMs: HOST_NOW + offset, startedMs: HOST_NOW + offset - 2_000 }));
    t.equal(planned.bound, "start-limit", `host ${offset > 0 ? "ahead" : "behind"}`);
    t.equal(planned.deadlineMs - (HOST_NOW + offset), 21_500, "the same 21.5 s left, on the host's clock");
  }
});

t.test("LaunchTime missing or unreadable: the budget alone, said", async (t) => {
  for (const launchTime of [undefined, "", "yesterday"]) {
    const planned = planBootDeadline(inputs({ launchTime }));
    t.equal(planned.bound, "budget");
    t.equal(planned.deadlineMs, HOST_NOW - 2_000 + 40_000);
    t.match(planned.note, /LaunchTime of this instance is unknown/);
  }
});

t.test("EC2's time unknown (no answer seen): the budget alone, said", async (t) => {
  for (const ec2Now of [undefined, new Date(Number.NaN)]) {
    const planned = planBootDeadline(inputs({ ec2Now }));
    t.equal(planned.bound, "budget");
    t.match(planned.note, /EC2's time is unknown/);
  }
});

t.test("LaunchTime in the future", async (t) => {
  const rounded = planBootDeadline(
    inputs({ launchTime: new Date(EC2_NOW + FUTURE_TOLERANCE_MS - 500).toISOString(), budgetSeconds: 60 }),
  );
  t.equal(rounded.bound, "start-limit", "within the whole-second tolerance: counted as now");
  t.equal(rounded.deadlineMs - HOST_NOW, 40_000, "the whole 60 − 20 s are left");
  const beyond = planBootDeadline(inputs({ launchTime: "2026-12-06T12:05:00.000Z" }));
  t.equal(beyond.bound, "budget", "minutes after EC2's own time: not believed");
  t.match(beyond.note, /is 270 s after EC2's own time: not believed/);
});

t.test("a reboot (LaunchTime not reset) or a limit already over: nothing to race, the budget alone", async (t) => {
  for (const launchTime of ["2026-12-06T09:00:00.000Z", "2026-12-06T11:59:30.000Z"]) {
    const planned = planBootDeadline(inputs({ launchTime }));
    t.equal(planned.bound, "budget", launchTime);
    t.equal(planned.deadlineMs, HOST_NOW - 2_000 + 40_000);
    t.match(planned.note, /the start limit is not counted/);
  }
});

t.test("the limit not over but the margin eaten: the deadline is now, so the join may still make it", async (t) => {
  const planned = planBootDeadline(inputs({ launchTime: "2026-12-06T11:59:45.000Z" }));
  t.equal(planned.bound, "start-limit");
  t.equal(planned.deadlineMs, HOST_NOW, "45.5 s after launch, 40 s were phase 1's");
  t.equal(planned.sinceLaunchSeconds, 45.5);
});

t.test("a warm buffer's activation: StartInstances reset LaunchTime, so it is counted from the start", async (t) => {
  // Launched hours ago as a warm buffer, stopped after its pull, started again 3 s ago.
  const planned = planBootDeadline(inputs({ launchTime: "2026-12-06T12:00:27.000Z" }));
  t.equal(planned.bound, "start-limit");
  t.equal(planned.deadlineMs - HOST_NOW, 36_500);
});

t.test("startLimitSeconds 0: the budget alone, nothing said", async (t) => {
  const planned = planBootDeadline(inputs({ startLimitSeconds: 0 }));
  t.same(planned, { deadlineMs: HOST_NOW - 2_000 + 40_000, bound: "budget" });
});
