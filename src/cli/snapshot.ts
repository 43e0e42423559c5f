/**
 * `ebs-cache-agent snapshot upload`: the pool's golden snapshot from a disk image, through the
 * EBS direct APIs (src/agent/snapshot/), on any machine with credentials: no builder instance.
 */
import { resolve } from "node:path";
import { Command, InvalidArgumentError, Option } from "commander";
import { generationTags, runSnapshotUpload, type SnapshotUploadReport } from "../agent/snapshot/run.ts";
import { fleetCredentials, fleetRegion } from "../aws/fleet-credentials.ts";
import { ebsClient } from "../aws/ebs.ts";
import { hostMaxAttempts } from "../aws/max-attempts.ts";
import { builderEc2Client } from "../aws/uploaded-snapshots.ts";
import { ConfigError, ExitCode } from "../errors.ts";
import { readManifestJson } from "../host/snapshot-manifest.ts";
import { createLogger } from "../log.ts";
import { VolumeTag } from "../tags.ts";
import { progressOutputs, stopSignal } from "./common.ts";
import { fleetAccess, fleetOptions } from "./fleet.ts";
import { poolNameOption, wholeNumber } from "./options.ts";
import { snapshotBuildCommand } from "./snapshot-build.ts";
import { snapshotUploadDeps } from "./snapshot-deps.ts";
import { snapshotStripCommand } from "./snapshot-strip.ts";

function tagOption(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const at = value.indexOf("=");
  if (at <= 0) throw new InvalidArgumentError(`expected KEY=VALUE, got ${JSON.stringify(value)}`);
  return { ...previous, [value.slice(0, at)]: value.slice(at + 1) };
}

/**
 * The build time of the upload `manifest` left unfinished (a kill, a stop), to resume with: the
 * snapshot is started again with the same ClientToken, and EBS refuses that token with other
 * parameters, tags included. Undefined when there is none (a manifest EBS refuses is reported by
 * the upload itself).
 */
async function interruptedBuiltAt(manifest: string): Promise<string | undefined> {
  const earlier = (await readManifestJson(manifest).catch(() => undefined)) as
    { status?: unknown; tags?: Record<string, unknown> } | undefined;
  // A starting one: its ClientToken may have reached EBS with these tags. A rejected one too: the
  // rerun uploads the same build anew (a new snapshot, the generation's time kept).
  const unfinished = ["starting", "uploading", "completing", "rejected"].includes(earlier?.status as string);
  const builtAt = unfinished ? earlier?.tags?.[VolumeTag.builtAt] : undefined;
  return typeof builtAt === "string" ? builtAt : undefined;
}

function positive(value: string): number {
  const n = wholeNumber(value);
  if (n === 0) throw new InvalidArgumentError("expected at least 1");
  return n;
}

interface UploadOptions {
  image: string;
  manifest: string;
  parent?: string;
  parentSnapshot?: string;
  pool: string;
  imageSet: string;
  images: string;
  imageStore: "graphdriver" | "containerd";
  engineVersion: string;
  builtAt?: string;
  tag?: Record<string, string>;
  kmsKeyArn?: string;
  encrypted?: boolean;
  concurrency: number;
  sizeGib?: number;
  timeoutMinutes: number;
  profile?: string;
  region?: string;
  endpoint?: string;
  ec2Endpoint?: string;
  verify?: boolean;
  json?: boolean;
}

