/**
 * `ebs-cache-agent acceptance`: on this instance, with the agent's role, first clean up what
 * earlier (killed) runs left; then create a volume from the pool's current snapshot and a blank
 * one (plan.ts), attach each here, find its device by NVMe serial (the boot's own lookup), mount
 * the snapshot's read-only (never read-write, never formatted), time first reads of never-read
 * blocks at depths 1, 8 and 32 and the throughput once initialized (reads.ts), then unmount,
 * detach (never forced) and delete everything it made, and write the calibration
 * (schema/ebs-model.schema.json), checked by the parser the lab reads it with.
 */
import { join } from "node:path";
import { DEVICE_NAMES } from "../../aws/ec2.ts";
import { EbsModelError, parseEbsModel, type EbsModel } from "../../ebs-model.ts";
import { AgentError, describeError } from "../../errors.ts";
import type { CloudVolumes, Identity } from "../ports.ts";
import { currentSnapshot, poolSelector } from "../volume-rules.ts";
import { cleanUpEarlierRuns, type CleanupOutcome } from "./apply.ts";
import type { AcceptanceDeps } from "./deps.ts";
import { calibrationOf, planAcceptance, type AcceptanceMeasurements, type AcceptancePlan } from "./plan.ts";
import { DEPTHS, EBS_BLOCK_BYTES, FIRST_READ_BYTES, WARM_READ, planReads, type Depth, type ReadPlan } from "./reads.ts";

/** The folder under the mount root where a run mounts its volume (and only a run). */
/** How long a killed run's volumes live before gc deletes them (the command's help says it). */
export { ACCEPTANCE_LIFETIME_HOURS } from "./plan.ts";

export const ACCEPTANCE_FOLDER = "acceptance";

/** The run could not be made, or left something behind: what, and what to do. */
export class AcceptanceError extends AgentError {}

export interface AcceptanceResult {
  runId: string;
  /** What earlier runs left, and what became of it. */
  cleaned: CleanupOutcome[];
  calibration: EbsModel;
  output: string;
}

/** A volume the run made, and how far it got with it. */
interface Made {
  volumeId: string;
  role: string;
  mountPoint?: string;
}

export async function runAcceptance(deps: AcceptanceDeps): Promise<AcceptanceResult> {
  const { settings } = deps;
  const identity = await deps.identify();
  const instanceType = identity.instanceType;
  if (!instanceType)
    throw new AcceptanceError(
      "IMDS gives no instance type: the calibration must name one",
      "run the acceptance on an EC2 instance whose metadata service answers /latest/meta-data/instance-type",
    );
  const cloud = deps.cloudFor(identity.region);
  const cleaned = await cleanUp(deps, cloud, identity.instanceId);
  const snapshot = currentSnapshot(await cloud.findSnapshots(poolSelector(settings)), settings.imageSet);
  if (!snapshot)
    throw new AcceptanceError(
      `pool ${settings.pool} has no current snapshot to create the run's volume from`,
      "build the pool's snapshot first (docs/snapshot.md), then run the acceptance again",
    );
  const plan = planAcceptance({
    runId: deps.newRunId(),
    zone: identity.availabilityZone,
    snapshot,
    cloudNow: cloud.clock.now(),
    prices: settings.prices,
  });
  for (const line of plan.announcement) deps.say(line);
  const made: Made[] = [];
  let measured: (AcceptanceMeasurements & { inData: boolean }) | undefined;
  let failure: unknown;
  try {
    measured = await measure(deps, cloud, identity, plan, made);
  } catch (error) {
    failure = error;
  }
  const left = await tearDown(deps, cloud, identity.instanceId, made);
  const leftLine = `left behind: ${left.join("; ")}`;
  if (failure !== undefined) {
    if (left.length > 0) deps.log.warning("acceptance.left", leftLine);
    throw failure;
  }
  if (left.length > 0)
    throw new AcceptanceError(
      `the run measured, but ${leftLine}`,
      "run `ebs-cache-agent acceptance --yes` again (it cleans up earlier runs first); " +
        "gc deletes them after expires-at",
    );
  const calibration = calibrationOf(measured!, {
    instanceType,
    region: identity.region,
    date: cloud.clock.now(),
    runId: plan.runId,
    note:
      `a volume from ${snapshot.snapshotId} in ${identity.availabilityZone}, first reads ` +
      (measured!.inData ? "in the filesystem's data" : "outside the filesystem's data (too little of it in one piece)"),
  });
  const model = parseEbsModel(calibration, settings.output);
  await deps.writeFile(settings.output, JSON.stringify(model, null, 2) + "\n").catch((error: unknown) => {
    throw new EbsModelError(
      `could not write the calibration to ${settings.output}: ${describeError(error)}`,
      "choose a writable file with --output",
    );
  });
  deps.log.notice("acceptance.written", "calibration written", { output: settings.output, runId: plan.runId });
  return { runId: plan.runId, cleaned, calibration: model, output: settings.output };
}

