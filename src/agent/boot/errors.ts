/**
 * The boot's own failures. Each one ends in a hand-back or a degraded node, never in a thrown
 * exit: apply catches them, and run.ts derives the exit code from the outcome. They still carry
 * the exit code of that outcome (4, degraded) so the one error hierarchy tells the truth.
 */
import { AgentError, ExitCode, remediationOr, stopSignalName } from "../../errors.ts";

/** A failure that should leave the node degraded, with the reason for the log and the label. */
export class BootStepError extends AgentError {
  readonly step: string;

  constructor(step: string, message: string, remediation: string, options?: { cause?: unknown }) {
    super(`${step}: ${message}`, remediation, ExitCode.degraded, options);
    this.step = step;
  }
}

/**
 * Docker runs, already in a swarm (joined, or joining), on another data-root than the volume's:
 * something started and joined it before the agent prepared the volume (a unit order where the
 * join runs before the agent). Moving it now would restart it on a data-root without its swarm
 * state, and the node would leave the swarm under the autoscaler: docker is left as it is.
 */
export class JoinedBeforeSwitch extends BootStepError {
  readonly dockerRootDir: string;
  readonly swarmState: string;

  constructor(dockerRootDir: string, swarmState: string) {
    super(
      "start-docker",
      `docker already runs on ${dockerRootDir} and is in a swarm (${swarmState}): not moved to the cache volume ` +
        `after the join`,
      "order the join after the agent (cloud-final After=ebs-cache-agent-ready.service, or docker.service " +
        "After=ebs-cache-agent.service, which the unit sets); the next boot of a fresh instance uses the volume",
    );
    this.dockerRootDir = dockerRootDir;
    this.swarmState = swarmState;
  }
}

/**
 * The abort reason of a first phase whose deadline passed: its budget (config timeouts.bootSeconds), or the
 * autoscaler's start limit counted from LaunchTime (timeouts.startLimitSeconds, deadline.ts), whichever came first.
 */
export class BootBudgetSpent extends AgentError {
  readonly seconds: number;
  /** What ran out, in words (deadline.ts describeDeadline); the budget by default. */
  readonly what: string;

  constructor(seconds: number, what = `the boot budget of ${seconds} s`, startLimit = false) {
    super(
      `${what} spent`,
      startLimit
        ? "the instance reached phase 1 late after its launch, or EC2 or the device was slow: see the timeline; " +
            "keep timeouts.startLimitSeconds equal to the autoscaler's EC2_INSTANCES_MAX_START_TIME"
        : "EC2 or the device was slow: see the timeline; raise timeouts.bootSeconds only as far as the autoscaler's " +
            "start-time limit allows",
      ExitCode.degraded,
    );
    this.seconds = seconds;
    this.what = what;
  }
}

/**
 * The boot was stopped (systemd's SIGTERM: a stop, or TimeoutStartSec; a Ctrl-C's SIGINT), or its
 * budget ran out: it undoes and degrades.
 */
export class CancelledError extends BootStepError {
  constructor(step: string, signal: AbortSignal, cause?: unknown) {
    const budget = signal.reason instanceof BootBudgetSpent ? signal.reason : undefined;
    const received = stopSignalName(signal);
    super(
      step,
      budget ? `${budget.what} ran out before it finished` : `stopped by ${received} before it finished`,
      budget ? budget.remediation : stopRemediation(received),
      cause !== undefined ? { cause } : undefined,
    );
  }
}

/** What to do after a stop, by the signal that came (neither: the abort did not say which). */
function stopRemediation(received: string): string {
  if (received === "SIGTERM")
    return "see why systemd stopped the unit (journalctl -u ebs-cache-agent; TimeoutStartSec)";
  if (received === "SIGINT") return "it was interrupted (Ctrl-C): run the boot again";
  return "see why the boot was stopped: by systemd (journalctl -u ebs-cache-agent; TimeoutStartSec), or by a Ctrl-C";
}

/** The remediation to log with any failure: an AgentError's own, else a pointer to the log. */
export function remediationOf(error: unknown): string {
  return remediationOr(error, "see the log lines above");
}