/** `--endpoint`: an http(s) URL, checked before the SDK takes it. */
function endpointOption(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError(`expected an http(s) URL, got ${JSON.stringify(value)}`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:")
    throw new InvalidArgumentError(`expected an http(s) URL, got ${JSON.stringify(value)}`);
  return value;
}

/** The one line the upload prints without --json. */
export function uploadSummary(report: SnapshotUploadReport): string {
  const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  const parent = !report.parentSnapshotId
    ? "no parent"
    : report.parentHashes === "read back"
      ? `${report.parentSnapshotId} (its hashes read back from EBS: ${mib(report.parentBytesRead ?? 0)} ` +
        "downloaded; its manifest, given with --parent, spares this)"
      : `${report.parentSnapshotId} (its hashes from its manifest)`;
  const { verified } = report;
  return (
    `${report.snapshotId} ${report.status}` +
    (report.reconciled ? " (completed by an earlier run, found so and checked)" : "") +
    `: ${report.put} blocks put (${report.zeros} zeros), ${report.unchanged} unchanged from ${parent}, ` +
    `${report.resumed} resumed; ${mib(report.bytesPut)} of an image of ${mib(report.imageBytes)} in ` +
    `${report.seconds} s; read back: ${verified.read} of ${verified.listed} blocks` +
    (report.abandoned.length > 0 ? `; abandoned: ${report.abandoned.join(", ")}` : "") +
    "\n"
  );
}

export function snapshotCommand(): Command {
  const snapshot = new Command("snapshot").description(
    "build the pool's golden snapshot without an instance: the image set into a disk image (build), " +
      "then a snapshot of it (upload, the EBS direct APIs); strip: a pool volume built elsewhere " +
      "(Packer's pool-volume flow) cleared of its machine-local state before its snapshot",
  );
  snapshot.addCommand(snapshotBuildCommand());
  snapshot.addCommand(snapshotStripCommand());
  snapshot.addCommand(snapshotUploadCommand());
  return snapshot;
}

/** `snapshot upload`'s options and help. */
function snapshotUploadCommand(): Command {
  return new Command("upload")
    .description(
      "upload a disk image holding the image set (an XFS image with docker/ at its root, as the pool volume holds " +
        "it) as a pool snapshot: " +
        "only the 512 KiB blocks holding data, SHA-256 checked, several at once; with --parent only the blocks " +
        "that differ from the previous generation's; " +
        "resumable after a kill (the manifest); tagged as the pool's generation, " +
        "as Packer's pool-volume flow tags it",
    )
    .requiredOption("--image <path>", "the disk image (a sparse file; unmounted)")
    .requiredOption(
      "--manifest <path>",
      "this build's manifest: written before the snapshot is started and as blocks land, resumed from if it " +
        "exists, the next build's --parent",
    )
    .option(
      "--parent <path>",
      "the previous generation's completed manifest: upload only what changed (ParentSnapshotId)",
    )
    .option(
      "--parent-snapshot <id>",
      "the previous generation's snapshot (snap-…): with --parent naming it, its manifest's hashes are used; alone " +
        "(its manifest lost), its blocks are listed and those the image holds too read back from EBS to hash " +
        "them (each such block downloaded once)",
    )
    .requiredOption("--pool <name>", "the pool (tag ebs-cache:pool)", poolNameOption)
    .requiredOption("--image-set <name>", "the image set's name (tag ebs-cache:image-set)")
    .requiredOption("--images <refs>", "the image references in the set, comma-separated (tag ebs-cache:images)")
    .addOption(
      new Option("--image-store <store>", "the image store the volume was built with (tag ebs-cache:image-store)")
        .choices(["graphdriver", "containerd"])
        .makeOptionMandatory(),
    )
    .requiredOption("--engine-version <version>", "the docker version that built it (tag ebs-cache:engine-version)")
    .option(
      "--built-at <time>",
      "the generation's time, RFC 3339 UTC (default now; resuming, the interrupted upload's)",
    )
    .option(
      "--tag <key=value>",
      "an operator's tag on the snapshot (repeatable; not ebs-cache:*, not aws:*)",
      tagOption,
    )
    .option(
      "--encrypted",
      "encrypt the snapshot (with --kms-key-arn, that key; else the account's default EBS key); not with a parent, " +
        "whose encryption the snapshot takes",
    )
    .option(
      "--kms-key-arn <arn>",
      "the KMS key's ARN that encrypts the snapshot (implies --encrypted; not with a parent)",
    )
    .option("--concurrency <n>", "blocks put at once", positive, 16)
    .option(
      "--size-gib <n>",
      "the snapshot's size, 1-65536 (default: the image's, rounded up; at least the parent's); never less than the " +
        "image's or the parent's",
      positive,
    )
    .option(
      "--timeout-minutes <n>",
      "EBS fails a pending snapshot after this long without a put (StartSnapshot's Timeout, 10-4320)",
      positive,
      60,
    )
    .addOption(fleetOptions()[0])
    .addOption(fleetOptions("$AWS_REGION, $AWS_DEFAULT_REGION, the profile's region")[1])
    .option("--endpoint <url>", "the EBS direct endpoint (a VPC endpoint, or the lab's emulator)", endpointOption)
    .option(
      "--ec2-endpoint <url>",
      "the EC2 endpoint (a VPC endpoint, or the lab's emulator): the snapshot's ebs-cache:unverified tag removed " +
        "once it is read back, a snapshot found wrong deleted",
      endpointOption,
    )
    .option(
      "--verify",
      "read every block back before the manifest says completed (default: a sample of 32, and that every block " +
        "holding data is listed)",
    )
    .option("--json", "print the report as JSON")
    .addHelpText(
      "after",
      "\nCredentials: the AWS SDK's chain, as pool and gc take it (--profile, the environment, SSO, ~/.aws, an " +
        "instance role last); the build role's policy is iam/ebs-cache-snapshot-builder-policy.json." +
        "\nThe snapshot is tagged ebs-cache:unverified from its start: no keeper, boot or refresh takes it until " +
        "the upload has read it back and removed the tag. One found not to hold the image is deleted; its " +
        "manifest says rejected, and the same command run again uploads anew." +
        "\nExit codes: 0 completed and read back, 1 EBS or EC2 refused or failed, the snapshot read back is not " +
        "the image, or stopped (SIGTERM, SIGINT: run it again, it resumes; docs/snapshot.md's error table says " +
        "which failures a rerun resumes), 2 usage (a bad option, tag, manifest or image: nothing uploaded), " +
        "3 no region (or not a region); no credentials is 1, told in one line.",
    )
    .action(uploadSnapshot);
}

/** `snapshot upload`: the generation's tags checked, then the image uploaded; prints the report. */
async function uploadSnapshot(opts: UploadOptions): Promise<void> {
  const log = createLogger();
  const region = await fleetRegion(fleetAccess(opts), null);
  if (!region)
    throw new ConfigError(
      ["no region: no --region, no AWS_REGION, no region in the profile"],
      "give --region NAME, set AWS_REGION, or add `region` to the profile in ~/.aws/config",
    );
  const credentials = fleetCredentials({ ...(opts.profile ? { profile: opts.profile } : {}), log });
  const tags = generationTags({
    pool: opts.pool,
    imageSet: opts.imageSet,
    images: opts.images.split(",").filter((s) => s !== ""),
    imageStore: opts.imageStore,
    engineVersion: opts.engineVersion,
    builtAt:
      opts.builtAt ?? (await interruptedBuiltAt(opts.manifest)) ?? new Date().toISOString().replace(/\.\d{3}Z$/, "Z"),
    operatorTags: opts.tag ?? {},
  });
  if ("problems" in tags) {
    process.stderr.write(`error: ${tags.problems.join("; ")}\n`);
    process.exitCode = ExitCode.usage;
    return;
  }
  // AWS_MAX_ATTEMPTS counts for the puts as for every EC2 call of the agent (hostMaxAttempts).
  const client = ebsClient({
    region,
    credentials,
    maxAttempts: hostMaxAttempts(),
    ...(opts.endpoint ? { endpoint: opts.endpoint } : {}),
  });
  const ec2 = builderEc2Client({ region, credentials, ...(opts.ec2Endpoint ? { endpoint: opts.ec2Endpoint } : {}) });
  try {
    const report = await runSnapshotUpload(
      { ...snapshotUploadDeps({ ebs: client, ec2 }, log), signal: stopSignal(log), progress: progressOutputs(log) },
      {
        image: resolve(opts.image),
        manifest: resolve(opts.manifest),
        ...(opts.parent ? { parentManifest: resolve(opts.parent) } : {}),
        ...(opts.parentSnapshot ? { parentSnapshotId: opts.parentSnapshot } : {}),
        tags: tags.tags,
        description: `ebs-cache golden snapshot: pool ${opts.pool}, image set ${opts.imageSet}`,
        encrypted: Boolean(opts.encrypted || opts.kmsKeyArn),
        ...(opts.kmsKeyArn ? { kmsKeyArn: opts.kmsKeyArn } : {}),
        concurrency: opts.concurrency,
        ...(opts.sizeGib ? { volumeSizeGiB: opts.sizeGib } : {}),
        timeoutMinutes: opts.timeoutMinutes,
        verifyAll: Boolean(opts.verify),
      },
    );
    process.stdout.write(opts.json ? JSON.stringify(report, null, 2) + "\n" : uploadSummary(report));
  } finally {
    client.destroy();
    ec2.destroy();
  }
}
