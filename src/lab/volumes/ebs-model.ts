/**
 * The lab's model of EBS, as a file: how long an attach takes, how long the first read of a
 * never-read block waits and how many such reads EBS serves at once, how fast a warm volume reads.
 * The acceptance run on a real account writes one (origin `measured`); the lab's own assumptions
 * are one too (ebs-model.default.json, origin `assumed`, its `source` says what they rest on). The
 * cold layer and the benches take either with `--ebs-model FILE`, so a calibration changes the
 * lab without a code change. The format: schema/ebs-model.schema.json, parsed by src/ebs-model.ts
 * (the agent writes calibrations with it too; test/lab/volumes/ebs-model.test.ts holds parser and
 * schema together).
 */
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { EBS_SNAPSHOT_BLOCK_KIB, EbsModelError, parseEbsModel, type EbsModel } from "../../ebs-model.ts";
import type { ColdSnapshotOptions } from "./cold.ts";

export {
  EBS_SNAPSHOT_BLOCK_KIB,
  EbsModelError,
  FIRST_READ_DEPTHS,
  parseEbsModel,
  type EbsModel,
} from "../../ebs-model.ts";

/** schema/ebs-model.schema.json, from the repository's root. */
export const EBS_MODEL_SCHEMA_FILE = "schema/ebs-model.schema.json";

/** The lab's assumed model: what the cold layer's and the benches' defaults are. */
export const DEFAULT_EBS_MODEL_FILE = fileURLToPath(new URL("./ebs-model.default.json", import.meta.url));

/** Reads and parses a model file (the lab's assumed one when `file` is undefined). */
export async function readEbsModel(file: string = DEFAULT_EBS_MODEL_FILE): Promise<EbsModel> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (error) {
    throw new EbsModelError(`${file}: cannot read the EBS model: ${(error as Error).message}`);
  }
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch (error) {
    throw new EbsModelError(`${file}: not JSON: ${(error as Error).message}`);
  }
  return parseEbsModel(document, file);
}

/**
 * The cold layer's settings for a model: a first read waits the depth-1 latency, `concurrency` of
 * them at once per volume (deeper queues wait their turn, which is how the lab reproduces the
 * depth-8 and depth-32 figures), all reads sharing the warm throughput.
 */
export function coldSnapshotOptionsOf(model: EbsModel): Required<Omit<ColdSnapshotOptions, "holes">> {
  return {
    firstReadDelayMs: model.firstReadLatencyMs.qd1,
    chunkBytes: (model.blockKiB ?? EBS_SNAPSHOT_BLOCK_KIB) * 1024,
    fetchConcurrency: model.concurrency,
    throughputMiBps: model.warmThroughputMiBps,
  };
}

/** EC2's attach delay for the lab (ms): AttachVolume → the device, all of it before `attached`. */
export function attachDelayMsOf(model: EbsModel): number {
  return Math.round(model.attachSeconds * 1000);
}

/**
 * What the lab's cold layer predicts for a first read at queue depth `depth` (ms): reads beyond
 * the concurrency wait for a slot, so the median read waits about ceil(depth / concurrency) delays.
 * Beside a measured model's own figures, it shows how well one delay and one concurrency fit them.
 */
export function predictedFirstReadMs(model: EbsModel, depth: number): number {
  return model.firstReadLatencyMs.qd1 * Math.ceil(depth / model.concurrency);
}

/** One line naming the model, for a bench's header. */
export function describeEbsModel(model: EbsModel, file: string): string {
  const l = model.firstReadLatencyMs;
  return (
    `EBS model ${file} (${model.origin}, ${model.instanceType}, ${model.region}, ${model.date}): ` +
    `attach ${model.attachSeconds} s, first read ${l.qd1}/${l.qd8}/${l.qd32} ms at depth 1/8/32, ` +
    `${model.concurrency} at once, warm ${model.warmThroughputMiBps} MiB/s, ` +
    `block ${model.blockKiB ?? EBS_SNAPSHOT_BLOCK_KIB} KiB`
  );
}
