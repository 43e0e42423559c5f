/**
 * dockerd creates the legacy plugin-discovery folder /run/docker/plugins (and /run/docker) on
 * the machine whatever its --exec-root: a private dockerd (the snapshot build's, the lab's) that
 * found them missing removes them again once stopped, so it leaves nothing under the machine's
 * /run/docker; folders that were there before are not its own and stay.
 */
import { existsSync } from "node:fs";
import { rmdir } from "node:fs/promises";
import { dirname } from "node:path";

export const PLUGIN_DISCOVERY_DIR = "/run/docker/plugins";

/** The folders of `dir`'s path a dockerd about to start would create: those missing now, outermost first. */
export function missingFolders(dir: string = PLUGIN_DISCOVERY_DIR): string[] {
  const missing: string[] = [];
  for (let at = dir; !existsSync(at) && at !== dirname(at); at = dirname(at)) missing.unshift(at);
  return missing;
}

/**
 * Removes `folders` (from missingFolders), innermost first, each only when empty: one another
 * dockerd has put a plugin socket in since is left, and so are the folders around it.
 */
export async function removeCreatedFolders(folders: readonly string[]): Promise<void> {
  for (const folder of [...folders].reverse()) {
    const removed = await rmdir(folder).then(
      () => true,
      (error: NodeJS.ErrnoException) => error.code === "ENOENT",
    );
    if (!removed) return;
  }
}
