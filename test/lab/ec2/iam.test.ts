/**
 * IAM in the EC2 emulator, driven by the real SDK: a key installed for a role is decided by the
 * shipped policy through @cloud-copilot/iam-simulate. Denied calls answer UnauthorizedOperation
 * (403, EC2's message with an encoded authorization failure message) and change nothing; DryRun
 * answers DryRunOperation only when the call is allowed; EBS direct answers AccessDeniedException.
 * A statement removed from a copy of the policy makes the call it granted fail.
 */
import t from "tap";
import {
  AttachVolumeCommand,
  CreateTagsCommand,
  CreateVolumeCommand,
  DeleteTagsCommand,
  DeleteVolumeCommand,
  DescribeVolumesCommand,
  DetachVolumeCommand,
  EC2Client,
} from "@aws-sdk/client-ec2";
import { EBSClient, StartSnapshotCommand } from "@aws-sdk/client-ebs";
import agentPolicy from "../../../iam/ebs-cache-agent-policy.json" with { type: "json" };
import { contextKeysNamed, decodeAuthorizationMessage } from "../../../src/lab/ec2/iam/authorizer.ts";
import { ROLE_POLICIES, rolePrincipal } from "../../../src/lab/ec2/iam/principals.ts";
import { attachmentState, availableVolume, describeVolume, sdkError, startLab, volumeState } from "./helpers.ts";

const lab = await startLab(t);
const admin = lab.client();
const clients: { destroy(): void }[] = [];
t.teardown(() => clients.forEach((c) => c.destroy()));
/** A client signing with `key`, installed as `principal` (an uninstalled key is the lab's unrestricted one). */
function as(key: string, principal?: Parameters<typeof lab.emu.iam.principals.install>[1]): EC2Client {
  if (principal) lab.emu.iam.principals.install(key, principal);
  const client = new EC2Client({
    endpoint: lab.emu.endpoint,
    region: "us-east-1",
    credentials: { accessKeyId: key, secretAccessKey: "secret" },
    maxAttempts: 1,
  });
  clients.push(client);
  return client;
}
const nodeA = as("AKIDNODEA", rolePrincipal("agent", lab.a.instanceId));
const managed = { "ebs-cache:managed": "true", "ebs-cache:kind": "pool", "ebs-cache:pool": "p" };
const tagsOf = async (volumeId: string) =>
  Object.fromEntries(((await describeVolume(admin, volumeId)).Tags ?? []).map((tag) => [tag.Key, tag.Value]));

