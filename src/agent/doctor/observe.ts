/**
 * What `doctor` looks at, read and never changed: the host's programs, daemon.json and dockerd's
 * flags through the boot's own pre-claim check, the agent's systemd units, then IMDS, the
 * credentials and EC2's state of the pool. Every read catches its own failure into a fact: one
 * broken precondition is one line, never the end of the run.
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { DEVICE_NAMES } from "../../aws/ec2.ts";
import { cloudFailureOf, ec2CallError } from "../../aws/errors.ts";
import { describeError } from "../../errors.ts";
import { configuredStore } from "../../docker/image-store.ts";
import { DaemonJsonError } from "../../docker/daemon-json.ts";
import { PreflightError, preflightHost } from "../boot/preflight.ts";
import type { Identity } from "../ports.ts";
import {
  currentSnapshot,
  isUsableSnapshot,
  generationName,
  poolSelector,
  snapshotGeneration,
} from "../volume-rules.ts";
import type { DoctorCloudDeps, DoctorHostDeps } from "./deps.ts";
import {
  AGENT_UNITS,
  type CloudFacts,
  type CloudProblem,
  type DockerConflictsFact,
  type HostFacts,
  type UnitFact,
  UNANSWERED_REMEDIATION,
} from "./plan.ts";

/** The host's facts. */
export async function observeHost(deps: DoctorHostDeps): Promise<HostFacts> {
  const [fio, xfsprogs, blkid] = await Promise.all([
    deps.toolVersion("fio"),
    deps.toolVersion("mkfs.xfs"),
    deps.toolVersion("blkid"),
  ]);
  const docker = await deps
    .dockerVersion()
    .then((version) => ({ version }))
    .catch((error: unknown) => ({ missing: describeError(error) }));
  const store = await deps.preflight
    .readDaemonJson()
    .then(configuredStore)
    .catch(() => undefined);
  const command = await deps.preflight.dockerdCommand().catch((error: unknown) => ({ unknown: describeError(error) }));
  return {
    nodeVersion: deps.nodeVersion,
    fio,
    xfsprogs,
    blkid,
    docker: { ...docker, ...(store ? { store } : {}) },
    dockerConflicts: await dockerConflicts(deps),
    ...("unknown" in command && command.unknown !== undefined ? { dockerFlagsUnknown: command.unknown } : {}),
    units: await Promise.all(AGENT_UNITS.map((name) => readUnit(deps.unitsDir, name))),
    config: deps.config,
  };
}

/** The boot's pre-claim check, its verdict kept rather than thrown. */
async function dockerConflicts(deps: DoctorHostDeps): Promise<DockerConflictsFact> {
  try {
    await preflightHost({ ...deps.preflight, log: deps.log });
    return { checked: true, problems: [] };
  } catch (error) {
    if (error instanceof PreflightError) return { checked: true, problems: error.problems };
    if (error instanceof DaemonJsonError)
      return { checked: false, problem: error.message, remediation: error.remediation };
    return {
      checked: false,
      problem: `daemon.json and dockerd's flags could not be checked: ${describeError(error)}`,
      remediation: "check that daemon.json is readable and docker.service's unit is loaded",
    };
  }
}

/** A unit file's presence, enablement (a link under some *.wants/) and ordering. */
export async function readUnit(unitsDir: string, name: string): Promise<UnitFact> {
  const text = await readFile(join(unitsDir, name), "utf8").catch(() => undefined);
  const entries = await readdir(unitsDir).catch(() => [] as string[]);
  let enabled = false;
  for (const entry of entries.filter((e) => e.endsWith(".wants") || e.endsWith(".requires"))) {
    if ((await readdir(join(unitsDir, entry)).catch(() => [] as string[])).includes(name)) enabled = true;
  }
  const list = (key: string) =>
    [...(text ?? "").matchAll(new RegExp(`^${key}=(.*)$`, "gm"))].flatMap((m) => m[1]!.trim().split(/\s+/));
  return { name, installed: text !== undefined, enabled, before: list("Before"), after: list("After") };
}

