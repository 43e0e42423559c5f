/**
 * The spot interruption notice in instance metadata: `/latest/meta-data/spot/instance-action`
 * holds `{"action": "stop" | "hibernate" | "terminate", "time": "…"}` for the two minutes
 * before EC2 interrupts a spot instance, and is a 404 otherwise (and on on-demand instances).
 * The release reads it to learn whether this shutdown is a stop or a termination.
 */
import { ImdsError, shownAnswer } from "./errors.ts";
import type { MetadataSource } from "./imds.ts";

export const SPOT_INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action";

/** What EC2 announced it will do with this spot instance. */
export type SpotAction = "stop" | "hibernate" | "terminate";

function statusOf(error: unknown): number | undefined {
  return (error as { $metadata?: { httpStatusCode?: number } } | undefined)?.$metadata?.httpStatusCode;
}

/**
 * The announced action, or undefined when there is no notice (404). One request, bounded by
 * `timeoutMs` (at shutdown there is no time to wait out an IMDS that does not answer); a failed
 * request or a notice that does not parse throws ImdsError.
 */
export async function readSpotInstanceAction(
  metadata: MetadataSource,
  options: { timeoutMs: number },
): Promise<SpotAction | undefined> {
  const endpoint = metadata.endpoint ?? "(default endpoint)";
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${options.timeoutMs} ms`)), options.timeoutMs);
  });
  let text: string;
  try {
    text = await Promise.race([metadata.request(SPOT_INSTANCE_ACTION_PATH, {}), timeout]);
  } catch (error) {
    if (statusOf(error) === 404) return undefined;
    throw new ImdsError(endpoint, SPOT_INSTANCE_ACTION_PATH, { cause: error });
  } finally {
    clearTimeout(timer);
  }
  let action: unknown;
  try {
    action = (JSON.parse(text) as { action?: unknown } | null)?.action;
  } catch {
    action = undefined;
  }
  if (action === "stop" || action === "hibernate" || action === "terminate") return action;
  throw new ImdsError(endpoint, SPOT_INSTANCE_ACTION_PATH, {
    data: shownAnswer(text),
    expected: 'a notice {"action": "stop" | "hibernate" | "terminate", …}',
  });
}
