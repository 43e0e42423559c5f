/**
 * iam/ebs-cache-keeper-reclaim-policy.json, the statements the keeper host's role adds for the
 * opt-in reclaim (`keeper.reclaimStoppedAfterDays`, docs/keeper.md), decided by the IAM evaluator
 * this project did not write (@cloud-copilot/iam-simulate). The keeper host's role is the nodes'
 * policy plus this one; the reclaim's calls (src/agent/keeper/apply.ts: DescribeInstances,
 * DescribeVolumes, DetachVolume of another instance's volume, CreateTags and DeleteTags of the
 * release tags) must all be allowed on a managed pool volume, and the detach denied on volumes
 * that are not managed pool volumes.
 */
import { readFile } from "node:fs/promises";
import t from "tap";
import { releaseTags } from "../../src/agent/release/plan.ts";
import { VolumeKind, VolumeTag } from "../../src/tags.ts";
import {
  described,
  evaluateRole,
  foreignVolume,
  instance,
  managedVolume,
  OTHER,
  requestTags,
  volume,
  type Check,
} from "../fixtures/oracles/iam-matrix.ts";

const RECLAIM = "iam/ebs-cache-keeper-reclaim-policy.json";
const reclaimPolicy: unknown = JSON.parse(await readFile(RECLAIM, "utf8"));
const nodePolicy: unknown = JSON.parse(await readFile("iam/ebs-cache-agent-policy.json", "utf8"));
const keeperRole = [
  { name: "ebs-cache-agent", policy: nodePolicy },
  { name: "ebs-cache-keeper-reclaim", policy: reclaimPolicy },
];
const reclaimOnly = [{ name: "ebs-cache-keeper-reclaim", policy: reclaimPolicy }];

/** The request is allowed only when each of its resources is. */
async function decide(role: typeof keeperRole, action: string, ...checks: Check[]): Promise<string> {
  const parts: string[] = [];
  for (const check of checks) {
    const result = await evaluateRole(role, action, check);
    if (typeof result !== "string") return `error ${result.errors}`;
    parts.push(result);
  }
  return parts.every((p) => p === "Allowed") ? "allowed" : `denied (${parts.join(", ")})`;
}

/** A pool volume as a boot of the stopped instance left it: claimed by that instance. */
const claimedPool = {
  ...managedVolume,
  [VolumeTag.claimedBy]: OTHER,
  [VolumeTag.claimedAt]: "2026-11-01T00:00:00Z",
};
const released = releaseTags({
  instanceId: OTHER,
  kind: VolumeKind.pool,
  keep: false,
  ttlHours: 24,
  releasedAt: new Date("2026-12-01T00:00:00Z"),
  claimedAt: claimedPool[VolumeTag.claimedAt],
});
const workspaceVolume = { ...managedVolume, [VolumeTag.kind]: VolumeKind.workspace };

t.test("the keeper host's role allows every call of a reclaim on a managed pool volume", async (t) => {
  t.equal(await decide(keeperRole, "ec2:DescribeInstances", described()), "allowed", "who holds the volume");
  t.equal(await decide(keeperRole, "ec2:DescribeVolumes", described()), "allowed", "the volume, again");
  t.equal(
    await decide(keeperRole, "ec2:DetachVolume", volume(claimedPool), instance(OTHER)),
    "allowed",
    "DetachVolume of the pool volume from the stopped instance",
  );
  t.same(Object.keys(released.set).sort(), [VolumeTag.expiresAt, VolumeTag.releasedAt].sort(), "the tags it sets");
  t.equal(
    await decide(keeperRole, "ec2:CreateTags", volume(claimedPool, requestTags(released.set))),
    "allowed",
    "CreateTags released-at, expires-at",
  );
  t.equal(
    await decide(keeperRole, "ec2:DeleteTags", volume(claimedPool, { "aws:TagKeys": Object.keys(released.remove) })),
    "allowed",
    `DeleteTags ${Object.keys(released.remove).join(", ")}`,
  );
});

t.test("the reclaim's DetachVolume is denied on volumes that are not managed pool volumes", async (t) => {
  for (const role of [keeperRole, reclaimOnly]) {
    const which = role === keeperRole ? "nodes' policy + reclaim" : "reclaim alone";
    for (const [name, tags] of [
      ["an unmanaged volume", foreignVolume],
      ["a volume with no tags", {}],
      ["a volume tagged kind=pool but not managed", { [VolumeTag.kind]: VolumeKind.pool, [VolumeTag.pool]: "default" }],
      ["a volume tagged managed=false", { ...managedVolume, [VolumeTag.managed]: "false" }],
    ] as const) {
      t.match(
        await decide(role, "ec2:DetachVolume", volume(tags), instance(OTHER)),
        /^denied/,
        `${which}: ${name}, from another instance`,
      );
    }
    t.match(
      await decide(role, "ec2:CreateTags", volume(foreignVolume, requestTags(released.set))),
      /^denied/,
      `${which}: release tags on an unmanaged volume`,
    );
    t.match(
      await decide(role, "ec2:CreateTags", volume(claimedPool, requestTags({ Name: "mine" }))),
      /^denied/,
      `${which}: a tag key outside ebs-cache:* on the pool volume`,
    );
  }
  t.match(
    await decide(reclaimOnly, "ec2:DetachVolume", volume(workspaceVolume), instance(OTHER)),
    /^denied/,
    "reclaim alone: a managed workspace volume",
  );
  t.equal(
    await decide(reclaimOnly, "ec2:DetachVolume", volume(claimedPool), instance(OTHER)),
    "allowed",
    "reclaim alone grants both resources of the detach",
  );
});

t.test("the limit docs/keeper.md states: IAM cannot tie a detach's volume to its instance", async (t) => {
  // The nodes' policy grants the volume side of DetachVolume for every managed volume (a node
  // releases its workspace volumes too), and IAM decides each resource of a request on its own:
  // with the reclaim's instance statement, a managed workspace volume is detachable from another
  // instance as well. The keeper checks the kind itself right before the call.
  t.equal(
    await decide(keeperRole, "ec2:DetachVolume", volume(workspaceVolume), instance(OTHER)),
    "allowed",
    "nodes' policy + reclaim: a managed workspace volume from another instance",
  );
});

t.test("the statement docs/keeper.md gave before let any untagged volume go", async (t) => {
  // StringEqualsIfExists on the volume's tags: a volume without them passes the condition.
  const before = {
    Version: "2012-10-17",
    Statement: [
      {
        Sid: "ReclaimPoolVolumesFromStoppedInstances",
        Effect: "Allow",
        Action: "ec2:DetachVolume",
        Resource: ["arn:aws:ec2:*:*:volume/*", "arn:aws:ec2:*:*:instance/*"],
        Condition: {
          StringEqualsIfExists: {
            "aws:ResourceTag/ebs-cache:kind": "pool",
            "aws:ResourceTag/ebs-cache:managed": "true",
          },
        },
      },
    ],
  };
  t.equal(
    await decide([{ name: "before", policy: before }], "ec2:DetachVolume", volume({}), instance(OTHER)),
    "allowed",
    "an untagged volume from another instance was allowed",
  );
});

t.test("the reclaim policy grants DetachVolume only", async (t) => {
  const statements = (reclaimPolicy as { Statement: { Effect: string; Action: string | string[] }[] }).Statement;
  t.same([...new Set(statements.flatMap((s) => [s.Action].flat()))], ["ec2:DetachVolume"]);
  t.same([...new Set(statements.map((s) => s.Effect))], ["Allow"]);
});