t.test("the agent's role: what the policy allows goes through, the rest is UnauthorizedOperation", async (t) => {
  const pool = await availableVolume(admin, { tags: managed });
  const foreign = await availableVolume(admin, { tags: { Name: "database" } });

  const denied = await sdkError(
    nodeA.send(new AttachVolumeCommand({ VolumeId: foreign, InstanceId: lab.a.instanceId, Device: "/dev/sdf" })),
  );
  t.equal(denied.name, "UnauthorizedOperation");
  t.equal(denied.status, 403);
  const form = new RegExp(
    "^You are not authorized to perform this operation\\. " +
      "User: arn:aws:sts::\\d+:assumed-role/ebs-cache-node/i-\\w+ is not authorized to perform: ec2:AttachVolume " +
      `on resource: arn:aws:ec2:us-east-1:\\d+:volume/${foreign} ` +
      "because no identity-based policy allows the ec2:AttachVolume action\\. " +
      "Encoded authorization failure message: \\S+$",
  );
  t.match(denied.message, form, "EC2's message form");

  const encoded = /Encoded authorization failure message: (\S+)$/.exec(denied.message)?.[1] ?? "";
  const decoded = JSON.parse(decodeAuthorizationMessage(encoded) ?? "null") as {
    allowed: boolean;
    context: { action: string; resource: string };
  };
  t.same(
    { allowed: decoded.allowed, action: decoded.context.action, resource: decoded.context.resource.endsWith(foreign) },
    { allowed: false, action: "ec2:AttachVolume", resource: true },
    "the encoded message decodes to the decision",
  );
  t.equal((await describeVolume(admin, foreign)).State, "available", "the denied attach changed nothing");

  t.equal(
    (
      await sdkError(
        nodeA.send(new AttachVolumeCommand({ VolumeId: pool, InstanceId: lab.b.instanceId, Device: "/dev/sdf" })),
      )
    ).name,
    "UnauthorizedOperation",
    "a managed volume to another instance",
  );

  await nodeA.send(new AttachVolumeCommand({ VolumeId: pool, InstanceId: lab.a.instanceId, Device: "/dev/sdf" }));
  await attachmentState(admin, pool, "attached");
  await nodeA.send(new CreateTagsCommand({ Resources: [pool], Tags: [{ Key: "ebs-cache:claimed-by", Value: "a" }] }));
  t.equal((await tagsOf(pool))["ebs-cache:claimed-by"], "a", "the claim tag is set");
  t.equal(
    (await sdkError(nodeA.send(new CreateTagsCommand({ Resources: [pool], Tags: [{ Key: "Name", Value: "x" }] }))))
      .name,
    "UnauthorizedOperation",
    "a key outside ebs-cache:*",
  );
  t.equal((await tagsOf(pool)).Name, undefined, "the denied tag was not set");
  t.equal(
    (await sdkError(nodeA.send(new DeleteTagsCommand({ Resources: [pool] })))).name,
    "UnauthorizedOperation",
    "DeleteTags naming no key (every tag)",
  );
  t.equal(Object.keys(await tagsOf(pool)).length, 4, "no tag was deleted");

  await nodeA.send(new DetachVolumeCommand({ VolumeId: pool }));
  await volumeState(admin, pool, "available");
  // The decision follows the tags as they are now, not as they were first decided.
  await admin.send(new DeleteTagsCommand({ Resources: [pool], Tags: [{ Key: "ebs-cache:managed" }] }));
  t.equal(
    (
      await sdkError(
        nodeA.send(new AttachVolumeCommand({ VolumeId: pool, InstanceId: lab.a.instanceId, Device: "/dev/sdf" })),
      )
    ).name,
    "UnauthorizedOperation",
    "no longer managed, no longer attachable",
  );
});

t.test("CreateVolume and DeleteVolume: managed only, never a kept one (an explicit Deny)", async (t) => {
  const volumeIds = async () => ((await admin.send(new DescribeVolumesCommand({}))).Volumes ?? []).length;
  const before = await volumeIds();
  const unmanaged = await sdkError(
    nodeA.send(
      new CreateVolumeCommand({
        AvailabilityZone: "us-east-1a",
        Size: 1,
        TagSpecifications: [{ ResourceType: "volume", Tags: [{ Key: "Name", Value: "scratch" }] }],
      }),
    ),
  );
  t.equal(unmanaged.name, "UnauthorizedOperation");
  t.equal(await volumeIds(), before, "no volume was created");
  const created = await nodeA.send(
    new CreateVolumeCommand({
      AvailabilityZone: "us-east-1a",
      Size: 1,
      TagSpecifications: [
        { ResourceType: "volume", Tags: Object.entries(managed).map(([Key, Value]) => ({ Key, Value })) },
      ],
    }),
  );
  await volumeState(admin, created.VolumeId!, "available");

  const kept = await availableVolume(admin, { tags: { ...managed, "ebs-cache:keep": "true" } });
  const refused = await sdkError(nodeA.send(new DeleteVolumeCommand({ VolumeId: kept })));
  t.equal(refused.name, "UnauthorizedOperation");
  t.match(refused.message, /with an explicit deny in an identity-based policy/);
  t.equal((await describeVolume(admin, kept)).State, "available", "the kept volume is still there");
  await nodeA.send(new DeleteVolumeCommand({ VolumeId: created.VolumeId! }));
});

t.test("DryRun is answered truthfully: DryRunOperation when allowed, UnauthorizedOperation when not", async (t) => {
  const pool = await availableVolume(admin, { tags: managed });
  const foreign = await availableVolume(admin, { tags: { Name: "database" } });
  const attach = (volumeId: string, instanceId: string) =>
    sdkError(
      nodeA.send(
        new AttachVolumeCommand({ VolumeId: volumeId, InstanceId: instanceId, Device: "/dev/sdf", DryRun: true }),
      ),
    );
  t.equal((await attach(pool, lab.a.instanceId)).name, "DryRunOperation");
  t.equal((await attach(foreign, lab.a.instanceId)).name, "UnauthorizedOperation");
  t.equal((await attach(pool, lab.b.instanceId)).name, "UnauthorizedOperation");
  t.equal(
    (await sdkError(admin.send(new DeleteVolumeCommand({ VolumeId: foreign, DryRun: true })))).name,
    "DryRunOperation",
    "the lab's unrestricted key",
  );
  t.equal((await describeVolume(admin, pool)).State, "available", "no DryRun changed anything");
});

