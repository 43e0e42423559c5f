/**
 * What the prune takes: the adapters and what it reads of the last boot and the pre-warm, in a
 * module of their own so that run and observe share the types without importing each other.
 */
import type { Logger } from "../../log.ts";
import type { CloudVolumes, DockerImages, FilesystemFill } from "../ports.ts";

/** The last boot's result, as its record holds it (src/status/records.ts). */
export interface LastBoot {
  outcome: string;
  volumeId?: string;
  mountPoint?: string;
  dataRoot?: string;
}

/** The background pre-warm's state, as its state file and process say (src/agent/prewarm/run.ts prewarmStatus). */
export interface PrewarmActivity {
  phase: string | undefined;
  running: boolean;
}

/** The adapters the prune reads and acts through (built in src/cli/wiring.ts). */
export interface PruneDeps {
  /** The last boot's result, from its record; undefined when none is recorded (observe.ts mountedVolumeOf reads it). */
  lastBoot(): Promise<LastBoot | undefined>;
  cloud: Pick<CloudVolumes, "describeVolume" | "findSnapshots">;
  /** statfs of the filesystem mounted exactly there (src/host/fill.ts). */
  fill(mountPoint: string): Promise<FilesystemFill | undefined>;
  docker: DockerImages;
  /**
   * The instance's tags as EC2 has them now (osparc writes `pre_pulled_images` after its pulls).
   * Absent: not read (no pre-pulled images known).
   */
  instanceTags?(): Promise<Record<string, string>>;
  /** The background pre-warm's state (observe.ts prewarmReads judges it). Absent: none runs. */
  prewarm?(): Promise<PrewarmActivity>;
  log: Logger;
}
