/**
 * identifyInstance (src/aws/imds.ts) against the lab's hosts: the SDK's MetadataService over
 * HTTP to each host's IMDSv2 emulator, and DescribeInstances through the EC2 emulator when the
 * instance does not serve tags in IMDS.
 */
import t from "tap";
import { createServer } from "node:net";
import type { AddressInfo } from "node:net";
import { createCloudVolumes, createEc2Client } from "../../src/aws/ec2.ts";
import { ImdsUnavailableError } from "../../src/aws/errors.ts";
import { createMetadataService, identifyInstance, imdsTagKeyProblem } from "../../src/aws/imds.ts";
import { retry, RetryDeadlineError } from "../../src/aws/retry.ts";
import type { AgentError } from "../../src/errors.ts";
import { LAB_CREDENTIALS, startLab } from "../../src/lab/lab.ts";
import { createMemoryLogger } from "../../src/log.ts";
import { VolumeTag } from "../../src/tags.ts";
import { assertLabPrerequisites } from "../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const log = createMemoryLogger();
const lab = await startLab({ name: "test-aws-imds", log });
t.teardown(() => lab.close());
const client = createEc2Client({ region: lab.region, endpoint: lab.ec2.endpoint, credentials: LAB_CREDENTIALS });
t.teardown(() => client.destroy());
const cloud = createCloudVolumes({ client, log });

/** Keys IMDS can serve: every character EC2 allows there (`- _ + = , . @ :`), none needing encoding. */
const hostTags = {
  Name: "swarm-worker",
  [VolumeTag.pool]: "builders",
  "cost+center=ops,eu@team:1": "42",
  "io.simcore.autoscaling.ec2_instance.docker_node_labels": JSON.stringify({ "user-id": "7", "node-id": "n-1" }),
};
/** Keys EC2 keeps off an instance with metadata tags: such an instance reads them from EC2 (DescribeInstances). */
const describeOnlyTags = { ...hostTags, "cost center": "42", "k8s.io/cluster/lab": "owned" };

/** ec2Tags for tests where IMDS must serve the tags: any call is a failure. */
const noEc2Tags = async (instanceId: string): Promise<Record<string, string>> => {
  throw new Error(`EC2 tags were not expected (instance ${instanceId})`);
};

t.test("identity and tags from IMDS", async (t) => {
  const host = await lab.addHost({ availabilityZone: `${lab.region}b`, tags: hostTags, instanceType: "g4dn.8xlarge" });
  const metadata = createMetadataService({ endpoint: host.imds.endpoint });
  t.equal(metadata.endpoint, host.imds.endpoint);
  const identity = await identifyInstance({ metadata, ec2Tags: noEc2Tags, timeoutMs: 30_000, log });
  t.same(identity, {
    instanceId: host.instance.instanceId,
    region: lab.region,
    availabilityZone: `${lab.region}b`,
    tags: hostTags,
    tagsSource: "imds",
    instanceType: "g4dn.8xlarge",
  });
  t.ok(
    host.imds.requests.some((r) => r.method === "PUT" && r.path === "/latest/api/token"),
    "IMDSv2 token flow",
  );
  t.ok(
    host.imds.requests.every((r) => r.status === 200),
    "no request was refused",
  );
});

t.test("InstanceMetadataTags disabled: tags from EC2 DescribeInstances", async (t) => {
  const host = await lab.addHost({ tags: describeOnlyTags, metadataTags: false });
  const asked: string[] = [];
  const identity = await identifyInstance({
    metadata: createMetadataService({ endpoint: host.imds.endpoint }),
    ec2Tags: (instanceId) => {
      asked.push(instanceId);
      return cloud.describeInstance(instanceId).then((instance) => instance.tags);
    },
    timeoutMs: 30_000,
    log,
  });
  t.same(asked, [host.instance.instanceId]);
  t.same(identity.tags, describeOnlyTags, "keys with spaces and '/' included");
  t.equal(identity.tagsSource, "ec2");
  t.ok(
    host.imds.requests.some((r) => r.path.endsWith("/tags/instance") && r.status === 404),
    "IMDS said 404 for the tags",
  );
});

t.test("IMDS tag-key rules: EC2 refuses an instance with metadata tags and a key IMDS cannot serve", async (t) => {
  for (const key of ["cost center", "k8s.io/cluster/lab", ".", "..", "_index", "caf\u00e9"]) {
    t.match(imdsTagKeyProblem(key), /is not a valid tag key\. Tag keys must match pattern/, JSON.stringify(key));
    await t.rejects(
      lab.addHost({ tags: { [key]: "x" } }),
      { message: /is not a valid tag key/ },
      `${JSON.stringify(key)}: launch refused`,
    );
  }
  for (const key of ["Name", "ebs-cache:pool", "a.b_c-d+e=f,g@h:i", "_index2", "..."])
    t.equal(imdsTagKeyProblem(key), undefined, key);
  // With metadata tags off the same keys are fine (EC2 serves them).
  await t.resolves(lab.addHost({ tags: { "cost center": "42" }, metadataTags: false }));
});

