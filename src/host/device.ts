/**
 * Finding an attached volume's block device: the udev by-id link
 * `<byIdDir>/nvme-Amazon_Elastic_Block_Store_vol…`, resolved and verified from the NVMe serial
 * before the device path is handed out. Waiting is event-driven (chokidar over inotify), never a
 * sleep loop: the device appears some time after EC2 reports the attachment as `attached`.
 *
 * A missing by-id folder is not an error and nothing is created on the host: the watch starts at
 * the nearest folder that exists and follows the path down as udev creates it.
 */
import { lstat, readlink, realpath, stat } from "node:fs/promises";
import { dirname, join, relative, resolve, sep } from "node:path";
import { watch, type FSWatcher } from "chokidar";
import { AgentError, describeError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { assertVolumeId, DeviceIdentityError, ebsByIdName, verifyVolumeSerialMatch } from "./serial.ts";

/** The volume's device did not show up (or only as a dangling link) before the deadline. */
export class DeviceTimeoutError extends AgentError {
  readonly volumeId: string;
  readonly link: string;
  readonly timeoutMs: number;

  constructor(volumeId: string, link: string, timeoutMs: number, detail: string) {
    super(
      `the device of volume ${volumeId} did not appear at ${link} within ${timeoutMs} ms: ${detail}`,
      `check that ${volumeId} is attached to this instance (aws ec2 describe-volumes --volume-ids ${volumeId}) ` +
        ("and that udev made its by-id link (ls -l /dev/disk/by-id; udevadm trigger --subsystem-match=block), " +
          "then run the agent again"),
    );
    this.volumeId = volumeId;
    this.link = link;
    this.timeoutMs = timeoutMs;
  }
}

/** Where to look for devices: `/dev/disk/by-id` and `/sys` on a host, folders of a host root in the lab. */
export interface DeviceLocations {
  byIdDir: string;
  sysfsRoot: string;
  log?: Logger;
}

/** What the by-id link of a volume shows right now. */
export type LinkState =
  | { kind: "absent" }
  /** The link exists but its target does not (yet). */
  | { kind: "dangling"; target: string }
  /** The link leads somewhere that is not this volume. */
  | { kind: "refused"; error: DeviceIdentityError }
  | { kind: "verified"; device: string };

/** The path of the by-id link udev makes for the volume. */
export function volumeLinkPath(byIdDir: string, volumeId: string): string {
  return join(resolve(byIdDir), ebsByIdName(volumeId));
}

/** Looks at the volume's by-id link once: absent, dangling, refused or verified. */
export async function inspectVolumeLink(volumeId: string, where: DeviceLocations): Promise<LinkState> {
  const link = volumeLinkPath(where.byIdDir, volumeId);
  try {
    if (!(await lstat(link)).isSymbolicLink()) {
      return refused(new DeviceIdentityError(volumeId, link, undefined, "the by-id entry is not a symbolic link"));
    }
  } catch (error) {
    if (isCode(error, "ENOENT", "ENOTDIR")) return { kind: "absent" };
    throw error;
  }
  let device: string;
  try {
    device = await realpath(link);
  } catch (error) {
    if (isCode(error, "ELOOP")) return refused(new DeviceIdentityError(volumeId, link, undefined, "the link loops"));
    if (!isCode(error, "ENOENT", "ENOTDIR")) throw error;
    try {
      return { kind: "dangling", target: resolve(dirname(link), await readlink(link)) };
    } catch {
      return { kind: "absent" }; // Removed between the two looks.
    }
  }
  try {
    await verifyVolumeSerialMatch(volumeId, device, where.sysfsRoot);
  } catch (error) {
    if (error instanceof DeviceIdentityError) return refused(error);
    throw error;
  }
  return { kind: "verified", device };
}

/**
 * The verified device of the volume now, without waiting: undefined when there is no link (or it
 * dangles); throws DeviceIdentityError when the link leads to another device.
 */
export async function findVolumeDevice(volumeId: string, where: DeviceLocations): Promise<string | undefined> {
  assertVolumeId(volumeId);
  const state = await inspectVolumeLink(volumeId, where);
  if (state.kind === "refused") throw state.error;
  return state.kind === "verified" ? state.device : undefined;
}

/**
 * Waits until the volume's by-id link exists, its target exists and the target's serial is the
 * volume's, and returns the device (`/dev/nvme1n1`). A link that leads elsewhere (stale, or
 * malicious) is never used: the wait goes on in case udev replaces it, and the deadline then
 * throws its DeviceIdentityError. No device at the deadline: DeviceTimeoutError.
 */
export async function waitForVolumeDevice(
  volumeId: string,
  timeoutMs: number,
  where: DeviceLocations,
  signal?: AbortSignal,
): Promise<string> {
  assertVolumeId(volumeId);
  if (!Number.isFinite(timeoutMs) || timeoutMs < 0) throw new RangeError(`invalid timeout ${timeoutMs} ms`);
  const { log } = where;
  const link = volumeLinkPath(where.byIdDir, volumeId);
  const watchers: FSWatcher[] = [];
  let timer: NodeJS.Timeout | undefined;
  let done = false;
  let running = false;
  let again = false;
  let last: LinkState = { kind: "absent" };
  const watchedTargets = new Set<string>();

  signal?.throwIfAborted();
  return new Promise<string>((resolvePromise, rejectPromise) => {
    // Cancellation (SIGTERM) ends the wait at once, watchers closed, with the signal's AbortError.
    const onAbort = () => finish({ error: signal!.reason });
    signal?.addEventListener("abort", onAbort, { once: true });
    const finish = (outcome: { device: string } | { error: unknown }) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      void Promise.all(watchers.map((w) => closeWatcher(w).catch(() => undefined))).then(() => {
        if ("device" in outcome) resolvePromise(outcome.device);
        else rejectPromise(outcome.error);
      });
    };

    /** Looks at the link; checks are serialised and a trigger during one runs one more. */
    const check = (trigger: string) => {
      if (done) return;
      if (running) {
        again = true;
        return;
      }
      running = true;
      void (async () => {
        try {
          do {
            again = false;
            const state = await inspectVolumeLink(volumeId, where);
            log?.debug("host.device", "device check", { volumeId, trigger, state: state.kind });
            await observe(state);
          } while (again && !done);
        } catch (error) {
          finish({ error });
        } finally {
          running = false;
        }
      })();
    };

    const observe = async (state: LinkState) => {
      const previous = last;
      last = state;
      if (state.kind === "verified") {
        log?.info("host.device", "device verified", { volumeId, device: state.device, link });
        finish({ device: state.device });
      } else if (state.kind === "refused") {
        if (previous.kind !== "refused" || previous.error.message !== state.error.message) {
          log?.warning("host.device", "refusing the device the link leads to; waiting for the link to change", {
            volumeId,
            link,
            error: state.error.message,
          });
        }
      } else if (state.kind === "dangling" && !watchedTargets.has(state.target)) {
        // The link came before its device node: watch for the node too, then look again.
        watchedTargets.add(state.target);
        log?.info("host.device", "the link's target does not exist yet; watching for it", {
          volumeId,
          target: state.target,
        });
        adopt(await watchFor(state.target, (trigger) => check(trigger), log));
        check("target watch ready");
      }
    };

    timer = setTimeout(() => {
      void lastLook(volumeId, where, timeoutMs, last).then(finish, (error: unknown) => finish({ error }));
    }, timeoutMs);

    /** Keeps a watcher for closing at the end, or closes it now if the wait is already over. */
    const adopt = (watcher: FSWatcher) => {
      if (done) void closeWatcher(watcher).catch(() => undefined);
      else watchers.push(watcher);
    };

    watchFor(link, (trigger) => check(trigger), log)
      .then((watcher) => {
        adopt(watcher);
        if (done) return;
        log?.debug("host.device", "watching for the device", { volumeId, link });
        check("ready"); // A link that was there before the watch began.
      })
      .catch((error: unknown) => finish({ error }));
  });
}

