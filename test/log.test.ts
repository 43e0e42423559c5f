import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import t from "tap";
import ts from "typescript";
import { createMemoryLogger, formatLine, isEventName } from "../src/log.ts";

t.test("formatLine prefixes the journald priority and keeps one event on one line", async (t) => {
  t.equal(
    formatLine("error", "boot.failed", "no volume", { volume: "vol-1" }),
    "<3>boot.failed: no volume volume=vol-1",
  );
  t.equal(formatLine("info", "x", "a\nb", { why: "two words" }), '<6>x: a\\nb why="two words"');
});

t.test("minLevel drops verbose events", async (t) => {
  const log = createMemoryLogger("info");
  log.debug("d", "hidden");
  log.warning("w", "shown");
  t.same(log.lines, ["<4>w: shown"]);
});

t.test("event names follow one style: <area>.<event>, hyphenated words", async (t) => {
  for (const good of [
    "boot.claim",
    "ec2.create-volume",
    "labels.publish",
    "lab.ec2-emulator",
    "docker.daemon-json-written",
  ])
    t.ok(isEventName(good), good);
  for (const bad of [
    "ec2-claim",
    "labels",
    "gc",
    "boot.Claim",
    "boot.claim.more",
    "boot.claim_x",
    "nowhere.claim",
    "boot.",
    "boot.-x",
  ])
    t.notOk(isEventName(bad), bad);
});

t.test("every log call in src/ names its event in that style", async (t) => {
  const calls = await logCallsIn(join(import.meta.dirname, "..", "src"));
  t.ok(calls.length > 100, `found the log calls (${calls.length})`);
  for (const call of calls) {
    if (call.event === undefined) {
      // A computed name only where the entry points pass their literal names through (src/fatal.ts).
      t.ok(FORWARDING.has(call.file), `${call.where}: the event name is a string literal`);
    } else {
      t.ok(isEventName(call.event), `${call.where}: ${call.event}`);
    }
  }
});

/** Files that forward event names their callers give as literals. */
// progress.ts: its event is `<area>.progress`, the type (ProgressEvent) holds it to the style.
const FORWARDING = new Set(["fatal.ts", "state-folder.ts", "progress.ts"]);

const LEVELS = new Set(["error", "warning", "notice", "info", "debug"]);

interface LogCall {
  file: string;
  where: string;
  /** The literal event name; a template's `${…}` parts read as `x`. Undefined when not a literal. */
  event: string | undefined;
}

/** The calls `<…log>.<level>(event, message, …)` in every .ts file under `root`, parsed (not grepped). */
async function logCallsIn(root: string): Promise<LogCall[]> {
  const calls: LogCall[] = [];
  for (const entry of await readdir(root, { recursive: true })) {
    if (!entry.endsWith(".ts")) continue;
    const path = join(root, entry);
    const source = ts.createSourceFile(path, await readFile(path, "utf8"), ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node): void => {
      if (
        ts.isCallExpression(node) &&
        ts.isPropertyAccessExpression(node.expression) &&
        LEVELS.has(node.expression.name.text)
      ) {
        const receiver = node.expression.expression.getText(source).replace(/\?$/, "");
        if (/(^|\.)log$/.test(receiver) && node.arguments.length >= 2) {
          const first = node.arguments[0]!;
          const event = ts.isStringLiteralLike(first)
            ? first.text
            : ts.isTemplateExpression(first)
              ? first.head.text + first.templateSpans.map((span) => "x" + span.literal.text).join("")
              : undefined;
          const line = source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1;
          calls.push({ file: entry, where: `src/${entry}:${line}`, event });
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return calls;
}
