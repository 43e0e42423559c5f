/**
 * Which disk failure an error is, told by its class and not by one message: a filesystem with no
 * room left (ENOSPC, or EDQUOT: a quota reached, the same state for the writer) or one that takes
 * no write at all (EROFS). Node's errors carry the errno name in `code`; a child process (docker,
 * mkdir, the xfs tools) prints strerror's words on its stderr ("No space left on device", "Disk
 * quota exceeded", "Read-only file system"), which reach the agent in a message or a
 * CommandError's `stderr`. The cause chain is followed (and an AggregateError's errors). Pure.
 */

/** `no-space`: ENOSPC / EDQUOT. `read-only`: EROFS. */
export type DiskErrorKind = "no-space" | "read-only";

const BY_CODE: Readonly<Record<string, DiskErrorKind>> = {
  ENOSPC: "no-space",
  EDQUOT: "no-space",
  EROFS: "read-only",
};

/** strerror(3)'s words for those errnos, as programs print them. */
const BY_WORDS: readonly (readonly [RegExp, DiskErrorKind])[] = [
  [/\bno space left on device\b/i, "no-space"],
  [/\bdisk quota exceeded\b/i, "no-space"],
  [/\bread-only file ?system\b/i, "read-only"],
];

/** The first disk failure found in the error or its causes; undefined when it is none of them. */
export function diskErrorKind(error: unknown): DiskErrorKind | undefined {
  const seen = new Set<unknown>();
  const queue: unknown[] = [error];
  // Bounded: a cause chain is short, and a cycle must not hang the boot's failure path.
  while (queue.length > 0 && seen.size < 32) {
    const current = queue.shift();
    if (current === undefined || current === null || seen.has(current)) continue;
    seen.add(current);
    if (typeof current === "string") {
      const kind = kindOfText(current);
      if (kind) return kind;
      continue;
    }
    if (typeof current !== "object") continue;
    const fields = current as { code?: unknown; message?: unknown; stderr?: unknown; cause?: unknown };
    if (typeof fields.code === "string" && BY_CODE[fields.code]) return BY_CODE[fields.code];
    for (const text of [fields.message, fields.stderr]) {
      const kind = typeof text === "string" ? kindOfText(text) : undefined;
      if (kind) return kind;
    }
    queue.push(fields.cause);
    if (current instanceof AggregateError) queue.push(...(current.errors as unknown[]));
  }
  return undefined;
}

function kindOfText(text: string): DiskErrorKind | undefined {
  return BY_WORDS.find(([words]) => words.test(text))?.[1];
}

/** In words, for a log line or a label: `no space left` / `read-only filesystem`. */
export function describeDiskError(kind: DiskErrorKind): string {
  return kind === "no-space" ? "no space left" : "read-only filesystem";
}
