/**
 * What `doctor` needs of the world (wire.ts builds the real ones from the agent's adapters; a lab
 * test builds them for a lab host). Nothing here changes anything: every EC2 call that would is
 * sent with DryRun=true.
 */
import type { Ec2Api } from "../../aws/ec2-api.ts";
import type { PreflightDeps } from "../boot/preflight.ts";
import type { CloudVolumes, Identity } from "../ports.ts";
import type { PoolSettings, ToolFact } from "./plan.ts";
import type { Logger } from "../../log.ts";

/** The host part: no credentials, no network (Packer's AMI build runs it). */
export interface DoctorHostDeps {
  nodeVersion: string;
  /** The version of one of the boot's programs, or why it could not run. */
  toolVersion(tool: "fio" | "mkfs.xfs" | "blkid"): Promise<ToolFact>;
  /** `dockerd --version`'s version; throws when dockerd cannot be run. */
  dockerVersion(): Promise<string>;
  /** The boot's own pre-claim check's inputs (daemon.json, dockerd's command line). */
  preflight: PreflightDeps;
  /** Where systemd's units are installed (/etc/systemd/system). */
  unitsDir: string;
  /** The configuration's file and its problems (empty: valid). */
  config: { path: string; problems: string[] };
  log: Logger;
}

/** The cloud part: IMDS, credentials, EC2. */
export interface DoctorCloudDeps {
  /** IMDSv2 identity (tags from IMDS, else DescribeInstances). */
  identify(): Promise<Identity>;
  /** Where the credentials come from (`instance profile <role>`, `environment`); throws when there are none. */
  credentialsSource(): Promise<string>;
  /** STS GetCallerIdentity's ARN; undefined when STS is not asked (a stand-in EC2 has no STS). */
  callerArn?(region: string): Promise<string>;
  /** STS DecodeAuthorizationMessage; undefined (or a throw) when the role may not. */
  decodeAuthorization?(region: string, encoded: string): Promise<string>;
  /** EC2 of a region, in the agent's words and as the narrow SDK interface (for DryRun). */
  cloud(region: string): CloudVolumes;
  ec2(region: string): Ec2Api;
  pool: PoolSettings;
}

export interface DoctorDeps {
  host: DoctorHostDeps;
  /** Absent: --host-only. */
  cloud?: DoctorCloudDeps;
}
