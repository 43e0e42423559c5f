/**
 * A state folder that takes no write (full, read-only) is said once per run: the first write that
 * meets it logs the warning, and every later failed write into the same folder by any part of the
 * same run (the boot, its pre-warm, the status records: they share the run's logger) is a detail
 * (debug). One clear line, not one per file the agent keeps there.
 */
import type { Fields, Logger } from "./log.ts";

/** The folders each run (by its logger) has already said it cannot write. */
const said = new WeakMap<Logger, Set<string>>();

/** Logs a failed write into `stateDir`: a warning the first time in this run, debug after. */
export function stateFolderRefused(log: Logger, stateDir: string, event: string, line: string, fields?: Fields): void {
  const folders = said.get(log) ?? new Set<string>();
  said.set(log, folders);
  if (folders.has(stateDir)) return log.debug(event, line, fields);
  folders.add(stateDir);
  log.warning(event, line, fields);
}
