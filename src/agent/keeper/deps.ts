/**
 * What the pool keeper takes: EC2 (with EC2's clock, which judges every time of the pool) and
 * where its figures go, in a module of their own beside run.ts, as every use case has.
 */
import type { Logger } from "../../log.ts";
import type { ProgressOutputs } from "../../progress.ts";
import type { OutcomeRecorder } from "../outcomes.ts";
import type { KeeperCloud } from "../ports.ts";

/** The adapters the keeper reads and acts through (built in src/cli/common.ts `hostContext`, or a test's). */
export interface KeeperDeps {
  cloud: KeeperCloud;
  log: Logger;
  /** Takes the run's figures for the metrics (not on a dry run); absent: nothing is recorded. */
  recorder?: Pick<OutcomeRecorder, "keeperFinished">;
  /** Where the wait for new volumes is told besides the log: a terminal, systemd's STATUS= (src/cli/common.ts). */
  progress?: Pick<ProgressOutputs, "terminal" | "status">;
  /** A clock in ms for the progress's ETA (default `performance.now`); never compared with EC2's. */
  now?: () => number;
}
