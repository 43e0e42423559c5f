import t from "tap";
import { MetadataService } from "@aws-sdk/ec2-metadata-service";
import { fromInstanceMetadata } from "@smithy/credential-provider-imds";
import { defaultProvider } from "@aws-sdk/credential-provider-node";
import { startImdsEmulator, type ImdsEmulator, type ImdsEmulatorOptions } from "../../../src/lab/imds/imds.ts";
import type { LabInstance } from "../../../src/lab/types.ts";

function labInstance(overrides: Partial<LabInstance> = {}): LabInstance {
  return {
    instanceId: "i-0123456789abcdef0",
    region: "eu-west-3",
    availabilityZone: "eu-west-3b",
    tags: { Name: "swarm-worker", "ebs-cache:pool": "builders" },
    metadataTags: true,
    hostRoot: "/nonexistent",
    ...overrides,
  };
}

/** Starts an emulator for the test and stops it when the test ends. */
async function emulator(
  t: { teardown(fn: () => unknown): void },
  instance: LabInstance,
  options: Partial<ImdsEmulatorOptions> = {},
): Promise<ImdsEmulator> {
  const imds = await startImdsEmulator({ instance: () => instance, ...options });
  t.teardown(() => imds.close());
  return imds;
}

/** The SDK's client, IMDSv2 only, without the SDK's multi-second backoff between retries. */
function sdkClient(imds: ImdsEmulator, retries = 0): MetadataService {
  return new MetadataService({ endpoint: imds.endpoint, ec2MetadataV1Disabled: true, retries, backoff: 0 });
}

