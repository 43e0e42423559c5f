/**
 * fio, the one tool the pre-warm reads with: building its argument arrays, writing the I/O logs
 * it replays (reads of chosen device ranges), and parsing its JSON output
 * (`--output-format=json`), including the stream of reports `--status-interval` prints while
 * it runs. Parsing is pure and tested against recorded real output (test/fixtures/data/fio/).
 *
 * fio 3.33 facts this relies on (seen in the recordings):
 * - with `--status-interval`, stdout is a sequence of whole JSON documents, the last one the
 *   final report; progress lines and warnings go to stderr;
 * - replaying an I/O log (`--read_iolog`) with iodepth N leaves the first N-1 I/Os out of
 *   `io_bytes` and the latency counts, while `total_ios` counts them all: the caller knows the
 *   log's size and uses it for the total;
 * - a job that fails (no such device, EIO) still prints JSON with `error` set, and exits 1.
 */
import { writeFile } from "node:fs/promises";
import { PassThrough, type Readable } from "node:stream";
import { AgentError, CommandError, describeError } from "../errors.ts";
import { run, type RunningCommand } from "../exec.ts";
import type { Logger } from "../log.ts";

/** One read of `length` bytes at `offset` of the device. */
export interface DeviceRead {
  offset: number;
  length: number;
}

/** Read statistics of one fio report (all jobs summed; latencies of the first job with reads). */
export interface FioReadStats {
  /** Bytes fio counted as read. */
  ioBytes: number;
  /** I/Os issued (also those an I/O-log replay leaves out of ioBytes). */
  totalIos: number;
  /** Milliseconds the reads ran. */
  runtimeMs: number;
  iops: number;
  bytesPerSecond: number;
  /** Completion latency in milliseconds (undefined when fio reported none). */
  latencyMs: { mean?: number; p50?: number; p90?: number; p99?: number; max?: number };
}

/** One parsed fio JSON document. */
export interface FioReport {
  fioVersion: string;
  /** Seconds since the job started (status reports) or its runtime (final report). */
  elapsedSeconds: number;
  /** First non-zero job error (errno), 0 when every job succeeded. */
  error: number;
  read: FioReadStats;
  jobs: Array<{ name: string; error: number; ioBytes: number; totalIos: number }>;
}

/** fio could not run, failed, or printed something that is not its JSON. */
export class FioError extends AgentError {
  constructor(message: string, remediation: string, options?: { cause?: unknown }) {
    super(message, remediation, undefined, options);
  }
}

type Json = Record<string, unknown>;

function obj(value: unknown): Json {
  return value && typeof value === "object" && !Array.isArray(value) ? (value as Json) : {};
}
function num(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) ? value : 0;
}
function optNum(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) ? value : undefined;
}
const nsToMs = (ns: number | undefined) => (ns === undefined ? undefined : ns / 1e6);

/** Parses one fio JSON document (`--output-format=json`). */
export function parseFioJson(text: string): FioReport {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new FioError(
      `fio printed no JSON report: ${describeError(error)}`,
      "run fio by hand with the same arguments and read its output",
    );
  }
  const root = obj(parsed);
  const jobs = Array.isArray(root.jobs) ? root.jobs.map(obj) : [];
  if (typeof root["fio version"] !== "string" || jobs.length === 0) {
    throw new FioError("fio's JSON report has no `fio version` or no jobs", "check the fio version (3.x is expected)");
  }
  let ioBytes = 0;
  let totalIos = 0;
  let runtimeMs = 0;
  let iops = 0;
  let bytesPerSecond = 0;
  let latency: FioReadStats["latencyMs"] | undefined;
  let error = 0;
  let elapsed = 0;
  for (const job of jobs) {
    const read = obj(job.read);
    ioBytes += num(read.io_bytes);
    totalIos += num(read.total_ios);
    runtimeMs = Math.max(runtimeMs, num(read.runtime));
    iops += num(read.iops);
    bytesPerSecond += num(read.bw_bytes);
    elapsed = Math.max(elapsed, num(job.elapsed));
    if (error === 0) error = num(job.error);
    const clat = obj(read.clat_ns);
    if (!latency && num(clat.N) > 0) {
      const percentile = obj(clat.percentile);
      latency = {
        ...(optNum(clat.mean) !== undefined ? { mean: nsToMs(optNum(clat.mean)) } : {}),
        ...(optNum(percentile["50.000000"]) !== undefined ? { p50: nsToMs(optNum(percentile["50.000000"])) } : {}),
        ...(optNum(percentile["90.000000"]) !== undefined ? { p90: nsToMs(optNum(percentile["90.000000"])) } : {}),
        ...(optNum(percentile["99.000000"]) !== undefined ? { p99: nsToMs(optNum(percentile["99.000000"])) } : {}),
        ...(optNum(clat.max) !== undefined ? { max: nsToMs(optNum(clat.max)) } : {}),
      };
    }
  }
  return {
    fioVersion: root["fio version"],
    elapsedSeconds: elapsed,
    error,
    read: { ioBytes, totalIos, runtimeMs, iops, bytesPerSecond, latencyMs: latency ?? {} },
    jobs: jobs.map((job) => ({
      name: typeof job.jobname === "string" ? job.jobname : "",
      error: num(job.error),
      ioBytes: num(obj(job.read).io_bytes),
      totalIos: num(obj(job.read).total_ios),
    })),
  };
}

