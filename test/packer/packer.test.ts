/**
 * The Packer templates (packer/) validate offline with the Packer of scripts/setup.sh (Debian's
 * 1.6.6, which has the amazon builders built in and predates `required_plugins`, so the check
 * runs on a copy of the folder without plugins.pkr.hcl), a broken template fails the same check,
 * and the templates agree with the code on the volume layout and tags.
 */
import t, { type Test } from "tap";
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { run } from "../../src/exec.ts";
import { DATA_ROOT_SUBDIR, FS_LABEL } from "../../src/layout.ts";
import { VolumeTag } from "../../src/tags.ts";

const PACKER = "packer";
const TEMPLATES = ["ami.pkr.hcl", "pool-volume.pkr.hcl"];
/** Offline: no update check, no credentials, no instance metadata lookups. */
const ENV = {
  PATH: process.env.PATH ?? "/usr/bin:/bin",
  HOME: tmpdir(),
  CHECKPOINT_DISABLE: "1",
  AWS_EC2_METADATA_DISABLED: "true",
  PACKER_LOG: "0",
};

async function packerVersion(): Promise<string> {
  const out = await run(PACKER, ["version"], { check: false, env: ENV }).catch((error: unknown) => {
    throw new Error(`packer is not installed (scripts/setup.sh installs it): ${String(error)}`);
  });
  const version = /Packer v(\d+\.\d+\.\d+)/.exec(out.stdout)?.[1];
  if (!version) throw new Error(`packer version printed ${JSON.stringify(out.stdout + out.stderr)}`);
  return version;
}

/** A copy of packer/ with `files` only (plus its scripts/), in a fresh folder. */
async function folderWith(t: Test, files: string[]): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "ebs-cache-packer-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  for (const file of files) await copyFile(join("packer", file), join(dir, file));
  await mkdir(join(dir, "scripts"));
  for (const script of await readdir("packer/scripts"))
    await copyFile(join("packer/scripts", script), join(dir, "scripts", script));
  return dir;
}

async function validate(dir: string, args: string[] = []) {
  return run(PACKER, ["validate", ...args, "."], { cwd: dir, check: false, env: ENV, timeoutMs: 120_000 });
}

t.test("packer validate passes offline", async (t) => {
  t.comment(`packer ${await packerVersion()}`);
  const all = (await readdir("packer")).filter((f) => f.endsWith(".pkr.hcl"));
  t.same(
    all.sort(),
    ["ami.pkr.hcl", "plugins.pkr.hcl", "pool-volume.pkr.hcl", "variables.pkr.hcl"],
    "the folder holds the two templates, their variables and the plugin requirement",
  );

  const both = await folderWith(t, ["variables.pkr.hcl", ...TEMPLATES]);
  const result = await validate(both);
  t.equal(result.exitCode, 0, `both templates validate${result.exitCode ? `: ${result.stdout}${result.stderr}` : ""}`);
  for (const only of ["amazon-ebs.ami", "amazon-ebsvolume.pool"]) {
    const one = await validate(both, [`-only=${only}`]);
    t.equal(one.exitCode, 0, `-only=${only} validates${one.exitCode ? `: ${one.stdout}${one.stderr}` : ""}`);
  }
  for (const template of TEMPLATES) {
    const alone = await validate(await folderWith(t, ["variables.pkr.hcl", template]));
    t.equal(
      alone.exitCode,
      0,
      `${template} validates with variables.pkr.hcl alone${alone.exitCode ? `: ${alone.stdout}${alone.stderr}` : ""}`,
    );
  }
  const pool = await validate(both, [
    "-var",
    'images=["registry.example.org/simcore/app:1.2.3","busybox:1.36"]',
    "-var",
    "pool=sim4life",
    "-var",
    "image_set=2025-05",
  ]);
  t.equal(pool.exitCode, 0, `validates with a real image list${pool.exitCode ? `: ${pool.stdout}${pool.stderr}` : ""}`);
});

