/**
 * The EC2 client's credentials (src/aws/credentials.ts) against the IMDS emulator over HTTP and
 * the EC2 emulator: instance-profile credentials with the agent's timeouts and retries, fetched
 * once per client, refreshed before they expire; and how a credential failure is classified.
 */
import t from "tap";
import { DescribeVolumesCommand, EC2ServiceException } from "@aws-sdk/client-ec2";
import { CredentialsProviderError, ProviderError } from "@smithy/core/config";
import { fromInstanceMetadata } from "@smithy/credential-provider-imds";
import {
  agentCredentials,
  instanceProfileCredentials,
  type InstanceProfileOptions,
} from "../../src/aws/credentials.ts";
import { createEc2Client } from "../../src/aws/ec2.ts";
import {
  classifyEc2Error,
  cloudFailureOf,
  CredentialsUnavailableError,
  Ec2CallError,
  ec2CallError,
  isTransientFailure,
} from "../../src/aws/errors.ts";
import { AgentError } from "../../src/errors.ts";
import { startEc2Emulator } from "../../src/lab/ec2/index.ts";
import { MemoryVolumeBackend } from "../../src/lab/ec2/memory-backend.ts";
import { startImdsEmulator, type ImdsEmulator, type ImdsEmulatorOptions } from "../../src/lab/imds/imds.ts";
import type { LabInstance } from "../../src/lab/types.ts";
import { createMemoryLogger } from "../../src/log.ts";

const ROLE_PATH = "/latest/meta-data/iam/security-credentials/ebs-cache-agent-lab";
const FIXED = { accessKeyId: "ASIALABCREDS", secretAccessKey: "lab-secret", sessionToken: "lab-session" };

// Hermetic: no AWS_* variable of the machine may decide where credentials come from.
const savedEnv = { ...process.env };
t.teardown(() => {
  process.env = savedEnv;
});
for (const key of Object.keys(process.env)) if (key.startsWith("AWS_")) delete process.env[key];
process.env.AWS_CONFIG_FILE = "/nonexistent/aws-config";
process.env.AWS_SHARED_CREDENTIALS_FILE = "/nonexistent/aws-credentials";

const instance: LabInstance = {
  instanceId: "i-0123456789abcdef0",
  region: "us-east-1",
  availabilityZone: "us-east-1a",
  tags: { Name: "creds" },
  metadataTags: true,
  hostRoot: "/nonexistent",
};

/** An IMDS for one test, which the SDK's provider is pointed at (it reads the environment). */
async function imdsFor(
  t: { teardown(fn: () => unknown): void },
  options: Partial<ImdsEmulatorOptions> = {},
): Promise<ImdsEmulator> {
  const imds = await startImdsEmulator({ instance: () => instance, credentials: FIXED, ...options });
  t.teardown(() => imds.close());
  process.env.AWS_EC2_METADATA_SERVICE_ENDPOINT = imds.endpoint;
  return imds;
}

/**
 * The agent's provider options for `imds`. The pause between attempts is 20 ms, not the agent's
 * backoff (250 ms doubling): these cases check what is retried and how often, not how long it
 * pauses, and would otherwise spend seconds waiting it out.
 */
function profile(imds: ImdsEmulator, overrides: Partial<InstanceProfileOptions> = {}): InstanceProfileOptions {
  return {
    endpoint: imds.endpoint,
    requestTimeoutMs: 5_000,
    budgetMs: 30_000,
    retryDelayMs: () => 20,
    log: createMemoryLogger(),
    ...overrides,
  };
}

/** GETs of the role's credentials document. */
const roleFetches = (imds: ImdsEmulator) =>
  imds.requests.filter((r) => r.method === "GET" && r.path.replace(/\/{2,}/g, "/") === ROLE_PATH);

t.test(
  "credentials answering after 2 s: the SDK's default (1 s) gives up, the agent's provider gets them",
  async (t) => {
    const imds = await imdsFor(t);
    // Each of the role's two reads (its name, then its credentials) answers after 2 s: twice
    // the SDK's default timeout, well within the agent's 5 s per request.
    imds.slowCredentials(2_000);
    // Both at once, each with a token of its own: the SDK's gives up while the agent's waits.
    const sdkDefaults = t.rejects(
      fromInstanceMetadata({ ec2MetadataV1Disabled: true })(),
      "the SDK's defaults: 1 s timeout, no retry",
    );
    const credentials = await instanceProfileCredentials(profile(imds))();
    await sdkDefaults;
    t.match(credentials, {
      accessKeyId: FIXED.accessKeyId,
      secretAccessKey: FIXED.secretAccessKey,
      sessionToken: FIXED.sessionToken,
    });
    t.ok(credentials.expiration && credentials.expiration.getTime() > Date.now(), "with their expiry");
  },
);

