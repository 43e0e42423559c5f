/** The docs stay true to the code: the config reference is generated from the schema, the paths they name exist. */
import t from "tap";
import { access, readdir, readFile } from "node:fs/promises";
import { run } from "../../src/exec.ts";

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

t.test("every path docs/architecture.md names exists", async (t) => {
  const doc = await readFile("docs/architecture.md", "utf8");
  // Paths from the checkout's root; a placeholder (`<use-case>`, `&lt;name&gt;`) or a glob is a pattern, not a path.
  const named = [...doc.matchAll(/\b(?:src|test|docs|iam|config|scripts|schema|bench|systemd)\/[\w./<>&;*-]*/g)]
    .map((m) => m[0].replace(/[.:;,]+$/, ""))
    .filter((path) => !/[<>&*]/.test(path));
  t.ok(named.length > 40, `the check reads the doc's paths (${named.length})`);
  t.ok(named.includes("src/cli/wiring.ts"), "the wiring's among them");
  const missing: string[] = [];
  for (const path of new Set(named)) await access(path).catch(() => missing.push(path));
  t.same(missing, [], "renamed or removed: update docs/architecture.md");
});

t.test("every use case folder of src/agent is in docs/architecture.md's layers", async (t) => {
  const doc = await readFile("docs/architecture.md", "utf8");
  const layers = doc.slice(doc.indexOf("## Layers"), doc.indexOf("## The names of a use case"));
  // The box's left column, from `src/agent/<use-case>/` to the shared modules below it.
  const box = layers.slice(layers.indexOf("src/agent/<use-case>/"), layers.indexOf("src/agent/*.ts"));
  const named = new Set(box.split("\n").flatMap((line) => line.slice(0, 31).split(/[\s,]+/)));
  const folders = (await readdir("src/agent", { withFileTypes: true }))
    .filter((e) => e.isDirectory())
    .map((e) => e.name);
  t.ok(folders.includes("boot"), `the check reads src/agent's folders (${folders.join(", ")})`);
  t.same(
    folders.filter((folder) => !named.has(folder)),
    [],
    "a use case folder not in the layers' box: add it to docs/architecture.md",
  );
});
