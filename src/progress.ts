/**
 * One progress line for every long task (the pre-warm's reads, an upload's scan and puts, a
 * build's steps and pulls, the keeper's wait for volumes), told alike wherever it goes:
 * `step 2 of 4, pull: 20.1 % (412 MiB of 2 GiB), 54.0 MiB/s, ETA 31s`. Formatting and pacing are
 * pure over an injected clock; the outputs are given: the journal (a log line every
 * `intervalMs`), a terminal (the line rewritten in place, only when stderr is one) and systemd
 * (`STATUS=`, paced as the journal, so `systemctl status` shows where the unit is).
 */
import type { Fields, LOG_AREAS, Logger } from "./log.ts";
import type { TerminalLine } from "./terminal-line.ts";

/** Where a task stands. Bytes, when known, give the %, the rate and the ETA; else `count` does. */
export interface ProgressFigures {
  /** Step k of n of a task made of steps (1-based), and the step's name. */
  step?: { index: number; count: number; name?: string };
  /** Bytes done of bytes in all (of the task, or of the step under way). */
  bytes?: { done: number; total: number };
  /** Things done of things in all, when no bytes are known (`volumes available`). */
  count?: { done: number; total: number; noun: string };
  /** The rate, when the task knows it better than the reporter's average (fio's own figure). */
  bytesPerSecond?: number;
  /** Seconds left, when the task knows them better than the reporter's estimate. */
  etaSeconds?: number;
  /** What the task waits on now, after the figures (`waiting for vol-0abc (eu-west-1a): creating`). */
  note?: string;
}

/** The percent done, floored to a tenth: 100.0 only once all is done. */
export function percentOf(done: number, total: number): number {
  if (total <= 0) return 100;
  return Math.floor((Math.max(0, Math.min(done, total)) * 1000) / total) / 10;
}

/** The one progress line: step, then %, amounts, rate and ETA, each part only when known. */
export function formatProgress(f: ProgressFigures): string {
  const parts: string[] = [];
  if (f.step) parts.push(`step ${f.step.index} of ${f.step.count}${f.step.name ? `, ${f.step.name}` : ""}`);
  const figures: string[] = [];
  if (f.bytes && f.bytes.total > 0) {
    const percent = percentOf(f.bytes.done, f.bytes.total).toFixed(1);
    figures.push(`${percent} % (${formatBytes(f.bytes.done)} of ${formatBytes(f.bytes.total)})`);
  } else if (f.bytes) {
    figures.push(formatBytes(f.bytes.done));
  } else if (f.count) {
    figures.push(
      `${f.count.done} of ${f.count.total} ${f.count.noun} (${percentOf(f.count.done, f.count.total).toFixed(1)} %)`,
    );
  }
  if (f.bytesPerSecond !== undefined) figures.push(`${(f.bytesPerSecond / MiB).toFixed(1)} MiB/s`);
  const done = f.bytes ?? f.count;
  if (f.etaSeconds !== undefined && !(done && done.total > 0 && done.done >= done.total))
    figures.push(`ETA ${formatDuration(f.etaSeconds)}`);
  if (figures.length > 0) parts.push(figures.join(", "));
  const line = parts.join(": ");
  return f.note ? (line ? `${line}; ${f.note}` : f.note) : line;
}

/** `1.5 GiB`, `300 MiB`, `12 KiB`. */
export function formatBytes(bytes: number): string {
  if (bytes >= GiB) return `${round(bytes / GiB)} GiB`;
  if (bytes >= MiB) return `${round(bytes / MiB)} MiB`;
  return `${Math.round(bytes / 1024)} KiB`;
}

/** `1h02m`, `3m05s`, `12s`. */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s >= 3600) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${s}s`;
}

/** A progress line's event: `<area>.progress`, one area's lines found by one grep. */
export type ProgressEvent = `${(typeof LOG_AREAS)[number]}.progress`;

/** Where a reporter tells the progress, and how often. */
export interface ProgressOutputs {
  log: Logger;
  /** The log event of the progress lines (`snapshot.progress`). */
  event: ProgressEvent;
  fields?: Fields;
  /** A clock in ms (`performance.now`): rates, ETAs and pacing; never compared with EC2's. */
  now: () => number;
  /** The journal's and systemd's pace (default 5 s): a log line at most this often, and at the end. */
  intervalMs?: number;
  /** The terminal's line (stderr a TTY): redrawn at most every `terminalMs` (default 250 ms). */
  terminal?: TerminalLine;
  terminalMs?: number;
  /** systemd's `STATUS=` (NOTIFY_SOCKET set): paced as the journal. */
  status?: (text: string) => void;
}

/** Told a task's figures as they change, says them at its pace. */
export interface ProgressReporter {
  /** The task's figures now; `done` says the last ones (always told). */
  update(figures: ProgressFigures, done?: boolean): void;
  /** The line last told (for tests and the final report). */
  readonly last: string | undefined;
}

/**
 * A reporter over `outputs`. The rate and the ETA, unless the figures bring them, are the
 * average since the first update of bytes (or things) done in this run: a resumed task's earlier
 * work counts in its %, not in its rate. A new step starts a new average.
 */
export function progressReporter(outputs: ProgressOutputs): ProgressReporter {
  const interval = outputs.intervalMs ?? 5000;
  const terminalMs = outputs.terminalMs ?? 250;
  let lastLog: number | undefined;
  let lastDraw: number | undefined;
  let base: { at: number; done: number; step: number | undefined } | undefined;
  let last: string | undefined;
  return {
    get last() {
      return last;
    },
    update(figures, done = false) {
      const at = outputs.now();
      const amount = figures.bytes ?? figures.count;
      const step = figures.step?.index;
      if (amount && (!base || base.step !== step || amount.done < base.done)) base = { at, done: amount.done, step };
      const told = { ...figures };
      if (amount && base && at > base.at && amount.done > base.done) {
        const perSecond = (amount.done - base.done) / ((at - base.at) / 1000);
        if (figures.bytes && told.bytesPerSecond === undefined) told.bytesPerSecond = perSecond;
        if (told.etaSeconds === undefined && amount.total > 0)
          told.etaSeconds = Math.ceil(Math.max(0, amount.total - amount.done) / perSecond);
      }
      const text = formatProgress(told);
      last = text;
      if (outputs.terminal && (done || lastDraw === undefined || at - lastDraw >= terminalMs)) {
        lastDraw = at;
        if (done) outputs.terminal.clear();
        else outputs.terminal.show(text);
      }
      if (done || lastLog === undefined || at - lastLog >= interval) {
        lastLog = at;
        outputs.log.info(outputs.event, text, outputs.fields);
        outputs.status?.(text);
      }
    },
  };
}

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

function round(n: number): number {
  return Math.round(n * 10) / 10;
}
