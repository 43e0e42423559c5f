/**
 * The lab's IAM: every request is decided for the principal of its access key by an evaluator
 * this project did not write (@cloud-copilot/iam-simulate), against the shipped policies of the
 * principal's role. A decision depends only on the role's policies, the action, the resource and
 * the context keys those policies name, so decisions are kept under those: the lab's polling, and
 * each claim's tags with a new timestamp, ask the same question many times.
 */
import { runSimulation, type Simulation } from "@cloud-copilot/iam-simulate";
import type { IamCheck } from "./checks.ts";
import { LAB_ACCOUNT, principalArn, type LabPrincipal, type NamedPolicy } from "./principals.ts";

export type Decision = "Allowed" | "ImplicitlyDenied" | "ExplicitlyDenied";

/** A refused request: the first check not allowed, and why. */
export interface Denial {
  check: IamCheck;
  decision: Exclude<Decision, "Allowed">;
  principalArn: string;
}

/** Decisions kept before the cache starts afresh (each is a few hundred bytes). */
const MAX_KEPT = 20_000;

/** Decides requests; one per emulator. */
export class Authorizer {
  private readonly kept = new Map<string, Decision>();
  /** Distinct policy sets, so a cache key names a set by a short number, and the context keys they name. */
  private readonly policySets = new WeakMap<object, { id: number; keys: ReadonlySet<string> }>();
  private nextPolicyId = 1;

  /** The first of `checks` the principal may not do; undefined when it may do them all. */
  async firstDenial(principal: LabPrincipal, checks: readonly IamCheck[]): Promise<Denial | undefined> {
    for (const check of checks) {
      const decision = await this.decide(principal, check);
      if (decision !== "Allowed") return { check, decision, principalArn: principalArn(principal) };
    }
    return undefined;
  }

  private async decide(principal: LabPrincipal, check: IamCheck): Promise<Decision> {
    const set = this.policySet(principal.policies);
    const key = JSON.stringify([
      set.id,
      principal.role,
      check.action,
      check.resource,
      Object.entries(check.context)
        .filter(([name]) => set.keys.has(name.toLowerCase()))
        .sort(([a], [b]) => (a < b ? -1 : 1)),
    ]);
    const known = this.kept.get(key);
    if (known) return known;
    const decision = await evaluate(principal, check);
    if (this.kept.size >= MAX_KEPT) this.kept.clear();
    this.kept.set(key, decision);
    return decision;
  }

  private policySet(policies: readonly NamedPolicy[]): { id: number; keys: ReadonlySet<string> } {
    let set = this.policySets.get(policies);
    if (set === undefined) {
      set = { id: this.nextPolicyId++, keys: contextKeysNamed(policies) };
      this.policySets.set(policies, set);
    }
    return set;
  }
}

/**
 * The context keys (lower case, as IAM compares them) a decision under these policies can depend
 * on: those of their Condition blocks and the `${…}` variables anywhere in them.
 */
export function contextKeysNamed(policies: readonly NamedPolicy[]): Set<string> {
  const keys = new Set<string>();
  const visit = (value: unknown, inCondition: boolean): void => {
    if (typeof value === "string") {
      for (const match of value.matchAll(/\$\{([^}]+)\}/g)) keys.add(match[1]!.toLowerCase());
    } else if (Array.isArray(value)) {
      for (const item of value) visit(item, inCondition);
    } else if (typeof value === "object" && value !== null) {
      for (const [name, child] of Object.entries(value)) {
        // Condition: { Operator: { key: values } }: the keys are one level below the operators.
        if (inCondition) for (const key of Object.keys(child as object)) keys.add(key.toLowerCase());
        visit(child, name === "Condition");
      }
    }
  };
  for (const { policy } of policies) visit(policy, false);
  return keys;
}

async function evaluate(principal: LabPrincipal, check: IamCheck): Promise<Decision> {
  const simulation = {
    identityPolicies: principal.policies.map(({ name, policy }) => ({ name, policy })),
    serviceControlPolicies: [],
    resourceControlPolicies: [],
    request: {
      action: check.action,
      principal: principalArn(principal),
      resource: { accountId: LAB_ACCOUNT, resource: check.resource },
      contextVariables: check.context,
    },
  } as unknown as Simulation;
  const response = await runSimulation(simulation, {});
  // A policy the evaluator cannot read is the lab's bug, not a denial to hide.
  if (response.resultType === "error") {
    throw new Error(`IAM evaluation of ${check.action} failed: ${JSON.stringify(response.errors)}`);
  }
  return response.overallResult as Decision;
}

/**
 * The "encoded authorization failure message" of a denial: as on AWS, an opaque string that
 * `sts decode-authorization-message` turns into the decision's JSON (here base64 of that JSON,
 * `decodeAuthorizationMessage` reads it back).
 */
export function encodeDenial(denial: Denial): string {
  const document = {
    allowed: false,
    explicitDeny: denial.decision === "ExplicitlyDenied",
    matchedStatements: { items: [] },
    failures: { items: [] },
    context: {
      principal: { arn: denial.principalArn },
      action: denial.check.action,
      resource: denial.check.resource,
      conditions: {
        items: Object.entries(denial.check.context).map(([key, value]) => ({
          key,
          values: { items: (Array.isArray(value) ? value : [value]).map((v) => ({ value: v })) },
        })),
      },
    },
  };
  return Buffer.from(JSON.stringify(document)).toString("base64url");
}

/** The decision's JSON from an encoded message; undefined when it is not one of the lab's. */
export function decodeAuthorizationMessage(encoded: string): string | undefined {
  try {
    const text = Buffer.from(encoded, "base64url").toString("utf8");
    const parsed = JSON.parse(text) as { allowed?: unknown };
    return typeof parsed === "object" && parsed !== null && parsed.allowed === false ? text : undefined;
  } catch {
    return undefined;
  }
}
