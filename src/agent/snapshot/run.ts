/**
 * `snapshot upload`: a disk image (the image set built into a sparse XFS image) becomes an EBS
 * snapshot through the EBS direct APIs, with no instance and no volume: check what is asked and
 * the image (a pool image of the image set the tags name: before any call) → observe (the parent
 * build's manifest, this build's manifest if a killed run left one, the image's blocks) → start
 * the snapshot, tagged `ebs-cache:unverified`, with a new ClientToken the manifest records
 * (`starting`) before StartSnapshot is asked, or find what the manifest's ClientToken gives back
 * (pending: resume; completed: check it and record it; in error, or not holding the image: reject
 * it, delete it and start a fresh one) → plan (src/agent/snapshot/plan.ts) → put the planned
 * blocks, several at once → complete → read back (verify.ts) → the tag removed (only now may the
 * snapshot be a pool's current generation) → the manifest says completed. The manifest is
 * rewritten as blocks land, so a kill at any point resumes where it stopped; once completed it is
 * the next generation's parent. A snapshot the read-back finds wrong is never untagged: the
 * manifest says `rejected`, it is deleted, and the rerun starts a new one.
 */
import { progressReporter, type ProgressReporter } from "../../progress.ts";
import type { Fields } from "../../log.ts";
import { randomUUID } from "node:crypto";
import { EbsAnswerError } from "../../aws/ebs-errors.ts";
import { AgentError, ExitCode } from "../../errors.ts";
import { SnapshotTag } from "../../tags.ts";
import type { SnapshotUploadDeps } from "./deps.ts";
import { imageSetMismatch, parseImageSetRecord } from "./image-set-record.ts";
import {
  MANIFEST_FORMAT,
  ManifestError,
  parseManifest,
  toMap,
  toRecord,
  type SnapshotManifest,
  type StartedManifest,
  type StartingManifest,
} from "./manifest.ts";
import { readParentBlocks, type ParentRead } from "./parent.ts";
import {
  EBS_BLOCK_BYTES,
  blocksOfVolume,
  checkWritten,
  linearAggregate,
  planSnapshotUpload,
  type BlockHashes,
} from "./plan.ts";
import { checkUploadSettings, type SnapshotUploadSettings } from "./settings.ts";
import { SnapshotUploadError, stopIfAborted } from "./stop.ts";
import { SnapshotVerifyError, verifySnapshot, waitUntilReadable, type Disposal, type VerifyReport } from "./verify.ts";

export type { SnapshotUploadSettings } from "./settings.ts";
export { SnapshotUploadError } from "./stop.ts";
/** The generation's tags an upload carries, checked (tags.ts): the command builds them before it uploads. */
export { generationTags } from "./tags.ts";

export interface SnapshotUploadReport {
  snapshotId: string;
  parentSnapshotId?: string;
  status: string;
  volumeSizeGiB: number;
  imageBytes: number;
  /** Blocks of the image holding data. */
  imageBlocks: number;
  /** Blocks put by this run, of which zeros (over the parent's data). */
  put: number;
  zeros: number;
  /** Blocks the parent held the same, and blocks an earlier run of this build had put. */
  unchanged: number;
  resumed: number;
  bytesPut: number;
  /** Where the parent's block hashes came from: its manifest, or EBS (each shared block downloaded). */
  parentHashes?: "manifest" | "read back";
  /** Bytes downloaded to learn the parent's hashes (none with its manifest). */
  parentBytesRead?: number;
  /** The read-back check before the manifest said completed. */
  verified: VerifyReport;
  /** The snapshot an earlier run completed, found so on this run, checked and recorded (nothing put). */
  reconciled: boolean;
  /**
   * Snapshots of earlier runs this one abandoned (in error, completed without the image, or rejected by an earlier
   * read-back), each deleted if it could be (logged `snapshot.discarded`, else `snapshot.kept`).
   */
  abandoned: string[];
  seconds: number;
}

const GiB = 1024 ** 3;
/** How long a snapshot CompleteSnapshot left `pending` may take to become readable, by default. */
const READABLE_WAIT_MINUTES = 60;

