import t from "tap";
import { createMemoryLogger, formatLine } from "../src/log.ts";

t.test("formatLine prefixes the journald priority and keeps one event on one line", async (t) => {
  t.equal(formatLine("error", "boot", "no volume", { volume: "vol-1" }), "<3>boot: no volume volume=vol-1");
  t.equal(formatLine("info", "x", "a\nb", { why: "two words" }), '<6>x: a\\nb why="two words"');
});

t.test("minLevel drops verbose events", async (t) => {
  const log = createMemoryLogger("info");
  log.debug("d", "hidden");
  log.warning("w", "shown");
  t.same(log.lines, ["<4>w: shown"]);
});
