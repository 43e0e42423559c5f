/**
 * The arrows between layers (docs/architecture.md, "Layers"): the adapters (src/aws, src/docker,
 * src/host) and the config (src/config) depend on no use case. From src/agent they may import only
 * src/agent/ports.ts, and only types: the ports are the contract they implement, never code to
 * run. Every import of src/ is held against the table of allowed arrows, directly and through
 * the modules it imports; import cycles are dpdm's to find (`npm run cycles`).
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
    metrics.some((i) => i.target === "agent/gc/plan.ts" && i.typeOnly),
    "a type import of a use case",
  );
  const host = await importsOf("host");
  t.ok(
    host.some((i) => i.target === "agent/ports.ts" && i.typeOnly),
    "src/host implements ports",
  );
});

/**
 * The layers, lowest first. A module's layer is its folder's; the modules directly in src/ are the
 * base (names, validators, errors, log, exec, atomic writes), src/cli.ts is the command line's.
 */
const LAYERS = ["base", "config", "ports", "adapter", "agent", "report", "cli", "lab"] as const;
type Layer = (typeof LAYERS)[number];

function layerOf(module: string): Layer {
  if (module === "cli.ts" || module.startsWith("cli/")) return "cli";
  if (module === "agent/ports.ts") return "ports";
  const top = module.split("/")[0];
  if (top === "agent") return "agent";
  if (top === "lab") return "lab";
  if (top === "config") return "config";
  if (top === "aws" || top === "host" || top === "docker") return "adapter";
  if (top === "metrics" || top === "status") return "report";
  return "base";
}

/**
 * Which layers a module may import from, besides its own. The adapters import the ports for
 * their types only (checked above); the use cases read the adapters' pure helpers and error
 * classes and never construct one (the wiring in src/cli does); src/metrics and src/status read
 * the use cases' result types; only the lab imports the command line's wiring.
 */
const ALLOWED: Record<Layer, readonly Layer[]> = {
  base: [],
  config: ["base"],
  ports: ["base"],
  adapter: ["ports", "base"],
  agent: ["ports", "adapter", "config", "base"],
  report: ["agent", "ports", "adapter", "base"],
  cli: ["report", "agent", "ports", "adapter", "config", "base"],
  lab: ["cli", "report", "agent", "ports", "adapter", "config", "base"],
};

/** Every relative import of every module of src/ (type imports too), by importing module. */
async function importGraph(): Promise<Map<string, Import[]>> {
  const graph = new Map<string, Import[]>();
  for (const entry of await readdir(SRC, { withFileTypes: true })) {
    if (entry.isDirectory()) {
      for (const i of await importsOf(entry.name)) graph.set(i.from, [...(graph.get(i.from) ?? []), i]);
      continue;
    }
    if (!entry.name.endsWith(".ts")) continue;
    graph.set(entry.name, graph.get(entry.name) ?? []);
  }
  // The base modules directly in src/ (importsOf reads a folder's tree).
  for (const i of await importsOfTop()) graph.set(i.from, [...(graph.get(i.from) ?? []), i]);
  for (const imports of graph.values())
    for (const { target } of imports) if (target.endsWith(".ts") && !graph.has(target)) graph.set(target, []);
  return graph;
}

/** The imports of the modules directly in src/ (cli.ts and the base). */
async function importsOfTop(): Promise<Import[]> {
  const all = await importsOf(".");
  return all.filter((i) => !i.from.includes("/"));
}

/** Every module `from` reaches through imports, with the first path found to each. */
function reach(graph: Map<string, Import[]>, from: string): Map<string, string[]> {
  const paths = new Map<string, string[]>([[from, [from]]]);
  const queue = [from];
  while (queue.length > 0) {
    const module = queue.shift()!;
    for (const { target } of graph.get(module) ?? []) {
      if (paths.has(target) || !target.endsWith(".ts")) continue;
      paths.set(target, [...paths.get(module)!, target]);
      queue.push(target);
    }
  }
  paths.delete(from);
  return paths;
}

t.test("no two layers may import each other: every allowed arrow points down", async (t) => {
  t.same([...reachable("config")].sort(), ["base", "config"], "the config reaches the base only");
  t.notOk(reachable("agent").has("cli"), "a use case never reaches the command line");
  for (const [layer, allowed] of Object.entries(ALLOWED) as [Layer, readonly Layer[]][]) {
    for (const lower of allowed) {
      t.notOk(ALLOWED[lower].includes(layer), `${layer} -> ${lower}, so never ${lower} -> ${layer}`);
      t.ok(LAYERS.indexOf(lower) < LAYERS.indexOf(layer), `${lower} sits below ${layer}`);
    }
  }
});

