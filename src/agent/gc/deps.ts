/**
 * What gc takes: EC2 and where its outcome goes, in a module of their own beside run.ts, as
 * every use case has.
 */
import type { Logger } from "../../log.ts";
import type { OutcomeRecorder } from "../outcomes.ts";
import type { CloudVolumes } from "../ports.ts";

/** The adapters gc reads and deletes through (built in src/cli/common.ts `hostContext`, or a test's). */
export interface GcDeps {
  cloud: CloudVolumes;
  log: Logger;
  /** Leaves the report for the metrics; absent: nothing is recorded. */
  recorder?: Pick<OutcomeRecorder, "gcFinished">;
}
