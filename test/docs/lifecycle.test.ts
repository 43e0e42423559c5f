/** The release's docs stay true to the command: every exit code `release --help` lists is in docs/release.md. */
import t from "tap";
import { readFile } from "node:fs/promises";
import { run } from "../../src/exec.ts";
import { RELEASE_ENTRY } from "../fixtures/lab/lifecycle-lab.ts";

t.test("every release exit code in --help is documented in docs/release.md", async (t) => {
  const help = await run(process.execPath, [RELEASE_ENTRY, "release", "--help"]);
  const doc = await readFile("docs/release.md", "utf8");
  const codes = [...help.stdout.matchAll(/(\d) (released|refused|usage|invalid)/g)].map((m) => m[1]);
  t.same(codes, ["0", "1", "2", "3"], "--help lists the exit codes");
  for (const code of codes) t.match(doc, new RegExp(`\\| ${code} \\|`), `exit code ${code} in docs/release.md`);
  t.match(help.stdout, /--dry-run/);
  t.match(help.stdout, /--json/);
});
