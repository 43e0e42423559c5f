/**
 * scripts/check-iam.sh, the operators' check of the policy against AWS's own evaluators, run
 * against nothing real: it parses, it is shellcheck-clean, it refuses clearly without an aws CLI or
 * without credentials, the context it sends is valid JSON, and the cases it asks AWS about are
 * decided as it expects by the independent evaluator test/iam/iam.test.ts uses.
 */
import t from "tap";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { ACCOUNT, evaluate, OTHER, OWN, type Check } from "../fixtures/oracles/iam-matrix.ts";

const SCRIPT = "scripts/check-iam.sh";
const POLICY = "iam/ebs-cache-agent-policy.json";
const run = promisify(execFile);

async function which(command: string): Promise<string | undefined> {
  try {
    return (await run("bash", ["-c", `command -v ${command}`])).stdout.trim() || undefined;
  } catch {
    return undefined;
  }
}

/**
 * Runs the script with bash found on this PATH (the script's own PATH may lack it); its exit code, stdout and stderr.
 */
async function script(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const bash = (await which("bash")) ?? "bash";
  try {
    const { stdout, stderr } = await run(bash, [SCRIPT, ...args], { env, timeout: 120_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === "number" ? e.code : -1, stdout: e.stdout ?? "", stderr: e.stderr ?? "" };
  }
}

t.test("parses and is shellcheck-clean", async (t) => {
  await run("bash", ["-n", SCRIPT]);
  t.pass("bash -n");
  const shellcheck = await which("shellcheck");
  t.ok(shellcheck, "shellcheck is installed (Debian package shellcheck: apt-get install -y shellcheck)");
  if (!shellcheck) return;
  const { stdout } = await run(shellcheck, ["--format=gcc", SCRIPT]).catch((error: { stdout?: string }) => ({
    stdout: error.stdout ?? "failed",
  }));
  t.equal(stdout, "", "shellcheck reports nothing");
});

t.test("a clear refusal without the aws CLI, without credentials, or with a bad argument", async (t) => {
  const bin = await mkdtemp(join(tmpdir(), "check-iam-"));
  t.teardown(() => rm(bin, { recursive: true, force: true }));
  const dirname = await which("dirname");
  t.ok(dirname, "dirname is on PATH");
  await symlink(dirname!, join(bin, "dirname"));
  const noCli = await script([], { PATH: bin, HOME: bin });
  t.equal(noCli.code, 2, "exit 2 without the aws CLI");
  t.match(noCli.stderr, /the aws CLI is not installed/, noCli.stderr.trim());

  const aws = await which("aws");
  t.ok(aws, "the aws CLI is installed (pip install awscli), for the no-credentials case");
  if (aws) {
    // No credentials anywhere the CLI looks, and no instance metadata: it answers without a network call.
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      HOME: bin,
      AWS_CONFIG_FILE: "/dev/null",
      AWS_SHARED_CREDENTIALS_FILE: "/dev/null",
      AWS_EC2_METADATA_DISABLED: "true",
    };
    for (const key of Object.keys(env)) {
      if (
        new RegExp(
          String.raw`^AWS_(ACCESS_KEY_ID|SECRET_ACCESS_KEY|SESSION_TOKEN|PROFILE|DEFAULT_PROFILE|WEB_` +
            String.raw`IDENTITY_TOKEN_FILE|ROLE_ARN|CONTAINER_)`,
        ).test(key)
      )
        delete env[key];
    }
    const noCredentials = await script([], env);
    t.equal(noCredentials.code, 2, "exit 2 without credentials");
    t.match(noCredentials.stderr, /no usable AWS credentials/, noCredentials.stderr.trim().split("\n")[0] ?? "");
  }

  const bad = await script(["--frobnicate"], process.env);
  t.equal(bad.code, 2, "exit 2 for an unknown argument");
  t.match(bad.stderr, /usage:/);
  const missing = await script(["--policy", join(bin, "absent.json")], process.env);
  t.equal(missing.code, 2, "exit 2 for a policy that cannot be read");
  t.match(missing.stderr, /cannot read the policy/);
});