/** The HTTP status an SDK request failed with ("resolved" if it did not fail). */
async function failureStatus(request: Promise<unknown>): Promise<number | "resolved" | undefined> {
  try {
    await request;
    return "resolved";
  } catch (error) {
    return (error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
  }
}

async function getToken(imds: ImdsEmulator, ttl: string): Promise<string> {
  const res = await fetch(`${imds.endpoint}/latest/api/token`, {
    method: "PUT",
    headers: { "X-aws-ec2-metadata-token-ttl-seconds": ttl },
  });
  if (res.status !== 200) throw new Error(`token request answered ${res.status}`);
  return res.text();
}

t.test("the SDK's MetadataService reads every path through the token flow", async (t) => {
  const imds = await emulator(t, labInstance());
  const sdk = sdkClient(imds);
  t.equal(await sdk.request("/latest/meta-data/instance-id", {}), "i-0123456789abcdef0");
  t.equal(await sdk.request("/latest/meta-data/placement/availability-zone", {}), "eu-west-3b");
  t.equal(await sdk.request("/latest/meta-data/placement/region", {}), "eu-west-3");
  t.same((await sdk.request("/latest/meta-data/tags/instance", {})).split("\n").sort(), ["Name", "ebs-cache:pool"]);
  t.equal(await sdk.request("/latest/meta-data/tags/instance/ebs-cache:pool", {}), "builders");
  const listing = (await sdk.request("/latest/meta-data/", {})).split("\n");
  t.same(listing.sort(), ["iam/", "instance-id", "instance-type", "placement/", "tags/"]);
  t.equal(await sdk.request("/latest/meta-data/instance-type", {}), "m6i.large", "the lab's default type");
  const doc = JSON.parse(await sdk.request("/latest/dynamic/instance-identity/document", {})) as Record<string, string>;
  t.match(doc, {
    instanceId: "i-0123456789abcdef0",
    region: "eu-west-3",
    availabilityZone: "eu-west-3b",
    accountId: "123456789012",
    instanceType: "m6i.large",
  });
  t.equal(await sdk.request("/latest/meta-data/iam/security-credentials/", {}), "ebs-cache-agent-lab");

  // Every GET went with a token: none of them was refused.
  const gets = imds.requests.filter((r) => r.method === "GET");
  t.ok(gets.length >= 8);
  t.ok(gets.every((r) => r.status === 200));
  t.ok(imds.requests.some((r) => r.method === "PUT" && r.path === "/latest/api/token" && r.status === 200));
});

t.test("unknown paths are 404 and the SDK does not retry them", async (t) => {
  const imds = await emulator(t, labInstance());
  t.equal(await failureStatus(sdkClient(imds, 3).request("/latest/meta-data/nope", {})), 404);
  t.equal(imds.requests.filter((r) => r.method === "GET").length, 1);
  const token = await getToken(imds, "60");
  const res = await fetch(`${imds.endpoint}/latest/meta-data/instance-id/extra`, {
    headers: { "X-aws-ec2-metadata-token": token },
  });
  t.equal(res.status, 404);
  t.equal(res.headers.get("connection"), "close", "as EC2's IMDS: the connection ends with the answer");
});

t.test("without IMDSv1, a GET needs a valid token", async (t) => {
  const imds = await emulator(t, labInstance());
  const url = `${imds.endpoint}/latest/meta-data/instance-id`;
  t.equal((await fetch(url)).status, 401, "no token");
  t.equal((await fetch(url, { headers: { "X-aws-ec2-metadata-token": "forged" } })).status, 401, "unknown token");
  const token = await getToken(imds, "21600");
  const ok = await fetch(url, { headers: { "X-aws-ec2-metadata-token": token } });
  t.equal(ok.status, 200);
  t.equal(await ok.text(), "i-0123456789abcdef0");
  imds.revokeTokens();
  t.equal((await fetch(url, { headers: { "X-aws-ec2-metadata-token": token } })).status, 401, "revoked token");
});

t.test("with IMDSv1 allowed, no token is fine but a bad one is still refused", async (t) => {
  const imds = await emulator(t, labInstance(), { imdsV1: true });
  const url = `${imds.endpoint}/latest/meta-data/placement/region`;
  const res = await fetch(url);
  t.equal(res.status, 200);
  t.equal(await res.text(), "eu-west-3");
  t.equal((await fetch(url, { headers: { "X-aws-ec2-metadata-token": "forged" } })).status, 401);
});

t.test("the token request is validated as IMDS does", async (t) => {
  const imds = await emulator(t, labInstance());
  const url = `${imds.endpoint}/latest/api/token`;
  const put = (headers: Record<string, string>) => fetch(url, { method: "PUT", headers }).then((r) => r.status);
  t.equal(await put({}), 400, "TTL missing");
  t.equal(await put({ "X-aws-ec2-metadata-token-ttl-seconds": "0" }), 400, "TTL 0");
  t.equal(await put({ "X-aws-ec2-metadata-token-ttl-seconds": "21601" }), 400, "TTL above 6 h");
  t.equal(await put({ "X-aws-ec2-metadata-token-ttl-seconds": "ten" }), 400, "TTL not a number");
  t.equal(await put({ "X-aws-ec2-metadata-token-ttl-seconds": "1" }), 200, "TTL 1 s");
  t.equal(await put({ "X-aws-ec2-metadata-token-ttl-seconds": "21600" }), 200, "TTL 6 h");
  const forwarded = { "X-aws-ec2-metadata-token-ttl-seconds": "60", "X-Forwarded-For": "10.0.0.1" };
  t.equal(await put(forwarded), 403, "proxied token requests are refused");
  t.equal((await fetch(url)).status, 405, "GET on the token path");
  const res = await fetch(url, { method: "PUT", headers: { "X-aws-ec2-metadata-token-ttl-seconds": "120" } });
  t.equal(res.headers.get("x-aws-ec2-metadata-token-ttl-seconds"), "120", "the TTL is echoed");
});

// Both wait out a token's 1 s lifetime: side by side, each with an emulator of its own.
t.test("token lifetimes", async (t) => {
  t.jobs = 2;
  t.test("a token stops working once its TTL has passed", async (t) => {
    const imds = await emulator(t, labInstance());
    const url = `${imds.endpoint}/latest/meta-data/instance-id`;
    const token = await getToken(imds, "1");
    t.equal((await fetch(url, { headers: { "X-aws-ec2-metadata-token": token } })).status, 200);
    // Correctness wait: the token must be past its 1 s lifetime.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    t.equal((await fetch(url, { headers: { "X-aws-ec2-metadata-token": token } })).status, 401);
  });

  t.test("setTokenTtlOverride shortens tokens the client believes long-lived", async (t) => {
    const imds = await emulator(t, labInstance());
    imds.setTokenTtlOverride(1);
    const url = `${imds.endpoint}/latest/meta-data/instance-id`;
    const token = await getToken(imds, "21600");
    await new Promise((resolve) => setTimeout(resolve, 1500));
    t.equal((await fetch(url, { headers: { "X-aws-ec2-metadata-token": token } })).status, 401);
    imds.setTokenTtlOverride(undefined);
    const fresh = await getToken(imds, "21600");
    t.equal((await fetch(url, { headers: { "X-aws-ec2-metadata-token": fresh } })).status, 200);
  });
});

t.test("tags are 404 when the instance does not allow metadata tags", async (t) => {
  const imds = await emulator(t, labInstance({ metadataTags: false }));
  const sdk = sdkClient(imds);
  t.equal(await failureStatus(sdk.request("/latest/meta-data/tags/instance", {})), 404);
  t.equal(await failureStatus(sdk.request("/latest/meta-data/tags/instance/Name", {})), 404);
  t.notOk((await sdk.request("/latest/meta-data/", {})).split("\n").includes("tags/"));
});

t.test("tags are read live from the instance", async (t) => {
  const instance = labInstance();
  const imds = await emulator(t, instance);
  const sdk = sdkClient(imds);
  t.equal(await failureStatus(sdk.request("/latest/meta-data/tags/instance/ebs-cache:volume", {})), 404);
  instance.tags = { ...instance.tags, "ebs-cache:volume": "vol-0abc" };
  t.equal(await sdk.request("/latest/meta-data/tags/instance/ebs-cache:volume", {}), "vol-0abc");
  t.ok((await sdk.request("/latest/meta-data/tags/instance", {})).split("\n").includes("ebs-cache:volume"));
  instance.metadataTags = false;
  t.equal(await failureStatus(sdk.request("/latest/meta-data/tags/instance", {})), 404);
});

t.test("tag keys with every character IMDS allows are reached as they are", async (t) => {
  const key = "cost+center=ops,eu@team:1.a_b-c";
  const imds = await emulator(t, labInstance({ tags: { [key]: "42" } }));
  t.ok((await sdkClient(imds).request("/latest/meta-data/tags/instance", {})).split("\n").includes(key), "listed");
  t.equal(await sdkClient(imds).request(`/latest/meta-data/tags/instance/${key}`, {}), "42");
});

t.test("a key holding '/' (which EC2 keeps off such an instance) is listed but cannot be read as a path", async (t) => {
  const imds = await emulator(t, labInstance({ tags: { "k8s.io/cluster/lab": "owned" } }));
  const sdk = sdkClient(imds);
  t.ok((await sdk.request("/latest/meta-data/tags/instance", {})).split("\n").includes("k8s.io/cluster/lab"));
  t.equal(await failureStatus(sdk.request("/latest/meta-data/tags/instance/k8s.io/cluster/lab", {})), 404);
});

t.test("unavailableFor makes early-boot requests fail, then IMDS answers", async (t) => {
  const imds = await emulator(t, labInstance());
  imds.unavailableFor(2, "reset");
  t.equal(
    await sdkClient(imds, 3)
      .fetchMetadataToken()
      .then((token) => token.length > 0),
    true,
  );
  t.same(
    imds.requests.map((r) => r.status),
    ["reset", "reset", 200],
  );

  imds.unavailableFor(1, "503");
  const res = await fetch(`${imds.endpoint}/latest/api/token`, {
    method: "PUT",
    headers: { "X-aws-ec2-metadata-token-ttl-seconds": "60" },
  });
  t.equal(res.status, 503);
  t.equal((await fetch(`${imds.endpoint}/latest/meta-data/instance-id`)).status, 401, "back to normal");
});

t.test("the SDK's credential providers get instance-profile credentials", async (t) => {
  const imds = await emulator(t, labInstance(), {
    credentials: { accessKeyId: "ASIALABKEY", secretAccessKey: "lab-secret", sessionToken: "lab-session" },
  });
  // The chain reads its endpoint from the environment; keep it hermetic from ~/.aws and AWS_* vars.
  const saved = { ...process.env };
  t.teardown(() => {
    process.env = saved;
  });
  for (const key of Object.keys(process.env)) if (key.startsWith("AWS_")) delete process.env[key];
  process.env.AWS_EC2_METADATA_SERVICE_ENDPOINT = imds.endpoint;
  process.env.AWS_EC2_METADATA_V1_DISABLED = "true";
  process.env.AWS_CONFIG_FILE = "/nonexistent/aws-config";
  process.env.AWS_SHARED_CREDENTIALS_FILE = "/nonexistent/aws-credentials";

  const fromImds = await fromInstanceMetadata()();
  t.equal(fromImds.accessKeyId, "ASIALABKEY");
  t.equal(fromImds.secretAccessKey, "lab-secret");
  t.equal(fromImds.sessionToken, "lab-session");
  t.ok(fromImds.expiration && fromImds.expiration.getTime() > Date.now(), "expires in the future");

  const fromChain = await defaultProvider()();
  t.equal(fromChain.accessKeyId, "ASIALABKEY", "the default chain falls through to IMDS");

  const path = "/latest/meta-data/iam/security-credentials/ebs-cache-agent-lab";
  const raw = JSON.parse(await sdkClient(imds).request(path, {})) as Record<string, string>;
  t.match(raw, { Code: "Success", Type: "AWS-HMAC", AccessKeyId: "ASIALABKEY", Token: "lab-session" });
  t.match(raw.Expiration, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  t.match(raw.LastUpdated, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
});

t.test("without an instance profile there is no iam tree", async (t) => {
  const imds = await emulator(t, labInstance(), { iamRole: null });
  const sdk = sdkClient(imds);
  t.equal(await failureStatus(sdk.request("/latest/meta-data/iam/security-credentials/", {})), 404);
});