/** The manifest at `path` checked, or undefined when there is none. */
async function readManifest(deps: SnapshotUploadDeps, path: string): Promise<SnapshotManifest | undefined> {
  let json: unknown;
  try {
    json = await deps.readManifestJson(path);
  } catch (error) {
    throw new ManifestError(path, (error as Error).message);
  }
  return json === undefined ? undefined : parseManifest(path, json);
}

const ROOM = "make its folder writable with room to spare, then run the same command again";

/** Writes the manifest; a failure (a full disk, a folder gone) is the upload's, typed. */
async function writeManifest(
  deps: SnapshotUploadDeps,
  path: string,
  manifest: SnapshotManifest,
  remediation = `${ROOM}: it resumes from the manifest as last written (blocks put since are put again)`,
): Promise<void> {
  try {
    await deps.writeManifestJson(path, manifest);
  } catch (error) {
    throw new SnapshotUploadError(
      `the manifest ${path} cannot be written: ${(error as Error).message}`,
      remediation,
      ExitCode.failure,
    );
  }
}

/** The image is a pool image of the image set the tags name, or nothing is asked of EBS. */
async function checkImage(deps: SnapshotUploadDeps, settings: SnapshotUploadSettings) {
  const image = await deps.inspectImage(settings.image);
  const record =
    image.imageSetRecord === undefined
      ? { problem: "is missing (.ebs-cache-agent/image-set.json)" }
      : parseImageSetRecord(image.imageSetRecord);
  if ("problem" in record)
    throw new SnapshotUploadError(
      `${settings.image} is not an image \`snapshot build\` made: the record of its image set ${record.problem}`,
      "upload an image `snapshot build` made (it records the image set it built on the image); nothing was uploaded",
    );
  const mismatch = imageSetMismatch(record, settings.tags);
  if (mismatch.length > 0)
    throw new SnapshotUploadError(
      `${settings.image} does not hold the image set the tags would name: ${mismatch.join("; ")}`,
      "give --images, --image-store and --engine-version as the build's report names them, or upload the image " +
        "built for these; nothing was uploaded",
    );
  return image;
}

/** What the manifest's ClientToken (or a new one) gave: a snapshot to put blocks to, or one to check. */
type Opened =
  | {
      kind: "upload";
      snapshotId: string;
      clientToken: string;
      alreadyPut: Map<number, string>;
    }
  /** CompleteSnapshot was accepted on an earlier run (`completing`): only the check is left. */
  | { kind: "sealing"; snapshotId: string; clientToken: string; alreadyPut: Map<number, string> }
  | { kind: "reconciled"; snapshotId: string; clientToken: string; verified: VerifyReport };

export async function runSnapshotUpload(
  deps: SnapshotUploadDeps,
  settings: SnapshotUploadSettings,
): Promise<SnapshotUploadReport> {
  const now = deps.now ?? Date.now;
  const started = now();
  const request = await checkRequest(deps, settings);
  const upload = await readUpload(deps, settings, request);
  const opened = await openSnapshot(upload);
  const plan = planSnapshotUpload({
    volumeBlocks: upload.volumeBlocks,
    image: upload.scan.blocks,
    ...(upload.parentBlocks ? { parent: upload.parentBlocks } : {}),
    ...(opened.kind === "reconciled" ? {} : { alreadyPut: opened.alreadyPut }),
    zeroHash: upload.expected.zeroHash,
  });
  const run: OpenedUpload = {
    ...upload,
    opened,
    plan,
    written: new Map(opened.kind === "reconciled" ? plan.wanted : opened.alreadyPut),
    seconds: () => Math.round((now() - started) / 100) / 10,
  };
  if (opened.kind === "reconciled") return finish(run, "completed", opened.verified);
  const status = await putAndComplete(run);
  return finish(run, status, await readBack(run));
}