/**
 * The deadline's one last look (a lost event must not fail a boot): the device, or why there is
 * none (`last`: what the wait saw before).
 */
async function lastLook(
  volumeId: string,
  where: DeviceLocations,
  timeoutMs: number,
  last: LinkState,
): Promise<{ device: string } | { error: unknown }> {
  const state = await inspectVolumeLink(volumeId, where);
  if (state.kind === "verified") return { device: state.device };
  if (state.kind === "refused") return { error: state.error };
  const detail =
    state.kind === "dangling"
      ? `the link points at ${state.target}, which does not exist`
      : last.kind === "refused"
        ? `the link led elsewhere: ${last.error.message}`
        : "no such link";
  return { error: new DeviceTimeoutError(volumeId, volumeLinkPath(where.byIdDir, volumeId), timeoutMs, detail) };
}

/**
 * Watches for `target` to appear or change: from the nearest existing folder on its path down to
 * it, ignoring everything else. Resolves once the watch is in place (chokidar's `ready`).
 */
async function watchFor(target: string, onEvent: (trigger: string) => void, log?: Logger): Promise<FSWatcher> {
  const start = await nearestExistingDir(dirname(target));
  // Watch in the real namespace: a symlinked folder on the way would otherwise be watched as a link.
  const realStart = await realpath(start);
  const wanted = join(realStart, relative(start, target));
  const relevant = (path: string) => path === wanted || wanted.startsWith(path.endsWith(sep) ? path : path + sep);
  const watcher = watch(realStart, {
    ignoreInitial: true, // The caller looks once the watch is ready.
    followSymlinks: false,
    atomic: false,
    usePolling: false,
    persistent: false,
    ignored: (path: string) => !relevant(resolve(path)),
  });
  watcher.on("all", (event, path) => onEvent(`${event} ${path}`));
  // Raw inotify events come before chokidar's throttled directory re-reads: react to them at once.
  watcher.on("raw", (event, path, details) => {
    const watchedPath = (details as { watchedPath?: string } | undefined)?.watchedPath ?? realStart;
    const full = path ? resolve(watchedPath, path) : watchedPath;
    if (relevant(full)) onEvent(`raw ${event} ${full}`);
  });
  watcher.on("error", (error) => log?.warning("host.device", "watch error", { target, error: describeError(error) }));
  await new Promise<void>((resolveReady) => watcher.once("ready", resolveReady));
  return watcher;
}

/**
 * Closes a watcher and the timers it would leave behind. A directory re-read holds a 1 s throttle
 * that only the read's end clears; close() destroys a read in flight and forgets the throttle
 * without clearing its timer, which is not unref'd even with `persistent: false`. A boot that saw
 * its device appear while chokidar was re-reading the by-id folder then kept its process alive
 * for up to a second after its result (about half of the phase 1 runs, 0.55-0.7 s).
 */
export function closeWatcher(watcher: FSWatcher): Promise<void> {
  for (const throttles of watcher._throttled.values()) {
    for (const throttle of throttles.values()) (throttle as { clear?: () => unknown }).clear?.();
  }
  return watcher.close();
}

async function nearestExistingDir(dir: string): Promise<string> {
  for (let current = resolve(dir); ; current = dirname(current)) {
    try {
      if ((await stat(current)).isDirectory()) return current;
    } catch {
      // Not there (yet): look one level up.
    }
    if (dirname(current) === current) return current;
  }
}

function refused(error: DeviceIdentityError): LinkState {
  return { kind: "refused", error };
}

function isCode(error: unknown, ...codes: string[]): boolean {
  return codes.includes((error as NodeJS.ErrnoException | undefined)?.code ?? "");
}
