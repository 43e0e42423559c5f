/**
 * What `snapshot upload` is asked, checked before anything is read from EBS or written to it
 * (pure): the shapes EBS direct's model gives its parameters, and the requests it documents as
 * refused, so that none of them is sent to find out. Every problem is collected, as
 * planBuild does.
 */
import { MAX_VOLUME_GIB } from "../../aws/ebs-answers.ts";
import { SnapshotTag } from "../../tags.ts";

export interface SnapshotUploadSettings {
  image: string;
  manifest: string;
  /** The previous generation's completed manifest: its snapshot becomes the parent, its hashes are the parent's. */
  parentManifest?: string;
  /**
   * The previous generation's snapshot. With its manifest (`parentManifest`, naming the same
   * snapshot) the manifest's hashes are used; without it, which blocks it holds comes from
   * ListSnapshotBlocks, and the SHA-256 of those the image holds too from reading them back
   * (GetSnapshotBlock: the price of not keeping the manifest).
   */
  parentSnapshotId?: string;
  /** The generation's tags (tags.ts): the image set they name must be the one the image holds. */
  tags: Record<string, string>;
  description: string;
  encrypted: boolean;
  kmsKeyArn?: string;
  /** Puts in flight at once. */
  concurrency: number;
  /** The snapshot's size; default the image's, rounded up to GiB (at least the parent's). Never less than the image. */
  volumeSizeGiB?: number;
  /** Minutes EBS keeps a pending snapshot without a put before it fails it (StartSnapshot's Timeout, 10-4320). */
  timeoutMinutes: number;
  /** Read every block back before the manifest says completed (default: a sample of VERIFY_SAMPLE_BLOCKS). */
  verifyAll?: boolean;
  /** How long to wait for a snapshot CompleteSnapshot left `pending` to become readable (default 60 minutes). */
  readableWaitMinutes?: number;
}

/** StartSnapshot's Timeout, in minutes (the model: 10 to 4320). */
export const TIMEOUT_MINUTES = { min: 10, max: 4320 } as const;
const SNAPSHOT_ID = /^snap-[0-9a-f]{8,17}$/;
/** StartSnapshot's KmsKeyArn (the API reference's pattern): a key's ARN, not its id or an alias. */
const KMS_KEY_ARN = /^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key\/[A-Za-z0-9-]+$/;
/** StartSnapshot's Description: at most 255 characters. */
const MAX_DESCRIPTION = 255;
/** Tags a snapshot carries at most (EC2's limit per resource). */
const MAX_TAGS = 50;

/** The problems with `settings` (none: the upload may call EBS). */
export function checkUploadSettings(settings: SnapshotUploadSettings): string[] {
  const problems: string[] = [];
  const parent = settings.parentManifest !== undefined || settings.parentSnapshotId !== undefined;
  if (settings.parentSnapshotId !== undefined && !SNAPSHOT_ID.test(settings.parentSnapshotId))
    problems.push(`--parent-snapshot ${JSON.stringify(settings.parentSnapshotId)} is not a snapshot id (snap-…)`);
  if (parent && (settings.encrypted || settings.kmsKeyArn !== undefined))
    problems.push(
      "--encrypted and --kms-key-arn do not go with a parent: StartSnapshot refuses Encrypted with " +
        "ParentSnapshotId, and the snapshot is encrypted as its parent is",
    );
  if (settings.kmsKeyArn !== undefined && !KMS_KEY_ARN.test(settings.kmsKeyArn))
    problems.push(
      `--kms-key-arn ${JSON.stringify(settings.kmsKeyArn)} is not a KMS key's ARN ` +
        "(arn:aws:kms:<region>:<account>:key/<id>; StartSnapshot takes no key id or alias)",
    );
  const { min, max } = TIMEOUT_MINUTES;
  if (!Number.isSafeInteger(settings.timeoutMinutes) || settings.timeoutMinutes < min || settings.timeoutMinutes > max)
    problems.push(`--timeout-minutes ${settings.timeoutMinutes} is outside ${min}-${max} (StartSnapshot's Timeout)`);
  if (
    settings.volumeSizeGiB !== undefined &&
    (!Number.isSafeInteger(settings.volumeSizeGiB) ||
      settings.volumeSizeGiB < 1 ||
      settings.volumeSizeGiB > MAX_VOLUME_GIB)
  )
    problems.push(`--size-gib ${settings.volumeSizeGiB} is outside 1-${MAX_VOLUME_GIB} (EBS direct's sizes)`);
  if (!Number.isSafeInteger(settings.concurrency) || settings.concurrency < 1)
    problems.push(`--concurrency ${settings.concurrency} is not a whole number from 1`);
  if (settings.description.length > MAX_DESCRIPTION)
    problems.push(
      `the description is ${settings.description.length} characters; StartSnapshot takes ${MAX_DESCRIPTION}`,
    );
  // The upload adds ebs-cache:unverified at the start (removed once the snapshot is read back).
  if (Object.keys(settings.tags).length + 1 > MAX_TAGS)
    problems.push(
      `${Object.keys(settings.tags).length} tags and the upload's ${SnapshotTag.unverified}; a snapshot carries ` +
        MAX_TAGS,
    );
  if (Object.hasOwn(settings.tags, SnapshotTag.unverified))
    problems.push(`the tags name ${SnapshotTag.unverified}, which the upload sets and removes itself`);
  if (settings.parentManifest !== undefined && settings.parentManifest === settings.manifest)
    problems.push("--parent is the manifest being written (--manifest)");
  return problems;
}
