/**
 * IAM at the emulator's door: each EC2 or EBS direct request signed with an installed key is
 * decided before it is applied. Denied, EC2 answers `UnauthorizedOperation` (HTTP 403) with its
 * message form and an encoded authorization failure message, and a DryRun is answered truthfully
 * (`DryRunOperation` only when allowed); EBS direct answers `AccessDeniedException` (403).
 */
import type { ActionContext, RequestIam } from "../actions/context.ts";
import { Ec2Error } from "../ec2-error.ts";
import type { Params } from "../params.ts";
import { Authorizer, encodeDenial, type Denial } from "./authorizer.ts";
import { ebsChecks, ec2Checks } from "./checks.ts";
import { Principals } from "./principals.ts";

/** The emulator's IAM: installed keys, and whether their requests are decided at all. */
export class LabIam implements RequestIam {
  /** Off: every request is allowed, as before the lab enforced IAM. */
  public enforce: boolean;
  readonly principals = new Principals();
  private readonly authorizer = new Authorizer();

  constructor(enforce = true) {
    this.enforce = enforce;
  }

  /** The refusal of an EC2 request signed with `accessKeyId`; undefined when it may go on. */
  async ec2Refusal(ctx: ActionContext, params: Params, accessKeyId: string | undefined): Promise<Ec2Error | undefined> {
    const principal = this.enforce ? this.principals.of(accessKeyId) : undefined;
    if (!principal) return undefined;
    const denial = await this.authorizer.firstDenial(principal, ec2Checks(ctx, params, principal));
    if (!denial) return undefined;
    ctx.log?.info("lab.ec2-emulator", "unauthorized", {
      action: denial.check.action,
      resource: denial.check.resource,
      principal: denial.principalArn,
    });
    return new Ec2Error(
      "UnauthorizedOperation",
      `You are not authorized to perform this operation. ${denialSentence(denial)} ` +
        `Encoded authorization failure message: ${encodeDenial(denial)}`,
      403,
    );
  }

  /** The denial of an EBS direct request, as its message; undefined when it may go on. */
  async ebsRefusal(
    ctx: ActionContext,
    action: string,
    snapshotId: string | undefined,
    body: Buffer,
    accessKeyId: string | undefined,
  ): Promise<string | undefined> {
    const principal = this.enforce ? this.principals.of(accessKeyId) : undefined;
    if (!principal) return undefined;
    const denial = await this.authorizer.firstDenial(principal, ebsChecks(ctx, action, snapshotId, body, principal));
    return denial ? denialSentence(denial) : undefined;
  }
}

/** "User: arn:… is not authorized to perform: ec2:X on resource: arn:… because …", as AWS words it. */
function denialSentence(denial: Denial): string {
  const { action, resource } = denial.check;
  const because =
    denial.decision === "ExplicitlyDenied"
      ? "with an explicit deny in an identity-based policy"
      : `because no identity-based policy allows the ${action} action`;
  return `User: ${denial.principalArn} is not authorized to perform: ${action} on resource: ${resource} ${because}.`;
}