/**
 * Splits fio's stdout into whole JSON documents (what `--status-interval` prints), returning
 * them and the unfinished rest. Braces inside strings are skipped; text between documents
 * (a warning fio printed to stdout) is dropped.
 */
export function splitJsonDocuments(buffer: string): { documents: string[]; rest: string } {
  const documents: string[] = [];
  let depth = 0;
  let start = -1;
  let inString = false;
  let escaped = false;
  let consumed = 0;
  for (let i = 0; i < buffer.length; i++) {
    const c = buffer[i];
    if (inString) {
      if (escaped) escaped = false;
      else if (c === "\\") escaped = true;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"' && depth > 0) inString = true;
    else if (c === "{") {
      if (depth === 0) start = i;
      depth++;
    } else if (c === "}" && depth > 0) {
      depth--;
      if (depth === 0) {
        documents.push(buffer.slice(start, i + 1));
        consumed = i + 1;
      }
    } else if (depth === 0) {
      consumed = i + 1;
    }
  }
  return { documents, rest: buffer.slice(consumed) };
}

/** fio's own I/O-log format (version 2): the reads to replay, in order. */
export function renderIolog(device: string, reads: readonly DeviceRead[]): string {
  return iologHead(device) + iologReads(device, reads) + `${device} close\n`;
}

/** A log's first lines: the format's, then `add` and `open` of the device. */
function iologHead(device: string): string {
  if (/\s/.test(device))
    throw new FioError(`device path ${JSON.stringify(device)} holds whitespace`, "use the device's /dev path");
  return `fio version 2 iolog\n${device} add\n${device} open\n`;
}

function iologReads(device: string, reads: readonly DeviceRead[]): string {
  return reads.map(({ offset, length }) => `${device} read ${offset} ${length}\n`).join("");
}

/** Writes an I/O log for `--read_iolog`. */
export async function writeIolog(path: string, device: string, reads: readonly DeviceRead[]): Promise<void> {
  await writeFile(path, renderIolog(device, reads), { mode: 0o600 });
}

/**
 * Reads fio replays while they are still being found: fio reads its I/O log from stdin, a part at a time
 * (`--read_iolog=-` and `--read_iolog_chunked=1`, fio 3.22 on), so it can be started before the reads are known.
 * fio takes a third of a second from its start to its first read on an idle 2-core machine (0.1-0.2 s of CPU, then
 * a fixed 0.1 s wait of its main process for its job): started first, that time passes while the reads are looked up.
 *
 * The job reads the log's parts after it has reported itself started (fio 3.28 to 3.40 alike), waiting on stdin for
 * as long as nothing comes: no start-up timeout applies. A part is as many lines as fio replayed in the last second
 * (ten at first), so reads added in several parts may wait for the next or the end: `end()` releases them all.
 */
export interface FedIolog {
  readonly device: string;
  /** The longest read that will be added (`--bs`: fio's buffers are made that large at its start). */
  readonly maxReadBytes: number;
  /** What fio reads its log from. */
  readonly input: Readable;
  /** Every read added so far, in order. */
  readonly added: readonly DeviceRead[];
  /** Appends reads to the log, in order. */
  add(reads: readonly DeviceRead[]): void;
  /** The log is complete (also after a failure: fio then replays what it has and ends). */
  end(): void;
  /** Resolves once end() was called: every read is in `added`. */
  readonly ended: Promise<void>;
}

/** A log to feed fio while it runs (FedIolog), its header written. */
export function feedIolog(device: string, maxReadBytes: number): FedIolog {
  const input = new PassThrough();
  // fio may exit before it has read everything (stopped, failed): what it did not read is dropped.
  input.on("error", () => undefined);
  const added: DeviceRead[] = [];
  let ended = false;
  let resolveEnded = () => {};
  const endedPromise = new Promise<void>((resolve) => (resolveEnded = resolve));
  // `close` ends the log.
  input.write(iologHead(device));
  return {
    device,
    maxReadBytes,
    input,
    added,
    add(reads) {
      if (ended || reads.length === 0) return;
      const long = reads.find((read) => read.length > maxReadBytes);
      if (long) throw new RangeError(`a read of ${long.length} bytes in a log made for at most ${maxReadBytes}`);
      added.push(...reads);
      input.write(iologReads(device, reads));
    },
    end() {
      if (ended) return;
      ended = true;
      input.end(`${device} close\n`);
      resolveEnded();
    },
    ended: endedPromise,
  };
}

/** A read job: a replayed I/O log, or a plain read of a device range. */
export type FioJob =
  | {
      name: string;
      /** Replays this I/O log (a file: writeIolog; or fed while fio runs: feedIolog) as fast as the device allows. */
      iolog: string | FedIolog;
      ioDepth: number;
      /** Stop after this many seconds even if the log is not done. */
      runtimeSeconds?: number;
      /**
       * The idle I/O class (ioprio, `--prioclass=3`): served only when nothing else waits, where
       * the device's scheduler honours priorities (bfq, mq-deadline); with `none` the bounded
       * depth is what leaves room for others' reads.
       */
      idle?: boolean;
      /** Jobs as threads of the one fio process (`--thread`): one process to stop and continue. */
      thread?: boolean;
    }
  | {
      name: string;
      device: string;
      rw: "read" | "randread";
      blockSize: string;
      ioDepth: number;
      offset?: number;
      size?: number;
      /** Sequential reads only: bytes skipped after each read (one read every blockSize + skipBytes). */
      skipBytes?: number;
      runtimeSeconds?: number;
    };

/** The fio argument array for a job: always read-only, direct, libaio, JSON. */
export function fioArgs(job: FioJob, options: { statusIntervalMs?: number } = {}): string[] {
  const args =
    "iolog" in job
      ? [
          `--name=${job.name}`,
          ...(typeof job.iolog === "string"
            ? [`--read_iolog=${job.iolog}`]
            : ["--read_iolog=-", "--read_iolog_chunked=1", `--bs=${job.iolog.maxReadBytes}`]),
          "--replay_no_stall=1",
          `--iodepth=${job.ioDepth}`,
        ]
      : [
          `--filename=${job.device}`,
          `--rw=${job.rw}${job.skipBytes && job.rw === "read" ? `:${job.skipBytes}` : ""}`,
          `--bs=${job.blockSize}`,
          `--iodepth=${job.ioDepth}`,
          "--ioengine=libaio",
          "--direct=1",
          `--name=${job.name}`,
          ...(job.offset ? [`--offset=${job.offset}`] : []),
          ...(job.size ? [`--size=${job.size}`] : []),
        ];
  if ("iolog" in job)
    args.push(
      "--ioengine=libaio",
      "--direct=1",
      ...(job.idle ? ["--prioclass=3"] : []),
      ...(job.thread ? ["--thread"] : []),
    );
  if (job.runtimeSeconds) args.push(`--runtime=${job.runtimeSeconds}`);
  // --clocksource: told which clock to use, fio does not calibrate the CPU's at its start (a one-read job: 0.29
  // against 0.38 s, 0.11 against 0.18 CPU-s, on an idle 2-core machine); clock_gettime is precise to far below the
  // milliseconds fio measures here. --readonly: fio refuses any write; it never creates or lays out a file.
  args.push("--clocksource=clock_gettime", "--readonly", "--output-format=json");
  // In milliseconds: fio reads a bare `0.2` as 0 (no reports at all).
  if (options.statusIntervalMs) args.push(`--status-interval=${Math.max(1, Math.round(options.statusIntervalMs))}ms`);
  return args;
}

/** How to run fio. */
export interface RunFioOptions {
  log?: Logger;
  /** The fio binary (default `fio` on PATH). */
  fio?: string;
  /** Kill fio after this long (a guard; jobs bound themselves with runtimeSeconds). */
  timeoutMs?: number;
  /** Called with each status report while fio runs (`--status-interval`). */
  onStatus?: (report: FioReport) => void;
  statusIntervalMs?: number;
  signal?: AbortSignal;
  /** Called with fio's process once started (to stop and continue it: RunningCommand.signal). */
  onSpawn?: (fio: RunningCommand) => void;
}

/** Runs fio and returns its final report; throws FioError when fio is missing or the job failed. */
export async function runFio(job: FioJob, options: RunFioOptions = {}): Promise<FioReport> {
  const fio = options.fio ?? "fio";
  const interval = options.onStatus ? (options.statusIntervalMs ?? 1000) : undefined;
  const args = fioArgs(job, interval ? { statusIntervalMs: interval } : {});
  let pending = "";
  let last: FioReport | undefined;
  const onStdout = (chunk: string) => {
    const { documents, rest } = splitJsonDocuments(pending + chunk);
    pending = rest;
    for (const document of documents) {
      try {
        last = parseFioJson(document);
      } catch {
        continue;
      }
      options.onStatus?.(last);
    }
  };
  const fed = "iolog" in job && typeof job.iolog !== "string" ? job.iolog : undefined;
  // A fio waiting for its log's next part does not end on SIGTERM: the log's end lets it.
  if (fed && options.signal) {
    if (options.signal.aborted) fed.end();
    else options.signal.addEventListener("abort", () => fed.end(), { once: true });
  }
  let result;
  try {
    result = await run(fio, args, {
      check: false,
      log: options.log,
      timeoutMs: options.timeoutMs,
      ...(options.onStatus ? { onStdout } : {}),
      signal: options.signal,
      ...(options.onSpawn ? { onSpawn: options.onSpawn } : {}),
      ...(fed ? { input: fed.input } : {}),
    });
  } catch (error) {
    const missing = error instanceof CommandError && error.exitCode_ === undefined;
    throw new FioError(
      missing ? `fio could not be started: ${describeError(error)}` : `fio failed: ${describeError(error)}`,
      missing ? "install fio (apt-get install fio / dnf install fio)" : "see the fio error above",
      { cause: error },
    );
  }
  if (options.signal?.aborted)
    throw new FioError("fio was stopped", "run the pre-warm again", { cause: options.signal.reason });
  const documents = splitJsonDocuments(result.stdout).documents;
  const finalText = documents.at(-1);
  let report: FioReport | undefined;
  if (finalText !== undefined) {
    try {
      report = parseFioJson(finalText);
    } catch {
      report = undefined;
    }
  }
  report ??= last;
  const stderr = result.stderr.trim().split("\n").filter(Boolean).slice(-3).join(" | ");
  if (result.exitCode !== 0 || !report || report.error !== 0) {
    const why = report?.error ? `error ${report.error}` : `exit code ${result.exitCode}`;
    throw new FioError(
      `fio ${job.name} failed (${why})${stderr ? `: ${stderr}` : ""}`,
      "check the device and fio's message; the node is not blocked by this",
    );
  }
  return report;
}

/** The version fio reports (`fio-3.33`), or undefined when it cannot run. */
export async function fioVersion(fio = "fio"): Promise<string | undefined> {
  const result = await run(fio, ["--version"], { check: false }).catch(() => undefined);
  return result && result.exitCode === 0 ? result.stdout.trim() : undefined;
}