/** Unmounts what a killed run left mounted in the run's own folder, then cleans up EC2 (apply.ts). */
async function cleanUp(deps: AcceptanceDeps, cloud: CloudVolumes, instanceId: string): Promise<CleanupOutcome[]> {
  for (const mountPoint of await deps.mountsBelow(join(deps.settings.mountRoot, ACCEPTANCE_FOLDER))) {
    // Only a run mounts there, and only read-only: unmounting it loses nothing.
    await deps.unmount(mountPoint);
    deps.log.info("acceptance.unmounted", "unmounted what an earlier run left mounted", { mountPoint });
  }
  const outcomes = await cleanUpEarlierRuns({
    cloud,
    instanceId,
    mounted: async (volumeId) => {
      const device = await deps.storage.findDevice(volumeId);
      return device !== undefined && (await deps.storage.mountPointOf(device)) !== undefined;
    },
    detachTimeoutMs: deps.settings.attachTimeoutMs,
  });
  for (const { step, done, detail } of outcomes) {
    const line = `earlier run: ${step.volumeId} ${done} (${detail ?? step.reason})`;
    deps.say(line);
    deps.log.info("acceptance.cleaned", line, { volumeId: step.volumeId, done });
  }
  return outcomes;
}

/** Creates, attaches and reads the plan's volumes; `made` keeps what exists, for tearDown. */
async function measure(
  deps: AcceptanceDeps,
  cloud: CloudVolumes,
  identity: Identity,
  plan: AcceptancePlan,
  made: Made[],
): Promise<AcceptanceMeasurements & { inData: boolean }> {
  const { log, settings } = deps;
  const attachSeconds: number[] = [];
  let reads: Omit<AcceptanceMeasurements, "attachSeconds"> & { inData: boolean } = undefined!;
  for (const volume of plan.volumes) {
    const created = await cloud.createVolume({
      availabilityZone: volume.availabilityZone,
      ...(volume.snapshotId ? { snapshotId: volume.snapshotId } : {}),
      sizeGiB: volume.sizeGiB,
      volumeType: volume.volumeType,
      tags: volume.tags,
      ...(settings.creation ? { creation: settings.creation } : {}),
      // One volume per run and role, whatever the SDK retries.
      clientToken: `${plan.runId}-${volume.role}`,
    });
    const entry: Made = { volumeId: created.volumeId, role: volume.role };
    made.push(entry);
    log.info("acceptance.created", "volume created", { volumeId: entry.volumeId, role: volume.role });
    const device = await freeDeviceName(cloud, identity.instanceId, settings.device);
    const started = performance.now();
    const claim = await cloud.claimVolume(entry.volumeId, identity.instanceId, device, { justCreated: true });
    if (claim.kind !== "claimed")
      throw new AcceptanceError(
        `${entry.volumeId}, just created, could not be attached here: ${claim.reason}`,
        "run again; if it repeats, check the instance's free device names (ebs-cache-agent doctor)",
      );
    await cloud.waitForAttachment(entry.volumeId, identity.instanceId, "attached", settings.attachTimeoutMs);
    const found = await deps.storage.waitForDevice(entry.volumeId, settings.deviceTimeoutMs);
    attachSeconds.push((performance.now() - started) / 1000);
    log.info("acceptance.attached", "attached, device found by its serial", {
      volumeId: entry.volumeId,
      device: found,
      seconds: attachSeconds.at(-1)!.toFixed(3),
    });
    if (volume.role === "from-snapshot") reads = await readVolume(deps, entry, found);
  }
  return { attachSeconds, ...reads };
}

/**
 * The configured device name if no volume of the instance uses it, else the first free one: the
 * run's two volumes are attached at once, and an EC2 that took a name twice (moto does) would
 * detach the wrong one.
 */
