/**
 * Opening a lab root the safe way: reap what crashed labs left behind, create a fresh root owned
 * by this process, and put a janitor on watch so the root is reaped even if this process dies.
 */
import type { Logger } from "../../log.ts";
import { reapLab, reapStaleLabs, type ReapReport } from "./cleanup.ts";
import { startJanitor, type StartJanitorOptions } from "./janitor.ts";
import { createLabRoot, labBase } from "./labdir.ts";

/** An open lab root. */
export interface LabRoot {
  root: string;
  /** The janitor's pid (0 when started without one). */
  janitorPid: number;
  /**
   * Reaps the root (processes, mounts, loop devices, folder) and dismisses the janitor. If the
   * reap fails, the janitor stays on watch and tries again when this process exits.
   */
  close(): Promise<ReapReport>;
}

/** Options for openLabRoot. */
export interface OpenLabRootOptions {
  /** Base folder (default: labBase(), i.e. EBS_CACHE_LAB_BASE or /var/tmp/ebs-cache-lab). */
  base?: string;
  /** Readable part of the root's folder name. */
  name?: string;
  log?: Logger;
  /** false: no janitor (the caller takes care of crashes); or options for it. */
  janitor?: false | StartJanitorOptions;
}

/** Reaps stale labs under the base, creates a new root owned by this process, starts its janitor. */
export async function openLabRoot(options: OpenLabRootOptions = {}): Promise<LabRoot> {
  const { log } = options;
  const base = options.base ?? labBase();
  await reapStaleLabs(base, { log });
  const root = await createLabRoot(base, options.name);
  let janitor;
  try {
    janitor = options.janitor === false ? undefined : await startJanitor(root, options.janitor ?? {});
  } catch (error) {
    await reapLab(root, { log });
    throw error;
  }
  log?.info("lab.root", "lab root opened", { root, janitor: janitor?.pid });
  let closing: Promise<ReapReport> | undefined;
  return {
    root,
    janitorPid: janitor?.pid ?? 0,
    close: () => {
      closing ??= (async () => {
        // The janitor names the root on its command line: spare it, it stays on watch until released.
        const report = await reapLab(root, { log, spare: janitor ? [janitor.pid] : [] });
        await janitor?.release();
        return report;
      })().catch((error: unknown) => {
        closing = undefined; // Let a later close() try again.
        throw error;
      });
      return closing;
    },
  };
}
