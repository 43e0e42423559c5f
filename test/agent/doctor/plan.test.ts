/**
 * doctor's verdicts, pure: a host that is right gives no failing line (exit 0); each of the broken
 * hosts below gives exactly one line that is not ok, naming what is wrong and the remediation that
 * fixes it. The daemon.json case goes through the boot's own pre-claim check (daemonJsonProblems).
 */
import t from "tap";
import {
  cloudLines,
  decodedGist,
  doctorExitCode,
  encodedAuthorizationMessage,
  hostLines,
  iamLine,
  iamSkips,
  planIamProbes,
  type CheckLine,
  type CloudFacts,
  type DryRunAnswer,
  type HostFacts,
  type IamTargets,
} from "../../../src/agent/doctor/plan.ts";
import { daemonJsonProblems } from "../../../src/agent/boot/preflight.ts";
import { CLAIM_CLEARS } from "../../../src/agent/boot/claim-tags.ts";
import { VolumeTag } from "../../../src/tags.ts";

const POOL = { pool: "sim4life", imageSet: null };
const unit = (name: string, before: string[], after: string[] = []) => ({
  name,
  installed: true,
  enabled: true,
  before,
  after,
});

function rightHost(): HostFacts {
  return {
    nodeVersion: "v24.21.0",
    fio: { version: "fio-3.33" },
    xfsprogs: { version: "mkfs.xfs version 6.1.0" },
    blkid: { version: "blkid from util-linux 2.38.1" },
    docker: { version: "28.5.2", store: "graphdriver" },
    dockerConflicts: { checked: true, problems: [] },
    units: [
      unit("ebs-cache-agent.service", ["docker.service", "containerd.service"], ["network-online.target"]),
      unit("ebs-cache-agent-release.service", ["docker.service", "containerd.service", "ebs-cache-agent.service"]),
      unit("ebs-cache-agent-ready.service", ["cloud-final.service"], ["docker.service", "ebs-cache-agent.service"]),
    ],
    config: { path: "/etc/ebs-cache-agent/config.json", problems: [] },
  };
}

function rightCloud(): CloudFacts {
  return {
    imds: { ok: true, instanceId: "i-0abc", region: "eu-west-1", zone: "eu-west-1a", instanceType: "m5.large" },
    tagsInImds: true,
    metadataOptions: { httpTokens: "required", hopLimit: 2, instanceMetadataTags: "enabled" },
    credentials: { source: "the instance profile, role ebs-cache-agent" },
    snapshot: { current: { snapshotId: "snap-1", generation: "set-a@2026-11-30" }, seen: 2, unusable: 1 },
    availableVolumes: ["vol-1", "vol-2"],
    freeDeviceNames: ["/dev/sdf", "/dev/sdg"],
    problems: {},
  };
}

const TARGETS: IamTargets = {
  instanceId: "i-0abc",
  zone: "eu-west-1a",
  volumeId: "vol-1",
  snapshotId: "snap-1",
  deviceName: "/dev/sdf",
  createTags: { [VolumeTag.managed]: "true" },
};
const ALLOWED: DryRunAnswer = {
  kind: "error",
  code: "DryRunOperation",
  message: "Request would have succeeded, but DryRun flag is set.",
};
const DENIED: DryRunAnswer = {
  kind: "error",
  code: "UnauthorizedOperation",
  message:
    "You are not authorized to perform this operation. User: arn:aws:sts::1:assumed-role/r/i-0abc is not " +
    "authorized to perform: ec2:AttachVolume on resource: arn:aws:ec2:eu-west-1:1:volume/vol-1. " +
    "Encoded authorization failure message: AbC-123_xyz",
};

/** Every line doctor would print for these facts, every probe answered as `answer(action)` says. */
function doctorLines(
  host: HostFacts,
  cloud: CloudFacts,
  answer: (action: string) => DryRunAnswer = () => ALLOWED,
  targets: IamTargets = TARGETS,
): CheckLine[] {
  const lines = [...hostLines(host), ...cloudLines(cloud, POOL)];
  for (const probe of planIamProbes(targets)) lines.push(iamLine(probe, answer(probe.action)));
  return [...lines, ...iamSkips(targets)];
}

t.test("a host that is right: every line ok, exit 0", async (t) => {
  const lines = doctorLines(rightHost(), rightCloud());
  t.same(
    lines.filter((l) => l.verdict !== "ok"),
    [],
    "no line other than ok",
  );
  t.equal(doctorExitCode(lines), 0);
  t.same(
    lines.filter((l) => l.check.startsWith("iam.")).map((l) => l.check),
    [
      "iam.DescribeVolumes",
      "iam.DescribeSnapshots",
      "iam.DescribeInstances",
      "iam.AttachVolume",
      "iam.CreateTags",
      "iam.DeleteTags",
      "iam.DetachVolume",
      "iam.CreateVolume",
    ],
    "every EC2 call of a boot and a release is asked",
  );
});

