/**
 * `--ebs-model FILE` of the boot benches (bench/boot.ts, bench/boot-latency.ts): a calibration
 * (schema/ebs-model.schema.json, src/lab/volumes/ebs-model.ts) sets the lab's attach time and
 * makes volumes from a snapshot cold as the model says. Without it the benches keep their own
 * defaults, which their headers name (bench/boot.ts: EC2 delays 0; bench/boot-latency.ts: the
 * ranges of bench/sampling.ts).
 */
import type { ColdSnapshotOptions } from "../src/lab/volumes/cold.ts";
import {
  attachDelayMsOf,
  coldSnapshotOptionsOf,
  describeEbsModel,
  readEbsModel,
  type EbsModel,
} from "../src/lab/volumes/ebs-model.ts";

/** A model given on the command line, with the file it came from. */
export interface EbsModelChoice {
  file: string;
  model: EbsModel;
  /** One line for the bench's header and its JSON. */
  description: string;
}

/** The model of `--ebs-model FILE`, or undefined when not given. */
export async function ebsModelOption(file: string | undefined): Promise<EbsModelChoice | undefined> {
  if (file === undefined) return undefined;
  const model = await readEbsModel(file);
  return { file, model, description: describeEbsModel(model, file) };
}

/**
 * The lab's timing under a model: EC2's attach delay is the model's whole attach-to-device time
 * (the device then appears at once), and volumes from a snapshot read cold as the model says.
 */
export function labTimingOf(model: EbsModel): {
  delays: { createMs: number; attachMs: number; detachMs: number; snapshotMs: number };
  deviceDelayMs: number;
  coldSnapshots: ColdSnapshotOptions;
} {
  return {
    delays: { createMs: 0, attachMs: attachDelayMsOf(model), detachMs: 0, snapshotMs: 0 },
    deviceDelayMs: 0,
    coldSnapshots: coldSnapshotOptionsOf(model),
  };
}
