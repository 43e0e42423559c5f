/**
 * The one line of a terminal that a long task's progress rewrites in place (`\r`, erase to the
 * end of the line), below the log lines. Only a terminal gets it: a journal or a pipe never sees
 * a control character. A log line written while it shows first erases it, so the two never mix.
 */

/** Where the line is drawn: the stderr of a process whose stderr is a terminal. */
export interface TerminalLine {
  /** Draws `text` in place of the line shown. */
  show(text: string): void;
  /** Erases the line shown (before a log line is written, or once the task is over). */
  clear(): void;
}

let shown: TerminalLine | undefined;

/** The progress line of stderr when stderr is a terminal (`isTTY`), else undefined. */
export function stderrLine(stream: NodeJS.WriteStream = process.stderr): TerminalLine | undefined {
  if (!stream.isTTY) return undefined;
  let drawn = false;
  const line: TerminalLine = {
    show(text) {
      // Cut to the terminal's width: a wrapped line would not be rewritten in place.
      const width = stream.columns > 1 ? stream.columns - 1 : 79;
      stream.write(`\r\x1b[K${text.length > width ? text.slice(0, width) : text}`);
      drawn = true;
      shown = line;
    },
    clear() {
      if (drawn) stream.write("\r\x1b[K");
      drawn = false;
      if (shown === line) shown = undefined;
    },
  };
  return line;
}

/** Erases the progress line if one shows: the default logger calls it before each line it writes. */
export function clearTerminalLine(): void {
  shown?.clear();
}