interface Broken {
  what: string;
  host?: (h: HostFacts) => void;
  cloud?: (c: CloudFacts) => void;
  answer?: (action: string) => DryRunAnswer;
  check: string;
  verdict: "fail" | "warn";
  detail: RegExp;
  remediation: RegExp;
}

const BROKEN: Broken[] = [
  {
    what: "Node 20",
    host: (h) => (h.nodeVersion = "v20.20.2"),
    check: "node",
    verdict: "fail",
    detail: /v20\.20\.2: the agent needs 22/,
    remediation: /install Node\.js 22\+/,
  },
  {
    what: "fio missing",
    host: (h) => (h.fio = { missing: "not found (spawn fio ENOENT)" }),
    check: "fio",
    verdict: "fail",
    detail: /fio: not found/,
    remediation: /apt-get install fio/,
  },
  {
    what: "xfsprogs missing",
    host: (h) => (h.xfsprogs = { missing: "not found" }),
    check: "xfsprogs",
    verdict: "fail",
    detail: /mkfs\.xfs: not found/,
    remediation: /install xfsprogs/,
  },
  {
    what: "docker 19.03",
    host: (h) => (h.docker = { version: "19.03.15" }),
    check: "docker",
    verdict: "fail",
    detail: /19\.03\.15.*20\.10 or later/,
    remediation: /20\.10 or later/,
  },
  {
    what: "daemon.json with the legacy graph key (the boot's own check)",
    host: (h) =>
      (h.dockerConflicts = {
        checked: true,
        problems: daemonJsonProblems({ graph: "/mnt/docker" }, "/etc/docker/daemon.json", {
          agentKeys: ["data-root"],
          prefix: "io.simcore.ebs-cache",
        }),
      }),
    check: "daemon-json",
    verdict: "fail",
    detail: /legacy "graph" key/,
    remediation: /rename "graph" to "data-root" in \/etc\/docker\/daemon\.json/,
  },
  {
    what: "the boot unit installed but not enabled",
    host: (h) => (h.units[0]!.enabled = false),
    check: "unit.ebs-cache-agent.service",
    verdict: "fail",
    detail: /not enabled/,
    remediation: /^systemctl enable ebs-cache-agent\.service$/,
  },
  {
    what: "the boot unit not ordered before docker",
    host: (h) => (h.units[0]!.before = ["containerd.service"]),
    check: "unit.ebs-cache-agent.service",
    verdict: "fail",
    detail: /not ordered Before=docker\.service/,
    remediation: /restore ebs-cache-agent\.service/,
  },
  {
    what: "the config invalid",
    host: (h) => (h.config.problems = ['ttlHours: expected a number, got "x"']),
    check: "config",
    verdict: "fail",
    detail: /ttlHours: expected a number/,
    remediation: /fix the listed settings in \/etc\/ebs-cache-agent\/config\.json/,
  },
  {
    what: "IMDS refuses a token",
    cloud: (c) => (c.imds = { ok: false, problem: "IMDS did not hand out a token (timed out)" }),
    check: "imds",
    verdict: "fail",
    detail: /not reachable with a token: IMDS did not hand out a token/,
    remediation: /HttpEndpoint=enabled/,
  },
  {
    what: "no instance profile",
    cloud: (c) => (c.credentials = { source: "nowhere", problem: "no instance profile: IMDS lists no role" }),
    check: "credentials",
    verdict: "fail",
    detail: /no instance profile/,
    remediation: /attach an instance profile/,
  },
  {
    what: "the pool has no completed, verified snapshot",
    cloud: (c) => (c.snapshot = { seen: 1, unusable: 1 }),
    check: "snapshot",
    verdict: "fail",
    detail: /1 snapshots of pool sim4life, none completed and verified/,
    remediation: /snapshot build/,
  },
  {
    what: "every device name taken",
    cloud: (c) => (c.freeDeviceNames = []),
    check: "slots",
    verdict: "fail",
    detail: /every device name/,
    remediation: /detach a volume/,
  },
  {
    what: "AttachVolume denied by IAM",
    answer: (action) => (action === "AttachVolume" ? DENIED : ALLOWED),
    check: "iam.AttachVolume",
    verdict: "fail",
    detail: /AttachVolume vol-1 to i-0abc: denied/,
    remediation: /grant ec2:AttachVolume.*aws sts decode-authorization-message --encoded-message AbC-123_xyz/,
  },
  {
    what: "instance tags not in IMDS (osparc's launch): a warning, exit 0",
    cloud: (c) => (c.tagsInImds = false),
    check: "imds-tags",
    verdict: "warn",
    detail: /not served by IMDS/,
    remediation: /instance-metadata-tags enabled/,
  },
  {
    what: "no available pool volume in this zone: a warning",
    cloud: (c) => (c.availableVolumes = []),
    check: "volumes",
    verdict: "warn",
    detail: /no available volume of pool sim4life in eu-west-1a/,
    remediation: /pool fill/,
  },
];

