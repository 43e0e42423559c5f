// Production build: what a host runs with plain `node` (no tsx, no node_modules). esbuild is a
// devDependency only.
//
//   dist/ebs-cache-agent.mjs   the agent's entry (src/cli.ts)
//   dist/chunks/*.mjs          the code it imports on demand, one chunk per command and the
//                              modules they share: `--help` or `pool` does not parse boot's code
//   dist/ebs-cache-lab.mjs     the lab (src/lab/main.ts), one file; never installed on a host
//   dist/meta/{agent,lab}.json esbuild's metafiles: which module went where, and its size
//
// The agent is the entry file and its chunks folder, installed together (scripts/install.sh).
// `node scripts/build.mjs --agent-only` builds only the agent.
import { build } from "esbuild";
import { realpathSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import process, { argv } from "node:process";
import { pathToFileURL } from "node:url";

// Some bundled CommonJS dependencies call require(); give every ESM output file one.
const REQUIRE_SHIM =
  "import { createRequire as __createRequire } from 'node:module';\nconst require = __createRequire(import.meta.url);";

const common = {
  bundle: true,
  platform: "node",
  target: "node22",
  format: "esm",
  sourcemap: false,
  legalComments: "none",
  metafile: true,
  logLevel: "warning",
  banner: { js: REQUIRE_SHIM },
  // ES modules before CommonJS where a package ships both: the AWS SDK's ES build lets esbuild
  // keep only the EC2 commands the agent sends (its CommonJS build is one 2.3 MB file).
  mainFields: ["module", "main"],
};

/**
 * The agent imports package.json for its version alone (src/cli.ts); bundled whole, hosts would
 * get the scripts, the test runner's settings and the dev dependencies as dead text. This plugin
 * hands the bundle a package.json holding only the version.
 */
function versionOnly(root) {
  const own = resolve(root, "package.json");
  return {
    name: "package-json-version-only",
    setup(builder) {
      // Only the checkout's own package.json: a dependency's stays as it ships.
      builder.onLoad({ filter: /[\\/]package\.json$/ }, async ({ path }) => {
        if (path !== own) return undefined;
        const { version } = JSON.parse(await readFile(path, "utf8"));
        return { contents: JSON.stringify({ version }), loader: "json" };
      });
    },
  };
}

/**
 * Builds the agent of the checkout `root` into `outdir` (relative to `root`): its entry
 * `ebs-cache-agent.mjs` and its `chunks/`; returns esbuild's metafile. The old chunks are
 * removed first: their names carry a content hash, and a stale one would be installed too.
 */
export async function buildAgent(outdir = "dist", root = process.cwd()) {
  await rm(resolve(root, outdir, "chunks"), { recursive: true, force: true });
  const result = await build({
    ...common,
    absWorkingDir: root,
    entryPoints: { "ebs-cache-agent": "src/cli.ts" },
    plugins: [versionOnly(root)],
    outdir,
    outExtension: { ".js": ".mjs" },
    splitting: true,
    chunkNames: "chunks/[name]-[hash]",
  });
  return result.metafile;
}

/** Builds the lab (`root`/src/lab/main.ts) into `outdir/ebs-cache-lab.mjs`, one file; returns esbuild's metafile. */
export async function buildLab(outdir = "dist", root = process.cwd()) {
  const result = await build({
    ...common,
    absWorkingDir: root,
    entryPoints: ["src/lab/main.ts"],
    outfile: join(outdir, "ebs-cache-lab.mjs"),
  });
  return result.metafile;
}

// Run as a script (not imported by bench/): node resolves its own path through symlinks, so must this.
if (argv[1] && import.meta.url === pathToFileURL(realpathSync(argv[1])).href) {
  const outdir = "dist";
  await mkdir(join(outdir, "meta"), { recursive: true });
  await writeFile(join(outdir, "meta", "agent.json"), JSON.stringify(await buildAgent(outdir)));
  if (!argv.includes("--agent-only"))
    await writeFile(join(outdir, "meta", "lab.json"), JSON.stringify(await buildLab(outdir)));
}
