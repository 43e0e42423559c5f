/** The docs stay true to the code: the config reference is generated from the schema. */
import t from "tap";
import { readFile } from "node:fs/promises";
import { run } from "../src/exec.ts";

t.test("docs/config.md is what scripts/config-reference.ts prints", async (t) => {
  const generated = await run(process.execPath, ["--import", "tsx", "scripts/config-reference.ts"]);
  const committed = await readFile("docs/config.md", "utf8");
  t.equal(
    committed.trimEnd(),
    generated.stdout.trimEnd(),
    "regenerate with: npx tsx scripts/config-reference.ts > docs/config.md",
  );
});

t.test("every boot exit code in --help is documented in docs/boot.md", async (t) => {
  const help = await run(process.execPath, ["--import", "tsx", "src/cli.ts", "boot", "--help"]);
  const doc = await readFile("docs/boot.md", "utf8");
  const codes = [...help.stdout.matchAll(/(\d) (ready|failure|usage|invalid|degraded)/g)].map((m) => m[1]);
  t.ok(codes.length >= 5, `--help lists the exit codes (${codes.join(",")})`);
  for (const code of codes) t.match(doc, new RegExp(`\\| ${code} \\|`), `exit code ${code} in docs/boot.md`);
});
