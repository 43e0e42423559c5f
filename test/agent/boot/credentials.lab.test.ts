/**
 * `ebs-cache-agent boot` as a process on a lab host whose EC2 credentials come from the
 * instance profile (the host's IMDS emulator), as on EC2: credentials slower than the SDK's 1 s
 * default still let the boot claim its volume; credentials that never come within the budget
 * leave the node degraded (exit 4) with a reason that says credentials, not IAM; a real
 * permission refusal by EC2 also leaves the node degraded but fails the unit (exit 1) with the
 * IAM hint. Each boot is the first phase (`--no-docker`, `docker.control: none`): claim, format
 * (a blank workspace volume the agent creates), mount and switch daemon.json, no docker. The
 * second phase (`--no-claim`) that cannot ask EC2 fails and leaves daemon.json on the volume.
 */
import t from "tap";
import { execa } from "execa";
import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import type { BootPlan } from "../../../src/agent/boot/plan.ts";
import { ExitCode } from "../../../src/errors.ts";
import { writeLabConfig, type ConfigOverrides } from "../../../src/lab/machines/agent.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import { VolumeTag } from "../../../src/tags.ts";
import { startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites, childEnv } from "../../fixtures/lab/lab-prereq.ts";
import { workspaceTags } from "../../fixtures/lab/lifecycle-lab.ts";
import { agentBundle, withCompileCache } from "../../fixtures/lab/agent-bundle.ts";
import type { BootReport } from "../../../src/agent/outcomes.ts";

await assertLabPrerequisites();

const REPO = fileURLToPath(new URL("../../..", import.meta.url));
const ROLE_PATH = "/latest/meta-data/iam/security-credentials/ebs-cache-agent-lab";

const bl = await startBootLab({ name: "test-boot-credentials", golden: false });
t.teardown(() => bl.close());

/** A blank workspace volume of 1 GiB for the host's ids: no snapshot needed, formatted by the agent. */
const OVERRIDES: ConfigOverrides = { docker: { control: "none" }, workspace: { create: "blank", sizeGiB: 1 } };

interface Run {
  exitCode: number;
  stdout: string;
  stderr: string;
  plan?: BootPlan;
  result?: BootReport | null;
}

/**
 * `boot --no-docker --json` as a process with no AWS_* variable: its credentials can only come
 * from the host's IMDS (config `imdsEndpoint`), through the agent's instance-profile provider.
 */
async function bootCli(host: LabHost, overrides: ConfigOverrides = {}, phase = "--no-docker"): Promise<Run> {
  const config = await writeLabConfig(bl.lab, host, { ...OVERRIDES, ...overrides });
  const env = Object.fromEntries(Object.entries(childEnv()).filter(([key]) => !key.startsWith("AWS_")));
  const result = await execa(process.execPath, [await agentBundle(), "boot", phase, "--json", "--config", config], {
    cwd: REPO,
    env: {
      ...(await withCompileCache(env)),
      AWS_CONFIG_FILE: "/nonexistent/aws-config",
      AWS_SHARED_CREDENTIALS_FILE: "/nonexistent/aws-credentials",
    },
    extendEnv: false,
    reject: false,
    stdin: "ignore",
    timeout: 240_000,
  });
  const run: Run = { exitCode: result.exitCode ?? -1, stdout: String(result.stdout), stderr: String(result.stderr) };
  try {
    Object.assign(run, JSON.parse(run.stdout) as { plan: BootPlan; result: BootReport | null });
  } catch {
    // no JSON: the assertions below show stdout and stderr
  }
  return run;
}

/** EC2 requests the emulator answered so far (any process). */
function ec2Requests(): number {
  return bl.labLog.filter((line) => /^<\d>lab\.ec2-emulator: [A-Z][A-Za-z]+( failed)? requestId=/.test(line)).length;
}

function hostIds(): ReturnType<typeof workspaceTags> {
  const id = randomBytes(4).toString("hex");
  return workspaceTags({ userId: `u-${id}`, projectId: `p-${id}`, nodeId: `n-${id}` });
}

const roleFetches = (host: LabHost) =>
  host.imds.requests.filter((r) => r.method === "GET" && r.path.replace(/\/{2,}/g, "/") === ROLE_PATH);

t.test(
  "credentials answering after 3 s (the SDK's default gives up after 1 s): the boot claims and prepares its volume",
  async (t) => {
    const host = await bl.addHost({ tags: hostIds() });
    host.imds.slowCredentials(3_000);
    const run = await bootCli(host);
    t.equal(run.exitCode, 0, "exit code 0", { stderr: run.stderr });
    t.equal(run.result?.outcome, "prepared", "volume mounted and daemon.json switched");
    const volumeId = run.result?.volumeId;
    t.ok(volumeId, "a volume was created and claimed");
    if (volumeId)
      t.equal((await bl.tags(volumeId))[VolumeTag.claimedBy], host.instance.instanceId, "claimed by this instance");
    t.equal(roleFetches(host).length, 1, "the credentials were fetched once for the whole boot");
    t.match(run.stderr, /instance-profile credentials from IMDS/);

    // The second phase (after docker.service) without credentials: docker may run on the volume
    // already, so it must not be moved off it: exit 1, daemon.json left on the volume.
    const dataRoot = (JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>)[
      "data-root"
    ];
    t.match(dataRoot, new RegExp(`^${host.paths.mountRoot}/`), "daemon.json points at the volume");
    host.imds.slowCredentials(600_000);
    const second = await bootCli(host, { timeouts: { imdsSeconds: 3, imdsRequestSeconds: 1 } }, "--no-claim");
    t.equal(second.exitCode, ExitCode.failure, "--no-claim without credentials: exit 1", { stderr: second.stderr });
    t.match(second.stderr, /no instance-profile credentials/);
    const after = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
    t.equal(after["data-root"], dataRoot, "daemon.json still on the volume");
    t.notMatch(JSON.stringify(after.labels ?? []), /state=degraded/, "no degraded label over a prepared volume");
  },
);