/** The script's CASES, one per line: expected, action, resource, context items. */
async function scriptCases(): Promise<{ expected: string; action: string; resource: string; context: string[] }[]> {
  const text = await readFile(SCRIPT, "utf8");
  const block = /^CASES='\n([\s\S]*?)^'$/m.exec(text);
  if (!block) throw new Error(`no CASES block in ${SCRIPT}`);
  return block[1]!
    .split("\n")
    .filter((line) => line.trim())
    .map((line) => {
      const [expected, action, resource, ...context] = line.trim().split(/\s+/);
      return { expected: expected!, action: action!, resource: resource!, context };
    });
}

/** The context entry the script sends for KEY=VALUE, as JSON (its own function, run by bash). */
async function contextEntry(item: string): Promise<unknown> {
  const text = await readFile(SCRIPT, "utf8");
  const fn = /^context_entry\(\) \{\n[\s\S]*?^\}$/m.exec(text);
  if (!fn) throw new Error(`no context_entry in ${SCRIPT}`);
  const { stdout } = await run("bash", ["-c", `${fn[0]}\ncontext_entry "$1"`, "bash", item]);
  return JSON.parse(stdout) as unknown;
}

t.test("the cases the script asks AWS about are decided as it expects by an independent evaluator", async (t) => {
  const policy = JSON.parse(await readFile(POLICY, "utf8")) as unknown;
  const cases = await scriptCases();
  t.ok(cases.length >= 15, `${cases.length} cases`);
  t.ok(
    cases.some((c) => c.expected === "allowed") && cases.some((c) => c.expected === "denied"),
    "both decisions are asked for",
  );
  const arn = (resource: string): string => {
    const region = "eu-west-1";
    const arns: Record<string, string> = {
      volume: `arn:aws:ec2:${region}:${ACCOUNT}:volume/vol-0000000000000000a`,
      "new-volume": `arn:aws:ec2:${region}:${ACCOUNT}:volume/vol-0000000000000000b`,
      snapshot: `arn:aws:ec2:${region}::snapshot/snap-0000000000000000a`,
      "instance:own": `arn:aws:ec2:${region}:${ACCOUNT}:instance/${OWN}`,
      "instance:other": `arn:aws:ec2:${region}:${ACCOUNT}:instance/${OTHER}`,
      key: `arn:aws:kms:${region}:${ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab`,
    };
    if (!arns[resource]) throw new Error(`unknown resource ${resource}`);
    return arns[resource];
  };
  const script = await readFile(SCRIPT, "utf8");
  t.match(script, new RegExp(`^OWN=${OWN}$`, "m"), "the script's own instance is the matrix's");
  t.match(script, new RegExp(`^OTHER=${OTHER}$`, "m"), "the script's other instance is the matrix's");
  for (const c of cases) {
    const context: Record<string, string | string[]> = { "ec2:SourceInstanceARN": arn("instance:own") };
    if (c.resource === "instance:own") context["ec2:InstanceID"] = OWN;
    if (c.resource === "instance:other") context["ec2:InstanceID"] = OTHER;
    for (const item of c.context) {
      const entry = (await contextEntry(item)) as {
        ContextKeyName: string;
        ContextKeyValues: string[];
        ContextKeyType: string;
      };
      context[entry.ContextKeyName] =
        entry.ContextKeyType === "stringList" ? entry.ContextKeyValues : entry.ContextKeyValues[0]!;
    }
    const check: Check = { resource: arn(c.resource), context };
    const result = await evaluate(policy, c.action, check);
    const decision =
      result === "Allowed" ? "allowed" : typeof result === "string" ? "denied" : `error ${result.errors}`;
    t.equal(
      decision,
      c.expected,
      `${c.action} ${c.resource} ${c.context.join(" ")}: ${c.expected} ` +
        `(${typeof result === "string" ? result : "error"})`,
    );
  }
  t.same(
    await contextEntry("kms:GrantIsForAWSResource=true"),
    { ContextKeyName: "kms:GrantIsForAWSResource", ContextKeyValues: ["true"], ContextKeyType: "boolean" },
    "a boolean",
  );
  t.same(
    await contextEntry("aws:TagKeys=ebs-cache:a,ebs-cache:b"),
    { ContextKeyName: "aws:TagKeys", ContextKeyValues: ["ebs-cache:a", "ebs-cache:b"], ContextKeyType: "stringList" },
    "a list",
  );
});
