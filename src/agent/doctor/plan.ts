/**
 * `doctor`'s verdicts, pure: every precondition of a boot, from facts observed on this host and in
 * EC2 (observe.ts), becomes one line with a verdict and, when it is not ok, the remediation. The
 * IAM part is planned here too (which EC2 calls to send with DryRun=true, against which real
 * volume, snapshot and instance), and each answer decoded the way EC2 gives it: DryRunOperation
 * means the role may, UnauthorizedOperation that it may not.
 */
import type { HostProblem } from "../../docker/dockerd-flags.ts";
import type { ImageStore } from "../../docker/engine.ts";
import { engineMajorVersion } from "../../engine-version.ts";
import { VolumeTag } from "../../tags.ts";
import { CLAIM_CLEARS } from "../boot/claim-tags.ts";

/** ok: nothing to do; warn: a boot works, worse than it could; fail: a boot degrades or fails; skip: not asked. */
export type Verdict = "ok" | "warn" | "fail" | "skip";

/** One line of doctor's answer. */
export interface CheckLine {
  /** Stable name of the check (`fio`, `iam.AttachVolume`), for --json readers and tests. */
  check: string;
  verdict: Verdict;
  /** What was found, in one line. */
  detail: string;
  /** What to do, for a verdict other than ok. */
  remediation?: string;
}

/** A program the boot runs: its version, or why it could not be run. */
export type ToolFact = { version: string } | { missing: string };

/** A systemd unit of the agent, as found in the unit folder. */
export interface UnitFact {
  name: string;
  installed: boolean;
  /** Linked from a target's .wants/ folder (systemctl enable). */
  enabled: boolean;
  before: string[];
  after: string[];
}

/** daemon.json and dockerd's flags, through the boot's own pre-claim check (src/agent/boot/preflight.ts). */
export type DockerConflictsFact =
  | { checked: true; problems: HostProblem[] }
  /** daemon.json does not parse (the boot leaves it alone and degrades). */
  | { checked: false; problem: string; remediation: string };

/** What observe.ts found on the host. */
export interface HostFacts {
  nodeVersion: string;
  fio: ToolFact;
  xfsprogs: ToolFact;
  blkid: ToolFact;
  docker: ToolFact & { store?: ImageStore };
  dockerConflicts: DockerConflictsFact;
  /** dockerd's command line could not be read (its flags were not compared). */
  dockerFlagsUnknown?: string;
  units: UnitFact[];
  /** The configuration's problems (empty: valid), with the file it came from. */
  config: { path: string; problems: string[] };
}

/** The oldest Node the agent runs on (package.json `engines`). */
export const MIN_NODE_MAJOR = 22;
/** The oldest docker the agent supports: `data-root` and `features` in daemon.json (20.10 in the lab). */
export const MIN_DOCKER_MAJOR = 20;
/** The units the agent ships (systemd/): the boot, the release at shutdown, the readiness gate. */
export const AGENT_UNITS = [
  "ebs-cache-agent.service",
  "ebs-cache-agent-release.service",
  "ebs-cache-agent-ready.service",
];

function toolLine(check: string, fact: ToolFact, what: string, install: string): CheckLine {
  return "version" in fact
    ? { check, verdict: "ok", detail: `${what}: ${fact.version}` }
    : { check, verdict: "fail", detail: `${what}: ${fact.missing}`, remediation: install };
}

