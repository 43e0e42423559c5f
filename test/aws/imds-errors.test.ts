/**
 * Identification's reads of IMDS that fail, told as what happened: a refusal (HTTP 4xx), or an
 * answer with data of another shape than an identity (shown, trimmed), never one for the other.
 * The metadata source is a stand-in answering as the SDK's MetadataService does (its errors carry
 * `$metadata.httpStatusCode`); the real IMDSv2 flow is test/aws/imds.lab.test.ts's.
 */
import t from "tap";
import { ImdsError } from "../../src/aws/errors.ts";
import { identifyInstance, type MetadataSource } from "../../src/aws/imds.ts";

const noEc2Tags = async () => ({});

/** IMDS answering `answers[path]` (a string, or an HTTP status it fails with), 404 elsewhere. */
function imds(answers: Record<string, string | number>): MetadataSource {
  return {
    endpoint: "http://imds.test",
    request: async (path) => {
      const answer = answers[path] ?? 404;
      if (typeof answer === "string") return answer;
      throw Object.assign(new Error(`Request failed with status code ${answer}`), {
        $metadata: { httpStatusCode: answer },
      });
    },
  };
}

const IDENTITY = {
  "/latest/meta-data/instance-id": "i-0123456789abcdef0",
  "/latest/meta-data/placement/availability-zone": "us-east-1a",
  "/latest/meta-data/placement/region": "us-east-1",
};

t.test("a path IMDS refuses (HTTP 403): refused, with the status", async (t) => {
  const error = await identifyInstance({
    metadata: imds({ ...IDENTITY, "/latest/meta-data/instance-id": 403 }),
    ec2Tags: noEc2Tags,
    timeoutMs: 5_000,
  }).catch((e: unknown) => e);
  t.type(error, ImdsError);
  t.match(error, {
    kind: "refused",
    message:
      /^the instance metadata service at http:\/\/imds\.test refused \/latest\/meta-data\/instance-id \(HTTP 403\)/,
  });
  t.match((error as ImdsError).remediation, /metadata options/);
});

t.test("an identity of another shape: answered with unexpected data, shown trimmed, not 'refused'", async (t) => {
  const page = `<html><body>${"sign in ".repeat(100)}</body></html>`;
  const error = await identifyInstance({
    metadata: imds({ ...IDENTITY, "/latest/meta-data/instance-id": page }),
    ec2Tags: noEc2Tags,
    timeoutMs: 5_000,
  }).catch((e: unknown) => e);
  t.type(error, ImdsError);
  const message = (error as Error).message;
  t.match(error, { kind: "unexpected-data" });
  t.match(
    message,
    /^the instance metadata service at http:\/\/imds\.test answered \/latest\/meta-data with unexpected data/,
  );
  t.match(message, /: instance "<html><body>sign in (sign in )+[a-z ]*…", zone "us-east-1a", region "us-east-1"$/);
  t.ok(message.length < 400, `the page trimmed (${message.length} characters)`);
  t.notMatch(message, /refused/);
  t.match((error as ImdsError).remediation, /something other than EC2's instance metadata service answers/);
});
