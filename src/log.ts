/**
 * Journald-friendly logging: one line per event, prefixed with the sd-daemon priority
 * (`<3>` error … `<7>` debug) so `journalctl -p warning -u ebs-cache-agent` filters correctly.
 * Lines go to stderr so stdout stays free for machine-readable output (`--json`, `--dry-run`).
 */

import { clearTerminalLine } from "./terminal-line.ts";

export type Level = "error" | "warning" | "notice" | "info" | "debug";

/**
 * The areas an event name starts with: a use case (`boot`, `release`, …) or the adapter that
 * logs (`ec2`, `imds`, `docker`, …). One style, `<area>.<event>` with hyphenated words
 * (`boot.claim`, `ec2.create-volume`), so `journalctl … | grep ' ec2\.'` finds one area's lines;
 * test/log.test.ts checks every event in src/ against it.
 */
export const LOG_AREAS = [
  "agent",
  "boot",
  "release",
  "gc",
  "prewarm",
  "pool",
  "keeper",
  "metrics",
  "status",
  "refresh",
  "prune",
  "snapshot",
  "ec2",
  "imds",
  "credentials",
  "identify",
  "labels",
  "docker",
  "host",
  "exec",
  "lab",
  "acceptance",
] as const;

const WORDS = "[a-z0-9]+(?:-[a-z0-9]+)*";
const EVENT_NAME = new RegExp(`^(${LOG_AREAS.join("|")})\\.${WORDS}$`);

/** Whether `event` follows the one event-name style (see LOG_AREAS). */
export function isEventName(event: string): boolean {
  return EVENT_NAME.test(event);
}

const PRIORITY: Record<Level, number> = { error: 3, warning: 4, notice: 5, info: 6, debug: 7 };

export type Fields = Record<string, string | number | boolean | undefined | null>;

export interface Logger {
  error(event: string, message: string, fields?: Fields): void;
  warning(event: string, message: string, fields?: Fields): void;
  notice(event: string, message: string, fields?: Fields): void;
  info(event: string, message: string, fields?: Fields): void;
  debug(event: string, message: string, fields?: Fields): void;
}

/** Renders one event as a single line; newlines inside values are escaped so one event is one line. */
export function formatLine(level: Level, event: string, message: string, fields: Fields = {}): string {
  const parts = [`<${PRIORITY[level]}>${event}: ${message}`];
  for (const [key, value] of Object.entries(fields)) {
    if (value === undefined || value === null) continue;
    const text = String(value);
    parts.push(/[\s"=]/.test(text) || text === "" ? `${key}=${JSON.stringify(text)}` : `${key}=${text}`);
  }
  return parts.join(" ").replace(/\r?\n/g, "\\n");
}

/** A logger writing to a sink (stderr by default); `minLevel` drops more verbose events. */
export function createLogger(
  sink: (line: string) => void = (line) => {
    clearTerminalLine();
    process.stderr.write(line + "\n");
  },
  minLevel: Level = "info",
): Logger {
  const emit = (level: Level) => (event: string, message: string, fields?: Fields) => {
    if (PRIORITY[level] > PRIORITY[minLevel]) return;
    sink(formatLine(level, event, message, fields));
  };
  return {
    error: emit("error"),
    warning: emit("warning"),
    notice: emit("notice"),
    info: emit("info"),
    debug: emit("debug"),
  };
}

/** A logger that keeps lines in memory: for tests and for the lab's printed timeline. */
export function createMemoryLogger(minLevel: Level = "debug"): Logger & { lines: string[] } {
  const lines: string[] = [];
  return Object.assign(
    createLogger((line) => lines.push(line), minLevel),
    { lines },
  );
}
