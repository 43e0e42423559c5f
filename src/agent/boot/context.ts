/**
 * What applying a boot plan works with: the adapters (built in src/cli/wiring.ts, for the CLI
 * or a lab host), the limits, and the progress the steps share as they go.
 */
import type { Logger } from "../../log.ts";
import type { ReadinessState } from "../../tags.ts";
import type { BootPlan } from "./plan.ts";
import type {
  CloudVolumes,
  ContainerdRoot,
  DaemonConfig,
  DockerEngine,
  DockerService,
  HostStorage,
  VolumeInfo,
} from "../ports.ts";
import type { PrewarmAtBoot } from "../prewarm/apply.ts";
import type { PrewarmReport, PrewarmTarget } from "../prewarm/plan.ts";
import type { BootReport } from "../outcomes.ts";
import type { DataRootPorts } from "./activation-marker.ts";
import type { CreatedFrom } from "./source.ts";

/** The adapters a boot uses (built in src/cli/wiring.ts, for the CLI or a lab host). */
export interface BootDeps {
  cloud: CloudVolumes;
  storage: HostStorage;
  daemonConfig: DaemonConfig;
  /** undefined when docker is left to systemd ordering (config docker.control = none). */
  docker: DockerService | undefined;
  engine: DockerEngine & { waitUntilReady(timeoutMs: number): Promise<void> };
  /** What the prepare-data-root step does on the host (activation-marker.ts prepareVolumeDataRoot decides when). */
  dataRoot: DataRootPorts;
  /** containerd's root and service, for a host on the containerd image store. Absent: such a host degrades at switch-data-root. */
  containerd?: ContainerdRoot;
  /** The installed dockerd's version (`dockerd --version`), read before docker starts. */
  dockerVersion(): Promise<string | undefined>;
  /**
   * Publishes the readiness labels (node labels via a manager, or engine labels) and reads them
   * back; throws when they did not take.
   */
  report(state: ReadinessState, details: Record<string, string>): Promise<void>;
  /**
   * The host checks before anything is claimed (src/agent/boot/preflight.ts): daemon.json parses and
   * holds nothing the switch refuses, dockerd's flags do not conflict with it. Throws the
   * refusal. Absent: only daemon.json's parse is checked.
   */
  preflight?(): Promise<void>;
  /**
   * Begins the pre-warm (beginPrewarmAtBoot with the configured settings): the sample starts at
   * once (the boot begins it as docker starts); a verdict, and maybe an initialization, inline or
   * handed to the background run, once its outcome is asked for. Absent: the step does nothing.
   */
  prewarm?(target: PrewarmTarget): PrewarmAtBoot;
  log: Logger;
  now?: () => Date;
}

/** Limits and expectations of this boot. */
export interface BootLimits {
  attachTimeoutMs: number;
  deviceTimeoutMs: number;
  dockerTimeoutMs: number;
  /** Images that must be listed after docker starts, beyond the volume's `images` tag. */
  expectedImages: string[];
  device: string;
  /** Where cache volumes are mounted: a data-root below it is the agent's doing. */
  mountRoot: string;
  /** docker's data-root without the agent (undefined: no `data-root` key, docker's default). */
  defaultDataRoot: string | undefined;
  /**
   * This boot of the machine (/proc/sys/kernel/random/boot_id): with the instance id, it makes
   * the CreateVolume ClientToken, so a rerun of a killed boot gets the volume the first run
   * created instead of a second one, while the next boot makes a new one.
   */
  bootId?: string;
  /**
   * EC2's LaunchTime of the instance (DescribeInstances): with the instance id and the boot id,
   * the activation a pool volume's data-root is prepared for (activation-marker.ts). Absent: unknown.
   */
  launchTime?: string;
}

/** What apply gets besides the plan. */
export interface ApplyOptions {
  /** Volumes observe() saw: their tags serve the claim without another DescribeVolumes. */
  known?: readonly VolumeInfo[];
  /**
   * Aborted on SIGTERM or when the boot budget runs out: the step in flight stops, the undo runs, the node degrades.
   */
  signal?: AbortSignal;
  /** When the boot budget runs out (ms since the epoch): a volume creation that would not fit is not started. */
  deadline?: number;
  /** How long creating a volume from the snapshot and attaching it takes (config timeouts.createSeconds). */
  createMs?: number;
}

/** A boot that ended before the last step (disabled, degraded), without its timeline and source yet. */
export type Finished = Omit<BootReport, "timeline" | "source">;

/** What the steps learn as they go (about the volume in hand; reset when it is handed back). */
export interface Progress {
  volume?: VolumeInfo;
  claimedNow: boolean;
  /** The claimed-at this run wrote, so the undo removes only its own. */
  claimedAt?: string;
  device?: string;
  mountPoint?: string;
  mountedNow: boolean;
  dataRoot?: string;
  switched: boolean;
  /** config.toml's root was changed by this run: containerd restarts before docker, the undo restores it. */
  containerdSwitched?: boolean;
  /** The step resume-prepared runs after all, while it runs: a failure is judged as that step's. */
  inStep?: BootPlan["steps"][number]["step"];
  /** The filesystem's data size (bytes) from its superblock, as identified before the mount. */
  filesystemBytes?: number;
  /** The pre-warm begun while docker starts; its outcome is awaited by the `prewarm` step. */
  prewarmRun?: PrewarmAtBoot;
  prewarm?: PrewarmReport;
  /** Set when this boot created the volume in hand (the plan's creation, or the claim's fallback). */
  created?: CreatedFrom;
}

/** Progress with no volume in hand: at the start, and after one was handed back. */
export function freshProgress(): Progress {
  return { claimedNow: false, mountedNow: false, switched: false };
}

/** The claim's bookkeeping across the volumes one boot takes in turn. */
export interface ClaimState {
  known: Map<string, VolumeInfo>;
  /** Volumes lost to another instance, or handed back: never tried again in this boot. */
  tried: Set<string>;
  /** Volumes claimed so far (each one that failed was handed back). */
  volumes: number;
  losses: number;
  /** Why each volume handed back in this boot failed, for the reason of a boot that then degrades. */
  handedBack: string[];
  signal?: AbortSignal;
  deadline?: number;
  createMs: number;
}

/** What every step handler gets. */
export interface StepContext {
  plan: BootPlan;
  progress: Progress;
  deps: BootDeps;
  limits: BootLimits;
  claim: ClaimState;
  /** The options of a cancellable call: the boot's signal, when it has one. */
  call: { signal?: AbortSignal };
}
