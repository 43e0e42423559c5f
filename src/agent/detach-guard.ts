/**
 * Whether a volume this host unmounted may be detached now: the one guard the release's detach,
 * the boot's hand-back of a volume left attached and the boot's undo all ask, so that none of them
 * can detach what another still counts as mounted. A mounted volume is never detached: EC2 would
 * take the device from under a live filesystem (a forced detach in effect), and what it holds that
 * is not yet written back would be lost. A check that cannot be made counts as mounted.
 */
import { describeError } from "../errors.ts";
import type { FilesystemLiveness, HostStorage } from "./ports.ts";

/** Why the detach must wait, and what clears it. */
export interface DetachBlocker {
  message: string;
  remediation: string;
}

/**
 * Asks the host, after the unmount, whether `device` is still mounted here or in any other mount
 * namespace; the blocker when it is, or when either look fails. `rerun`: the command that takes
 * it from there once cleared (release; boot for the boot's own hand-back and undo).
 */
export async function detachBlocker(
  storage: Pick<HostStorage, "mountPointOf" | "liveness">,
  volumeId: string,
  device: string,
  rerun: string,
): Promise<DetachBlocker | undefined> {
  let mountPoint: string | undefined;
  try {
    mountPoint = await storage.mountPointOf(device);
  } catch (error) {
    return {
      message: `could not learn whether ${volumeId} is still mounted (${describeError(error)}): not detaching it`,
      remediation: `check that the agent can read /proc/self/mountinfo (it runs as root), then run ${rerun} again`,
    };
  }
  if (mountPoint !== undefined) {
    return {
      message: `${volumeId} is still mounted at ${mountPoint}: not detaching it (a mounted volume is never detached)`,
      remediation: `find what holds it (fuser -vm ${mountPoint}), unmount it, then run ${rerun} again`,
    };
  }
  return storage.liveness(device).then(
    (live) => liveElsewhere(volumeId, live, rerun),
    (error: unknown) => ({
      message:
        `could not learn whether ${volumeId}'s filesystem is still mounted in another mount namespace ` +
        `(${describeError(error)}): not detaching it`,
      remediation: `check that /proc is readable to the agent (it runs as root), then run ${rerun} again`,
    }),
  );
}

/** How many processes of one namespace a refusal names. */
const NAMED_PROCESSES = 5;

/**
 * Why a volume unmounted here must not be detached yet (pure): its filesystem is still mounted in
 * another mount namespace (a copy made after the mount that no unmount propagates to: `unshare
 * --mount`, a container, a service's own namespace), so the unmount left it live and a detach now
 * would be a forced detach in effect. Undefined when it is live nowhere: the detach may go.
 * `rerun`: the command that takes it from there (release; boot for a boot's hand-back).
 */
export function liveElsewhere(
  volumeId: string,
  live: FilesystemLiveness,
  rerun = "release",
): DetachBlocker | undefined {
  const kept = `${volumeId} stays attached and untagged: a mounted volume is never detached`;
  if (live.holders.length > 0) {
    const where = live.holders.map((holder) => {
      const named = holder.processes.slice(0, NAMED_PROCESSES).map((p) => `pid ${p.pid} ${JSON.stringify(p.command)}`);
      const more = holder.processes.length - named.length;
      const at = `(${holder.ns}, at ${holder.mountPoints.join(", ")})`;
      return `${named.join(", ")}${more > 0 ? ` and ${more} more` : ""} ${at}`;
    });
    const first = live.holders[0]!;
    const pids = live.holders.flatMap((holder) => holder.processes.map((p) => p.pid));
    return {
      message:
        `${volumeId}'s filesystem is still mounted in another mount namespace, held by ${where.join("; ")}; ` +
        `${kept}`,
      remediation:
        `stop those processes (kill ${pids.slice(0, 20).join(" ")}), or unmount it in their namespace ` +
        `(nsenter -t ${first.processes[0]?.pid ?? "PID"} -m umount ${first.mountPoints[0] ?? "MOUNTPOINT"}), ` +
        `then run ${rerun} again`,
    };
  }
  if (live.superblock) {
    return {
      message: `${volumeId}'s filesystem is still mounted in a mount namespace no process is in; ${kept}`,
      remediation:
        "find the namespace file that keeps it (findmnt -t nsfs), unmount that file or unmount the filesystem in " +
        "that namespace (nsenter --mount=FILE umount MOUNTPOINT), then run " +
        rerun +
        " again",
    };
  }
  return undefined;
}
