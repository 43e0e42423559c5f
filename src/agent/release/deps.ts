/**
 * What the release takes: the adapters and its few knobs, in a module of their own so that
 * run, observe and apply share the type without importing each other.
 */
import type { Logger } from "../../log.ts";
import type {
  CloudVolumes,
  ContainerdRoot,
  DockerRootQuery,
  DockerService,
  HostStorage,
  LabelWithdrawer,
  MountTable,
  ReleaseDaemonConfig,
  SpotInstanceAction,
} from "../ports.ts";

/** The adapters a release uses (built in src/cli/wiring.ts), and its few knobs. */
export interface ReleaseDeps {
  cloud: CloudVolumes;
  storage: Pick<HostStorage, "findDevice" | "mountPointOf" | "unmount" | "liveness">;
  mounts: MountTable;
  daemonConfig: ReleaseDaemonConfig;
  /** undefined with `docker.control: none`. */
  docker: DockerService | undefined;
  /** Asked only while docker runs (or, without docker control, to learn whether it does). */
  engine: DockerRootQuery;
  withdrawLabels: LabelWithdrawer;
  log: Logger;
  /** Interval between DescribeVolumes while waiting for `available` (default 1000 ms). */
  pollMs?: number;
  /** Absent: the notice is not read. */
  spotInstanceAction?: SpotInstanceAction;
  /**
   * containerd's root and service: a root on the volume is put back and containerd stopped before the unmount. Absent:
   * not looked at.
   */
  containerd?: ContainerdRoot;
  /**
   * How long one IMDS answer may take (config `timeouts.imdsRequestSeconds`): the spot notice gets
   * that long (observe.ts spotNoticeMs), and the release asks whether the instance stops or
   * terminates within twice that (shutdownQuestionMs). Absent: 5 s for the notice, 10 s for the question.
   */
  imdsRequestSeconds?: number;
  /**
   * Whether the host's systemd is rebooting (src/host/reboot.ts). Absent: not asked (the lab, a release by hand outside
   * systemd).
   */
  rebootQueued?: () => Promise<boolean>;
  /**
   * Stops the pre-warm run begun at the boot's mount (ebs-cache-agent-prewarm.service on a host) and resolves once its
   * reads have ended: it reads the device, so it must end before the volume is unmounted and detached. Absent: none.
   */
  stopPrewarm?: () => Promise<void>;
}
