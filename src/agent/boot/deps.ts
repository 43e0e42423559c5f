/**
 * What the boot takes: the adapters its steps act through, in a module of their own beside
 * run.ts, as every use case has.
 */
import type { Logger } from "../../log.ts";
import type { ReadinessState } from "../../tags.ts";
import type {
  CloudVolumes,
  ContainerdRoot,
  DaemonConfig,
  DockerEngine,
  DockerService,
  FilesystemFill,
  HostStorage,
} from "../ports.ts";
import type { PrewarmAtBoot } from "../prewarm/apply.ts";
import type { PrewarmTarget } from "../prewarm/plan.ts";
import type { PrewarmStrategy } from "../../config/index.ts";
import type { DataRootPorts } from "./activation-marker.ts";

/**
 * The pre-warm run the first phase begins at the mount (`ebs-cache-agent prewarm --from-mount`, a unit of its own on
 * a host) and the second takes over, with its record (prewarm/mount-run.ts).
 */
export interface MountRun {
  /** Records the run (the volume's tags as this phase saw them), its labels held, and starts it. */
  begin(volume: { volumeId: string; tags: Readonly<Record<string, string>> }): Promise<void>;
  /** Whether this boot began one for the volume (the first phase's record). */
  begun(volumeId: string): Promise<boolean>;
  /** The boot has published the node: the run publishes from now on. */
  published(volumeId: string): Promise<void>;
  /** Stops it and resolves once its reads have ended (before an unmount). */
  stop(): Promise<void>;
}

/** The adapters a boot uses, and the parts it composes from them once its settings are known (compose.ts). */
export interface BootDeps {
  cloud: CloudVolumes;
  storage: HostStorage;
  daemonConfig: DaemonConfig;
  /** undefined when docker is left to systemd ordering (config docker.control = none). */
  docker: DockerService | undefined;
  engine: DockerEngine & { waitUntilReady(timeoutMs: number): Promise<void> };
  /** What the prepare-data-root step does on the host (activation-marker.ts prepareVolumeDataRoot decides when). */
  dataRoot: DataRootPorts;
  /**
   * containerd's root and service, for a host on the containerd image store. Absent: such a host degrades at
   * switch-data-root.
   */
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
   * Begins the pre-warm (beginPrewarmAtBoot with the plan's strategy): the sample starts at
   * once (the boot begins it as docker starts); a verdict, and maybe an initialization, inline or
   * handed to the background run, once its outcome is asked for. Absent: the step does nothing.
   */
  prewarm?(target: PrewarmTarget, strategy: PrewarmStrategy, options?: { takeOver?: boolean }): PrewarmAtBoot;
  /** The pre-warm run begun at the first phase's mount (a unit of its own on a host). Absent: none is begun. */
  mountRun?: MountRun;
  /**
   * The fill of the filesystem mounted exactly at a mount point (statfs, src/host/fill.ts), read
   * when a step on the volume failed: a full volume is handed back, never quarantined
   * (volume-space.ts). Absent: only the error's class tells.
   */
  fill?(mountPoint: string): Promise<FilesystemFill | undefined>;
  log: Logger;
}