t.test("every import of src/ follows an allowed arrow, and none goes back up", async (t) => {
  const graph = await importGraph();
  t.ok(graph.size > 150, `the scan reads every module of src/ (${graph.size})`);
  const wrong: string[] = [];
  for (const [from, imports] of graph) {
    const layer = layerOf(from);
    for (const { target } of imports) {
      if (!target.endsWith(".ts")) continue; // package.json, read for the version
      const to = layerOf(target);
      if (to !== layer && !ALLOWED[layer].includes(to)) wrong.push(`${from} (${layer}) -> ${target} (${to})`);
    }
  }
  t.same(wrong, []);
});

/** The layers a layer may reach through its imports: the allowed arrows, followed. */
function reachable(layer: Layer): Set<Layer> {
  const found = new Set<Layer>([layer]);
  const queue: Layer[] = [layer];
  while (queue.length > 0)
    for (const lower of ALLOWED[queue.shift()!])
      if (!found.has(lower)) {
        found.add(lower);
        queue.push(lower);
      }
  return found;
}

t.test("no module reaches a forbidden layer through an allowed one", async (t) => {
  const graph = await importGraph();
  const wrong: string[] = [];
  for (const from of graph.keys()) {
    const layer = layerOf(from);
    const may = reachable(layer);
    for (const [target, path] of reach(graph, from)) {
      const to = layerOf(target);
      if (!may.has(to)) wrong.push(`${path.join(" -> ")} (${layer} reaches ${to})`);
    }
  }
  t.same(wrong, []);
  // The check sees what it must: src/config reaches the base through its imports, and no further.
  const config = [...reach(graph, "config/validate.ts").keys()];
  t.ok(config.includes("label-prefix.ts"), "config/validate.ts reaches the label prefix's rules");
  t.notOk(
    config.some((m) => layerOf(m) !== "config" && layerOf(m) !== "base"),
    "and nothing above the base",
  );
  const ports = [...reach(graph, "agent/ports.ts").keys()];
  t.notOk(
    ports.some((m) => layerOf(m) !== "base"),
    `the ports reach only the base (${ports.join(", ")})`,
  );
});

t.test("the composition root is the command line's: nothing below it imports src/cli", async (t) => {
  const graph = await importGraph();
  t.ok(graph.has("cli/wiring.ts"), "src/cli/wiring.ts is scanned");
  const importers = [...graph].flatMap(([from, imports]) =>
    imports.filter((i) => layerOf(i.target) === "cli" && layerOf(from) !== "cli").map(() => from),
  );
  t.same(
    [...new Set(importers)].filter((from) => layerOf(from) !== "lab"),
    [],
    "only the lab (which runs the agent on its hosts) imports it",
  );
});

t.test("the wiring builds adapters only: src/cli/wiring.ts takes nothing from src/agent but types", async (t) => {
  const graph = await importGraph();
  const intoAgent = (graph.get("cli/wiring.ts") ?? []).filter((i) => layerOf(i.target) === "agent");
  t.ok(
    intoAgent.some((i) => i.target === "agent/adapters.ts"),
    "the scan sees the wiring's imports (HostAdapters, the port it returns)",
  );
  t.same(
    intoAgent.filter((i) => !i.typeOnly).map((i) => i.target),
    [],
    "no agent code in the wiring",
  );
});

t.test("the command line takes from src/agent, besides types, only a use case's entry", async (t) => {
  const graph = await importGraph();
  // A use case's entry is its run.ts. More are entries of their own: the volume build's build.ts
  // (snapshot/run.ts is the upload's), and the compositions from the host of the use cases that
  // compose themselves that way (doctor/wire.ts, acceptance/wire.ts).
  const entry = (module: string) =>
    /^agent\/[a-z-]+\/run\.ts$/.test(module) ||
    module === "agent/snapshot/build.ts" ||
    module === "agent/doctor/wire.ts" ||
    module === "agent/acceptance/wire.ts";
  const intoAgent = [...graph]
    .filter(([from]) => layerOf(from) === "cli")
    .flatMap(([from, imports]) =>
      imports.filter((i) => layerOf(i.target) === "agent" && !i.typeOnly).map((i) => `${from} -> ${i.target}`),
    );
  t.ok(intoAgent.includes("cli/pool.ts -> agent/pool/run.ts"), "the scan sees the command line's imports");
  t.same(
    intoAgent.filter((line) => !entry(line.split(" -> ")[1]!)),
    [],
    "a command goes through its use case's entry (run.ts), never into the use case's modules",
  );
});
