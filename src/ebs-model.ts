/**
 * The calibration file's format (schema/ebs-model.schema.json): what the acceptance run writes
 * (origin `measured`) and the lab's cold layer and benches read (src/lab/volumes/ebs-model.ts, which
 * also holds the lab's assumed one). Here, in the base, because the agent validates what it writes
 * with the same parser the lab reads with: this parser refuses what the schema refuses
 * (test/config/schema-oracle.test.ts holds them together).
 */
import { AgentError } from "./errors.ts";

/** The block size of EBS snapshots: what a first read fetches when a model names none. */
export const EBS_SNAPSHOT_BLOCK_KIB = 512;

/** The queue depths at which the acceptance run times first reads. */
export const FIRST_READ_DEPTHS = ["qd1", "qd8", "qd32"] as const;

/** One calibration of the lab (schema/ebs-model.schema.json). */
export interface EbsModel {
  schemaVersion: 1;
  /** `measured` by an acceptance run, or `assumed` for the lab. */
  origin: "measured" | "assumed";
  /** Where the numbers come from. */
  source: string;
  instanceType: string;
  region: string;
  /** ISO 8601 date, or date and time. */
  date: string;
  /** AttachVolume sent → the NVMe device on the instance. */
  attachSeconds: number;
  /** Median latency of one first read of a never-read block, at queue depths 1, 8 and 32. */
  firstReadLatencyMs: Record<(typeof FIRST_READ_DEPTHS)[number], number>;
  /** First reads of one volume EBS serves at once. */
  concurrency: number;
  /** Throughput of an initialized volume. */
  warmThroughputMiBps: number;
  /** The unit a first read fetches (KiB); absent: 512. */
  blockKiB?: number;
}

const KEYS = new Set([
  "$comment",
  "schemaVersion",
  "origin",
  "source",
  "instanceType",
  "region",
  "date",
  "attachSeconds",
  "firstReadLatencyMs",
  "concurrency",
  "warmThroughputMiBps",
  "blockKiB",
]);
const INSTANCE_TYPE = /^[a-z][a-z0-9-]*\.[a-z0-9]+$/;
const REGION = /^[a-z]{2,4}(-[a-z]+)+-[0-9]{1,2}$/;
const DATE = /^[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2}))?$/;

/** A model file that is not one: the file and the first thing wrong, on one line. */
export class EbsModelError extends AgentError {
  constructor(message: string, remediation = "fix the file to follow schema/ebs-model.schema.json") {
    super(message, remediation);
  }
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);
const isNumberIn = (value: unknown, min: number, max: number): value is number =>
  typeof value === "number" && Number.isFinite(value) && value >= min && value <= max;

/** The first problem of `document` as a model, or undefined when it is one. */
function problemOf(document: unknown): string | undefined {
  if (!isRecord(document)) return "not a JSON object";
  const unknown = Object.keys(document).find((key) => !KEYS.has(key));
  if (unknown !== undefined) return `unknown key ${JSON.stringify(unknown)}`;
  const d = document;
  if (d.$comment !== undefined && typeof d.$comment !== "string") return "$comment must be a string";
  if (d.schemaVersion !== 1) return `schemaVersion must be 1, got ${JSON.stringify(d.schemaVersion)}`;
  if (d.origin !== "measured" && d.origin !== "assumed")
    return `origin must be "measured" or "assumed", got ${JSON.stringify(d.origin)}`;
  if (typeof d.source !== "string" || d.source.length < 1 || d.source.length > 2000)
    return "source must be a string of 1 to 2000 characters saying where the numbers come from";
  if (typeof d.instanceType !== "string" || !INSTANCE_TYPE.test(d.instanceType))
    return `instanceType must be an EC2 instance type (m6i.large), got ${JSON.stringify(d.instanceType)}`;
  if (typeof d.region !== "string" || !REGION.test(d.region))
    return `region must be a region name (eu-west-1), got ${JSON.stringify(d.region)}`;
  if (typeof d.date !== "string" || !DATE.test(d.date))
    return `date must be an ISO 8601 date or date and time, got ${JSON.stringify(d.date)}`;
  if (!isNumberIn(d.attachSeconds, 0, 3600))
    return `attachSeconds must be a number of seconds from 0 to 3600, got ${JSON.stringify(d.attachSeconds)}`;
  const latency = d.firstReadLatencyMs;
  if (!isRecord(latency)) return "firstReadLatencyMs must be an object with qd1, qd8 and qd32";
  const extra = Object.keys(latency).find((key) => !(FIRST_READ_DEPTHS as readonly string[]).includes(key));
  if (extra !== undefined) return `firstReadLatencyMs: unknown key ${JSON.stringify(extra)}`;
  for (const depth of FIRST_READ_DEPTHS)
    if (!isNumberIn(latency[depth], 0, 600_000))
      return (
        `firstReadLatencyMs.${depth} must be a number of ms from 0 to 600000, ` +
        `got ${JSON.stringify(latency[depth])}`
      );
  if (!Number.isInteger(d.concurrency) || !isNumberIn(d.concurrency, 1, 1024))
    return `concurrency must be an integer from 1 to 1024, got ${JSON.stringify(d.concurrency)}`;
  if (!isNumberIn(d.warmThroughputMiBps, Number.MIN_VALUE, 100_000))
    return `warmThroughputMiBps must be a number above 0, at most 100000, got ${JSON.stringify(d.warmThroughputMiBps)}`;
  if (
    d.blockKiB !== undefined &&
    (!Number.isInteger(d.blockKiB) || !isNumberIn(d.blockKiB, 4, 65536) || d.blockKiB % 4 !== 0)
  )
    return `blockKiB must be a multiple of 4 from 4 to 65536, got ${JSON.stringify(d.blockKiB)}`;
  return undefined;
}

/** The model in `document` (JSON already parsed); throws EbsModelError naming `source` and the problem. */
export function parseEbsModel(document: unknown, source: string): EbsModel {
  const problem = problemOf(document);
  if (problem !== undefined) throw new EbsModelError(`${source}: not an EBS model: ${problem}`);
  return document as EbsModel;
}