/** The request as checked before anything is asked of EBS: the image, the parent's and this build's manifests. */
interface CheckedRequest {
  image: Awaited<ReturnType<typeof checkImage>>;
  /** The parent's manifest (--parent), completed. */
  parent: StartedManifest | undefined;
  parentId: string | undefined;
  /** This build's manifest, left by an earlier run. */
  earlier: SnapshotManifest | undefined;
}

/** The settings, the image and the manifests agree, or the upload is refused before any call. */
async function checkRequest(deps: SnapshotUploadDeps, settings: SnapshotUploadSettings): Promise<CheckedRequest> {
  const problems = checkUploadSettings(settings);
  if (problems.length > 0)
    throw new SnapshotUploadError(
      `the upload is refused: ${problems.join("; ")}`,
      "fix the options named; nothing was asked of EBS",
    );
  const image = await checkImage(deps, settings);

  const read = settings.parentManifest ? await readManifest(deps, settings.parentManifest) : undefined;
  if (settings.parentManifest && read?.status !== "completed") {
    throw new ManifestError(settings.parentManifest, read ? "is not completed" : "does not exist");
  }
  const parent = read?.status === "completed" ? read : undefined;
  if (parent && settings.parentSnapshotId !== undefined && parent.snapshotId !== settings.parentSnapshotId)
    throw new SnapshotUploadError(
      `--parent ${settings.parentManifest} is the manifest of ${parent.snapshotId}, not of --parent-snapshot ` +
        settings.parentSnapshotId,
      "give the manifest of that snapshot, or one of the two",
    );
  const parentId = parent?.snapshotId ?? settings.parentSnapshotId;
  const earlier = await readManifest(deps, settings.manifest);
  if (earlier?.status === "completed") {
    throw new SnapshotUploadError(
      `the build of ${settings.manifest} is already completed: ${earlier.snapshotId}`,
      "give a new --manifest path for a new build (and this one as --parent for an incremental one)",
    );
  }
  if (earlier && earlier.parentSnapshotId !== parentId) {
    throw new SnapshotUploadError(
      `${settings.manifest} resumes an upload with parent ${earlier.parentSnapshotId ?? "none"}, ` +
        `not ${parentId ?? "none"}`,
      "resume with the same --parent, or start a new build with a new --manifest path",
    );
  }
  return { image, parent, parentId, earlier };
}

/** What the upload works from once the image is read: the decisions below take it. */
interface Upload extends CheckedRequest {
  deps: SnapshotUploadDeps;
  settings: SnapshotUploadSettings;
  log: SnapshotUploadDeps["log"];
  scan: { bytes: number; blocks: BlockHashes };
  /** The parent's blocks read back from EBS (no parent manifest given). */
  parentRead: ParentRead | undefined;
  parentBlocks: BlockHashes | undefined;
  volumeSizeGiB: number;
  volumeBlocks: number;
  /** What a read-back checks the snapshot against. */
  expected: { image: BlockHashes; volumeSizeGiB: number; zeroHash: string };
  verifyOptions: { all: boolean; concurrency: number; signal?: AbortSignal };
  /** Snapshots this run abandoned (the report's `abandoned`). */
  abandoned: string[];
}

/**
 * The image's blocks and the parent's, and the volume's size: the image unchanged since an
 * earlier run, the size no smaller than the image or the parent.
 */