for (const broken of BROKEN) {
  t.test(broken.what, async (t) => {
    const host = rightHost();
    const cloud = rightCloud();
    broken.host?.(host);
    broken.cloud?.(cloud);
    const lines = doctorLines(host, cloud, broken.answer);
    const bad = lines.filter((l) => l.verdict !== "ok");
    t.equal(bad.length, 1, "exactly one line is not ok", { bad });
    const [line] = bad;
    t.equal(line?.check, broken.check);
    t.equal(line?.verdict, broken.verdict);
    t.match(line?.detail, broken.detail);
    t.match(line?.remediation, broken.remediation);
    t.equal(doctorExitCode(lines), broken.verdict === "fail" ? 1 : 0, "exit code");
  });
}

t.test("no pool volume and no snapshot: the calls that need one are skipped, with why", async (t) => {
  const targets: IamTargets = { instanceId: "i-0abc", zone: "eu-west-1a", createTags: {} };
  t.same(
    planIamProbes(targets).map((p) => p.action),
    ["DescribeVolumes", "DescribeSnapshots", "DescribeInstances"],
  );
  const skips = iamSkips(targets);
  t.same(
    skips.map((s) => s.check),
    ["iam.AttachVolume", "iam.CreateTags", "iam.DeleteTags", "iam.DetachVolume", "iam.CreateVolume"],
  );
  t.ok(skips.every((s) => s.verdict === "skip"));
  t.equal(doctorExitCode(skips), 0, "a skip fails nothing");
});

t.test("the probes are the calls the agent makes, against the real resources", async (t) => {
  const byAction = new Map(planIamProbes(TARGETS).map((p) => [p.action, p.input]));
  t.same(byAction.get("AttachVolume"), { VolumeId: "vol-1", InstanceId: "i-0abc", Device: "/dev/sdf" });
  t.same(
    (byAction.get("CreateTags")?.Tags as Array<{ Key: string }>).map((tag) => tag.Key),
    [VolumeTag.claimedBy, VolumeTag.claimedAt],
    "CreateTags with the claim's keys",
  );
  t.same(
    (byAction.get("DeleteTags")?.Tags as Array<{ Key: string }>).map((tag) => tag.Key),
    [...CLAIM_CLEARS],
    "DeleteTags with the keys a claim clears, never without keys (that deletes every tag)",
  );
  t.match(byAction.get("CreateVolume"), { SnapshotId: "snap-1", AvailabilityZone: "eu-west-1a" });
  t.notOk(
    [...byAction.values()].some((input) => "DryRun" in input),
    "DryRun is added when sent (apply.ts), one place",
  );
});

t.test("the answers of EC2 to a DryRun call", async (t) => {
  const probe = planIamProbes(TARGETS).find((p) => p.action === "DetachVolume")!;
  t.equal(iamLine(probe, ALLOWED).verdict, "ok", "DryRunOperation: allowed");
  t.equal(iamLine(probe, DENIED).verdict, "fail", "UnauthorizedOperation: denied");
  const performed = iamLine(probe, { kind: "performed" });
  t.equal(performed.verdict, "fail", "an EC2 that ignored DryRun is a failure, never an ok");
  t.match(performed.detail, /as if DryRun were not set/);
  const other = iamLine(probe, {
    kind: "error",
    code: "InvalidVolume.NotFound",
    message: "The volume 'vol-1' does not exist.",
  });
  t.equal(other.verdict, "warn", "another error cannot tell the permission");
  t.match(other.detail, /InvalidVolume\.NotFound/);
  const lost = iamLine(probe, { kind: "unanswered", message: "connect ETIMEDOUT" });
  t.equal(lost.verdict, "fail");
  t.match(lost.remediation, /route to EC2/);
});

t.test("a denial's message decoded by STS names the action, the resource and why", async (t) => {
  t.equal(encodedAuthorizationMessage(DENIED.kind === "error" ? DENIED.message : ""), "AbC-123_xyz");
  t.equal(encodedAuthorizationMessage("You are not authorized to perform this operation."), undefined);
  const decoded = JSON.stringify({
    allowed: false,
    explicitDeny: false,
    matchedStatements: { items: [] },
    context: { action: "ec2:AttachVolume", resource: "arn:aws:ec2:eu-west-1:1:volume/vol-1" },
  });
  t.equal(decodedGist(decoded), "ec2:AttachVolume on arn:aws:ec2:eu-west-1:1:volume/vol-1: no statement allows it");
  t.match(
    decodedGist(JSON.stringify({ explicitDeny: true, context: { action: "ec2:DeleteVolume" } })),
    /explicit Deny/,
  );
  t.equal(decodedGist("not json"), undefined);
  const probe = planIamProbes(TARGETS).find((p) => p.action === "AttachVolume")!;
  const line = iamLine(probe, { ...(DENIED as Extract<DryRunAnswer, { kind: "error" }>), decoded });
  t.match(line.detail, /denied \(ec2:AttachVolume on arn:aws:ec2:eu-west-1:1:volume\/vol-1: no statement allows it\)/);
  t.notMatch(line.remediation, /decode-authorization-message/, "decoded: no command to decode it by hand");
});
