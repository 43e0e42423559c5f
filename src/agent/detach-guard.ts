/**
 * Whether a volume this host unmounted may be detached now: the one guard the release's detach,
 * the boot's hand-back of a volume left attached and the boot's undo all ask, so that none of them
 * can detach what another still counts as mounted. A mounted volume is never detached: EC2 would
 * take the device from under a live filesystem (a forced detach in effect), and what it holds that
 * is not yet written back would be lost. A check that cannot be made counts as mounted.
 *
 * A copy held for a moment is not a copy held. Any process that makes a mount namespace copies
 * every mount of the namespace it leaves: runc does it for each container it starts (until its
 * pivot_root drops the copies), systemd for a unit with PrivateTmp= or ProtectSystem=, `unshare`
 * too. When the copy was made while the volume was mounted and the copy does not receive unmount
 * propagation (a private mount, or a namespace made private), the agent's unmount leaves it
 * there. So a holder found after the unmount is looked at again, for at most `boundMs`
 * (config `timeouts.mountHolderSeconds`): one that goes was never a reason; one still there at the
 * bound refuses the detach. The log names each holder (pid, command, namespace) and how long it
 * held. No holder at the first look: no wait at all.
 *
 * What the agent never does to a holder, however long it holds: unmount the copy in its
 * namespace or end its processes. The copy is that namespace's own mount; the agent cannot tell
 * whether a process there uses it (a container's bind mount below it, a service writing to it),
 * a lazy unmount there would keep the filesystem live anyway until the last file closes, and
 * entering a container's namespace crosses a boundary the agent has no business crossing. Only
 * a person who knows what the holder is may end it: the refusal says how.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { describeError } from "../errors.ts";
import type { Fields, Logger } from "../log.ts";
import type { FilesystemLiveness, HostStorage, NamespaceHolder } from "./ports.ts";

/** Why the detach must wait, and what clears it. */
export interface DetachBlocker {
  message: string;
  remediation: string;
}

/** How long a holder in another mount namespace is given to let go before the detach is refused. */
export interface HolderWait {
  /** The bound (config `timeouts.mountHolderSeconds` in ms); 0: refused at the first look. */
  boundMs: number;
  log: Logger;
  /** The log's area: the use case that detaches (`release`, `boot`). */
  area: "release" | "boot";
  /** Ends the wait at once (a stop, the boot's budget): the holder then refuses the detach. */
  signal?: AbortSignal;
  /** A monotonic clock in ms and a sleep (tests give their own; the host's clock may jump). */
  clock?: { now(): number; sleep(ms: number, signal?: AbortSignal): Promise<void> };
}

/** The first look again after this long; each further look waits twice as long, up to POLL_MAX_MS. */
const POLL_FIRST_MS = 50;
const POLL_MAX_MS = 500;

const MONOTONIC = {
  now: () => performance.now(),
  sleep: (ms: number, signal?: AbortSignal) =>
    sleep(ms, undefined, signal ? { signal } : {}).catch(() => undefined) as Promise<void>,
};

/**
 * Asks the host, after the unmount, whether `device` is still mounted here or in any other mount
 * namespace; the blocker when it is, or when either look fails. A holder in another namespace is
 * looked at again until it goes, for at most `wait.boundMs` (none without `wait`). `rerun`: the
 * command that takes it from there once cleared (release; boot for the boot's own hand-back and undo).
 */
export async function detachBlocker(
  storage: Pick<HostStorage, "mountPointOf" | "liveness">,
  volumeId: string,
  device: string,
  rerun: string,
  wait?: HolderWait,
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
  const look = () =>
    storage.liveness(device).then(
      (live): FilesystemLiveness | DetachBlocker => live,
      (error: unknown): DetachBlocker => ({
        message:
          `could not learn whether ${volumeId}'s filesystem is still mounted in another mount namespace ` +
          `(${describeError(error)}): not detaching it`,
        remediation: `check that /proc is readable to the agent (it runs as root), then run ${rerun} again`,
      }),
    );
  const first = await look();
  if (!("holders" in first)) return first;
  if (!isLive(first)) return undefined;
  if (!wait || wait.boundMs <= 0) return liveElsewhere(volumeId, first, rerun);
  return waitForHolders(volumeId, first, look, rerun, wait);
}

function isLive(live: FilesystemLiveness): boolean {
  return live.holders.length > 0 || live.superblock;
}

/** One namespace seen holding the filesystem: since when, and until when (undefined: still). */
interface Seen {
  holder: NamespaceHolder;
  from: number;
  until?: number;
}