async function readUpload(
  deps: SnapshotUploadDeps,
  settings: SnapshotUploadSettings,
  request: CheckedRequest,
): Promise<Upload> {
  const { log } = deps;
  const { image, parent, earlier } = request;
  // The sizes, before any call: EBS would take a smaller size and leave the image's end out.
  const imageGiB = Math.ceil(Math.max(image.bytes, image.fsBytes) / GiB);
  const refuseSize = (what: string, giB: number) => {
    throw new SnapshotUploadError(
      `--size-gib ${settings.volumeSizeGiB} is smaller than ${what} (${giB} GiB)`,
      `give --size-gib of at least ${giB}, or none (the image's size, at least the parent's)`,
    );
  };
  if (settings.volumeSizeGiB !== undefined && settings.volumeSizeGiB < imageGiB) refuseSize("the image", imageGiB);
  if (parent && settings.volumeSizeGiB !== undefined && settings.volumeSizeGiB < parent.volumeSizeGiB)
    refuseSize(`the parent ${parent.snapshotId}`, parent.volumeSizeGiB);

  log.info("snapshot.scan", "finding the image's blocks holding data", { image: settings.image });
  const scanning = uploadProgress(deps, { image: settings.image });
  const scanned = (read: number, toRead: number, done = false) =>
    scanning.update(
      {
        step: { index: 1, count: 2, name: "scan" },
        bytes: { done: read * EBS_BLOCK_BYTES, total: toRead * EBS_BLOCK_BYTES },
      },
      done,
    );
  let toRead = 0;
  const scan = await deps.scanImage(settings.image, EBS_BLOCK_BYTES, (read, total) => {
    toRead = total;
    scanned(read, total, read === total && total > 0);
  });
  if (toRead === 0) scanned(0, 0, true);
  if (scan.bytes !== image.bytes || (earlier && !sameHashes(toMap(earlier.blocks), scan.blocks))) {
    const since = earlier ? `since the upload of ${earlier.snapshotId ?? "this build"} began` : "while read";
    throw new SnapshotUploadError(
      `${settings.image} changed ${since}`,
      "upload an image once it is built and unmounted; start a new build with a new --manifest path",
    );
  }
  let parentRead: ParentRead | undefined;
  if (parent) {
    log.info("snapshot.parent", "the parent's block hashes from its manifest: nothing read back", {
      parent: parent.snapshotId,
      manifest: settings.parentManifest,
    });
  } else if (settings.parentSnapshotId !== undefined) {
    parentRead = await readParentBlocks(deps, settings.parentSnapshotId, scan.blocks, settings.concurrency);
    if (settings.volumeSizeGiB !== undefined && settings.volumeSizeGiB < parentRead.volumeSizeGiB)
      refuseSize(`the parent ${settings.parentSnapshotId}`, parentRead.volumeSizeGiB);
  }
  const volumeSizeGiB =
    settings.volumeSizeGiB ?? Math.max(imageGiB, parent?.volumeSizeGiB ?? parentRead?.volumeSizeGiB ?? 1);
  if (earlier && earlier.volumeSizeGiB !== volumeSizeGiB)
    throw new SnapshotUploadError(
      `${settings.manifest} resumes an upload of ${earlier.volumeSizeGiB} GiB, not ${volumeSizeGiB} GiB`,
      `resume with --size-gib ${earlier.volumeSizeGiB}, or start a new build with a new --manifest path`,
    );
  return {
    ...request,
    deps,
    settings,
    log,
    scan,
    parentRead,
    parentBlocks: parent ? toMap(parent.blocks) : parentRead?.blocks,
    volumeSizeGiB,
    volumeBlocks: blocksOfVolume(volumeSizeGiB),
    expected: { image: scan.blocks, volumeSizeGiB, zeroHash: deps.zeroBlockHash(EBS_BLOCK_BYTES) },
    verifyOptions: {
      all: settings.verifyAll ?? false,
      concurrency: settings.concurrency,
      signal: deps.signal,
    },
    abandoned: [],
  };
}

/**
 * Deletes a snapshot this build made and will never use (its manifest already says so, so no
 * rerun asks its ClientToken again). A failure is told, not thrown: the snapshot keeps
 * `ebs-cache:unverified`, so nothing takes it, and the upload goes on.
 */
async function discard(upload: Upload, snapshotId: string): Promise<Disposal> {
  const { deps, log } = upload;
  try {
    await deps.snapshots.discard(snapshotId);
    log.notice("snapshot.discarded", `${snapshotId} deleted (or gone already): abandoned, never verified`, {
      snapshotId,
    });
    return { deleted: true };
  } catch (error) {
    if (!(error instanceof AgentError)) throw error;
    log.warning(
      "snapshot.kept",
      `${snapshotId} could not be deleted: it keeps ${SnapshotTag.unverified}, so nothing takes it; delete it ` +
        `(aws ec2 delete-snapshot --snapshot-id ${snapshotId})`,
      { snapshotId, error: error.message, remediation: error.remediation },
    );
    return { deleted: false, why: error.message };
  }
}

