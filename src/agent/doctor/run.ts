/**
 * `ebs-cache-agent doctor`: observe the host (and, unless --host-only, IMDS, the credentials and
 * EC2), plan the verdicts and the IAM probes, send the probes with DryRun=true, report one line per
 * precondition. It changes nothing.
 */
import { MANAGED, poolSelector } from "../volume-rules.ts";
import { VolumeKind, VolumeTag } from "../../tags.ts";
import { sendProbe } from "./apply.ts";
import type { DoctorCloudDeps, DoctorDeps } from "./deps.ts";
import { observeCloud, observeHost } from "./observe.ts";
import {
  cloudLines,
  doctorExitCode,
  hostLines,
  iamLine,
  iamSkips,
  iamSkipsUnanswered,
  planIamProbes,
  type CheckLine,
  type IamTargets,
} from "./plan.ts";

export interface DoctorReport {
  /** Only the host's checks were run (no credentials). */
  hostOnly: boolean;
  lines: CheckLine[];
  /** 0 nothing failed, 1 a check failed. */
  exitCode: 0 | 1;
}

export async function runDoctor(deps: DoctorDeps): Promise<DoctorReport> {
  const lines = hostLines(await observeHost(deps.host));
  if (deps.cloud) lines.push(...(await cloudCheckLines(deps.cloud)));
  return { hostOnly: deps.cloud === undefined, lines, exitCode: doctorExitCode(lines) };
}

/** IMDS, the credentials, EC2's state of the pool, then the IAM probes: their lines. */
export async function cloudCheckLines(cloud: DoctorCloudDeps): Promise<CheckLine[]> {
  const { facts, identity } = await observeCloud(cloud);
  const lines = cloudLines(facts, cloud.pool);
  if (!identity) return lines;
  const targets: IamTargets = {
    instanceId: identity.instanceId,
    zone: identity.availabilityZone,
    ...(facts.availableVolumes?.[0] ? { volumeId: facts.availableVolumes[0] } : {}),
    ...(facts.snapshot?.current ? { snapshotId: facts.snapshot.current.snapshotId } : {}),
    ...(facts.freeDeviceNames?.[0] ? { deviceName: facts.freeDeviceNames[0] } : {}),
    createTags: {
      ...poolSelector(cloud.pool),
      ...MANAGED,
      [VolumeTag.kind]: VolumeKind.pool,
      [VolumeTag.claimedBy]: identity.instanceId,
    },
  };
  const ec2 = cloud.ec2(identity.region);
  const decode = cloud.decodeAuthorization
    ? (encoded: string) => cloud.decodeAuthorization!(identity.region, encoded)
    : undefined;
  // One at a time: a denied role must not read as throttling. After a call EC2 left unanswered,
  // nothing more is sent: each would wait as long again.
  const probes = planIamProbes(targets);
  let unanswered = facts.unanswered;
  for (const [index, probe] of probes.entries()) {
    if (unanswered !== undefined) {
      lines.push(...iamSkipsUnanswered(probes.slice(index), unanswered));
      break;
    }
    const answer = await sendProbe(ec2, probe, decode);
    lines.push(iamLine(probe, answer));
    if (answer.kind === "unanswered") unanswered = `${probe.action} (DryRun)`;
  }
  lines.push(...iamSkips(targets));
  return lines;
}

/** The text report: one line per check, `ok`/`WARN`/`FAIL`/`skip`, the remediation after `->`. */
export function renderDoctor(report: DoctorReport): string[] {
  const mark = { ok: "ok  ", warn: "WARN", fail: "FAIL", skip: "skip" } as const;
  const out = report.lines.map(
    (line) =>
      `${mark[line.verdict]} ${line.check.padEnd(34)} ${line.detail}` +
      (line.verdict !== "ok" && line.remediation ? `  -> ${line.remediation}` : ""),
  );
  const failed = report.lines.filter((l) => l.verdict === "fail").length;
  const warned = report.lines.filter((l) => l.verdict === "warn").length;
  out.push(
    `${failed === 0 ? "this host can boot the agent" : `${failed} checks failed`}` +
      (warned > 0 ? `, ${warned} warnings` : "") +
      (report.hostOnly ? " (host only: no IMDS, credentials or EC2)" : ""),
  );
  return out;
}