/** The host's lines: what a boot needs installed and configured here, no credentials needed. */
export function hostLines(facts: HostFacts): CheckLine[] {
  const lines: CheckLine[] = [];
  const nodeMajor = Number(/^v?(\d+)/.exec(facts.nodeVersion)?.[1] ?? NaN);
  lines.push(
    nodeMajor >= MIN_NODE_MAJOR
      ? { check: "node", verdict: "ok", detail: `node ${facts.nodeVersion}` }
      : {
          check: "node",
          verdict: "fail",
          detail: `node ${facts.nodeVersion}: the agent needs ${MIN_NODE_MAJOR} or later`,
          remediation: `install Node.js ${MIN_NODE_MAJOR}+ (packer/scripts/node.sh)`,
        },
  );
  lines.push(
    toolLine("fio", facts.fio, "fio", "install fio (apt-get install fio): the pre-warm verdict reads with it"),
  );
  lines.push(
    toolLine(
      "xfsprogs",
      facts.xfsprogs,
      "mkfs.xfs",
      "install xfsprogs: a blank volume the agent creates is formatted XFS",
    ),
  );
  lines.push(
    toolLine("blkid", facts.blkid, "blkid", "install util-linux (blkid): no device is formatted without its probe"),
  );
  lines.push(dockerLine(facts.docker));
  lines.push(dockerConflictsLine(facts));
  lines.push(...unitLines(facts.units));
  lines.push(
    facts.config.problems.length === 0
      ? { check: "config", verdict: "ok", detail: `${facts.config.path} valid` }
      : {
          check: "config",
          verdict: "fail",
          detail: `${facts.config.path}: ${facts.config.problems.join("; ")}`,
          remediation: `fix the listed settings in ${facts.config.path}`,
        },
  );
  return lines;
}

function dockerLine(docker: HostFacts["docker"]): CheckLine {
  if (!("version" in docker))
    return {
      check: "docker",
      verdict: "fail",
      detail: `docker: ${docker.missing}`,
      remediation: "install docker (docker-ce or docker.io)",
    };
  const major = engineMajorVersion(docker.version);
  const store = docker.store ? `, ${docker.store} image store` : "";
  if (major === undefined || major < MIN_DOCKER_MAJOR)
    return {
      check: "docker",
      verdict: "fail",
      detail: `docker ${docker.version}${store}: the agent needs ${MIN_DOCKER_MAJOR}.10 or later`,
      remediation: "install a docker engine of 20.10 or later",
    };
  return { check: "docker", verdict: "ok", detail: `docker ${docker.version}${store}` };
}

function dockerConflictsLine(facts: HostFacts): CheckLine {
  const conflicts = facts.dockerConflicts;
  if (!conflicts.checked)
    return { check: "daemon-json", verdict: "fail", detail: conflicts.problem, remediation: conflicts.remediation };
  if (conflicts.problems.length > 0)
    return {
      check: "daemon-json",
      verdict: "fail",
      detail: conflicts.problems.map((p) => p.problem).join("; "),
      remediation: conflicts.problems.map((p) => p.remediation).join("; "),
    };
  if (facts.dockerFlagsUnknown !== undefined)
    return {
      check: "daemon-json",
      verdict: "warn",
      detail: `daemon.json fits the switch; dockerd's flags not compared: ${facts.dockerFlagsUnknown}`,
      remediation: "check that docker.service's ExecStart sets no flag daemon.json also sets (data-root, labels)",
    };
  return { check: "daemon-json", verdict: "ok", detail: "daemon.json and dockerd's flags agree with the switch" };
}

function unitLines(units: readonly UnitFact[]): CheckLine[] {
  return units.map((unit): CheckLine => {
    const check = `unit.${unit.name}`;
    if (!unit.installed)
      return {
        check,
        verdict: "fail",
        detail: `${unit.name} not installed`,
        remediation: "install the agent's units (scripts/install.sh) and enable them",
      };
    if (!unit.enabled)
      return {
        check,
        verdict: "fail",
        detail: `${unit.name} installed but not enabled: it does not run at boot`,
        remediation: `systemctl enable ${unit.name}`,
      };
    const missing = unitOrderProblem(unit);
    if (missing)
      return {
        check,
        verdict: "fail",
        detail: `${unit.name} ${missing}`,
        remediation: `restore ${unit.name} from the agent's systemd/ folder (scripts/install.sh)`,
      };
    return { check, verdict: "ok", detail: `${unit.name} installed, enabled and ordered` };
  });
}