t.test("the check fails on a broken template", async (t) => {
  const broken = await folderWith(t, ["variables.pkr.hcl", ...TEMPLATES]);
  await writeFile(
    join(broken, "ami.pkr.hcl"),
    (await readFile(join(broken, "ami.pkr.hcl"), "utf8")) + '\nsource "amazon-ebs" "unclosed" {\n',
  );
  const syntax = await validate(broken);
  t.not(syntax.exitCode, 0, "a syntax error fails packer validate");

  const unknown = await folderWith(t, ["variables.pkr.hcl", ...TEMPLATES]);
  const text = await readFile(join(unknown, "pool-volume.pkr.hcl"), "utf8");
  await writeFile(
    join(unknown, "pool-volume.pkr.hcl"),
    text.replace("delete_on_termination = false", "delete_on_termination = false\n    no_such_argument = true"),
  );
  const semantic = await validate(unknown);
  t.not(semantic.exitCode, 0, "an unknown argument fails packer validate");

  const badVar = await validate(await folderWith(t, ["variables.pkr.hcl", ...TEMPLATES]), ["-var", "node_major=20"]);
  t.not(badVar.exitCode, 0, "Node.js < 22 is refused by the variable's validation");
  t.match(badVar.stdout + badVar.stderr, /Node\.js 22 or newer/);
});

