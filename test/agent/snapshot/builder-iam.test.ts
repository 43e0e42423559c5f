/**
 * iam/ebs-cache-snapshot-builder-policy.json, the build role of `snapshot upload`, decided by the
 * IAM evaluator this project did not write (@cloud-copilot/iam-simulate with AWS's service
 * data): its EBS and EC2 actions are exactly the commands the builder's adapters import (grants =
 * calls), it may start and write pool snapshots tagged as the builder tags them, remove their
 * `ebs-cache:unverified` tag and no other, delete one only while it carries that tag, and nothing else.
 */
import { runSimulation, type Simulation } from "@cloud-copilot/iam-simulate";
import { readFile } from "node:fs/promises";
import t from "tap";
import { generationTags } from "../../../src/agent/snapshot/tags.ts";
import { SnapshotTag } from "../../../src/tags.ts";
import { BUILDER_ADAPTERS, sdkActionsOf } from "../../fixtures/oracles/sdk-calls.ts";

const ACCOUNT = "123456789012";
const REGION = "us-east-1";
const SNAPSHOT = `arn:aws:ec2:${REGION}::snapshot/snap-0123456789abcdef0`;
const KEY = `arn:aws:kms:${REGION}:${ACCOUNT}:key/0e85c3a4-5b3c-4d8e-9f1a-0ebd5defa0c1`;

const policy: unknown = JSON.parse(await readFile("iam/ebs-cache-snapshot-builder-policy.json", "utf8"));

async function decide(action: string, resource: string, context: Record<string, string | string[]>) {
  const response = await runSimulation(
    {
      identityPolicies: [{ name: "ebs-cache-snapshot-builder", policy }],
      serviceControlPolicies: [],
      resourceControlPolicies: [],
      ...(resource.startsWith("arn:aws:kms:")
        ? {
            resourcePolicy: {
              Version: "2012-10-17",
              Statement: [
                { Effect: "Allow", Principal: { AWS: `arn:aws:iam::${ACCOUNT}:root` }, Action: "kms:*", Resource: "*" },
              ],
            },
          }
        : {}),
      request: {
        action,
        principal: `arn:aws:sts::${ACCOUNT}:assumed-role/ebs-cache-snapshot-builder/ci`,
        resource: { accountId: ACCOUNT, resource },
        contextVariables: context,
      },
    } as Simulation,
    {},
  );
  if (response.resultType === "error") return `error ${JSON.stringify(response.errors)}`;
  return response.overallResult;
}

const built = generationTags({
  pool: "sim4life",
  imageSet: "2026-12",
  images: ["registry.example.org/simcore/services/dynamic/sim4life:3.1.0"],
  imageStore: "graphdriver",
  engineVersion: "28.5.1",
  builtAt: "2026-12-02T01:00:00Z",
  operatorTags: { team: "platform" },
});
const tags = "tags" in built ? built.tags : {};
/** What StartSnapshot sends and the snapshot carries until read back. */
const marked = { ...tags, [SnapshotTag.unverified]: "true" };
const requestTags = (given: Record<string, string>) => ({
  ...Object.fromEntries(Object.entries(given).map(([k, v]) => [`aws:RequestTag/${k}`, v])),
  "aws:TagKeys": Object.keys(given),
});
const resourceTags = (given: Record<string, string>) =>
  Object.fromEntries(Object.entries(given).map(([k, v]) => [`aws:ResourceTag/${k}`, v]));

/** The actions the builder's adapters import, and the problems parsing them. */
async function builderCalls(): Promise<{ called: Set<string>; problems: string[] }> {
  const ebs = sdkActionsOf(BUILDER_ADAPTERS.ebs, await readFile(BUILDER_ADAPTERS.ebs, "utf8"), "@aws-sdk/client-ebs");
  const ec2 = sdkActionsOf(BUILDER_ADAPTERS.ec2, await readFile(BUILDER_ADAPTERS.ec2, "utf8"), "@aws-sdk/client-ec2");
  return {
    called: new Set([...ebs.actions.map((a) => `ebs:${a}`), ...ec2.actions.map((a) => `ec2:${a}`)]),
    problems: [...ebs.problems, ...ec2.problems],
  };
}

/** The policy's ebs: and ec2: actions. */
function grantedOf(p: unknown): Set<string> {
  const statements = (p as { Statement: { Action: string | string[] }[] }).Statement;
  return new Set(statements.flatMap((s) => [s.Action].flat()).filter((a) => /^(ebs|ec2):/.test(a)));
}