/** The ordering each unit must keep (see the units' own comments); undefined when it does. */
function unitOrderProblem(unit: UnitFact): string | undefined {
  const needs: Record<string, { before?: string[]; after?: string[] }> = {
    // docker must start on the data-root the boot chose, and stop before the release detaches.
    "ebs-cache-agent.service": { before: ["docker.service"] },
    "ebs-cache-agent-release.service": { before: ["docker.service"] },
    "ebs-cache-agent-ready.service": { after: ["docker.service", "ebs-cache-agent.service"] },
  };
  const need = needs[unit.name];
  const missingBefore = (need?.before ?? []).filter((u) => !unit.before.includes(u));
  const missingAfter = (need?.after ?? []).filter((u) => !unit.after.includes(u));
  if (missingBefore.length > 0) return `is not ordered Before=${missingBefore.join(" ")}`;
  if (missingAfter.length > 0) return `is not ordered After=${missingAfter.join(" ")}`;
  return undefined;
}

/** What observe.ts found through IMDS and EC2 (undefined: could not be asked, with why in `problems`). */
export interface CloudFacts {
  /** IMDSv2: a token was given and the identity read; else why not. */
  imds:
    | { ok: true; instanceId: string; region: string; zone: string; instanceType?: string }
    | { ok: false; problem: string };
  /** Whether `/latest/meta-data/tags/instance` answers (InstanceMetadataTags=enabled). */
  tagsInImds?: boolean;
  /** DescribeInstances' MetadataOptions of this instance. */
  metadataOptions?: { httpTokens?: string; hopLimit?: number; instanceMetadataTags?: string };
  /** Where the credentials come from (`instance profile <role>`, `environment`) and who they are (STS). */
  credentials: { source: string; arn?: string; problem?: string };
  /** The pool's snapshots: the current one (volume-rules currentSnapshot), how many were seen. */
  snapshot?: { current?: { snapshotId: string; generation: string }; seen: number; unusable: number };
  /** Available pool volumes in this zone (of the configured image set). */
  availableVolumes?: string[];
  /** Device names /dev/sdf…/dev/sdp the instance does not use. */
  freeDeviceNames?: string[];
  /** A describe call that failed, by what it was for. */
  problems: Partial<Record<"instance" | "snapshots" | "volumes", CloudProblem>>;
  /**
   * The first EC2 call that got no answer at all (a timeout, no route): nothing more is asked of
   * EC2 after it, since each call would wait as long again (30 s per attempt, the SDK's attempts
   * one after another: an unreachable endpoint made doctor take many minutes).
   */
  unanswered?: string;
}

/**
 * A describe call's failure: what it said, and what to do as the error itself tells it (a network
 * failure or throttling is no missing permission); undefined `remediation`: a refusal, or a failure
 * of no known kind, which the line tells as the permission to grant.
 */
export interface CloudProblem {
  problem: string;
  remediation?: string;
}

/** The line's remediation: the failure's own, else the permission `denied` names. */
function remedy(problem: CloudProblem | undefined, denied: string): string {
  return problem?.remediation ?? denied;
}

/** The configured pool (config `pool`, `imageSet`). */
export interface PoolSettings {
  pool: string;
  imageSet: string | null;
}