/** Looks again until nothing holds the filesystem, the bound passes, or the wait is ended. */
async function waitForHolders(
  volumeId: string,
  first: FilesystemLiveness,
  look: () => Promise<FilesystemLiveness | DetachBlocker>,
  rerun: string,
  wait: HolderWait,
): Promise<DetachBlocker | undefined> {
  const clock = wait.clock ?? MONOTONIC;
  const started = clock.now();
  const deadline = started + wait.boundMs;
  const seen = new Map<string, Seen>();
  const note = (live: FilesystemLiveness, at: number) => {
    const present = new Set(live.holders.map((holder) => holder.ns));
    for (const holder of live.holders) {
      const known = seen.get(holder.ns);
      if (known) known.holder = holder;
      else seen.set(holder.ns, { holder, from: at });
    }
    for (const [ns, entry] of seen) if (!present.has(ns) && entry.until === undefined) entry.until = at;
  };
  note(first, started);
  noteWait(wait, "held")(
    `${volumeId}'s filesystem is still mounted in another mount namespace, held by ${holdersText(first)}: ` +
      `waiting up to ${secondsText(wait.boundMs)} for it to go before the detach (a copy made for a moment, as a ` +
      `container or a service starting makes, goes by itself)`,
    { volume: volumeId },
  );
  let live = first;
  let pause = POLL_FIRST_MS;
  while (isLive(live) && !wait.signal?.aborted) {
    const left = deadline - clock.now();
    if (left <= 0) break;
    await clock.sleep(Math.min(pause, left), wait.signal);
    pause = Math.min(pause * 2, POLL_MAX_MS);
    const next = await look();
    if (!("holders" in next)) return next;
    live = next;
    note(live, clock.now());
  }
  const ended = clock.now();
  const heldFor = [...seen.values()]
    .map(({ holder, from, until }) => `${holderText(holder)} for ${secondsText((until ?? ended) - from)}`)
    .join("; ");
  if (!isLive(live)) {
    noteWait(wait, "released")(
      `${volumeId}'s filesystem is no longer mounted in any other mount namespace after ` +
        `${secondsText(ended - started)}: detaching it`,
      { volume: volumeId, heldBy: heldFor || "the kernel alone (a namespace being torn down)" },
    );
    return undefined;
  }
  const waited = wait.signal?.aborted
    ? `the wait was ended after ${secondsText(ended - started)} (${stopReason(wait.signal)})`
    : `still there at the end of the ${secondsText(wait.boundMs)} the detach waits for it ` +
      "(timeouts.mountHolderSeconds)";
  return liveElsewhere(volumeId, live, rerun, waited);
}

/** The notice of the wait's start or end, in the area of the use case that waits (literal names: test/log.test.ts). */
function noteWait(wait: HolderWait, what: "held" | "released"): (message: string, fields: Fields) => void {
  const { log } = wait;
  if (wait.area === "release")
    return what === "held"
      ? (message, fields) => log.notice("release.mount-held", message, fields)
      : (message, fields) => log.notice("release.mount-released", message, fields);
  return what === "held"
    ? (message, fields) => log.notice("boot.mount-held", message, fields)
    : (message, fields) => log.notice("boot.mount-released", message, fields);
}

function stopReason(signal: AbortSignal): string {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason.message : "stopped";
}

/** `1.2 s`, `10 s`: a duration for the log, to the tenth of a second below 10 s. */
export function secondsText(ms: number): string {
  const s = Math.max(0, ms) / 1000;
  return `${s < 10 ? (Math.round(s * 10) / 10).toString() : Math.round(s).toString()} s`;
}

/** How many processes of one namespace a refusal names. */
const NAMED_PROCESSES = 5;

/** One holder as the log and a refusal name it: its first processes, the namespace, its mount points. */
function holderText(holder: NamespaceHolder): string {
  const named = holder.processes.slice(0, NAMED_PROCESSES).map((p) => `pid ${p.pid} ${JSON.stringify(p.command)}`);
  const more = holder.processes.length - named.length;
  const at = `(${holder.ns}, at ${holder.mountPoints.join(", ")})`;
  return `${named.join(", ")}${more > 0 ? ` and ${more} more` : ""} ${at}`;
}

function holdersText(live: FilesystemLiveness): string {
  return live.holders.length > 0
    ? live.holders.map(holderText).join("; ")
    : "a mount namespace no process is in (only the kernel still holds it)";
}

/**
 * Why a volume unmounted here must not be detached yet (pure): its filesystem is still mounted in
 * another mount namespace (a copy made after the mount that no unmount propagates to: `unshare
 * --mount`, a container, a service's own namespace), so the unmount left it live and a detach now
 * would be a forced detach in effect. Undefined when it is live nowhere: the detach may go.
 * `rerun`: the command that takes it from there (release; boot for a boot's hand-back); `waited`:
 * how the wait for it to go ended, when there was one.
 */
export function liveElsewhere(
  volumeId: string,
  live: FilesystemLiveness,
  rerun = "release",
  waited?: string,
): DetachBlocker | undefined {
  const kept =
    `${waited ? `${waited}; ` : ""}${volumeId} stays attached and untagged: ` + "a mounted volume is never detached";
  if (live.holders.length > 0) {
    const first = live.holders[0]!;
    const pids = live.holders.flatMap((holder) => holder.processes.map((p) => p.pid));
    return {
      message:
        `${volumeId}'s filesystem is still mounted in another mount namespace, held by ` +
        `${holdersText(live)}; ${kept}`,
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
