/**
 * doctor against an EC2 endpoint that takes the connection and never answers (a proxy or a VPC
 * endpoint that hangs): the first call that gets no answer is the one FAIL line with the route's
 * remediation; nothing more is asked of EC2 (each call would wait its timeout again, 30 s per
 * attempt with the SDK's attempts one after another: minutes on a broken route), the checks left
 * say what they were not asked for. The real SDK client the agent builds, over HTTP to a server
 * that only counts the requests it holds.
 */
import t from "tap";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { cloudCheckLines } from "../../../src/agent/doctor/run.ts";
import type { DoctorCloudDeps } from "../../../src/agent/doctor/deps.ts";
import { UNANSWERED_REMEDIATION } from "../../../src/agent/doctor/plan.ts";
import { sdkEc2Api } from "../../../src/aws/ec2-api.ts";
import { createCloudVolumes, createEc2Client } from "../../../src/aws/ec2.ts";
import { createMemoryLogger } from "../../../src/log.ts";

/** A server that reads each request and never answers it; the actions asked, in order. */
async function silentEc2(): Promise<{ server: Server; url: string; actions: string[] }> {
  const actions: string[] = [];
  const server = createServer((req) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => actions.push(new URLSearchParams(body).get("Action") ?? "?"));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, actions };
}

function deps(endpoint: string): DoctorCloudDeps {
  const client = createEc2Client({
    region: "eu-west-1",
    endpoint,
    credentials: { accessKeyId: "AKIDEXAMPLE", secretAccessKey: "secret" },
    maxAttempts: 1,
    // The agent's is 30 s: the test's own, so that it waits for one silence only briefly.
    requestTimeoutMs: 300,
  });
  return {
    identify: async () => ({
      instanceId: "i-0abc1234def567890",
      region: "eu-west-1",
      availabilityZone: "eu-west-1a",
      tags: {},
      tagsSource: "imds",
    }),
    credentialsSource: async () => "environment",
    cloud: () => createCloudVolumes({ client, log: createMemoryLogger() }),
    ec2: () => sdkEc2Api(client),
    pool: { pool: "default", imageSet: null },
  };
}

t.test("EC2 takes the connection and never answers: one call asked, one FAIL for it, the rest not asked", async (t) => {
  const ec2 = await silentEc2();
  t.teardown(() => {
    ec2.server.closeAllConnections();
    return new Promise<void>((resolve) => ec2.server.close(() => resolve()));
  });
  const lines = await cloudCheckLines(deps(ec2.url));

  t.same(ec2.actions, ["DescribeInstances"], "EC2 was asked one thing: the first call, left unanswered");
  const byCheck = new Map(lines.map((line) => [line.check, line]));
  t.equal(byCheck.get("imds")?.verdict, "ok", "IMDS answered");
  t.equal(byCheck.get("hop-limit")?.verdict, "warn", "the metadata options are unknown");
  t.match(byCheck.get("hop-limit")?.remediation, /route to the EC2 endpoint/, "hop-limit: the route, not a grant");
  for (const check of ["snapshot", "volumes"]) {
    const line = byCheck.get(check);
    t.equal(line?.verdict, "fail", `${check}: fails (unknown)`);
    t.match(line?.detail, /not asked: EC2 gave no answer to DescribeInstances/, `${check}: says why it was not asked`);
    t.match(line?.detail, /requestTimeout/, `${check}: and what DescribeInstances met`);
    t.match(line?.remediation, /route to the EC2 endpoint/, `${check}: the route, not a permission`);
  }
  const iam = lines.filter((line) => line.check.startsWith("iam."));
  t.ok(iam.length > 0, "the IAM checks have lines");
  for (const line of iam) {
    t.equal(line.verdict, "skip", `${line.check}: not sent`);
    t.notMatch(line.remediation ?? "", /allow ec2:|report/, `${line.check}: names no grant and no bug`);
  }
  t.notOk(
    lines.some((line) => /allow ec2:|report (it|this) as a bug/.test(line.remediation ?? "")),
    "no line asks for a grant or calls it a bug",
  );
});

t.test(
  "EC2 answers the describes and then goes silent: the first unanswered probe fails, the rest are skipped",
  async (t) => {
    // The describes answered (empty), the DryRun probes never: a route that breaks mid-run.
    const actions: string[] = [];
    const server = createServer((req, res) => {
      let body = "";
      req.on("data", (chunk: Buffer) => (body += chunk.toString()));
      req.on("end", () => {
        const params = new URLSearchParams(body);
        const action = params.get("Action") ?? "?";
        actions.push(action);
        if (params.get("DryRun") === "true") return;
        res.setHeader("content-type", "text/xml;charset=UTF-8");
        const list = {
          DescribeInstances: "reservationSet",
          DescribeSnapshots: "snapshotSet",
          DescribeVolumes: "volumeSet",
        };
        const key = list[action as keyof typeof list] ?? "itemSet";
        res.end(`<?xml version="1.0"?><${action}Response><requestId>r</requestId><${key}/></${action}Response>`);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    t.teardown(() => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    });
    const lines = await cloudCheckLines(deps(`http://127.0.0.1:${(server.address() as AddressInfo).port}`));

    t.same(
      actions.slice(0, 3),
      ["DescribeInstances", "DescribeSnapshots", "DescribeVolumes"],
      "the three describes, answered",
    );
    const iam = lines.filter((line) => line.check.startsWith("iam."));
    const failed = iam.filter((line) => line.verdict === "fail");
    t.equal(failed.length, 1, "one probe fails: the first left unanswered");
    t.match(failed[0]?.detail, /no answer/);
    t.equal(failed[0]?.remediation, UNANSWERED_REMEDIATION);
    const skipped = iam.filter((line) => line.verdict === "skip" && /EC2 gave no answer to/.test(line.detail));
    t.ok(skipped.length > 0, "the probes after it are not sent");
    t.equal(actions.length, 4, "then one probe, left unanswered: nothing after it");
  },
);
