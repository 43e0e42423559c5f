/**
 * iam/ebs-cache-agent-policy.json grants exactly the EC2 actions the agent calls: the set of
 * `ec2:` actions in the policy equals the set of EC2 commands imported from
 * `@aws-sdk/client-ec2` by the agent's source (src/, without the lab's emulator and fixtures in
 * src/lab/). Calling a new action in code, or dropping one from the policy, fails here. The
 * policy's shape and its least-privilege conditions are checked too.
 */
import t from "tap";
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import ts from "typescript";
import { VolumeTag } from "../src/tags.ts";

const POLICY = "iam/ebs-cache-agent-policy.json";
const SDK = "@aws-sdk/client-ec2";
/** The KMS actions EBS encryption needs (the agent never calls KMS itself). */
const KMS_ACTIONS = ["kms:CreateGrant", "kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncrypt*"];
/** Waiters and paginators stand for the Describe call they repeat. */
const WAITER_ACTION: Record<string, string> = { Volume: "DescribeVolumes", Snapshot: "DescribeSnapshots", Instance: "DescribeInstances" };

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

/** EC2 actions a file's value imports from the SDK name (type-only imports call nothing). */
export function ec2ActionsOf(fileName: string, text: string): { actions: string[]; problems: string[] } {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, false);
  const actions: string[] = [];
  const problems: string[] = [];
  for (const statement of source.statements) {
    if (!ts.isImportDeclaration(statement) || !ts.isStringLiteral(statement.moduleSpecifier) || statement.moduleSpecifier.text !== SDK) continue;
    const clause = statement.importClause;
    if (!clause || clause.isTypeOnly) continue;
    if (clause.name) problems.push(`${fileName}: default import of ${SDK} cannot be checked`);
    const bindings = clause.namedBindings;
    if (bindings && ts.isNamespaceImport(bindings)) {
      problems.push(`${fileName}: \`import * as ${bindings.name.text}\` from ${SDK} hides which commands are called: import them by name`);
      continue;
    }
    for (const element of bindings?.elements ?? []) {
      if (element.isTypeOnly) continue;
      const name = (element.propertyName ?? element.name).text;
      const command = /^(\w+)Command$/.exec(name);
      const waiter = /^waitUntil(Volume|Snapshot|Instance)\w*$/.exec(name);
      const paginator = /^paginate(\w+)$/.exec(name);
      if (command) actions.push(command[1]!);
      else if (waiter) actions.push(WAITER_ACTION[waiter[1]!]!);
      else if (paginator) actions.push(paginator[1]!);
      else if (/^waitUntil/.test(name)) problems.push(`${fileName}: waiter ${name} is not mapped to its Describe action in test/iam.test.ts`);
    }
  }
  return { actions, problems };
}