t.test("a statement removed from a copy of the policy: the call it granted is denied", async (t) => {
  const pool = await availableVolume(admin, { tags: managed });
  const withoutTagging = {
    ...agentPolicy,
    Statement: agentPolicy.Statement.filter((statement) => statement.Sid !== "TagManagedVolumes"),
  };
  t.equal(withoutTagging.Statement.length, agentPolicy.Statement.length - 1);
  const edited = as(
    "AKIDEDITED",
    rolePrincipal("agent", lab.a.instanceId, [{ name: "edited", policy: withoutTagging }]),
  );
  const claim = new CreateTagsCommand({ Resources: [pool], Tags: [{ Key: "ebs-cache:claimed-by", Value: "a" }] });
  t.equal((await sdkError(edited.send(claim))).name, "UnauthorizedOperation", "the edited policy denies the claim");
  t.equal((await tagsOf(pool))["ebs-cache:claimed-by"], undefined);
  await nodeA.send(claim);
  t.equal((await tagsOf(pool))["ebs-cache:claimed-by"], "a", "the shipped policy allows it");
});

t.test("EBS direct: the build role starts only pool snapshots (AccessDeniedException)", async (t) => {
  lab.emu.iam.principals.install("AKIDBUILDER", rolePrincipal("builder"));
  const ebs = new EBSClient({
    endpoint: lab.emu.endpoint,
    region: "us-east-1",
    credentials: { accessKeyId: "AKIDBUILDER", secretAccessKey: "secret" },
    maxAttempts: 1,
  });
  clients.push(ebs);
  const denied = await sdkError(
    ebs.send(new StartSnapshotCommand({ VolumeSize: 1, Tags: [{ Key: "Name", Value: "x" }] })),
  );
  t.equal(denied.name, "AccessDeniedException");
  t.equal(denied.status, 403);
  t.match(denied.message, /is not authorized to perform: ebs:StartSnapshot/);
  const started = await ebs.send(
    new StartSnapshotCommand({
      VolumeSize: 1,
      Tags: [
        { Key: "ebs-cache:managed", Value: "true" },
        { Key: "ebs-cache:kind", Value: "pool" },
      ],
    }),
  );
  t.match(started.SnapshotId, /^snap-/);
});

t.test("with enforcement off, an installed key may do anything", async (t) => {
  const foreign = await availableVolume(admin, { tags: { Name: "database" } });
  lab.emu.iam.enforce = false;
  t.teardown(() => void (lab.emu.iam.enforce = true));
  await nodeA.send(new AttachVolumeCommand({ VolumeId: foreign, InstanceId: lab.a.instanceId, Device: "/dev/sdf" }));
  await attachmentState(admin, foreign, "attached");
  t.pass("attached");
});

t.test("decisions are kept under the context keys the policies name, and only those", async (t) => {
  t.same(
    [...contextKeysNamed(ROLE_POLICIES.agent)].sort(),
    [
      "aws:requesttag/ebs-cache:managed",
      "aws:resourcetag/ebs-cache:keep",
      "aws:resourcetag/ebs-cache:managed",
      "aws:tagkeys",
      "ec2:createaction",
      "ec2:instanceid",
      "ec2:sourceinstancearn",
      "kms:grantisforawsresource",
      "kms:viaservice",
    ],
    "the condition keys and the ${ec2:InstanceID} variable",
  );
  const pool = await availableVolume(admin, { tags: managed });
  const claim = (key: string, value: string) =>
    nodeA.send(new CreateTagsCommand({ Resources: [pool], Tags: [{ Key: key, Value: value }] }));
  await claim("ebs-cache:claimed-at", "2026-12-01T00:00:00Z");
  await claim("ebs-cache:claimed-at", "2026-12-01T00:00:01Z");
  t.equal((await tagsOf(pool))["ebs-cache:claimed-at"], "2026-12-01T00:00:01Z", "a kept decision, a new value");
  t.equal(
    (await sdkError(claim("Name", "2026-12-01T00:00:01Z"))).name,
    "UnauthorizedOperation",
    "a new key is asked anew",
  );
});