t.test("credentials failing a few times, then answering: retried (token included) until they come", async (t) => {
  for (const how of ["503", "reset"] as const) {
    const imds = await imdsFor(t);
    imds.credentialsFailFor(3, how);
    const log = createMemoryLogger();
    const credentials = await instanceProfileCredentials(profile(imds, { log }))();
    t.equal(credentials.accessKeyId, FIXED.accessKeyId, how);
    const failed = imds.requests.filter((r) => r.status === (how === "503" ? 503 : "reset"));
    t.equal(failed.length, 3, `3 failed answers (${how})`);
    t.equal(imds.requests.filter((r) => r.method === "PUT").length, 4, "a fresh token for each attempt");
    t.ok(
      log.lines.some((line) => /credentials\b.*attempts=4/.test(line)),
      "the log says how many attempts it took",
    );
  }
});

t.test(
  "credentials that never come within the budget: a transient CredentialsUnavailableError, no IAM hint",
  async (t) => {
    const imds = await imdsFor(t);
    imds.slowCredentials(600_000);
    const started = Date.now();
    const error = await instanceProfileCredentials(profile(imds, { requestTimeoutMs: 500, budgetMs: 1_200 }))().catch(
      (e: unknown) => e,
    );
    t.type(error, CredentialsUnavailableError);
    const e = error as CredentialsUnavailableError;
    t.ok(Date.now() - started >= 1_200, "it kept trying until the budget was spent");
    t.ok(e.attempts >= 2, `tried again (${e.attempts} attempts)`);
    t.match(e.message, /no instance-profile credentials from IMDS at http:\/\/127\.0\.0\.1:\d+ after \d+ attempts/);
    t.match(e.remediation, /instance profile/);
    t.match(e.remediation, /HttpPutResponseHopLimit/);
    t.notMatch(e.remediation, /grant the instance role/);
    t.same(cloudFailureOf(e), { kind: "credentials-unavailable", transient: true });
  },
);

t.test("a refused token request is told as such, not as the SDK's 'IMDSv1 fallback blocked'", async (t) => {
  const imds = await imdsFor(t);
  imds.unavailableFor(1_000, "503");
  const error = await instanceProfileCredentials(profile(imds, { requestTimeoutMs: 1_000, budgetMs: 600 }))().catch(
    (e: unknown) => e,
  );
  t.type(error, CredentialsUnavailableError);
  t.match((error as Error).message, /IMDS did not hand out an IMDSv2 session token/);
});

t.test("no instance profile: IMDS answers 404, the fetch stops at once and says so", async (t) => {
  const imds = await imdsFor(t, { iamRole: null });
  const error = await instanceProfileCredentials(profile(imds))().catch((e: unknown) => e);
  t.type(error, CredentialsUnavailableError);
  t.equal((error as CredentialsUnavailableError).attempts, 1, "a 404 is an answer: not retried");
  t.match((error as Error).message, /no instance profile attached/);
});

t.test("the SDK would ask another IMDS than the agent's: refused, nothing fetched", async (t) => {
  const imds = await imdsFor(t);
  const other = await startImdsEmulator({ instance: () => instance });
  t.teardown(() => other.close());
  const error = await instanceProfileCredentials(profile(other))().catch((e: unknown) => e);
  t.type(error, CredentialsUnavailableError);
  t.match((error as Error).message, /AWS_EC2_METADATA_SERVICE_ENDPOINT/);
  t.equal(imds.requests.length + other.requests.length, 0, "no IMDS was asked");
});

t.test("environment credentials come first: IMDS is not asked", async (t) => {
  const imds = await imdsFor(t);
  process.env.AWS_ACCESS_KEY_ID = "AKIAFROMENV";
  process.env.AWS_SECRET_ACCESS_KEY = "env-secret";
  t.teardown(() => {
    delete process.env.AWS_ACCESS_KEY_ID;
    delete process.env.AWS_SECRET_ACCESS_KEY;
  });
  const credentials = await agentCredentials({ instanceProfile: profile(imds) })();
  t.equal(credentials.accessKeyId, "AKIAFROMENV");
  t.equal(imds.requests.length, 0);
  const fixed = await agentCredentials({
    static: { accessKeyId: "AKIASTATIC", secretAccessKey: "s" },
    instanceProfile: profile(imds),
  })();
  t.equal(fixed.accessKeyId, "AKIASTATIC", "static credentials win over the environment");
});

