/**
 * systeminformation costs 50-80 ms to load: in the agent's build it must sit in a chunk that
 * only a dynamic import reaches, so that `boot` (before docker.service) loads it only when the
 * recorder asks for the host facts after a boot came up, and `release`, `gc`, `prewarm` never.
 * Read from esbuild's metafile of a build into a temp folder: the chunks each command's module
 * loads statically (at its start) must not hold it.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { buildAgent } from "../../scripts/build.mjs";

const root = new URL("../..", import.meta.url).pathname;
const dir = await mkdtemp(join(tmpdir(), "bundle-metrics-"));
t.teardown(() => rm(dir, { recursive: true, force: true }));
const meta = await buildAgent(dir, root);
const outputs = meta.outputs;

/** The output files a module's chunk loads before it runs: itself and its static imports, transitively. */
function staticClosure(output: string): Set<string> {
  const seen = new Set<string>();
  const visit = (path: string) => {
    if (seen.has(path)) return;
    seen.add(path);
    for (const imported of outputs[path]?.imports ?? []) if (imported.kind === "import-statement") visit(imported.path);
  };
  visit(output);
  return seen;
}

const holding = (module: (path: string) => boolean) =>
  Object.entries(outputs)
    .filter(([, o]) => Object.keys(o.inputs).some(module))
    .map(([path]) => path);
const siChunks = holding((path) => path.includes("node_modules/systeminformation/"));

t.ok(siChunks.length > 0, `systeminformation is in the build (${siChunks.join(", ")})`);
for (const command of ["boot", "release", "gc", "prewarm", "status"]) {
  const chunks = holding((path) => path === `src/cli/${command}.ts`);
  t.equal(chunks.length, 1, `src/cli/${command}.ts is in one chunk`);
  const loaded = staticClosure(chunks[0]!);
  t.same(
    siChunks.filter((chunk) => loaded.has(chunk)),
    [],
    `${command} does not load systeminformation when it starts`,
  );
}
const entry = Object.keys(outputs).find((path) => path.endsWith("ebs-cache-agent.mjs"))!;
t.notOk(
  siChunks.some((chunk) => staticClosure(entry).has(chunk)),
  "nor does the entry",
);

// The bundle loads a CommonJS package differently from Node: its facts must still read the host.
const factsChunk = Object.entries(outputs).find(([, o]) => Object.keys(o.inputs).includes("src/host/facts.ts"))?.[0];
t.ok(factsChunk, "src/host/facts.ts is in the build");
const facts = (await import(join(root, factsChunk!))) as Record<string, unknown>;
const readHostContext = Object.values(facts).find(
  (f): f is (sysfsRoot: string) => Promise<{ cpuCores?: number; memoryBytes?: number }> =>
    typeof f === "function" && f.name === "readHostContext",
);
t.ok(readHostContext, "the chunk exports readHostContext");
// In a subtest: awaited at the top level, the call outlived tap's automatic end of the file.
t.test("the bundled facts read the host", async (t) => {
  // A sysfs root with nothing in it: the host's own disks are not looked at.
  const host = await readHostContext!(join(root, "no-sysfs"));
  t.ok((host.cpuCores ?? 0) > 0 && (host.memoryBytes ?? 0) > 0, `through systeminformation (${JSON.stringify(host)})`);
});
