/**
 * An engine machine's journal, read from the host through its persistent journal files (readable
 * while the machine runs): what the nspawn boot test asserts on and what the engine demo waits for.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { run } from "../../exec.ts";

/** One journal entry (journalctl -o json): the fields used here. */
export interface JournalEntry {
  seq: number;
  realtimeUs: number;
  /** `_BOOT_ID`: which boot of the machine wrote it (a reboot starts another). */
  bootId?: string;
  message: string;
  unit?: string;
  systemdUnit?: string;
  identifier?: string;
  messageId?: string;
  jobType?: string;
  jobResult?: string;
  exitCode?: string;
  exitStatus?: string;
  priority?: number;
}

/** systemd's catalog message ids (sd-messages.h). */
export const MessageId = {
  unitStarting: "7d4958e842da4a758f6c1cdc7b36dcc5",
  unitStarted: "39f53479d3a045ac8e11786248231fbf",
  unitFailed: "be02cf6855d2428ba40df7e9d022f03d",
  unitStopping: "de5b426a63be47a7b6ac3eaac82e2f6f",
  unitStopped: "9d1aaa27d60140bd96365438aad20286",
  processExit: "98e322203f7a4ed290d09fe03c09fe15",
} as const;

function field(raw: Record<string, unknown>, key: string): string | undefined {
  const value = raw[key];
  if (typeof value === "string") return value;
  if (Array.isArray(value) && value.every((b) => typeof b === "number"))
    return Buffer.from(value as number[]).toString("utf8");
  return undefined;
}

/** Reads the machine's persistent journal from the host (it is readable while the machine runs). */
export async function readJournal(dir: string): Promise<JournalEntry[]> {
  const journalDir = join(dir, "var/log/journal");
  if (!existsSync(journalDir)) return [];
  const out = await run("journalctl", ["-D", journalDir, "-o", "json", "--no-pager"], {
    check: false,
    timeoutMs: 60_000,
  });
  const entries: JournalEntry[] = [];
  // journalctl prints entries in order. The sequence number is read from the cursor
  // (`…;i=<hex>;…`): systemd 252 has no __SEQNUM field in its JSON output.
  let index = 0;
  for (const line of out.stdout.split("\n")) {
    if (!line.startsWith("{")) continue;
    let raw: Record<string, unknown>;
    try {
      raw = JSON.parse(line) as Record<string, unknown>;
    } catch {
      continue;
    }
    const priority = field(raw, "PRIORITY");
    const cursorSeq = /(?:^|;)i=([0-9a-f]+)(?:;|$)/.exec(field(raw, "__CURSOR") ?? "")?.[1];
    index++;
    entries.push({
      seq: cursorSeq === undefined ? index : parseInt(cursorSeq, 16),
      realtimeUs: Number(field(raw, "__REALTIME_TIMESTAMP") ?? 0),
      ...(field(raw, "_BOOT_ID") !== undefined ? { bootId: field(raw, "_BOOT_ID") } : {}),
      message: field(raw, "MESSAGE") ?? "",
      unit: field(raw, "UNIT"),
      systemdUnit: field(raw, "_SYSTEMD_UNIT"),
      identifier: field(raw, "SYSLOG_IDENTIFIER"),
      messageId: field(raw, "MESSAGE_ID"),
      jobType: field(raw, "JOB_TYPE"),
      jobResult: field(raw, "JOB_RESULT"),
      exitCode: field(raw, "EXIT_CODE"),
      exitStatus: field(raw, "EXIT_STATUS"),
      priority: priority === undefined ? undefined : Number(priority),
    });
  }
  return entries.sort((a, b) => a.seq - b.seq);
}

/** The journal as text, one `unit/identifier: message` line per entry, for failure output. */
export function journalText(entries: JournalEntry[], filter: (e: JournalEntry) => boolean = () => true): string {
  return entries
    .filter(filter)
    .map(
      (e) =>
        `${new Date(e.realtimeUs / 1000).toISOString().slice(11, 23)} ` +
        `${e.identifier ?? "?"}${e.systemdUnit ? `[${e.systemdUnit}]` : ""}: ${e.message}`,
    )
    .join("\n");
}