t.test("the EC2 client fetches the credentials once for a boot's calls, and again before they expire", async (t) => {
  const ec2 = await startEc2Emulator({
    backend: new MemoryVolumeBackend(),
    delays: { createMs: 10, attachMs: 10, detachMs: 10, snapshotMs: 10 },
  });
  t.teardown(() => ec2.close());
  const callsWith = async (imds: ImdsEmulator) => {
    const client = createEc2Client({ region: "us-east-1", endpoint: ec2.endpoint, instanceProfile: profile(imds) });
    t.teardown(() => client.destroy());
    // observe's calls go out together; later steps one by one.
    await Promise.all([1, 2, 3].map(() => client.send(new DescribeVolumesCommand({}))));
    await client.send(new DescribeVolumesCommand({}));
    await client.send(new DescribeVolumesCommand({}));
  };

  const sixHours = await imdsFor(t);
  sixHours.slowCredentials(300); // the concurrent calls all wait on the one fetch
  await callsWith(sixHours);
  t.equal(roleFetches(sixHours).length, 1, "5 EC2 calls, 3 of them concurrent: one credentials fetch");

  // Credentials that expire within the SDK's 5-minute refresh window are fetched again.
  const fourMinutes = await imdsFor(t, { credentialsLifetimeSeconds: 240 });
  await callsWith(fourMinutes);
  t.ok(roleFetches(fourMinutes).length >= 2, `refreshed before expiry (${roleFetches(fourMinutes).length} fetches)`);
});

t.test(
  "classification: a credential failure is transient 'credentials-unavailable', a refusal by EC2 is 'unauthorized'",
  async (t) => {
    const sdkError = (name: string, status: number) =>
      new EC2ServiceException({
        name,
        $fault: status >= 500 ? "server" : "client",
        $metadata: { httpStatusCode: status },
        message: name,
      });
    const cases: Array<[string, unknown, string, boolean]> = [
      [
        "the default chain's last word",
        new CredentialsProviderError("Could not load credentials from any providers", false),
        "credentials-unavailable",
        true,
      ],
      [
        "IMDS refused the connection",
        Object.assign(new ProviderError("Unable to connect to instance metadata service"), { code: "ECONNREFUSED" }),
        "credentials-unavailable",
        true,
      ],
      [
        "IMDS timed out",
        new ProviderError("TimeoutError from instance metadata service"),
        "credentials-unavailable",
        true,
      ],
      [
        "IMDS answered 500",
        Object.assign(new ProviderError("Error response received from instance metadata service"), { statusCode: 500 }),
        "credentials-unavailable",
        true,
      ],
      [
        "token refused, IMDSv1 off",
        Object.assign(new CredentialsProviderError("AWS EC2 Metadata v1 fallback has been blocked"), {
          name: "InstanceMetadataV1FallbackError",
        }),
        "credentials-unavailable",
        true,
      ],
      [
        "a plain Error saying so",
        new Error("Could not load credentials from any providers"),
        "credentials-unavailable",
        true,
      ],
      [
        "the agent's own",
        new CredentialsUnavailableError("http://169.254.169.254", 3, 60_000, new Error("timeout")),
        "credentials-unavailable",
        true,
      ],
      ["EC2: UnauthorizedOperation", sdkError("UnauthorizedOperation", 403), "unauthorized", false],
      ["EC2: AuthFailure", sdkError("AuthFailure", 401), "unauthorized", false],
      ["EC2: throttled", sdkError("RequestLimitExceeded", 503), "throttled", true],
      ["EC2: 5xx", sdkError("InternalError", 500), "server", true],
      [
        "EC2 unreachable",
        Object.assign(new Error("connect ECONNREFUSED 10.0.0.1:443"), { code: "ECONNREFUSED" }),
        "network",
        true,
      ],
      ["EC2: bad request", sdkError("InvalidParameterValue", 400), "invalid-request", false],
    ];
    for (const [what, error, kind, transient] of cases) {
      const failure = classifyEc2Error(error);
      t.equal(failure.kind, kind, `${what}: ${kind}`);
      t.equal(isTransientFailure(failure), transient, `${what}: ${transient ? "transient" : "not transient"}`);
    }

    const credentials = ec2CallError(
      "DescribeVolumes",
      new CredentialsProviderError("Could not load credentials from any providers", false),
    );
    t.type(credentials, Ec2CallError);
    t.match(credentials.remediation, /instance profile/);
    t.notMatch(credentials.remediation, /grant the instance role/, "no IAM hint for missing credentials");
    t.same(cloudFailureOf(credentials), { kind: "credentials-unavailable", transient: true });

    const iam = ec2CallError("DescribeVolumes", sdkError("UnauthorizedOperation", 403));
    t.match(iam.remediation, /grant the instance role ec2:DescribeVolumes/, "the IAM hint stays for a real refusal");
    t.same(cloudFailureOf(iam), { kind: "unauthorized", transient: false });
    t.equal(cloudFailureOf(new AgentError("not a cloud failure", "n/a")), undefined);
    t.equal(cloudFailureOf(new Error("bug")), undefined);
  },
);
