/**
 * Who signs the lab's requests, as IAM sees them: each access key id the lab hands out is a
 * principal holding the shipped policies of its role (iam/*.json), as an instance profile or a
 * build role holds them on AWS. An agent's key also names the instance it was issued to
 * (instance-profile credentials carry `ec2:SourceInstanceARN`). A key the lab never installed
 * is unrestricted: the lab's own key for a test's setup, or a tool pointed at the emulator.
 */
import agentPolicy from "../../../../iam/ebs-cache-agent-policy.json" with { type: "json" };
import keeperReclaimPolicy from "../../../../iam/ebs-cache-keeper-reclaim-policy.json" with { type: "json" };
import builderPolicy from "../../../../iam/ebs-cache-snapshot-builder-policy.json" with { type: "json" };

/** The account of the lab's ARNs (IMDS' identity document gives the same). */
export const LAB_ACCOUNT = "123456789012";

/** A named IAM policy document, as a role holds it. */
export interface NamedPolicy {
  name: string;
  policy: unknown;
}

/** The caller of a request: a role with its policies, and the instance its credentials were issued to. */
export interface LabPrincipal {
  role: string;
  policies: readonly NamedPolicy[];
  /** Instance-profile credentials only: the instance they belong to (`ec2:SourceInstanceARN`). */
  instanceId?: string;
}

/** The roles the project ships a policy for, by what runs with them. */
export type LabRole = "agent" | "keeper" | "builder";

/** The shipped policies of each role (docs/operations.md "IAM", docs/keeper.md, docs/snapshot.md). */
export const ROLE_POLICIES: Readonly<Record<LabRole, readonly NamedPolicy[]>> = {
  // boot, release, prune, refresh, prewarm on a node; gc and pool from a management host.
  agent: [{ name: "ebs-cache-agent", policy: agentPolicy }],
  // The keeper's host: the nodes' policy plus the reclaim policy beside it.
  keeper: [
    { name: "ebs-cache-agent", policy: agentPolicy },
    { name: "ebs-cache-keeper-reclaim", policy: keeperReclaimPolicy },
  ],
  // `snapshot upload`: the build role.
  builder: [{ name: "ebs-cache-snapshot-builder", policy: builderPolicy }],
};

/** The role names IAM would show in an assumed-role ARN. */
const ROLE_NAMES: Readonly<Record<LabRole, string>> = {
  agent: "ebs-cache-node",
  keeper: "ebs-cache-keeper",
  builder: "ebs-cache-snapshot-builder",
};

/** The principal of a shipped role (`policies` replaces its policies: a test's edited copy). */
export function rolePrincipal(role: LabRole, instanceId?: string, policies?: readonly NamedPolicy[]): LabPrincipal {
  return {
    role: ROLE_NAMES[role],
    policies: policies ?? ROLE_POLICIES[role],
    ...(instanceId !== undefined ? { instanceId } : {}),
  };
}

/** The assumed-role ARN of a principal, as STS would give it. */
export function principalArn(principal: LabPrincipal): string {
  return `arn:aws:sts::${LAB_ACCOUNT}:assumed-role/${principal.role}/${principal.instanceId ?? "lab-session"}`;
}

/** The access keys installed so far and their principals. */
export class Principals {
  private readonly byKey = new Map<string, LabPrincipal>();

  /** From now on, requests signed with `accessKeyId` are `principal`'s (replacing an earlier one). */
  install(accessKeyId: string, principal: LabPrincipal): void {
    this.byKey.set(accessKeyId, principal);
  }

  /** The principal of a key; undefined for a key never installed (unrestricted). */
  of(accessKeyId: string | undefined): LabPrincipal | undefined {
    return accessKeyId === undefined ? undefined : this.byKey.get(accessKeyId);
  }
}
