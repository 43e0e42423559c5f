/** EC2's clock as the agent learns it from the `Date` of EC2's answers (src/aws/cloud-clock.ts): pure, no EC2. */
import t from "tap";
import { createCloudClock, describeOffset, SIGV4_SKEW_MS } from "../../src/aws/cloud-clock.ts";
import { CloudTimeUnknownError, cloudFailureOf, classifyEc2Error } from "../../src/aws/errors.ts";
import { createMemoryLogger } from "../../src/log.ts";

const DAY = 86_400_000;

/** The host's clocks, moved by hand: the wall clock may jump (NTP), the monotonic one only goes on. */
function hostClocks(wallMs: number) {
  const host = { wall: wallMs, mono: 1_000 };
  return {
    host,
    clocks: { wallMs: () => host.wall, monoMs: () => host.mono },
    /** Both clocks go on by `ms`. */
    pass(ms: number) {
      host.wall += ms;
      host.mono += ms;
    },
  };
}

const HOST = Date.parse("2026-03-01T12:00:00Z");
/** EC2's `Date` header for a time (whole seconds, RFC 7231). */
const header = (ms: number) => new Date(ms).toUTCString();

t.test("unknown until EC2 has answered: now() refuses, the offset is undefined", async (t) => {
  const { clocks } = hostClocks(HOST);
  const clock = createCloudClock({ host: clocks });
  t.throws(() => clock.now(), CloudTimeUnknownError);
  t.equal(clock.offsetMs(), undefined);
  clock.observe(undefined);
  clock.observe("not a date");
  t.throws(() => clock.now(), CloudTimeUnknownError, "an answer without a usable Date teaches nothing");
  t.same(cloudFailureOf(new CloudTimeUnknownError("x")), { kind: "clock", transient: true }, "a boot degrades on it");
});

t.test(
  "EC2's time is its answer's plus the host's monotonic time since; a wall-clock step moves nothing",
  async (t) => {
    const { host, clocks, pass } = hostClocks(HOST);
    const clock = createCloudClock({ host: clocks });
    const ec2 = HOST + 3 * DAY;
    clock.observe(header(ec2));
    t.equal(clock.now().getTime(), ec2 + 500, "the middle of the second the header names");
    t.equal(clock.offsetMs(), 3 * DAY + 500, "EC2 three days ahead of the host");
    pass(90_000);
    t.equal(clock.now().getTime(), ec2 + 500 + 90_000, "90 s later on the host: 90 s later in EC2's time");
    host.wall -= 2 * DAY; // NTP steps the host's clock back two days
    t.equal(clock.now().getTime(), ec2 + 500 + 90_000, "a step of the host's wall clock does not move EC2's time");
    clock.observe(header(ec2 + 100_000));
    t.equal(clock.now().getTime(), ec2 + 100_500, "the latest answer wins");
    t.equal(clock.offsetMs(), ec2 + 100_500 - host.wall, "the offset to the host's wall clock as it is now");
  },
);

t.test("an offset beyond SigV4's 5 minutes: one warning, naming the host's clock, however many answers", async (t) => {
  const log = createMemoryLogger("debug");
  const { clocks, pass } = hostClocks(HOST);
  const near = createCloudClock({ host: clocks, log });
  near.observe(header(HOST + SIGV4_SKEW_MS - 2_000));
  near.observe(header(HOST - SIGV4_SKEW_MS + 2_000));
  t.same(log.lines, [], "within 5 minutes either way: nothing said");

  const behind = createCloudClock({ host: clocks, log });
  for (let i = 0; i < 20; i++) {
    behind.observe(header(HOST + 2 * DAY + 3 * 3600_000 + i * 1000));
    pass(1000);
  }
  t.equal(log.lines.length, 1, "20 answers, one warning");
  t.match(log.lines[0], /^<4>ec2\.clock-offset: this host's clock is 2 d 3 h behind EC2's: /);
  t.match(log.lines[0], /fix the host's clock/);
  t.match(log.lines[0], /offsetSeconds=18\d{4}/);

  const ahead = createCloudClock({ host: clocks, log });
  ahead.observe(header(clocks.wallMs() - 400 * DAY));
  t.match(log.lines[1], /this host's clock is 400 d ahead of EC2's/);
});

t.test("how far off, in words", async (t) => {
  t.equal(describeOffset(3 * DAY), "3 d behind");
  t.equal(describeOffset(-(2 * DAY + 90 * 60_000)), "2 d 1 h 30 min ahead of");
  t.equal(describeOffset(-6 * 60_000), "6 min ahead of");
  t.equal(describeOffset(0), "0 min ahead of");
});

t.test("EC2's refusal of a signature's time is a clock fault, never 'report it as a bug'", async (t) => {
  for (const name of ["RequestExpired", "RequestInTheFuture", "RequestTimeTooSkewed"]) {
    const failure = classifyEc2Error({ name, message: "Request has expired.", $metadata: { httpStatusCode: 400 } });
    t.equal(failure.kind, "clock", name);
  }
});
