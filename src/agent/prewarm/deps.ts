/**
 * What the pre-warm takes: the ports narrowed to its calls, in a module of their own beside
 * run.ts, so that observe and apply share the type without importing each other.
 */
import type { Logger } from "../../log.ts";
import type { CloudClock, InitializationStatus, PrewarmReader } from "../ports.ts";
import type { OutcomeRecorder } from "../outcomes.ts";

/** What the pre-warm uses of the world (the ports, narrowed to its calls). */
export interface PrewarmDeps {
  reader: PrewarmReader;
  /** DescribeVolumeStatus initialization details; undefined when EC2 does not say. */
  initializationStatus?(volumeId: string): Promise<InitializationStatus | undefined>;
  tagVolume(volumeId: string, tags: Record<string, string>): Promise<void>;
  /** EC2's time (the cloud's clock): the volume's age from its create time, the `initialized` tag. */
  clock: Pick<CloudClock, "now">;
  /** Publishes the readiness labels (absent: nothing is published, e.g. before docker runs). */
  report?(state: "warming" | "ready", details: Record<string, string>): Promise<void>;
  /** `paths.stateDir`: prewarm.json and prewarm.lock. */
  stateDir: string;
  log: Logger;
  /** The host's time, for the state file (default: the host's clock). */
  now?: () => Date;
  sleep?: (ms: number) => Promise<void>;
  /**
   * Starts the background run (on a host: a detached `ebs-cache-agent prewarm --background`).
   * Absent: the initialization runs inline, before the node is reported ready.
   */
  startBackground?: () => Promise<void>;
  /** How often EBS's initialization status is polled while following it (default 10 s). */
  followPollMs?: number;
  /**
   * systemd's `STATUS=` (a unit that takes notifications): the progress line, at the journal's pace,
   * so that `systemctl status` shows how far the reads are. Absent: the journal alone.
   */
  status?: (text: string) => void;
  /** Told of each state written (the pre-warm's metrics); absent: nothing but the state file. */
  recorder?: Pick<OutcomeRecorder, "prewarmStateWritten">;
}
