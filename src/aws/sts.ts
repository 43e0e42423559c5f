/**
 * STS, for `doctor` only: who the credentials are (GetCallerIdentity: no permission needed) and why
 * EC2 refused a call (DecodeAuthorizationMessage: needs sts:DecodeAuthorizationMessage, which the
 * agent's shipped policy does not grant; an operator's role may).
 */
import { DecodeAuthorizationMessageCommand, GetCallerIdentityCommand, STSClient } from "@aws-sdk/client-sts";
import { agentCredentials, type InstanceProfileOptions } from "./credentials.ts";

export interface Sts {
  callerArn(): Promise<string>;
  decodeAuthorization(encoded: string): Promise<string>;
}

/** STS of `region`, with the agent's credentials (environment, else the instance profile). */
export function createSts(options: { region: string; instanceProfile: InstanceProfileOptions }): Sts {
  const client = new STSClient({
    region: options.region,
    credentials: agentCredentials({ instanceProfile: options.instanceProfile }),
    maxAttempts: 3,
    requestHandler: { connectionTimeout: 5_000, requestTimeout: 15_000, throwOnRequestTimeout: true },
  });
  return {
    async callerArn() {
      const answer = await client.send(new GetCallerIdentityCommand({}));
      if (!answer.Arn) throw new Error("STS GetCallerIdentity gave no ARN");
      return answer.Arn;
    },
    async decodeAuthorization(encoded) {
      const answer = await client.send(new DecodeAuthorizationMessageCommand({ EncodedMessage: encoded }));
      if (!answer.DecodedMessage) throw new Error("STS DecodeAuthorizationMessage gave no message");
      return answer.DecodedMessage;
    },
  };
}
