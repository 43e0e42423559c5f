/**
 * `doctor` end to end on lab hosts: the real adapters (IMDS emulator with its token flow, the EC2
 * emulator through the SDK, the host's daemon.json and dockerd command line, real fio, mkfs.xfs,
 * blkid and dockerd --version), the agent's units installed as scripts/install.sh installs them.
 * A host that is right passes (exit 0) with every IAM probe answered DryRunOperation by the
 * emulator's IAM (the host's role, iam/ebs-cache-agent-policy.json); hosts broken in the lab's real
 * ways each fail (or warn) on the one line that names it, a role without the attach statement
 * among them, its denial decoded. Nothing in EC2 changes.
 */
import t from "tap";
import { copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CreateSnapshotCommand, DescribeSnapshotsCommand, DescribeVolumesCommand } from "@aws-sdk/client-ec2";
import { runDoctor, type DoctorReport } from "../../../src/agent/doctor/run.ts";
import { wireDoctor } from "../../../src/agent/doctor/wire.ts";
import agentPolicy from "../../../iam/ebs-cache-agent-policy.json" with { type: "json" };
import { decodedGist } from "../../../src/agent/doctor/plan.ts";
import { decodeAuthorizationMessage } from "../../../src/lab/ec2/iam/authorizer.ts";
import type { LabHost } from "../../../src/lab/lab.ts";
import { labConfig } from "../../../src/lab/machines/agent.ts";
import { createMemoryLogger } from "../../../src/log.ts";
import { goldenPoolTags, POOL, startBootLab } from "../../fixtures/lab/boot-lab.ts";
import { assertLabPrerequisites, pollUntil } from "../../fixtures/lab/lab-prereq.ts";

await assertLabPrerequisites();

const bl = await startBootLab({ name: "test-doctor", golden: false });
t.teardown(() => bl.close());
const tags = goldenPoolTags(POOL, undefined);
const poolVolume = await bl.createBlankVolume(tags);
const { SnapshotId: snapshotId } = await bl.ec2.send(
  new CreateSnapshotCommand({
    VolumeId: poolVolume,
    TagSpecifications: [
      { ResourceType: "snapshot", Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })) },
    ],
  }),
);
await pollUntil(
  async () =>
    (await bl.ec2.send(new DescribeSnapshotsCommand({ SnapshotIds: [snapshotId!] }))).Snapshots?.[0]?.State ===
    "completed",
);

/** The agent's units as scripts/install.sh installs them: files, and the .wants links of `enable`. */
async function unitsDir(options: { skipEnable?: string } = {}): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "ebs-cache-doctor-units-"));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  await mkdir(join(dir, "multi-user.target.wants"));
  for (const unit of ["ebs-cache-agent.service", "ebs-cache-agent-release.service", "ebs-cache-agent-ready.service"]) {
    await copyFile(join("systemd", unit), join(dir, unit));
    if (unit !== options.skipEnable) await symlink(join(dir, unit), join(dir, "multi-user.target.wants", unit));
  }
  return dir;
}

/** EC2's volumes and snapshots, to show doctor changed nothing. */
async function ec2State() {
  const volumes = (await bl.ec2.send(new DescribeVolumesCommand({}))).Volumes ?? [];
  const snapshots = (await bl.ec2.send(new DescribeSnapshotsCommand({ OwnerIds: ["self"] }))).Snapshots ?? [];
  return JSON.stringify({
    volumes: volumes.map((v) => [v.VolumeId, v.State, v.Attachments?.length, v.Tags?.length]),
    snapshots: snapshots.map((s) => [s.SnapshotId, s.Tags?.length]),
  });
}

async function doctor(host: LabHost, options: { units?: string; hostOnly?: boolean } = {}): Promise<DoctorReport> {
  const config = labConfig(bl.lab, host, { pool: POOL });
  return runDoctor(
    wireDoctor({
      config,
      configFile: { path: "config.json", problems: [] },
      log: createMemoryLogger("debug"),
      hostOnly: options.hostOnly ?? false,
      unitsDir: options.units ?? (await unitsDir()),
      dockerdCommand: async () => host.dockerdCommand(),
      // The host's instance-profile keys: the emulator decides each probe by the agent's policy.
      credentials: host.credentials,
    }),
  );
}

const notOk = (report: DoctorReport) => report.lines.filter((l) => l.verdict !== "ok");

/** The requests the EC2 emulator answered (any process, any client), as its log lines say. */
function emulatorRequests(): Array<{ action: string; line: string }> {
  return bl.labLog.flatMap((line) => {
    const match = /^<\d>lab\.ec2-emulator: ([A-Z][A-Za-z]+)( failed)? requestId=/.exec(line);
    return match ? [{ action: match[1]!, line }] : [];
  });
}