/** The manifest's snapshot abandoned: the manifest says rejected first (no rerun resumes it), then it is deleted. */
async function abandon(upload: Upload, snapshotId: string, clientToken: string): Promise<void> {
  await writeManifest(upload.deps, upload.settings.manifest, {
    ...upload.earlier!,
    snapshotId,
    clientToken,
    status: "rejected",
  });
  upload.abandoned.push(snapshotId);
  await discard(upload, snapshotId);
}

/**
 * A new ClientToken, recorded in a `starting` manifest before StartSnapshot is asked with it. A
 * kill between the request and the manifest naming its answer (or an answer lost, then a kill)
 * leaves the token named, and the rerun asks it again instead of starting a second snapshot
 * beside the first (which would stay pending, nameless, until EBS failed it). The write failing
 * (a full disk, a folder gone) stops the upload with nothing started.
 */
async function newClientToken(upload: Upload): Promise<string> {
  const clientToken = randomUUID();
  await writeManifest(
    upload.deps,
    upload.settings.manifest,
    startingManifest(upload, clientToken),
    `nothing was started: ${ROOM}`,
  );
  return clientToken;
}

/**
 * StartSnapshot with the manifest's ClientToken (or a new one, recorded first): the snapshot it
 * gives back, resumed, checked, or abandoned for a fresh one. A new token must give a pending
 * snapshot; a `starting` manifest's may give one made by the run that recorded it (nothing put to
 * it yet), or a first one (that run was stopped before its request reached EBS). A rejected
 * manifest's token is never asked again: its snapshot may be deleted, and what EBS answers for a
 * deleted snapshot's token it does not say.
 */
async function openSnapshot(upload: Upload): Promise<Opened> {
  const { deps, settings, log, earlier, parentId } = upload;
  let clientToken: string;
  let fromManifest = earlier !== undefined && earlier.status !== "rejected";
  if (earlier?.status === "rejected") {
    log.notice("snapshot.rejected-before", `${earlier.snapshotId} was found not to hold the image: uploading anew`, {
      snapshotId: earlier.snapshotId,
    });
    upload.abandoned.push(earlier.snapshotId);
    await discard(upload, earlier.snapshotId);
    clientToken = await newClientToken(upload);
  } else clientToken = earlier?.clientToken ?? (await newClientToken(upload));
  for (; ; fromManifest = false) {
    const snapshot = await deps.writer.start({
      volumeSizeGiB: upload.volumeSizeGiB,
      ...(parentId ? { parentSnapshotId: parentId } : {}),
      clientToken,
      description: settings.description,
      // Never any pool's current generation until read back (finish removes it).
      tags: { ...settings.tags, [SnapshotTag.unverified]: "true" },
      encrypted: settings.encrypted,
      ...(settings.kmsKeyArn ? { kmsKeyArn: settings.kmsKeyArn } : {}),
      timeoutMinutes: settings.timeoutMinutes,
    });
    const { snapshotId } = snapshot;
    const same = fromManifest && snapshotId === earlier?.snapshotId;
    if (snapshot.status === "pending") {
      if (fromManifest && earlier?.status === "starting")
        log.notice(
          "snapshot.start-recorded",
          "the manifest's ClientToken asked again: uploading from its first block",
          {
            snapshotId,
            why: "an earlier run stopped between recording the token and recording StartSnapshot's answer",
          },
        );
      else if (fromManifest && !same)
        log.warning("snapshot.resume-lost", "the manifest's snapshot was not given back: uploading anew", {
          left: earlier?.snapshotId,
          snapshotId,
          why: "its ClientToken expired, or the endpoint keeps none; EBS fails the one left after its Timeout",
        });
      const alreadyPut = new Map(same ? toMap(earlier!.written) : []);
      return same && earlier?.status === "completing"
        ? { kind: "sealing", snapshotId, clientToken, alreadyPut }
        : { kind: "upload", snapshotId, clientToken, alreadyPut };
    }
    if (!fromManifest)
      throw new EbsAnswerError(
        "StartSnapshot",
        snapshotId,
        `a ${snapshot.status} snapshot for a ClientToken never used`,
      );
    const reconciled = await reconcile(upload, snapshot.status, snapshotId, clientToken);
    if (reconciled) return reconciled;
    await abandon(upload, snapshotId, clientToken);
    clientToken = await newClientToken(upload);
  }
}