t.test("the policy's EBS and EC2 actions are the commands the builder calls, no more", async (t) => {
  const { called, problems } = await builderCalls();
  t.same(problems, [], "every import of the SDKs can be checked");
  for (const action of ["ebs:StartSnapshot", "ebs:GetSnapshotBlock", "ec2:DeleteTags", "ec2:DeleteSnapshot"])
    t.ok(called.has(action), `the code's ${action} is found`);
  t.same([...grantedOf(policy)].sort(), [...called].sort(), "granted = called");
  const grantedExtra = {
    Statement: [...(policy as { Statement: object[] }).Statement, { Action: "ebs:ListChangedBlocks" }],
  };
  t.not([...grantedOf(grantedExtra)].sort().join(), [...called].sort().join(), "a grant nothing calls is noticed");
  const wiring = await readFile("src/cli/snapshot.ts", "utf8");
  // Where the credentials and the region come from: it builds a client only to read the SDK's
  // region (no command), so it calls no EC2 or EBS action for the policy to grant.
  const CREDENTIALS = "src/aws/fleet-credentials.ts";
  t.match(wiring, /from "\.\.\/aws\/fleet-credentials\.ts"/, "the upload takes the fleet's credentials");
  t.notMatch(await readFile(CREDENTIALS, "utf8"), /Command\b/, "which sends no command");
  // AWS_MAX_ATTEMPTS, read as for every call of the agent: a number, no client.
  const ATTEMPTS = "src/aws/max-attempts.ts";
  t.notMatch(await readFile(ATTEMPTS, "utf8"), /Command\b|@aws-sdk/, "the attempts' module sends no command");
  t.same(
    [...wiring.matchAll(/from "\.\.\/aws\/([\w-]+)\.ts"/g)]
      .map((m) => `src/aws/${m[1]}.ts`)
      .filter((path) => path !== CREDENTIALS && path !== ATTEMPTS)
      .sort(),
    Object.values(BUILDER_ADAPTERS).sort(),
    "the upload's command builds its AWS access from these adapters alone",
  );
});

const cases: [string, string, Record<string, string | string[]>, "Allowed" | "ImplicitlyDenied"][] = [
  ["ebs:StartSnapshot", SNAPSHOT, requestTags(tags), "Allowed"],
  ["ebs:StartSnapshot", SNAPSHOT, requestTags({ ...tags, "ebs-cache:managed": "false" }), "ImplicitlyDenied"],
  ["ebs:StartSnapshot", SNAPSHOT, requestTags({ team: "platform" }), "ImplicitlyDenied"],
  ["ebs:PutSnapshotBlock", SNAPSHOT, resourceTags(tags), "Allowed"],
  ["ebs:CompleteSnapshot", SNAPSHOT, resourceTags(tags), "Allowed"],
  ["ebs:PutSnapshotBlock", SNAPSHOT, resourceTags({ team: "platform" }), "ImplicitlyDenied"],
  ["ebs:CompleteSnapshot", SNAPSHOT, {}, "ImplicitlyDenied"],
  ["ebs:ListSnapshotBlocks", SNAPSHOT, resourceTags(tags), "Allowed"],
  ["ebs:GetSnapshotBlock", SNAPSHOT, resourceTags(tags), "Allowed"],
  ["ebs:GetSnapshotBlock", SNAPSHOT, {}, "ImplicitlyDenied"],
  // The upload's snapshot is tagged unverified from StartSnapshot on, and untagged once read back.
  ["ebs:StartSnapshot", SNAPSHOT, requestTags(marked), "Allowed"],
  ["ec2:DeleteTags", SNAPSHOT, { ...resourceTags(marked), "aws:TagKeys": [SnapshotTag.unverified] }, "Allowed"],
  ["ec2:DeleteTags", SNAPSHOT, { ...resourceTags(tags), "aws:TagKeys": [SnapshotTag.unverified] }, "Allowed"],
  // No other tag: not the pool's tags (a snapshot of no pool), not all at once (no Tag.N deletes every tag).
  ["ec2:DeleteTags", SNAPSHOT, { ...resourceTags(marked), "aws:TagKeys": ["ebs-cache:pool"] }, "ImplicitlyDenied"],
  [
    "ec2:DeleteTags",
    SNAPSHOT,
    { ...resourceTags(marked), "aws:TagKeys": [SnapshotTag.unverified, "ebs-cache:managed"] },
    "ImplicitlyDenied",
  ],
  ["ec2:DeleteTags", SNAPSHOT, resourceTags(marked), "ImplicitlyDenied"],
  ["ec2:DeleteTags", SNAPSHOT, { "aws:TagKeys": [SnapshotTag.unverified] }, "ImplicitlyDenied"],
  // A snapshot found wrong is deleted; a verified one (the pool's current) never.
  ["ec2:DeleteSnapshot", SNAPSHOT, resourceTags(marked), "Allowed"],
  ["ec2:DeleteSnapshot", SNAPSHOT, resourceTags(tags), "ImplicitlyDenied"],
  ["ec2:DeleteSnapshot", SNAPSHOT, resourceTags({ [SnapshotTag.unverified]: "true" }), "ImplicitlyDenied"],
  [
    "ec2:CreateTags",
    SNAPSHOT,
    { ...resourceTags(tags), ...requestTags({ [SnapshotTag.unverified]: "true" }) },
    "ImplicitlyDenied",
  ],
  ["kms:GenerateDataKeyWithoutPlaintext", KEY, { "kms:ViaService": `ebs.${REGION}.amazonaws.com` }, "Allowed"],
  ["kms:Decrypt", KEY, {}, "ImplicitlyDenied"],
];

for (const [action, resource, context, intended] of cases) {
  const what = JSON.stringify(context).slice(0, 80);
  t.test(`${action} ${what}: ${intended}`, async (t) => {
    t.equal(await decide(action, resource, context), intended);
  });
}