/** IMDS, credentials and what EC2 holds for the pool; the identity too (the IAM probes need it). */
export async function observeCloud(deps: DoctorCloudDeps): Promise<{ facts: CloudFacts; identity?: Identity }> {
  const problems: CloudFacts["problems"] = {};
  let identity: Identity;
  try {
    identity = await deps.identify();
  } catch (error) {
    return {
      facts: { imds: { ok: false, problem: describeError(error) }, credentials: { source: "unknown" }, problems },
    };
  }
  const { region, availabilityZone: zone, instanceId } = identity;
  const facts: CloudFacts = {
    imds: {
      ok: true,
      instanceId,
      region,
      zone,
      ...(identity.instanceType ? { instanceType: identity.instanceType } : {}),
    },
    tagsInImds: identity.tagsSource === "imds",
    credentials: await credentials(deps, region),
    problems,
  };
  const ec2 = deps.ec2(region);
  const cloud = deps.cloud(region);
  /** Runs `call` unless EC2 already left one unanswered; its failure is a problem, a silence ends the asking. */
  let silence: CloudProblem | undefined;
  const ask = async (key: keyof CloudFacts["problems"], action: string, call: () => Promise<void>) => {
    if (facts.unanswered !== undefined) {
      problems[key] = {
        problem: `not asked: EC2 gave no answer to ${facts.unanswered} (${silence?.problem ?? "no answer"})`,
        remediation: silence?.remediation ?? UNANSWERED_REMEDIATION,
      };
      return;
    }
    try {
      await call();
    } catch (error) {
      const { problem, unanswered } = cloudProblem(action, error);
      problems[key] = problem;
      if (unanswered) {
        facts.unanswered = action;
        silence = problem;
      }
    }
  };
  await ask("instance", "DescribeInstances", async () => {
    const answer = await ec2.describeInstances({ InstanceIds: [instanceId] });
    const instance = answer.Reservations?.[0]?.Instances?.[0];
    const options = instance?.MetadataOptions;
    facts.metadataOptions = {
      ...(options?.HttpTokens ? { httpTokens: options.HttpTokens } : {}),
      ...(options?.HttpPutResponseHopLimit !== undefined ? { hopLimit: options.HttpPutResponseHopLimit } : {}),
      ...(options?.InstanceMetadataTags ? { instanceMetadataTags: options.InstanceMetadataTags } : {}),
    };
    const used = new Set((instance?.BlockDeviceMappings ?? []).map((m) => m.DeviceName));
    facts.freeDeviceNames = DEVICE_NAMES.filter((name) => !used.has(name) && !used.has(name.replace("/dev/", "")));
  });
  await ask("snapshots", "DescribeSnapshots", async () => {
    const snapshots = await cloud.findSnapshots(poolSelector(deps.pool));
    const current = currentSnapshot(snapshots, deps.pool.imageSet);
    facts.snapshot = {
      seen: snapshots.length,
      unusable: snapshots.filter((s) => !isUsableSnapshot(s)).length,
      ...(current
        ? { current: { snapshotId: current.snapshotId, generation: generationName(snapshotGeneration(current)) } }
        : {}),
    };
  });
  await ask("volumes", "DescribeVolumes", async () => {
    const volumes = await cloud.findVolumes({
      tags: poolSelector(deps.pool),
      availabilityZone: zone,
      status: ["available"],
    });
    facts.availableVolumes = volumes.map((v) => v.volumeId);
  });
  return { facts, identity };
}

/** A describe call's failure as a fact: a refusal leaves the remediation to the line (the permission to grant). */
function cloudProblem(action: string, error: unknown): { problem: CloudProblem; unanswered: boolean } {
  const typed = ec2CallError(action, error);
  const failure = cloudFailureOf(typed);
  const told = failure !== undefined && failure.kind !== "unauthorized" && failure.kind !== "invalid-request";
  return {
    problem: { problem: describeError(error), ...(told ? { remediation: typed.remediation } : {}) },
    // No answer at all (a timeout, no route): nothing more is asked of EC2.
    unanswered: failure?.kind === "network",
  };
}

async function credentials(deps: DoctorCloudDeps, region: string): Promise<CloudFacts["credentials"]> {
  let source: string;
  try {
    source = await deps.credentialsSource();
  } catch (error) {
    return { source: "nowhere", problem: describeError(error) };
  }
  if (!deps.callerArn) return { source };
  try {
    return { source, arn: await deps.callerArn(region) };
  } catch (error) {
    return { source, problem: `STS GetCallerIdentity failed: ${describeError(error)}` };
  }
}