/**
 * The manifest's snapshot, found completed or in error by StartSnapshot: completed and holding
 * the image, it is this build's; otherwise undefined (it is to be abandoned).
 */
async function reconcile(
  upload: Upload,
  status: string,
  snapshotId: string,
  clientToken: string,
): Promise<Opened | undefined> {
  const { deps, log } = upload;
  if (status !== "completed") {
    log.warning(
      "snapshot.abandoned",
      `${snapshotId} is in error (EBS fails a pending snapshot --timeout-minutes after its last put): ` +
        "abandoned, deleting it, uploading anew",
      { snapshotId },
    );
    return undefined;
  }
  log.notice("snapshot.reconcile", "the manifest's snapshot is completed already: reading it back", {
    snapshotId,
  });
  try {
    const verified = await verifySnapshot(deps.reader, snapshotId, upload.expected, upload.verifyOptions);
    return { kind: "reconciled", snapshotId, clientToken, verified };
  } catch (error) {
    if (!(error instanceof SnapshotVerifyError)) throw error;
    log.error(
      "snapshot.abandoned",
      `${snapshotId} is completed but does not hold the image: abandoned (it keeps ` +
        `${SnapshotTag.unverified}: nothing took it), deleting it, uploading anew`,
      { snapshotId, problems: error.problems.join("; ") },
    );
    return undefined;
  }
}

/** The upload with its snapshot opened and its blocks planned. */
interface OpenedUpload extends Upload {
  opened: Opened;
  plan: ReturnType<typeof planSnapshotUpload>;
  /** The blocks the snapshot holds (put by this run or an earlier one). */
  written: Map<number, string>;
  /** Since the run started. */
  seconds(): number;
}

/** This build's manifest before StartSnapshot is asked with `clientToken`: no snapshot, nothing written. */
function startingManifest(upload: Upload, clientToken: string): StartingManifest {
  return {
    format: MANIFEST_FORMAT,
    ...(upload.parentId ? { parentSnapshotId: upload.parentId } : {}),
    clientToken,
    status: "starting",
    volumeSizeGiB: upload.volumeSizeGiB,
    blockSize: EBS_BLOCK_BYTES,
    imageBytes: upload.scan.bytes,
    blocks: toRecord(upload.scan.blocks),
    written: {},
    tags: upload.settings.tags,
  };
}

/** This build's manifest as it stands, once its snapshot is opened. */
function manifestOf(run: OpenedUpload, status: StartedManifest["status"], verified?: VerifyReport): StartedManifest {
  return {
    ...startingManifest(run, run.opened.clientToken),
    snapshotId: run.opened.snapshotId,
    status,
    written: toRecord(run.written),
    ...(verified ? { verified } : {}),
  };
}

function reportOf(run: OpenedUpload, status: string, verified: VerifyReport): SnapshotUploadReport {
  const { opened, plan, parent, parentRead, parentId } = run;
  return {
    snapshotId: opened.snapshotId,
    ...(parentId ? { parentSnapshotId: parentId } : {}),
    status,
    volumeSizeGiB: run.volumeSizeGiB,
    imageBytes: run.scan.bytes,
    imageBlocks: run.scan.blocks.size,
    put: opened.kind === "upload" ? plan.put.length : 0,
    zeros: opened.kind === "upload" ? plan.put.filter((b) => b.zeros).length : 0,
    unchanged: plan.unchanged,
    resumed: opened.kind === "upload" ? plan.resumed : plan.wanted.size,
    bytesPut: opened.kind === "upload" ? plan.put.length * EBS_BLOCK_BYTES : 0,
    ...(parent ? { parentHashes: "manifest" as const, parentBytesRead: 0 } : {}),
    ...(parentRead ? { parentHashes: "read back" as const, parentBytesRead: parentRead.bytesRead } : {}),
    verified,
    reconciled: opened.kind === "reconciled",
    abandoned: run.abandoned,
    seconds: run.seconds(),
  };
}

