/**
 * The attempts per EC2 call on a host (src/aws/max-attempts.ts hostMaxAttempts): the agent's default,
 * or AWS_MAX_ATTEMPTS (the variable every AWS SDK and the aws CLI read) when it is set; any
 * other value is a configuration error. test/cli/conventions.test.ts runs the error as a process.
 */
import t from "tap";
import { DEFAULT_MAX_ATTEMPTS, hostMaxAttempts } from "../../src/aws/max-attempts.ts";
import { ConfigError, ExitCode } from "../../src/errors.ts";

t.test("unset: the agent's default, enough for a boot storm", async (t) => {
  t.equal(hostMaxAttempts({}), DEFAULT_MAX_ATTEMPTS);
  t.equal(DEFAULT_MAX_ATTEMPTS, 10);
});

t.test("a whole number from 1 to 100: that many attempts", async (t) => {
  for (const [value, attempts] of [
    ["1", 1],
    ["2", 2],
    [" 7 ", 7],
    ["100", 100],
  ] as const)
    t.equal(hostMaxAttempts({ AWS_MAX_ATTEMPTS: value }), attempts, JSON.stringify(value));
});

t.test("anything else: a configuration error naming the variable and the value", async (t) => {
  for (const value of ["", "0", "101", "1.5", "-3", "ten", "3x"]) {
    const error = (() => {
      try {
        return hostMaxAttempts({ AWS_MAX_ATTEMPTS: value });
      } catch (e) {
        return e;
      }
    })();
    t.type(error, ConfigError, JSON.stringify(value));
    t.equal((error as ConfigError).exitCode, ExitCode.config);
    t.match(
      (error as Error).message,
      `AWS_MAX_ATTEMPTS must be a whole number from 1 to 100, got ${JSON.stringify(value)}`,
    );
  }
});
