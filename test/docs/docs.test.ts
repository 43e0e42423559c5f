/** The docs stay true to the code: the config reference is generated from the schema, the paths they name exist. */
import t from "tap";
import { access, readdir, readFile } from "node:fs/promises";
import { run } from "../../src/exec.ts";

t.test("docs/config.md is what scripts/config-reference.ts prints", async (t) => {
  const generated = await run(process.execPath, ["scripts/config-reference.ts"]);
  const committed = await readFile("docs/config.md", "utf8");
  t.equal(
    committed.trimEnd(),
    generated.stdout.trimEnd(),
    "regenerate with: npx tsx scripts/config-reference.ts > docs/config.md",
  );
});

t.test("every boot exit code in --help is documented in docs/boot.md", async (t) => {
  const help = await run(process.execPath, ["src/cli.ts", "boot", "--help"]);
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

/** GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

async function anchorsOf(path: string): Promise<Set<string>> {
  const text = await readFile(path, "utf8");
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  // Headings outside fenced code; a repeated heading gets -1, -2, … as on GitHub.
  let fenced = false;
  for (const line of text.split("\n")) {
    if (/^(```|~~~)/.test(line)) fenced = !fenced;
    const heading = fenced ? null : /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!heading) continue;
    const base = anchorOf(heading[1]!);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

t.test("every relative link of README.md and docs/ leads to a file, and to a heading there", async (t) => {
  const pages = ["README.md", ...(await readdir("docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];
  const broken: string[] = [];
  let links = 0;
  for (const page of pages) {
    const text = (await readFile(page, "utf8")).replace(/^(```|~~~)[\s\S]*?^\1/gm, "");
    const base = page.includes("/") ? page.slice(0, page.lastIndexOf("/") + 1) : "";
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/i.test(target!)) continue;
      links += 1;
      const [file, anchor] = target!.split("#") as [string, string | undefined];
      const path = file === "" ? page : new URL(file, `file:///${base}`).pathname.slice(1);
      if (
        !(await access(path).then(
          () => true,
          () => false,
        ))
      ) {
        broken.push(`${page}: ${target} (no ${path})`);
        continue;
      }
      if (anchor && path.endsWith(".md") && !(await anchorsOf(path)).has(anchor))
        broken.push(`${page}: ${target} (no heading #${anchor} in ${path})`);
    }
  }
  t.ok(links > 100, `the check reads the pages' links (${links})`);
  t.ok(pages.includes("docs/osparc-deploy.md"), "the deployment guide among them");
  t.same(broken, [], "a link to a file or heading that is not there");
});