t.test("a key IMDS cannot serve that shows up anyway: identify falls back to EC2", async (t) => {
  const host = await lab.addHost({ tags: { Name: "odd" } });
  // Only reachable behind EC2's back (the live object): what a lenient emulator or a future
  // IMDS change could list. The agent must not act on a partial tag set.
  host.instance.tags["k8s.io/cluster/lab"] = "owned";
  const asked: string[] = [];
  const identity = await identifyInstance({
    metadata: createMetadataService({ endpoint: host.imds.endpoint }),
    ec2Tags: async (instanceId) => {
      asked.push(instanceId);
      return { Name: "odd", "k8s.io/cluster/lab": "owned" };
    },
    timeoutMs: 30_000,
    log,
  });
  t.same(asked, [host.instance.instanceId], "EC2 asked once");
  t.equal(identity.tagsSource, "ec2");
  t.same(identity.tags, { Name: "odd", "k8s.io/cluster/lab": "owned" });
  t.ok(
    log.lines.some((line) => /IMDS lists tag keys it cannot serve/.test(line) && line.includes("k8s.io/cluster/lab")),
    "the fallback is logged with the key",
  );
  t.notOk(
    host.imds.requests.some((r) => r.path.includes("k8s.io")),
    "the key was never requested as a path",
  );
});

t.test("IMDS unavailable early in boot: identification still succeeds", async (t) => {
  for (const how of ["reset", "503"] as const) {
    const host = await lab.addHost({ tags: { Name: `early-${how}` } });
    host.imds.unavailableFor(3, how);
    const identity = await identifyInstance({
      metadata: createMetadataService({ endpoint: host.imds.endpoint }),
      ec2Tags: noEc2Tags,
      timeoutMs: 30_000,
      log,
    });
    t.equal(identity.instanceId, host.instance.instanceId, how);
    t.same(identity.tags, { Name: `early-${how}` });
    t.equal(
      host.imds.requests.filter((r) => r.status === (how === "reset" ? "reset" : 503)).length,
      3,
      `3 requests failed (${how})`,
    );
  }
});

t.test("IMDS that never answers: a typed error naming the endpoint at the deadline", async (t) => {
  const host = await lab.addHost();
  host.imds.unavailableFor(1_000_000, "503");
  const started = Date.now();
  const error = await identifyInstance({
    metadata: createMetadataService({ endpoint: host.imds.endpoint }),
    ec2Tags: noEc2Tags,
    timeoutMs: 1_000,
    log,
  }).catch((e: unknown) => e);
  t.type(error, ImdsUnavailableError);
  t.match((error as Error).message, host.imds.endpoint);
  t.match((error as AgentError).remediation, /HttpEndpoint/);
  t.ok(Date.now() - started >= 1_000, "it kept trying until the deadline");

  // Nothing listening at all (connection refused).
  const port = await new Promise<number>((resolve) => {
    const server = createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
  const endpoint = `http://127.0.0.1:${port}`;
  const refused = await identifyInstance({
    metadata: createMetadataService({ endpoint }),
    ec2Tags: noEc2Tags,
    timeoutMs: 500,
    log,
  }).catch((e: unknown) => e);
  t.type(refused, ImdsUnavailableError);
  t.match(refused, { endpoint, path: /instance-id|placement/ });
});

t.test("retry: only retryable errors are tried again, until the deadline", async (t) => {
  let calls = 0;
  const fatal = await retry(
    async () => {
      calls++;
      throw new Error("fatal");
    },
    { isRetryable: () => false, deadline: Date.now() + 10_000 },
  ).catch((e: unknown) => e);
  t.match(fatal, { message: "fatal" });
  t.equal(calls, 1, "a non-retryable error is thrown at once");

  calls = 0;
  const value = await retry(
    async (attempt) => {
      calls++;
      if (attempt < 3) throw new Error("transient");
      return "done";
    },
    { isRetryable: () => true, deadline: Date.now() + 10_000, delayMs: () => 1 },
  );
  t.equal(value, "done");
  t.equal(calls, 3);

  const late = await retry(
    async () => {
      throw new Error("still down");
    },
    { isRetryable: () => true, deadline: Date.now() + 50, delayMs: () => 10 },
  ).catch((e: unknown) => e);
  t.type(late, RetryDeadlineError);
  t.match(late, { lastError: { message: "still down" } });
});