/** The lines of IMDS, credentials and EC2's state (not IAM: iamLines). */
export function cloudLines(facts: CloudFacts, pool: PoolSettings): CheckLine[] {
  const lines: CheckLine[] = [];
  if (!facts.imds.ok) {
    lines.push({
      check: "imds",
      verdict: "fail",
      detail: `IMDSv2 not reachable with a token: ${facts.imds.problem}`,
      remediation: "run on an EC2 instance with the metadata service enabled (HttpEndpoint=enabled)",
    });
    return lines;
  }
  const imds = facts.imds;
  lines.push({ check: "imds", verdict: "ok", detail: `IMDSv2 token given; instance ${imds.instanceId}` });
  lines.push({
    check: "region",
    verdict: "ok",
    detail: `region ${imds.region}, zone ${imds.zone}${imds.instanceType ? `, ${imds.instanceType}` : ""}`,
  });
  lines.push(
    facts.tagsInImds
      ? { check: "imds-tags", verdict: "ok", detail: "instance tags served by IMDS" }
      : {
          check: "imds-tags",
          verdict: "warn",
          detail: "instance tags not served by IMDS: the boot reads them with DescribeInstances (one more EC2 call)",
          remediation:
            "optional: aws ec2 modify-instance-metadata-options --instance-metadata-tags enabled " +
            "(osparc launches without)",
        },
  );
  const options = facts.metadataOptions;
  if (facts.problems.instance !== undefined || options === undefined)
    lines.push({
      check: "hop-limit",
      verdict: "warn",
      detail: `metadata options unknown: ${facts.problems.instance?.problem ?? "DescribeInstances gave none"}`,
      remediation: remedy(
        facts.problems.instance,
        "allow ec2:DescribeInstances to the agent's role (iam/ebs-cache-agent-policy.json)",
      ),
    });
  else
    lines.push(
      (options.hopLimit ?? 1) >= 1
        ? {
            check: "hop-limit",
            verdict: "ok",
            detail:
              `hop limit ${options.hopLimit ?? "default (1)"}, tokens ${options.httpTokens ?? "unknown"}: ` +
              "the agent runs on the host",
          }
        : {
            check: "hop-limit",
            verdict: "fail",
            detail: `hop limit ${options.hopLimit}: IMDS answers nobody`,
            remediation: "aws ec2 modify-instance-metadata-options --http-put-response-hop-limit 1",
          },
    );
  lines.push(
    facts.credentials.problem === undefined
      ? {
          check: "credentials",
          verdict: "ok",
          detail:
            `credentials from ${facts.credentials.source}` +
            (facts.credentials.arn ? `: ${facts.credentials.arn}` : ""),
        }
      : {
          check: "credentials",
          verdict: "fail",
          detail: `credentials from ${facts.credentials.source}: ${facts.credentials.problem}`,
          remediation: "attach an instance profile with the agent's role (iam/ebs-cache-agent-policy.json)",
        },
  );
  lines.push(snapshotLine(facts, pool));
  lines.push(volumesLine(facts, pool, imds.zone));
  lines.push(slotsLine(facts));
  return lines;
}

function snapshotLine(facts: CloudFacts, pool: PoolSettings): CheckLine {
  const which = `pool ${pool.pool}${pool.imageSet ? ` (image set ${pool.imageSet})` : ""}`;
  if (facts.problems.snapshots !== undefined || facts.snapshot === undefined)
    return {
      check: "snapshot",
      verdict: "fail",
      detail: `the snapshots of ${which} could not be listed: ${facts.problems.snapshots?.problem ?? "not asked"}`,
      remediation: remedy(facts.problems.snapshots, "allow ec2:DescribeSnapshots to the agent's role"),
    };
  const { current, seen, unusable } = facts.snapshot;
  if (current === undefined)
    return {
      check: "snapshot",
      verdict: "fail",
      detail:
        seen === 0
          ? `no snapshot of ${which}: a boot finds no volume to create`
          : `${seen} snapshots of ${which}, none completed and verified`,
      remediation: "build the pool's snapshot (`ebs-cache-agent snapshot build` and `snapshot upload`, or packer/)",
    };
  const more = unusable > 0 ? ` (${unusable} pending, failed or unverified left aside)` : "";
  return {
    check: "snapshot",
    verdict: "ok",
    detail: `current snapshot ${current.snapshotId}, ${current.generation}${more}`,
  };
}

function volumesLine(facts: CloudFacts, pool: PoolSettings, zone: string): CheckLine {
  if (facts.problems.volumes !== undefined || facts.availableVolumes === undefined)
    return {
      check: "volumes",
      verdict: "fail",
      detail: `the pool's volumes could not be listed: ${facts.problems.volumes?.problem ?? "not asked"}`,
      remediation: remedy(facts.problems.volumes, "allow ec2:DescribeVolumes to the agent's role"),
    };
  const count = facts.availableVolumes.length;
  return count > 0
    ? { check: "volumes", verdict: "ok", detail: `${count} available volumes of pool ${pool.pool} in ${zone}` }
    : {
        check: "volumes",
        verdict: "warn",
        detail: `no available volume of pool ${pool.pool} in ${zone}: a boot creates one from the snapshot (slower)`,
        remediation: "keep the pool stocked in this zone (`ebs-cache-agent pool fill`, the keeper timer)",
      };
}