t.test("plugins.pkr.hcl holds the amazon plugin requirement alone, and every file is formatted", async (t) => {
  const plugins = await readFile("packer/plugins.pkr.hcl", "utf8");
  const code = plugins.replace(/#.*$/gm, "").trim();
  t.match(
    code,
    new RegExp(
      String.raw`^packer\s*\{[\s\S]*required_plugins\s*\{[\s\S]*amazon\s*=\s*\{[\s\S]*source\s*=\s` +
        String.raw`*"github\.com\/hashicorp\/amazon"[\s\S]*\}\s*\}\s*\}$`,
    ),
    "one packer block requiring the amazon plugin",
  );
  t.notMatch(code, /\b(source|build|variable|locals)\s+"/, "no sources, builds or variables in it");
  // `packer fmt` parses HCL (plugins.pkr.hcl included) without the schema check.
  const fmt = await run(PACKER, ["fmt", "-check", "-diff", "packer"], { check: false, env: ENV });
  t.equal(fmt.exitCode, 0, `packer fmt -check packer/${fmt.exitCode ? `:\n${fmt.stdout}${fmt.stderr}` : ""}`);
  for (const script of await readdir("packer/scripts")) {
    const syntax = await run("bash", ["-n", join("packer/scripts", script)], { check: false });
    t.equal(syntax.exitCode, 0, `bash -n packer/scripts/${script}${syntax.exitCode ? `: ${syntax.stderr}` : ""}`);
  }
});

t.test("the templates agree with the code on tags and the volume layout", async (t) => {
  const pool = await readFile("packer/pool-volume.pkr.hcl", "utf8");
  const expectTag = (key: string, value: RegExp) =>
    t.match(
      pool,
      new RegExp(`"${key.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}"\\s*=\\s*${value.source}`),
      `the pool volume is tagged ${key}`,
    );
  expectTag(VolumeTag.managed, /"true"/);
  expectTag(VolumeTag.kind, /"pool"/);
  expectTag(VolumeTag.pool, /var\.pool\b/);
  expectTag(VolumeTag.imageSet, /var\.image_set\b/);
  expectTag(VolumeTag.images, /join\(",", var\.images\)/);
  expectTag(VolumeTag.imageStore, /var\.image_store\b/);
  expectTag(VolumeTag.builtAt, /local\.pool_built_at\b/);
  t.match(pool, /pool_built_at\s*=\s*timestamp\(\)/, "built-at is the build's time (RFC 3339, UTC)");
  t.match(pool, /delete_on_termination\s*=\s*false/, "the pool volume outlives its builder");

  const script = await readFile("packer/scripts/pool-volume.sh", "utf8");
  t.match(script, new RegExp(`^LABEL=${FS_LABEL}\\b`, "m"), `the filesystem label is ${FS_LABEL}`);
  t.match(script, /mkfs\.xfs .*-n ftype=1/, "XFS with ftype=1 (overlay2)");
  t.match(
    script,
    new RegExp(`^DATA_ROOT="\\$MOUNT/${DATA_ROOT_SUBDIR}"`, "m"),
    `docker's data-root is <volume>/${DATA_ROOT_SUBDIR}`,
  );
  t.match(
    script,
    /^agent snapshot strip --volume "\$MOUNT" --image-store "\$IMAGE_STORE"$/m,
    "the machine-local state goes by the agent's own list (snapshot strip), as snapshot build strips it",
  );
  t.notMatch(script, /rm -rf "\$\{(DATA|CONTAINERD)_ROOT/, "no list of its own in the script");

  const snapshot = await readFile("packer/scripts/snapshot-pool-volume.sh", "utf8");
  t.match(snapshot, /ResourceType\\":\\"snapshot\\",\\"Tags\\":\$tags/, "the snapshot gets the volume's tags");
  t.match(
    snapshot,
    new RegExp(`Key=${VolumeTag.engineVersion},Value=\\$engine_version`),
    "the volume is tagged with the builder's engine version before the snapshot",
  );

  const ami = await readFile("packer/scripts/ami-setup.sh", "utf8");
  t.match(ami, /scripts\/install\.sh" --bundle "[^"]+" \//, "the AMI gets the agent through scripts/install.sh");
  const node = await readFile("packer/scripts/node.sh", "utf8");
  t.match(node, /node_\$\{NODE_MAJOR\}\.x/, "Node.js from NodeSource (/usr/bin/node, the units' path)");
  const installs = (text: string) =>
    text
      .split("\n")
      .filter((line) => /^apt-get install /.test(line))
      .join(" ")
      .split(/\s+/);
  for (const pkg of ["fio", "xfsprogs", '"$DOCKER_PACKAGE"'])
    t.ok(installs(ami).includes(pkg), `the AMI installs ${pkg}`);
  t.ok(installs(node).includes("nodejs"), "node.sh installs nodejs");

  // Both builders get Node.js (node.sh) before their own script, and the agent's package.
  const amiTemplate = await readFile("packer/ami.pkr.hcl", "utf8");
  for (const [name, template, main] of [
    ["ami", amiTemplate, "ami-setup.sh"],
    ["pool-volume", pool, "pool-volume.sh"],
  ] as const) {
    const nodeAt = template.indexOf("scripts/node.sh");
    t.ok(nodeAt > 0 && nodeAt < template.indexOf(`scripts/${main}`), `${name}: node.sh runs before ${main}`);
    t.match(template, /destination\s*=\s*"\/tmp\/ebs-cache-agent-package\.tar\.gz"/, `${name}: the agent is uploaded`);
    t.match(template, /"AGENT_PACKAGE=\/tmp\/ebs-cache-agent-package\.tar\.gz"/, `${name}: its script is told where`);
  }
  // The pool builder always records the need list, on either store: its own agent, or the uploaded one.
  t.match(script, /record=\(\/usr\/bin\/node "\$agent_dir\/dist\/ebs-cache-agent\.mjs"\)/, "the uploaded agent runs");
  t.match(
    script,
    /"\$\{record\[@\]\}" record-reads --volume "\$MOUNT" --containerd-address \/run\/containerd\/\S+ \$IMAGES/,
    "record-reads on the volume, asking the system containerd for the containerd store's snapshots",
  );
  t.notMatch(script, /if \[ "\$IMAGE_STORE" = graphdriver \]; then\s+record=/, "whatever the store");
});