/**
 * The planned blocks put (an upload) and the snapshot completed, then readable; the manifest
 * says `completing` from CompleteSnapshot on. Returns the snapshot's status.
 */
async function putAndComplete(run: OpenedUpload): Promise<string> {
  const { deps, settings, log, opened, plan, written } = run;
  const { snapshotId } = opened;
  const now = deps.now ?? Date.now;
  // The first record of the snapshot opened; a kill before it leaves the manifest `starting` (or as
  // it was), and the rerun asks the same ClientToken again.
  await writeManifest(deps, settings.manifest, manifestOf(run, opened.kind === "sealing" ? "completing" : "uploading"));
  log.info("snapshot.plan", "blocks to put", {
    snapshotId,
    parent: run.parentId,
    imageBlocks: run.scan.blocks.size,
    put: opened.kind === "upload" ? plan.put.length : 0,
    unchanged: plan.unchanged,
    resumed: plan.resumed,
  });
  let status = "pending";
  if (opened.kind === "upload") {
    await putBlocks(deps, settings, snapshotId, plan.put, written, () => manifestOf(run, "uploading"));
    checkWritten(plan.wanted, written, run.volumeBlocks);
    status = await deps.writer.complete(snapshotId, written.size, linearAggregate(written, deps.sha256));
    if (status === "error")
      throw new SnapshotUploadError(
        `EBS failed snapshot ${snapshotId} at its completion`,
        "run the same command again: it abandons the failed snapshot and uploads anew",
        ExitCode.failure,
      );
    await writeManifest(deps, settings.manifest, manifestOf(run, "completing"));
  }
  if (status !== "completed") {
    const minutes = settings.readableWaitMinutes ?? READABLE_WAIT_MINUTES;
    await waitUntilReadable(deps.reader, snapshotId, now() + minutes * 60_000, {
      now,
      signal: deps.signal,
      onWait: (attempt) =>
        log.info("snapshot.sealing", "waiting for EBS to let the completed snapshot be read", { snapshotId, attempt }),
    });
    status = "completed";
  }
  return status;
}

/** The completed snapshot read back; one found wrong is recorded rejected and deleted, and the run fails. */
async function readBack(run: OpenedUpload): Promise<VerifyReport> {
  const { snapshotId } = run.opened;
  try {
    return await verifySnapshot(run.deps.reader, snapshotId, run.expected, run.verifyOptions);
  } catch (error) {
    if (!(error instanceof SnapshotVerifyError)) throw error;
    // Found wrong: recorded as such before it goes, so no rerun ever checks it again (a second
    // sample could miss what the first found) or asks its ClientToken.
    await writeManifest(run.deps, run.settings.manifest, manifestOf(run, "rejected"));
    run.log.error("snapshot.rejected", `${snapshotId} does not hold the image: rejected, deleting it`, {
      snapshotId,
      problems: error.problems.join("; "),
    });
    throw new SnapshotVerifyError(snapshotId, error.problems, await discard(run, snapshotId));
  }
}

