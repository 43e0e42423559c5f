/**
 * The arrows between layers: the adapters (src/aws, src/docker, src/host) and the config
 * (src/config) depend on no use case. From src/agent they may import only src/agent/ports.ts, and
 * only types: the ports are the contract they implement, never code to run.
 */
import { readdir, readFile } from "node:fs/promises";
import { dirname, join, relative, resolve } from "node:path";
import t from "tap";
import ts from "typescript";

const SRC = join(import.meta.dirname, "..", "src");
const LOWER_LAYERS = ["config", "aws", "docker", "host"];

interface Import {
  from: string;
  /** The imported module, relative to src/. */
  target: string;
  typeOnly: boolean;
}

async function importsOf(folder: string): Promise<Import[]> {
  const found: Import[] = [];
  for (const entry of await readdir(join(SRC, folder), { recursive: true })) {
    if (!entry.endsWith(".ts")) continue;
    const path = join(SRC, folder, entry);
    const source = ts.createSourceFile(path, await readFile(path, "utf8"), ts.ScriptTarget.Latest, true);
    const from = relative(SRC, path);
    const add = (specifier: ts.Expression | undefined, typeOnly: boolean) => {
      if (!specifier || !ts.isStringLiteral(specifier) || !specifier.text.startsWith(".")) return;
      found.push({ from, target: relative(SRC, resolve(dirname(path), specifier.text)), typeOnly });
    };
    for (const statement of source.statements) {
      if (ts.isImportDeclaration(statement)) {
        const clause = statement.importClause;
        const typeOnly =
          clause !== undefined &&
          (clause.isTypeOnly ||
            (clause.name === undefined &&
              clause.namedBindings !== undefined &&
              ts.isNamedImports(clause.namedBindings) &&
              clause.namedBindings.elements.every((e) => e.isTypeOnly)));
        add(statement.moduleSpecifier, typeOnly);
      } else if (ts.isExportDeclaration(statement)) {
        add(statement.moduleSpecifier, statement.isTypeOnly);
      }
    }
    // import("…") at run time counts as much as a static import.
    const visit = (node: ts.Node): void => {
      if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword)
        add(node.arguments[0], false);
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return found;
}

for (const layer of LOWER_LAYERS) {
  t.test(`src/${layer} imports from src/agent only the types of ports.ts`, async (t) => {
    const imports = await importsOf(layer);
    t.ok(imports.length > 0, `the scan reads src/${layer}'s imports`);
    const intoAgent = imports.filter((i) => i.target.startsWith("agent/"));
    t.same(
      intoAgent
        .filter((i) => i.target !== "agent/ports.ts" || !i.typeOnly)
        .map((i) => `${i.from} -> ${i.target}${i.typeOnly ? " (types)" : ""}`),
      [],
    );
  });
}

t.test("src/config depends on nothing in src/agent, not even its ports", async (t) => {
  t.same(
    (await importsOf("config")).filter((i) => i.target.startsWith("agent/")).map((i) => `${i.from} -> ${i.target}`),
    [],
  );
});

t.test("the scan sees imports into src/agent where there are some", async (t) => {
  // src/metrics turns use-case results into figures, so it reads their types: the scan must see that.
  const metrics = await importsOf("metrics");
  t.ok(
    metrics.some((i) => i.target === "agent/gc/apply.ts" && i.typeOnly),
    "a type import of a use case",
  );
  const host = await importsOf("host");
  t.ok(
    host.some((i) => i.target === "agent/ports.ts" && i.typeOnly),
    "src/host implements ports",
  );
});
