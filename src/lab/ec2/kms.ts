/**
 * EBS encryption as EC2 decides it for a new volume (the EBS User Guide's "encryption outcomes"):
 * a volume from an encrypted snapshot is encrypted whatever `Encrypted` says (false is ignored),
 * with the snapshot's key unless `Encrypted=true` and `KmsKeyId` name another; `KmsKeyId` needs
 * `Encrypted` (InvalidParameterDependency); `Encrypted=true` without a key uses the account's
 * default key for EBS. EC2 authenticates the key asynchronously: a key of no valid shape makes
 * the volume fail after CreateVolume answered (it ends in `error`), as the CreateVolume reference
 * says. An alias is kept as its alias ARN: the emulator has no KMS to resolve it to its key.
 */
import { Ec2Error } from "./ec2-error.ts";
import { OWNER_ID } from "./ids.ts";

/** The account's default key for EBS (aws/ebs) in the emulator's account. */
export function defaultEbsKey(region: string): string {
  return `arn:aws:kms:${region}:${OWNER_ID}:key/0e85c3a4-5b3c-4d8e-9f1a-0ebd5defa0c1`;
}

const KEY_ID = /^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|mrk-[0-9a-fA-F]{32})$/;
const ALIAS = /^alias\/[A-Za-z0-9/_-]{1,250}$/;
const ARN = /^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:(key\/(.+)|alias\/[A-Za-z0-9/_-]{1,250})$/;

/**
 * The key's ARN (a key id or alias in the request's region and the emulator's account), or undefined for no valid
 * shape.
 */
export function kmsKeyArn(region: string, given: string): string | undefined {
  if (KEY_ID.test(given)) return `arn:aws:kms:${region}:${OWNER_ID}:key/${given}`;
  if (ALIAS.test(given)) return `arn:aws:kms:${region}:${OWNER_ID}:${given}`;
  const arn = ARN.exec(given);
  if (arn && (arn[2] === undefined || KEY_ID.test(arn[2]))) return given;
  return undefined;
}

export interface Encryption {
  encrypted: boolean;
  kmsKeyId: string | null;
  /** Set when the key has no valid shape: the volume fails once created. */
  keyProblem?: string;
}

/** How a new volume is encrypted, from the request and the snapshot it is made from. */
export function volumeEncryption(
  region: string,
  request: { encrypted: boolean; kmsKeyId: string | undefined },
  snapshot: { encrypted?: boolean; kmsKeyId?: string | null } | undefined,
): Encryption {
  if (request.kmsKeyId !== undefined && !request.encrypted) {
    throw new Ec2Error(
      "InvalidParameterDependency",
      "The parameter KmsKeyId requires the parameter Encrypted to be set.",
    );
  }
  const fromSnapshot = snapshot?.encrypted === true;
  if (!request.encrypted && !fromSnapshot) return { encrypted: false, kmsKeyId: null };
  if (request.kmsKeyId !== undefined) {
    const arn = kmsKeyArn(region, request.kmsKeyId);
    if (arn === undefined) {
      return {
        encrypted: true,
        kmsKeyId: request.kmsKeyId,
        keyProblem: `The KMS key '${request.kmsKeyId}' is not a key id, alias, key ARN or alias ARN`,
      };
    }
    return { encrypted: true, kmsKeyId: arn };
  }
  return {
    encrypted: true,
    kmsKeyId: fromSnapshot ? (snapshot?.kmsKeyId ?? defaultEbsKey(region)) : defaultEbsKey(region),
  };
}
