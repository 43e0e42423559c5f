/**
 * iam/ebs-cache-snapshot-builder-policy.json, the build role of `snapshot upload`, decided by the
 * IAM evaluator this project did not write (@cloud-copilot/iam-simulate with AWS's service
 * data): its EBS actions are exactly the EBS commands the builder imports, it may start and write
 * pool snapshots tagged as the builder tags them, and nothing else.
 */
import { runSimulation, type Simulation } from "@cloud-copilot/iam-simulate";
import { readFile } from "node:fs/promises";
import t from "tap";
import { generationTags } from "../../../src/agent/snapshot/tags.ts";

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
const requestTags = (given: Record<string, string>) => ({
  ...Object.fromEntries(Object.entries(given).map(([k, v]) => [`aws:RequestTag/${k}`, v])),
  "aws:TagKeys": Object.keys(given),
});
const resourceTags = (given: Record<string, string>) =>
  Object.fromEntries(Object.entries(given).map(([k, v]) => [`aws:ResourceTag/${k}`, v]));

t.test("the policy's EBS actions are the EBS commands the builder calls, no more", async (t) => {
  const source = await readFile("src/aws/ebs.ts", "utf8");
  const imported = [...source.matchAll(/\b(\w+)Command\b/g)].map((m) => `ebs:${m[1]}`);
  const called = new Set(imported);
  const statements = (policy as { Statement: { Action: string | string[] }[] }).Statement;
  const granted = new Set(statements.flatMap((s) => [s.Action].flat()).filter((a) => a.startsWith("ebs:")));
  // Reads too: an operator checking a build has their own role; this one grants what the builder calls.
  t.same([...granted].sort(), [...called].sort(), "granted = called");
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
  ["ec2:DeleteSnapshot", SNAPSHOT, resourceTags(tags), "ImplicitlyDenied"],
  ["kms:GenerateDataKeyWithoutPlaintext", KEY, { "kms:ViaService": `ebs.${REGION}.amazonaws.com` }, "Allowed"],
  ["kms:Decrypt", KEY, {}, "ImplicitlyDenied"],
];

for (const [action, resource, context, intended] of cases) {
  const what = JSON.stringify(context).slice(0, 80);
  t.test(`${action} ${what}: ${intended}`, async (t) => {
    t.equal(await decide(action, resource, context), intended);
  });
}
