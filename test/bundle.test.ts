/**
 * The production build: one file that runs with plain `node`, away from node_modules (no tsx,
 * no devDependencies at run time).
 */
import t from "tap";
import { copyFile, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { run } from "../src/exec.ts";

t.test("the bundle runs on its own", async (t) => {
  await run(process.execPath, ["scripts/build.mjs"]);
  const dir = await mkdtemp(join(tmpdir(), "ebs-cache-bundle-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const bundle = join(dir, "ebs-cache-agent.mjs");
  await copyFile("dist/ebs-cache-agent.mjs", bundle);

  const help = await run(process.execPath, [bundle, "boot", "--help"], { cwd: dir });
  t.match(help.stdout, /--dry-run/, "boot --help answers from the bundle alone");

  const config = join(dir, "config.json");
  await writeFile(config, JSON.stringify({ pool: "bad;pool", timeouts: { deviceSeconds: 0 } }));
  const bad = await run(process.execPath, [bundle, "boot", "--config", config], { cwd: dir, check: false });
  t.equal(bad.exitCode, 3, "invalid configuration exits 3");
  t.match(bad.stderr, /^<3>/m, "with a journald error line");
  t.match(bad.stderr, /pool/);
  t.match(bad.stderr, /timeouts\.deviceSeconds/, "every problem is reported at once");
});