t.test(
  "credentials that never come within timeouts.imdsSeconds: degraded, exit 4, the reason says credentials (not " +
    "IAM), no EC2 call",
  async (t) => {
    const host = await bl.addHost({ tags: hostIds() });
    host.imds.slowCredentials(600_000);
    const daemonJsonBefore = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
    const requests = ec2Requests();
    const run = await bootCli(host, { timeouts: { imdsSeconds: 4, imdsRequestSeconds: 1 } });
    t.equal(run.exitCode, ExitCode.degraded, "exit code 4", { stderr: run.stderr });
    t.equal(run.result?.outcome, "degraded");
    t.same(run.plan?.selection, { source: "none", reason: run.result?.reason }, "the plan: no source, the reason");
    t.same(
      run.plan?.steps.map((s) => s.step),
      ["degrade"],
      "and the single degrade step",
    );
    t.match(
      run.result?.reason,
      /no instance-profile credentials from IMDS at http:\/\/127\.0\.0\.1:\d+ after \d+ attempts/,
    );
    t.notMatch(run.result?.reason, /unauthori[sz]ed|grant/i, "not an IAM problem");
    t.match(run.stderr, /remediation=.*instance profile/, "the log says what to check");
    t.notMatch(run.stderr, /grant the instance role/, "no IAM hint");
    t.equal(ec2Requests(), requests, "no EC2 request was made");
    t.equal(
      bl.lab.backend.attachments().filter((a) => a.instanceId === host.instance.instanceId).length,
      0,
      "nothing attached",
    );
    const daemonJson = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
    t.equal(daemonJson["data-root"], daemonJsonBefore["data-root"], "docker keeps its default data-root");
    t.match(
      JSON.stringify(daemonJson.labels ?? []),
      /io\.simcore\.ebs-cache\.state=degraded/,
      "the degraded label is published",
    );
  },
);

t.test("EC2 refusing the role (UnauthorizedOperation): degraded as well, but exit 1 with the IAM hint", async (t) => {
  // EC2 as it answers a role without the permission (the emulator does not check signatures).
  const refusing = createServer((req, res) => {
    req.resume();
    res.writeHead(403, { "Content-Type": "text/xml" });
    res.end(
      '<?xml version="1.0" ' +
        'encoding="UTF-8"?>\n<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>You are not ' +
        "authorized to perform this " +
        "operation.</Message></Error></Errors><RequestID>lab-unauthorized</RequestID></Response>",
    );
  });
  await new Promise<void>((resolve) => refusing.listen(0, "127.0.0.1", resolve));
  t.teardown(() => new Promise<void>((resolve) => refusing.close(() => resolve())));
  const host = await bl.addHost({ tags: hostIds() });
  const run = await bootCli(host, { ec2Endpoint: `http://127.0.0.1:${(refusing.address() as AddressInfo).port}` });
  t.equal(run.exitCode, ExitCode.failure, "exit code 1: it will not clear by itself", { stderr: run.stderr });
  t.equal(run.result?.outcome, "degraded", "the node still came up degraded");
  t.match(run.result?.reason, /UnauthorizedOperation/);
  t.match(run.stderr, /grant the instance role ec2:Describe\w+/, "the IAM hint");
  t.equal(roleFetches(host).length, 1, "credentials came from the instance profile");
  const daemonJson = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
  t.match(
    JSON.stringify(daemonJson.labels ?? []),
    /io\.simcore\.ebs-cache\.state=degraded/,
    "the degraded label is published",
  );
});

t.test(
  "a burst of agents whose IMDS is slow to hand out credentials: every exit code is 0 or 4, never 1",
  async (t) => {
    // 4 hosts whose credentials take 3 s per answer, 2 whose credentials never come in time.
    const slow = await Promise.all([0, 1, 2, 3].map(() => bl.addHost({ tags: hostIds() })));
    const never = await Promise.all([0, 1].map(() => bl.addHost({ tags: hostIds() })));
    for (const host of slow) host.imds.slowCredentials(3_000);
    for (const host of never) host.imds.slowCredentials(600_000);
    // The slow ones with the defaults (5 s per answer); the others with a short budget.
    const runs = await Promise.all([
      ...slow.map((host) => bootCli(host)),
      ...never.map((host) => bootCli(host, { timeouts: { imdsSeconds: 4, imdsRequestSeconds: 1 } })),
    ]);
    t.same(
      runs.map((run) => run.exitCode),
      [0, 0, 0, 0, ExitCode.degraded, ExitCode.degraded],
      "slow credentials: prepared; no credentials: degraded",
      {
        stderr: runs.map((run) =>
          run.stderr
            .split("\n")
            .filter((line) => /^<[0-3]>/.test(line))
            .join("\n"),
        ),
      },
    );
    const volumes = runs.slice(0, 4).map((run) => run.result?.volumeId);
    t.equal(new Set(volumes.filter(Boolean)).size, 4, "each prepared agent on a volume of its own");
    for (const run of runs.slice(4))
      t.match(run.result?.reason, /no instance-profile credentials/, "the degraded ones say why");
  },
);