function slotsLine(facts: CloudFacts): CheckLine {
  if (facts.freeDeviceNames === undefined)
    return {
      check: "slots",
      verdict: "warn",
      detail: `free device names unknown: ${facts.problems.instance?.problem ?? "not asked"}`,
      remediation: remedy(facts.problems.instance, "allow ec2:DescribeInstances to the agent's role"),
    };
  return facts.freeDeviceNames.length > 0
    ? {
        check: "slots",
        verdict: "ok",
        detail: `${facts.freeDeviceNames.length} of /dev/sdf…/dev/sdp free to attach at`,
      }
    : {
        check: "slots",
        verdict: "fail",
        detail: "every device name /dev/sdf…/dev/sdp is taken: nothing can be attached",
        remediation: "detach a volume from this instance, or launch one with fewer EBS mappings",
      };
}

/** An EC2 call doctor sends with DryRun=true, as the agent sends it at boot or release. */
export interface IamProbe {
  action:
    | "DescribeVolumes"
    | "DescribeSnapshots"
    | "DescribeInstances"
    | "AttachVolume"
    | "DetachVolume"
    | "CreateTags"
    | "DeleteTags"
    | "CreateVolume";
  /** The request's parameters (DryRun added when sent). */
  input: Record<string, unknown>;
  /** What it is asked against, in words (`vol-1 to i-1`). */
  against: string;
}

/** What the IAM probes are planned from: this instance, a real pool volume and snapshot. */
export interface IamTargets {
  instanceId: string;
  zone: string;
  /** An available pool volume in this zone (AttachVolume, tags), or one attached here (DetachVolume). */
  volumeId?: string;
  snapshotId?: string;
  deviceName?: string;
  /** The tags a created volume carries (the claim's own: managed, kind, pool). */
  createTags: Record<string, string>;
}

/**
 * The calls a boot and a release make, each against the real resources the agent would use: a
 * call that needs a volume or a snapshot the account does not have is a `skip` line (iamSkips),
 * never a guess.
 */
export function planIamProbes(targets: IamTargets): IamProbe[] {
  const probes: IamProbe[] = [
    { action: "DescribeVolumes", input: { MaxResults: 5 }, against: "the account's volumes" },
    { action: "DescribeSnapshots", input: { MaxResults: 5, OwnerIds: ["self"] }, against: "the account's snapshots" },
    { action: "DescribeInstances", input: { InstanceIds: [targets.instanceId] }, against: targets.instanceId },
  ];
  const { volumeId, snapshotId } = targets;
  if (volumeId !== undefined) {
    probes.push(
      {
        action: "AttachVolume",
        input: { VolumeId: volumeId, InstanceId: targets.instanceId, Device: targets.deviceName ?? "/dev/sdf" },
        against: `${volumeId} to ${targets.instanceId}`,
      },
      {
        action: "CreateTags",
        input: {
          Resources: [volumeId],
          Tags: [
            { Key: VolumeTag.claimedBy, Value: targets.instanceId },
            { Key: VolumeTag.claimedAt, Value: "doctor" },
          ],
        },
        against: `${volumeId}, the claim's keys`,
      },
      {
        action: "DeleteTags",
        input: { Resources: [volumeId], Tags: CLAIM_CLEARS.map((Key) => ({ Key })) },
        against: `${volumeId}, the keys a claim clears`,
      },
      {
        action: "DetachVolume",
        input: { VolumeId: volumeId, InstanceId: targets.instanceId },
        against: `${volumeId} from ${targets.instanceId}`,
      },
    );
  }
  if (snapshotId !== undefined) {
    probes.push({
      action: "CreateVolume",
      input: {
        AvailabilityZone: targets.zone,
        SnapshotId: snapshotId,
        VolumeType: "gp3",
        TagSpecifications: [
          { ResourceType: "volume", Tags: Object.entries(targets.createTags).map(([Key, Value]) => ({ Key, Value })) },
        ],
      },
      against: `from ${snapshotId} in ${targets.zone}`,
    });
  }
  return probes;
}

/** The calls planIamProbes could not ask about, and why. */
/** What to do when EC2 gave no answer: the route to it, not a permission. */
export const UNANSWERED_REMEDIATION =
  "check the instance's route to EC2 (VPC endpoint, proxy, security group), then run doctor again";

