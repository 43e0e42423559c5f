/**
 * Every shell script of the repository passes shellcheck (Debian's `shellcheck`, installed by
 * scripts/setup.sh) with no finding at any severity: the tracked files that are shell by their
 * extension or by their shebang.
 * A finding is fixed, or silenced on its line with a `# shellcheck disable=SCxxxx` that says why.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { run } from "../../src/exec.ts";

const SHELL_EXTENSION = /\.(sh|bash)$/;
const SHELLS = new Set(["sh", "bash", "dash", "ksh"]);

/**
 * Whether a first line is a shell's shebang: `#!/bin/sh`, `#!/usr/bin/env bash`, `#!/bin/dash -e`; not node's or
 * python's.
 */
function isShellShebang(line: string): boolean {
  if (!line.startsWith("#!")) return false;
  const words = line.slice(2).trim().split(/\s+/);
  const base = (path: string | undefined) => path?.split("/").pop() ?? "";
  const interpreter = base(words[0]) === "env" ? base(words[1]) : base(words[0]);
  return SHELLS.has(interpreter);
}

const version = await run("shellcheck", ["--version"], { check: false }).catch(() => undefined);
if (version?.exitCode !== 0) {
  throw new Error("shellcheck is not installed: run scripts/setup.sh (it installs Debian's shellcheck)");
}

/** The tracked shell scripts: by extension, or by a shell shebang on the first line. */
async function trackedShellScripts(): Promise<string[]> {
  const files = (await run("git", ["ls-files", "-z"])).stdout.split("\0").filter(Boolean);
  const scripts: string[] = [];
  for (const file of files) {
    if (SHELL_EXTENSION.test(file)) {
      scripts.push(file);
      continue;
    }
    const text = await readFile(file, "utf8").catch(() => "");
    if (isShellShebang(text.split("\n", 1)[0] ?? "")) scripts.push(file);
  }
  return scripts;
}

t.test("the shebang rule tells shell scripts from the others", async (t) => {
  for (const line of ["#!/bin/sh", "#!/bin/bash", "#!/usr/bin/env bash", "#!/bin/dash -e", "#! /bin/sh"])
    t.ok(isShellShebang(line), line);
  for (const line of [
    "#!/usr/bin/env node",
    "#!/usr/bin/python3",
    "#!/usr/bin/env python3",
    "# sh",
    "#!/bin/shellcheck",
  ])
    t.notOk(isShellShebang(line), line);
});

t.test("every tracked shell script is shellcheck clean", async (t) => {
  const scripts = await trackedShellScripts();
  for (const known of ["scripts/setup.sh", "scripts/install.sh", ".ci/run", "packer/scripts/pool-volume.sh"]) {
    t.ok(scripts.includes(known), `${known} is found (by extension or shebang)`);
  }
  const result = await run("shellcheck", ["--format=gcc", "--external-sources", ...scripts], { check: false });
  t.equal(result.exitCode, 0, `shellcheck over ${scripts.length} scripts: ${scripts.join(", ")}`);
  t.equal(result.stdout, "", "no finding at any severity");
});

t.test("shellcheck does report findings here (so the checks above mean something)", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "shellcheck-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const bad = join(dir, "bad.sh");
  await writeFile(bad, '#!/bin/sh\ncd $1\necho "done"\n');
  const result = await run("shellcheck", ["--format=gcc", bad], { check: false });
  t.not(result.exitCode, 0);
  t.match(result.stdout, /SC2164/, "cd without || exit");
  t.match(result.stdout, /SC2086/, "an unquoted variable");
});
