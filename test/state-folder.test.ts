/** A state folder that takes no write is said once per run (per logger), per folder. */
import t from "tap";
import { createMemoryLogger } from "../src/log.ts";
import { stateFolderRefused } from "../src/state-folder.ts";

t.test("the first failed write of a run is the warning, the rest are details", async (t) => {
  const run = createMemoryLogger("debug");
  stateFolderRefused(run, "/var/lib/a", "boot.state-folder", "first");
  stateFolderRefused(run, "/var/lib/a", "boot.record-failed", "second");
  stateFolderRefused(run, "/var/lib/b", "prewarm.state", "another folder");
  t.same(run.lines, [
    "<4>boot.state-folder: first",
    "<7>boot.record-failed: second",
    "<4>prewarm.state: another folder",
  ]);
  const next = createMemoryLogger("debug");
  stateFolderRefused(next, "/var/lib/a", "boot.state-folder", "the next run says it again");
  t.same(next.lines, ["<4>boot.state-folder: the next run says it again"]);
});