t.test("a lab host that is right: every line ok, every IAM probe allowed, exit 0, nothing changed", async (t) => {
  const host = await bl.addHost();
  const before = await ec2State();
  const requests = emulatorRequests().length;
  const report = await doctor(host);
  t.same(notOk(report), [], "no line other than ok");
  t.equal(report.exitCode, 0);
  t.match(report.lines.find((l) => l.check === "snapshot")?.detail, new RegExp(`current snapshot ${snapshotId}`));
  t.match(report.lines.find((l) => l.check === "volumes")?.detail, /^1 available volumes/);
  t.match(
    report.lines.find((l) => l.check === "iam.AttachVolume")?.detail,
    new RegExp(`${poolVolume} to ${host.instance.instanceId}: allowed`),
  );
  t.equal(report.lines.filter((l) => l.check.startsWith("iam.")).length, 8, "eight EC2 calls asked");
  t.equal(await ec2State(), before, "EC2's volumes and snapshots as they were");
  const writes = emulatorRequests()
    .slice(requests)
    .filter((r) => !r.action.startsWith("Describe"));
  t.same(
    writes.map((r) => r.action),
    ["AttachVolume", "CreateTags", "DeleteTags", "DetachVolume", "CreateVolume"],
    "the writes doctor sent",
  );
  t.ok(
    writes.every((r) => r.line.includes("DryRunOperation")),
    "each answered DryRunOperation",
    { writes },
  );
});

t.test("--host-only: the host's lines only, no EC2 call", async (t) => {
  const host = await bl.addHost();
  const requests = emulatorRequests().length;
  const report = await doctor(host, { hostOnly: true });
  t.equal(report.exitCode, 0);
  t.ok(report.hostOnly);
  t.notOk(
    report.lines.some((l) => l.check.startsWith("iam.") || l.check === "imds"),
    "no cloud line",
  );
  t.equal(emulatorRequests().length, requests, "no EC2 request");
});

t.test("hosts broken in the lab's real ways: one line each, with its remediation", async (t) => {
  const cases: Array<{
    what: string;
    host: () => Promise<LabHost>;
    units?: () => Promise<string>;
    check: string;
    verdict: string;
    remediation: RegExp;
  }> = [
    {
      what: "dockerd started with --label (engine labels would be refused)",
      host: () => bl.addHost({ dockerdArgs: ["--label", "rack=a1"] }),
      check: "daemon-json",
      verdict: "fail",
      remediation: /--label/,
    },
    {
      what: "daemon.json with the legacy graph key",
      host: async () => {
        const host = await bl.addHost();
        const json = JSON.parse(await readFile(host.paths.daemonJson, "utf8")) as Record<string, unknown>;
        await writeFile(host.paths.daemonJson, JSON.stringify({ ...json, graph: "/mnt/docker" }));
        return host;
      },
      check: "daemon-json",
      verdict: "fail",
      remediation: /rename "graph" to "data-root"/,
    },
    {
      what: "the release unit installed but not enabled",
      host: () => bl.addHost(),
      units: () => unitsDir({ skipEnable: "ebs-cache-agent-release.service" }),
      check: "unit.ebs-cache-agent-release.service",
      verdict: "fail",
      remediation: /^systemctl enable ebs-cache-agent-release\.service$/,
    },
    {
      what: "instance tags not in IMDS",
      host: () => bl.addHost({ metadataTags: false }),
      check: "imds-tags",
      verdict: "warn",
      remediation: /instance-metadata-tags enabled/,
    },
    {
      what: "a host in another zone: no pool volume there (the volume probes skipped)",
      host: () => bl.addHost({ availabilityZone: `${bl.lab.region}b` }),
      check: "volumes",
      verdict: "warn",
      remediation: /pool fill/,
    },
  ];
  for (const c of cases) {
    const report = await doctor(await c.host(), c.units ? { units: await c.units() } : {});
    const bad = notOk(report).filter((l) => l.verdict !== "skip");
    t.equal(bad.length, 1, `${c.what}: one line not ok`, { bad });
    t.equal(bad[0]?.check, c.check, `${c.what}: ${c.check}`);
    t.equal(bad[0]?.verdict, c.verdict);
    t.match(bad[0]?.remediation, c.remediation);
    t.equal(report.exitCode, c.verdict === "fail" ? 1 : 0, `${c.what}: exit code`);
  }
});

t.test("a role without the attach statement: AttachVolume denied, the encoded message decodes to why", async (t) => {
  const withoutAttach = {
    ...agentPolicy,
    Statement: agentPolicy.Statement.filter((statement) => statement.Sid !== "AttachDetachManagedVolumes"),
  };
  const host = await bl.addHost({ policies: [{ name: "edited", policy: withoutAttach }] });
  const before = await ec2State();
  const report = await doctor(host);
  const bad = notOk(report);
  t.same(
    bad.map((l) => [l.check, l.verdict]),
    [
      ["iam.AttachVolume", "fail"],
      ["iam.DetachVolume", "fail"],
    ],
    "the two calls the statement granted, and only they, are denied",
  );
  t.equal(report.exitCode, 1);
  const attach = bad[0]!;
  t.match(attach.detail, new RegExp(`${poolVolume} to ${host.instance.instanceId}: denied`));
  // The agent's role may not decode (no sts:DecodeAuthorizationMessage): the line gives the command.
  const encoded = /--encoded-message (\S+)$/.exec(attach.remediation ?? "")?.[1];
  t.ok(encoded, "the remediation names aws sts decode-authorization-message", { attach });
  const decoded = decodeAuthorizationMessage(encoded ?? "");
  t.equal(
    decoded === undefined ? undefined : decodedGist(decoded),
    `ec2:AttachVolume on arn:aws:ec2:${bl.lab.region}:123456789012:volume/${poolVolume}: no statement allows it`,
    "decoded, the denial names the call and the volume",
  );
  t.equal(await ec2State(), before, "nothing changed");
});
