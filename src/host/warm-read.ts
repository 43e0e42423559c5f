/**
 * One warm block's read, timed: how long another reader of the device waits for a block that is already fetched,
 * while the pre-warm reads (read-pace.ts, holdsOthersUp). `dd` reads it (direct, read-only, one 4 KiB block) and
 * times its own copy: its process start is not in the figure.
 */
import { run } from "../exec.ts";
import type { Logger } from "../log.ts";
import { assertDevicePath } from "./serial.ts";

/** The block read: 4 KiB, every device's largest logical block (a direct read must be aligned to it). */
export const WARM_READ_BYTES = 4096;

/** The seconds dd reports for its copy (`… copied, 0.0312 s, …`), in milliseconds; undefined when it reports none. */
export function parseDdMs(stderr: string): number | undefined {
  const match = /copied, ([0-9.]+(?:e-?[0-9]+)?) s\b/.exec(stderr);
  if (!match) return undefined;
  const seconds = Number(match[1]);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : undefined;
}

/**
 * Times a direct read of the 4 KiB block at `offset` (rounded down to a block) of `device`; undefined when dd cannot
 * read it, reports no time or is stopped (`signal`: the reads it was timed beside are done). The caller then has no
 * figure, never a failure: the pre-warm reads on as before.
 */
export async function timeWarmRead(
  device: string,
  offset: number,
  options: { log?: Logger; dd?: string; signal?: AbortSignal } = {},
): Promise<number | undefined> {
  assertDevicePath(device);
  const block = Math.floor(Math.max(0, offset) / WARM_READ_BYTES);
  const result = await run(
    options.dd ?? "dd",
    [`if=${device}`, "of=/dev/null", `bs=${WARM_READ_BYTES}`, "count=1", `skip=${block}`, "iflag=direct"],
    {
      check: false,
      env: { LC_ALL: "C" },
      timeoutMs: 10_000,
      ...(options.log ? { log: options.log } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
    },
  ).catch(() => undefined);
  return result?.exitCode === 0 ? parseDdMs(result.stderr) : undefined;
}