async function freeDeviceName(cloud: CloudVolumes, instanceId: string, preferred: string): Promise<string> {
  const used = new Set(
    (await cloud.describeInstance(instanceId, { fresh: true })).volumes.map((v) => v.device.replace(/^\/dev\//, "")),
  );
  return [preferred, ...DEVICE_NAMES].find((name) => !used.has(name.replace(/^\/dev\//, ""))) ?? preferred;
}

/** Mounts the snapshot's volume read-only and times its reads. */
async function readVolume(
  deps: AcceptanceDeps,
  entry: Made,
  device: string,
): Promise<Omit<AcceptanceMeasurements, "attachSeconds"> & { inData: boolean }> {
  // The agent's own filesystem, or nothing is mounted (identify writes nothing; throws otherwise).
  await deps.storage.identify({ volumeId: entry.volumeId, createdByAgent: false }, device);
  const mountPoint = join(deps.settings.mountRoot, ACCEPTANCE_FOLDER, entry.volumeId);
  entry.mountPoint = mountPoint;
  await deps.mountReadOnly(device, mountPoint);
  deps.log.info("acceptance.mounted", "mounted read-only", { volumeId: entry.volumeId, mountPoint });
  const plan: ReadPlan = planReads(await deps.allocatedRanges(mountPoint), await deps.deviceBytes(device));
  const first = {} as Record<Depth, { medianMs: number; iops: number }>;
  for (const depth of Object.keys(DEPTHS) as Depth[]) {
    const region = plan.firstReads[depth];
    first[depth] = await deps.timeReads(device, {
      name: `first-read-${depth}`,
      offset: region.offset,
      size: region.size,
      blockBytes: FIRST_READ_BYTES,
      skipBytes: EBS_BLOCK_BYTES - FIRST_READ_BYTES,
      ioDepth: DEPTHS[depth],
    });
  }
  const warmRead = { offset: plan.warm.offset, size: plan.warm.size, ...WARM_READ };
  await deps.timeReads(device, { name: "initialize", ...warmRead });
  const warm = await deps.timeReads(device, { name: "warm", ...warmRead });
  deps.log.info("acceptance.measured", "reads timed", {
    qd1Ms: first.qd1.medianMs,
    qd8Ms: first.qd8.medianMs,
    qd32Ms: first.qd32.medianMs,
    warmMiBps: warm.mibps.toFixed(1),
  });
  const inData = Object.values(plan.firstReads).every((r) => r.inData);
  return {
    firstReadMs: { qd1: [first.qd1.medianMs], qd8: [first.qd8.medianMs], qd32: [first.qd32.medianMs] },
    firstReadIops: { qd1: first.qd1.iops, qd32: first.qd32.iops },
    warmThroughputMiBps: warm.mibps,
    inData,
  };
}

/**
 * Unmounts, detaches (never forced, never while mounted) and deletes what the run made, each
 * volume as EC2 has it now; returns what it had to leave (the next run or gc takes it).
 */
async function tearDown(
  deps: AcceptanceDeps,
  cloud: CloudVolumes,
  instanceId: string,
  made: Made[],
): Promise<string[]> {
  const left: string[] = [];
  for (const entry of [...made].reverse()) {
    const id = entry.volumeId;
    try {
      if (entry.mountPoint) await deps.unmount(entry.mountPoint);
      const volume = await cloud.describeVolume(id);
      if (!volume) continue;
      if (volume.attachment && volume.attachment.instanceId !== instanceId) {
        left.push(`${id} attached to ${volume.attachment.instanceId}`);
        continue;
      }
      if (volume.attachment) {
        const device = await deps.storage.findDevice(id);
        const mountedAt = device && (await deps.storage.mountPointOf(device));
        if (mountedAt) {
          left.push(`${id} still mounted at ${mountedAt}`);
          continue;
        }
        await cloud.detachVolume(id, instanceId);
        await cloud.waitForAttachment(id, instanceId, "detached", deps.settings.attachTimeoutMs);
        deps.log.info("acceptance.detached", "detached", { volumeId: id });
      }
      await cloud.deleteVolume(id);
      deps.log.info("acceptance.deleted", "deleted", { volumeId: id, role: entry.role });
    } catch (error) {
      left.push(`${id} (${describeError(error)})`);
    }
  }
  return left;
}
