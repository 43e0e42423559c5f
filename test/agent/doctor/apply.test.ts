/**
 * doctor's probes through the real EC2 SDK: a small HTTP server answers each request the way EC2
 * does (its XML error document, the status EC2 gives) and records what the SDK sent. Every probe
 * goes out with DryRun=true; DryRunOperation (412) reads as allowed, UnauthorizedOperation (403)
 * as denied with its encoded message handed to the decoder, a lost connection as unanswered.
 */
import t from "tap";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { EC2Client } from "@aws-sdk/client-ec2";
import { sdkEc2Api } from "../../../src/aws/ec2-api.ts";
import { sendProbe } from "../../../src/agent/doctor/apply.ts";
import { iamLine, planIamProbes } from "../../../src/agent/doctor/plan.ts";

const ENCODED = "Zm9vYmFy-encoded_message";

function errorXml(code: string, message: string): string {
  return (
    `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>${code}</Code>` +
    `<Message>${message}</Message></Error></Errors><RequestID>req-1</RequestID></Response>`
  );
}

/** An EC2 that allows the actions in `allowed` and denies the rest; every request recorded. */
async function fakeEc2(
  allowed: ReadonlySet<string>,
): Promise<{ server: Server; url: string; requests: URLSearchParams[] }> {
  const requests: URLSearchParams[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      const params = new URLSearchParams(body);
      requests.push(params);
      const action = params.get("Action") ?? "";
      res.setHeader("content-type", "text/xml;charset=UTF-8");
      if (params.get("DryRun") !== "true") {
        res.statusCode = 400;
        res.end(errorXml("MissingParameter", "doctor sent a call without DryRun"));
      } else if (allowed.has(action)) {
        res.statusCode = 412;
        res.end(errorXml("DryRunOperation", "Request would have succeeded, but DryRun flag is set."));
      } else {
        res.statusCode = 403;
        res.end(
          errorXml(
            "UnauthorizedOperation",
            `You are not authorized to perform this operation. Encoded authorization failure message: ${ENCODED}`,
          ),
        );
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests };
}

function client(endpoint: string): EC2Client {
  return new EC2Client({
    region: "eu-west-1",
    endpoint,
    credentials: { accessKeyId: "AKIDEXAMPLE", secretAccessKey: "secret" },
    maxAttempts: 1,
  });
}

const TARGETS = {
  instanceId: "i-0abc",
  zone: "eu-west-1a",
  volumeId: "vol-1",
  snapshotId: "snap-1",
  deviceName: "/dev/sdf",
  createTags: { "ebs-cache:managed": "true" },
};

t.test("every probe is sent with DryRun=true; allowed and denied read from EC2's own answers", async (t) => {
  const ec2 = await fakeEc2(new Set(["DescribeVolumes", "DescribeSnapshots", "DescribeInstances", "AttachVolume"]));
  t.teardown(() => new Promise((resolve) => ec2.server.close(resolve)));
  const api = sdkEc2Api(client(ec2.url));
  const decoded: string[] = [];
  const decode = async (encoded: string) => {
    decoded.push(encoded);
    return JSON.stringify({ allowed: false, explicitDeny: false, context: { action: "ec2:X", resource: "arn:y" } });
  };
  const probes = planIamProbes(TARGETS);
  const lines = [];
  for (const probe of probes) lines.push(iamLine(probe, await sendProbe(api, probe, decode)));
  t.same(
    ec2.requests.map((r) => r.get("Action")),
    probes.map((p) => p.action),
    "one request per probe, in order",
  );
  t.ok(
    ec2.requests.every((r) => r.get("DryRun") === "true"),
    "each with DryRun=true",
  );
  t.same(Object.fromEntries(lines.map((l) => [l.check, l.verdict])), {
    "iam.DescribeVolumes": "ok",
    "iam.DescribeSnapshots": "ok",
    "iam.DescribeInstances": "ok",
    "iam.AttachVolume": "ok",
    "iam.CreateTags": "fail",
    "iam.DeleteTags": "fail",
    "iam.DetachVolume": "fail",
    "iam.CreateVolume": "fail",
  });
  t.same(decoded, [ENCODED, ENCODED, ENCODED, ENCODED], "each denial's encoded message went to STS");
  t.match(lines.find((l) => l.check === "iam.CreateTags")?.detail, /denied \(ec2:X on arn:y: no statement allows it\)/);
  const attach = ec2.requests.find((r) => r.get("Action") === "AttachVolume")!;
  t.same([attach.get("VolumeId"), attach.get("InstanceId"), attach.get("Device")], ["vol-1", "i-0abc", "/dev/sdf"]);
});

t.test("a decoder that fails (the role may not decode) leaves the command to run by hand", async (t) => {
  const ec2 = await fakeEc2(new Set());
  t.teardown(() => new Promise((resolve) => ec2.server.close(resolve)));
  const probe = planIamProbes(TARGETS).find((p) => p.action === "DetachVolume")!;
  const answer = await sendProbe(sdkEc2Api(client(ec2.url)), probe, async () => {
    throw new Error("not authorized to perform sts:DecodeAuthorizationMessage");
  });
  t.match(answer, { kind: "error", code: "UnauthorizedOperation" });
  t.notOk("decoded" in answer);
  t.match(iamLine(probe, answer).remediation, new RegExp(`decode-authorization-message --encoded-message ${ENCODED}`));
});

t.test("no EC2 listening: unanswered, a failing line, never an ok", async (t) => {
  const ec2 = await fakeEc2(new Set());
  const url = ec2.url;
  await new Promise((resolve) => ec2.server.close(resolve));
  const probe = planIamProbes(TARGETS)[0]!;
  const answer = await sendProbe(sdkEc2Api(client(url)), probe);
  t.equal(answer.kind, "unanswered");
  t.equal(iamLine(probe, answer).verdict, "fail");
});
