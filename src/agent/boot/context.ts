/**
 * What applying a boot plan works with besides its adapters (./deps.ts): the limits, and the
 * progress the steps share as they go.
 */
import type { BootPlan } from "./plan.ts";
import type { VolumeInfo } from "../ports.ts";
import type { PrewarmAtBoot } from "../prewarm/apply.ts";
import type { PrewarmReport } from "../prewarm/plan.ts";
import type { BootReport } from "../outcomes.ts";
import type { CreatedFrom } from "./source.ts";
import type { BootDeps } from "./deps.ts";
import type { WorkspaceRecord } from "../workspace-record.ts";

/** Limits and expectations of this boot. */
export interface BootLimits {
  attachTimeoutMs: number;
  deviceTimeoutMs: number;
  /**
   * How long a copy of the volume's mount held in another mount namespace is given to go before
   * the hand-back's or the undo's detach is refused (config timeouts.mountHolderSeconds; absent: at once).
   */
  holderWaitMs?: number;
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
  /**
   * The workspace record a run that may claim acts on (workspace-record.ts): prepare-data-root
   * writes a copy on the volume (volume-record.ts), for phase 2 and the release when the state
   * folder's copy is lost. Absent: none is written (phase 2, a dry run).
   */
  workspaceRecord?: WorkspaceRecord;
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
  /**
   * Called once docker runs, verified, on the data-root it keeps for this boot, before the pre-warm's verdict and
   * the labels: what must come before the swarm join is done (systemd's READY=1 for the unit; see
   * systemd/ebs-cache-agent-ready.service). From then on nothing in this boot moves docker.
   */
  dataRootFinal?: () => Promise<void>;
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
  /**
   * A pre-warm run was begun at this boot's mount (begin-prewarm, or the first phase's record): taken over, stopped
   * before an undo.
   */
  mountRunBegun?: boolean;
  prewarm?: PrewarmReport;
  /**
   * The sample still running when the `prewarm` step came: `ready` is published without waiting for it
   * (`prewarm=checking`), its verdict once it ends.
   */
  verdictPending?: Promise<PrewarmReport>;
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