/** The EC2 actions the agent's code calls, with the files calling each. */
async function codeActions(): Promise<{ actions: Map<string, string[]>; problems: string[] }> {
  const actions = new Map<string, string[]>();
  const problems: string[] = [];
  for (const file of await sourceFiles("src")) {
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

const list = (value: string | string[] | undefined): string[] => (value === undefined ? [] : Array.isArray(value) ? value : [value]);

/** Why the policy's EC2 actions differ from the code's (empty when they are the same set). */
export function actionMismatch(policy: Policy, calls: Iterable<string>): string[] {
  const granted = new Set(policy.Statement.filter((s) => s.Effect === "Allow").flatMap((s) => list(s.Action)).filter((a) => a.startsWith("ec2:")));
  const called = new Set(calls);
  return [
    ...[...called].filter((a) => !granted.has(a)).map((a) => `${a} is called by the code but not granted by ${POLICY}`),
    ...[...granted].filter((a) => !called.has(a)).map((a) => `${a} is granted by ${POLICY} but the code never calls it`),
  ].sort();
}

/** The shape every policy statement must have. */
export function shapeProblems(policy: unknown): string[] {
  const problems: string[] = [];
  const p = policy as Partial<Policy>;
  if (p.Version !== "2012-10-17") problems.push(`Version is ${JSON.stringify(p.Version)}, not "2012-10-17"`);
  if (!Array.isArray(p.Statement) || p.Statement.length === 0) return [...problems, "Statement is not a non-empty array"];
  const sids = new Set<string>();
  for (const [i, s] of p.Statement.entries()) {
    const where = `Statement[${i}]${s.Sid ? ` (${s.Sid})` : ""}`;
    if (s.Effect !== "Allow" && s.Effect !== "Deny") problems.push(`${where}: Effect must be Allow or Deny`);
    const actions = list(s.Action);
    if (actions.length === 0 || actions.some((a) => typeof a !== "string" || !/^[a-z0-9-]+:[A-Za-z*]+$/.test(a))) problems.push(`${where}: Action must name service:Action entries`);
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
  t.same(actionMismatch(policy, actions.keys()), [], `the ec2: actions of ${POLICY} are the code's: ${[...actions.keys()].sort().join(", ")}`);
  const ec2Wildcards = policy.Statement.flatMap((s) => list(s.Action)).filter((a) => a.startsWith("ec2:") && a.includes("*"));
  t.same(ec2Wildcards, [], "no ec2: wildcard actions");
  const others = policy.Statement.flatMap((s) => list(s.Action)).filter((a) => !a.startsWith("ec2:"));
  t.same([...new Set(others)].sort(), [...KMS_ACTIONS].sort(), "besides EC2, only the KMS actions of encrypted volumes");
});

t.test("the comparison notices a change on either side", async (t) => {
  const policy = JSON.parse(await readFile(POLICY, "utf8")) as Policy;
  const { actions } = await codeActions();
  const withoutAttach: Policy = {
    ...policy,
    Statement: policy.Statement.map((s) => ({ ...s, Action: list(s.Action).filter((a) => a !== "ec2:AttachVolume") })),
  };
  t.match(actionMismatch(withoutAttach, actions.keys()), [/ec2:AttachVolume is called by the code but not granted/], "an action removed from the policy");
  t.match(actionMismatch(policy, [...actions.keys(), "ec2:ModifyVolume"]), [/ec2:ModifyVolume is called by the code but not granted/], "a new call in the code");
  t.match(actionMismatch(policy, [...actions.keys()].filter((a) => a !== "ec2:DeleteTags")), [/ec2:DeleteTags is granted .* never calls it/], "an action the code stopped calling");

  const parsed = ec2ActionsOf(
    "x.ts",
    [
      'import { EC2Client, ModifyVolumeCommand, type DescribeVolumesCommandInput, waitUntilVolumeAvailable } from "@aws-sdk/client-ec2";',
      'import type { DeleteVolumeCommand } from "@aws-sdk/client-ec2";',
      'import { paginateDescribeSnapshots as pages } from "@aws-sdk/client-ec2";',
    ].join("\n"),
  );
  t.same(parsed.actions.sort(), ["DescribeSnapshots", "DescribeVolumes", "ModifyVolume"], "commands, waiters and paginators count; types do not");
  t.match(ec2ActionsOf("y.ts", 'import * as ec2 from "@aws-sdk/client-ec2";').problems, [/import \* as ec2/], "a namespace import is refused");
});

t.test("the policy's shape", async (t) => {
  const policy = JSON.parse(await readFile(POLICY, "utf8")) as unknown;
  t.same(shapeProblems(policy), [], "Version 2012-10-17; every statement has Effect, Action and Resource");
  t.match(shapeProblems({ Version: "2008-10-17", Statement: [{ Effect: "Allow", Action: "ec2:AttachVolume" }] }), [/Version/, /Resource missing/], "the shape check finds problems");
});

t.test("least privilege: what each mutating statement is limited to", async (t) => {
  const policy = JSON.parse(await readFile(POLICY, "utf8")) as Policy;
  const managed = `aws:ResourceTag/${VolumeTag.managed}`;
  const statementsFor = (action: string) => policy.Statement.filter((s) => s.Effect === "Allow" && list(s.Action).includes(action));
  const conditionValue = (s: Statement, operator: string, key: string) => s.Condition?.[operator]?.[key];

  t.same(
    policy.Statement.filter((s) => list(s.Resource).includes("*")).flatMap((s) => list(s.Action)).filter((a) => a.startsWith("ec2:") && !a.startsWith("ec2:Describe")),
    [],
    "only Describe* actions have Resource *",
  );
  for (const action of ["ec2:AttachVolume", "ec2:DetachVolume"]) {
    const statements = statementsFor(action);
    const volumes = statements.filter((s) => list(s.Resource).every((r) => r.includes(":volume/")));
    const instances = statements.filter((s) => list(s.Resource).every((r) => r === "${ec2:SourceInstanceARN}"));
    t.equal(volumes.length + instances.length, statements.length, `${action}: every statement is for volumes or for the calling instance`);
    t.ok(volumes.length > 0 && volumes.every((s) => conditionValue(s, "StringEquals", managed) === "true"), `${action}: only volumes tagged ${VolumeTag.managed}=true`);
    t.equal(instances.length, 1, `${action}: only to the caller's own instance (ec2:SourceInstanceARN)`);
  }
  for (const action of ["ec2:DeleteVolume", "ec2:DeleteTags"]) {
    const statements = statementsFor(action);
    t.ok(statements.length > 0 && statements.every((s) => conditionValue(s, "StringEquals", managed) === "true"), `${action}: only managed volumes`);
  }
  const untag = statementsFor("ec2:DeleteTags");
  t.ok(untag.every((s) => conditionValue(s, "ForAllValues:StringNotEquals", "aws:TagKeys") === VolumeTag.managed), `DeleteTags cannot remove ${VolumeTag.managed}`);
  t.ok(untag.every((s) => conditionValue(s, "Null", "aws:TagKeys") === "false"), "DeleteTags must name its keys (no keys deletes every tag)");
  const tagging = statementsFor("ec2:CreateTags");
  t.ok(
    tagging.length > 0 &&
      tagging.every((s) => conditionValue(s, "StringEquals", managed) === "true" || conditionValue(s, "StringEquals", "ec2:CreateAction") === "CreateVolume"),
    "CreateTags: managed volumes, or a volume being created",
  );
  const create = statementsFor("ec2:CreateVolume");
  const newVolumes = create.filter((s) => list(s.Resource).every((r) => r.includes(":volume/")));
  const snapshots = create.filter((s) => list(s.Resource).every((r) => r.includes(":snapshot/")));
  t.equal(newVolumes.length + snapshots.length, create.length, "CreateVolume: volume and snapshot resources only");
  t.ok(newVolumes.length > 0 && newVolumes.every((s) => conditionValue(s, "StringEquals", `aws:RequestTag/${VolumeTag.managed}`) === "true"), "CreateVolume: the new volume must be tagged managed");
  t.ok(snapshots.every((s) => conditionValue(s, "StringEquals", managed) === "true"), "CreateVolume: only from managed snapshots");
  const grants = statementsFor("kms:CreateGrant");
  t.ok(grants.length > 0 && grants.every((s) => conditionValue(s, "Bool", "kms:GrantIsForAWSResource") === "true"), "kms:CreateGrant only for AWS resources (EBS)");
});
