/**
 * The production build: the agent's entry and its chunks run with plain `node`, away from
 * node_modules (no tsx, no devDependencies at run time), and carry no lab code; the lab is a
 * bundle of its own.
 */
import t from "tap";
import { cp, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { run } from "../../src/exec.ts";

interface Metafile {
  inputs: Record<string, unknown>;
  outputs: Record<string, { inputs: Record<string, unknown> }>;
}

await run(process.execPath, ["scripts/build.mjs"]);
const dir = await mkdtemp(join(tmpdir(), "ebs-cache-bundle-"));
t.teardown(() => rm(dir, { recursive: true, force: true }));
// What scripts/install.sh installs: the entry and its chunks folder, nothing else.
await cp("dist/ebs-cache-agent.mjs", join(dir, "ebs-cache-agent.mjs"));
await cp("dist/chunks", join(dir, "chunks"), { recursive: true });
const bundle = join(dir, "ebs-cache-agent.mjs");
const agentFiles = [bundle, ...(await readdir(join(dir, "chunks"))).map((name) => join(dir, "chunks", name))];

// Strings only the lab has: the janitor's handshake, the FUSE helper, the emulator's credentials
// and entry point, the loop devices.
const LAB_STRINGS = ["janitor-ready", "cold-fuse", "AKIALABLABLABLABLAB0", "startEc2Emulator", "startImdsEmulator"];

t.test("the agent's build carries no lab code", async (t) => {
  const meta = JSON.parse(await readFile("dist/meta/agent.json", "utf8")) as Metafile;
  const modules = Object.values(meta.outputs).flatMap((output) => Object.keys(output.inputs));
  t.ok(
    modules.some((path) => path.startsWith("src/agent/")),
    "the metafile lists the agent's modules",
  );
  t.same(
    modules.filter((path) => path.includes("src/lab/")),
    [],
    "no src/lab/ module in any output",
  );
  const agentText = (await Promise.all(agentFiles.map((file) => readFile(file, "utf8")))).join("\n");
  const labText = await readFile("dist/ebs-cache-lab.mjs", "utf8");
  for (const text of LAB_STRINGS) {
    t.ok(labText.includes(text), `the lab bundle has "${text}"`);
    t.notOk(agentText.includes(text), `the agent's files do not have "${text}"`);
  }
  // The project's package.json is bundled for the version alone (scripts/build.mjs): not its scripts,
  // its test runner's settings or its dev dependencies (a dependency's own package.json is its own).
  for (const text of ["tsx src/lab/main.ts", "!@tapjs/typescript", "@cloud-copilot/iam-simulate"])
    t.notOk(agentText.includes(text), `the agent's files do not have package.json's "${text}"`);
});

t.test("the bundle runs on its own", async (t) => {
  const top = await run(process.execPath, [bundle, "--help"], { cwd: dir });
  for (const command of ["boot", "release", "prewarm", "status", "gc", "prune", "pool"])
    t.match(top.stdout, new RegExp(`^  ${command}\\b`, "m"), `--help lists ${command}`);
  t.notMatch(top.stdout, /\blab\b/, "and no lab command");

  const help = await run(process.execPath, [bundle, "boot", "--help"], { cwd: dir });
  t.match(help.stdout, /--dry-run/, "boot --help answers from the bundle alone");
  const viaHelp = await run(process.execPath, [bundle, "help", "pool"], { cwd: dir });
  t.match(viaHelp.stdout, /--json/, "help pool loads pool's options too");

  const unknown = await run(process.execPath, [bundle, "lab"], { cwd: dir, check: false });
  t.equal(unknown.exitCode, 2, "lab is not a command of the agent (usage error)");

  const config = join(dir, "config.json");
  await writeFile(config, JSON.stringify({ pool: "bad;pool", timeouts: { deviceSeconds: 0 } }));
  const bad = await run(process.execPath, [bundle, "boot", "--config", config], { cwd: dir, check: false });
  t.equal(bad.exitCode, 3, "invalid configuration exits 3");
  t.match(bad.stderr, /^<3>/m, "with a journald error line");
  t.match(bad.stderr, /pool/);
  t.match(bad.stderr, /timeouts\.deviceSeconds/, "every problem is reported at once");
});

t.test("Node's compile cache: filled where it can be written, harmless where it cannot", async (t) => {
  const cache = join(dir, "compile-cache");
  const warm = await run(process.execPath, [bundle, "boot", "--help"], {
    cwd: dir,
    env: { NODE_COMPILE_CACHE: cache },
  });
  t.match(warm.stdout, /--dry-run/);
  const entries = await readdir(cache, { recursive: true });
  t.ok(entries.length > 1, `the cache holds the compiled chunks (${entries.length} entries)`);

  // A cache folder that cannot be created (its parent is a file): as a read-only /var/cache.
  const blocked = join(dir, "config.json", "compile-cache");
  const ro = await run(process.execPath, [bundle, "boot", "--help"], {
    cwd: dir,
    env: { NODE_COMPILE_CACHE: blocked },
  });
  t.match(ro.stdout, /--dry-run/, "the command still answers");
  t.equal(ro.stderr, "", "and says nothing about the cache");
});

t.test("the lab runs from its own bundle", async (t) => {
  const help = await run(process.execPath, ["dist/ebs-cache-lab.mjs", "--help"]);
  t.match(help.stdout, /--pool-size/);
  t.match(help.stdout, /ebs-cache-lab/);
});