/** The snapshot read back: untagged, then recorded completed; returns the report. */
async function finish(run: OpenedUpload, status: string, verified: VerifyReport): Promise<SnapshotUploadReport> {
  const { deps, log } = run;
  const { snapshotId } = run.opened;
  // Read back and found to hold the image: only now may a keeper, a boot or a refresh take it.
  // Before the manifest: a kill in between leaves it `completing`, and the rerun checks and untags again.
  await deps.snapshots.markVerified(snapshotId);
  log.info("snapshot.verified", `${SnapshotTag.unverified} removed: the snapshot may be the pool's current one`, {
    snapshotId,
  });
  await writeManifest(deps, run.settings.manifest, manifestOf(run, "completed", verified));
  const done = reportOf(run, status, verified);
  log.notice("snapshot.completed", `snapshot ${snapshotId} ${status}, read back`, {
    ...done,
    verified: `${verified.read} of ${verified.listed} blocks`,
    abandoned: run.abandoned.join(","),
  });
  return done;
}

/**
 * Puts `put`, `settings.concurrency` at once, recording each in `written`. The manifest is saved
 * at most every 2 s while puts land: a kill loses at most those puts' records, and they are put
 * again (the same bytes) on resume.
 */
async function putBlocks(
  deps: SnapshotUploadDeps,
  settings: SnapshotUploadSettings,
  snapshotId: string,
  put: readonly { index: number; hash: string; zeros: boolean }[],
  written: Map<number, string>,
  manifest: () => SnapshotManifest,
): Promise<void> {
  const now = deps.now ?? Date.now;
  let saving: Promise<void> = Promise.resolve();
  let lastSave = now();
  const save = (force: boolean) => {
    if (!force && now() - lastSave < 2000) return saving;
    lastSave = now();
    const copy = manifest();
    saving = saving.then(() => writeManifest(deps, settings.manifest, copy));
    return saving;
  };
  let next = 0;
  let done = 0;
  const progress = uploadProgress(deps, { snapshotId });
  const putting = (finished: boolean) =>
    progress.update(
      {
        step: { index: 2, count: 2, name: "put" },
        bytes: { done: done * EBS_BLOCK_BYTES, total: put.length * EBS_BLOCK_BYTES },
      },
      finished,
    );
  putting(put.length === 0);
  const zeros = Buffer.alloc(EBS_BLOCK_BYTES);
  const worker = async () => {
    while (next < put.length) {
      stopIfAborted(deps.signal);
      const block = put[next++]!;
      const data = block.zeros ? zeros : await readImageBlock(deps, settings.image, block.index);
      // The bytes read now must be the bytes planned: the image may not change under the upload.
      const hash = Buffer.from(deps.sha256(data)).toString("base64");
      if (hash !== block.hash)
        throw new SnapshotUploadError(
          `${settings.image} changed while uploading (block ${block.index})`,
          "upload an image once it is built and unmounted; start a new build with a new --manifest path",
          ExitCode.failure,
        );
      await deps.writer.putBlock(snapshotId, block.index, data, block.hash);
      written.set(block.index, block.hash);
      done += 1;
      void save(false).catch(() => undefined);
      putting(done === put.length);
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.max(1, Math.min(settings.concurrency, put.length)) }, worker));
  } finally {
    await save(true);
  }
}

/**
 * The upload's progress line: in the log every 5 s (and at each step's end), and on a terminal or
 * to systemd where the CLI gives them.
 */
function uploadProgress(deps: SnapshotUploadDeps, fields: Fields): ProgressReporter {
  return progressReporter({
    log: deps.log,
    event: "snapshot.progress",
    fields,
    now: deps.now ?? (() => performance.now()),
    ...deps.progress,
  });
}

/** One block of the image; a failure to read it (the file gone, an I/O error) is the upload's, typed. */
async function readImageBlock(deps: SnapshotUploadDeps, image: string, index: number): Promise<Uint8Array> {
  try {
    return await deps.readBlock(image, index, EBS_BLOCK_BYTES);
  } catch (error) {
    throw new SnapshotUploadError(
      `block ${index} of ${image} cannot be read: ${(error as Error).message}`,
      "keep the image in place and readable until the upload ends, then run the same command again: it resumes",
      ExitCode.failure,
    );
  }
}

function sameHashes(a: BlockHashes, b: BlockHashes): boolean {
  if (a.size !== b.size) return false;
  for (const [index, hash] of a) if (b.get(index) !== hash) return false;
  return true;
}
