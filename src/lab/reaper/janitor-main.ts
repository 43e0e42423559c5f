/**
 * Entry of the janitor process when run from sources (`node janitor-main.ts <root>`);
 * a bundled lab routes `janitor <root>` (src/lab/main.ts) to the same runJanitor(). See janitor.ts.
 */
import { createLogger } from "../../log.ts";
import { runJanitor } from "./janitor.ts";

const root = process.argv[2];
if (!root) {
  process.stderr.write("usage: janitor-main.ts <lab root>\n");
  process.exit(2);
}
// Once the owner is gone, stdout may be a closed pipe: a late write must not crash the reap.
process.stdout.on("error", () => undefined);
process.stderr.on("error", () => undefined);
const outcome = await runJanitor(root, { log: createLogger(undefined, "debug") });
// Exit explicitly: a pipe inherited elsewhere could otherwise keep this process waiting.
process.exit(outcome === "failed" ? 1 : 0);