/** The IAM probes not sent because EC2 gave no answer to `call` before them. */
export function iamSkipsUnanswered(probes: readonly IamProbe[], call: string): CheckLine[] {
  return probes.map((probe) => ({
    check: `iam.${probe.action}`,
    verdict: "skip",
    detail: `${probe.action} not asked: EC2 gave no answer to ${call}`,
    remediation: UNANSWERED_REMEDIATION,
  }));
}

export function iamSkips(targets: IamTargets): CheckLine[] {
  const skips: CheckLine[] = [];
  if (targets.volumeId === undefined)
    for (const action of ["AttachVolume", "CreateTags", "DeleteTags", "DetachVolume"])
      skips.push({
        check: `iam.${action}`,
        verdict: "skip",
        detail: `${action} not asked: no pool volume in this zone to ask about`,
        remediation: "run doctor again once the pool has a volume in this zone",
      });
  if (targets.snapshotId === undefined)
    skips.push({
      check: "iam.CreateVolume",
      verdict: "skip",
      detail: "CreateVolume not asked: the pool has no current snapshot",
      remediation: "run doctor again once the pool has a snapshot",
    });
  return skips;
}

/** How EC2 answered a DryRun call (apply.ts reads it off the SDK's error). */
export type DryRunAnswer =
  | { kind: "error"; code: string; message: string; decoded?: string }
  /** No error at all: EC2 ignored DryRun (never on AWS; a stand-in that does not honour it). */
  | { kind: "performed" }
  /** The request did not get an answer (network, timeout). */
  | { kind: "unanswered"; message: string };

/** The encoded message of an UnauthorizedOperation, as EC2 appends it. */
export function encodedAuthorizationMessage(message: string): string | undefined {
  return /Encoded authorization failure message:\s*(\S+)/i.exec(message)?.[1];
}

/** A decoded authorization message's gist: which action on which resource was denied, and by what. */
export function decodedGist(decoded: string): string | undefined {
  try {
    const doc = JSON.parse(decoded) as {
      allowed?: boolean;
      explicitDeny?: boolean;
      context?: { action?: string; resource?: string };
    };
    const why = doc.explicitDeny ? "an explicit Deny" : "no statement allows it";
    return `${doc.context?.action ?? "?"} on ${doc.context?.resource ?? "?"}: ${why}`;
  } catch {
    return undefined;
  }
}

/** One probe's line: DryRunOperation = allowed, UnauthorizedOperation = denied, anything else = could not tell. */
export function iamLine(probe: IamProbe, answer: DryRunAnswer): CheckLine {
  const check = `iam.${probe.action}`;
  const what = `${probe.action} ${probe.against}`;
  if (answer.kind === "performed")
    return {
      check,
      verdict: "fail",
      detail: `${what}: EC2 answered as if DryRun were not set`,
      remediation: "check the EC2 endpoint (config ec2Endpoint): AWS honours DryRun",
    };
  if (answer.kind === "unanswered")
    return {
      check,
      verdict: "fail",
      detail: `${what}: no answer (${answer.message})`,
      remediation: UNANSWERED_REMEDIATION,
    };
  if (answer.code === "DryRunOperation") return { check, verdict: "ok", detail: `${what}: allowed` };
  if (answer.code === "UnauthorizedOperation") {
    const encoded = encodedAuthorizationMessage(answer.message);
    const gist = answer.decoded !== undefined ? decodedGist(answer.decoded) : undefined;
    return {
      check,
      verdict: "fail",
      detail: `${what}: denied${gist ? ` (${gist})` : ""}`,
      remediation:
        `grant ec2:${probe.action} as iam/ebs-cache-agent-policy.json does` +
        (gist === undefined && encoded !== undefined
          ? `; why: aws sts decode-authorization-message --encoded-message ${encoded}`
          : ""),
    };
  }
  return {
    check,
    verdict: "warn",
    detail: `${what}: ${answer.code} (${answer.message.slice(0, 200)}): the permission could not be told`,
    remediation: "run doctor again; when it persists, check the resource EC2 names",
  };
}

/** Exit code of doctor: 0 nothing failed, 1 a check failed (2, could not run, is the CLI's). */
export function doctorExitCode(lines: readonly CheckLine[]): 0 | 1 {
  return lines.some((line) => line.verdict === "fail") ? 1 : 0;
}
