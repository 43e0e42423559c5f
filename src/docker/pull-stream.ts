/**
 * A pull through dockerd's API (`POST /images/create`), whose answer is the JSON progress stream
 * the docker CLI draws its bars from: one object a line, each layer's `Downloading` with its
 * bytes done and in all. The CLI prints none of it unless its output is a terminal, so a build
 * that wants the bytes of a multi-GB pull reads the stream itself. The API pull sends no
 * registry credentials (the CLI reads them from the machine's docker config and its helpers):
 * a registry that refuses it is pulled from again by the CLI, without bytes.
 */
import { request } from "node:http";
import { AgentError } from "../errors.ts";
import { withLatest } from "../image-ref.ts";

/** The bytes of a pull so far: of the layers whose download docker has reported. */
export interface PullBytes {
  done: number;
  total: number;
}

/** One message of the stream, as far as the pull's bytes and its failure go. */
interface PullMessage {
  id?: unknown;
  status?: unknown;
  progressDetail?: { current?: unknown; total?: unknown };
  error?: unknown;
  errorDetail?: { message?: unknown };
}

/** The folded stream: each layer's bytes, and the failure docker reported, if any. */
export interface PullState {
  layers: Map<string, PullBytes>;
  error?: string;
}

/**
 * Folds one line of the stream into `state` (pure but for `state`): a layer's `Downloading`
 * sets its bytes, `Download complete` makes them all done; an `error` is kept. A line that is
 * not a JSON object, or a figure that is not a count, is skipped: the bytes are a courtesy, the
 * pull's end decides.
 */
export function foldPullLine(state: PullState, line: string): void {
  let message: PullMessage;
  try {
    const parsed: unknown = JSON.parse(line);
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) return;
    message = parsed as PullMessage;
  } catch {
    return;
  }
  if (message.error !== undefined) {
    const detail = message.errorDetail?.message;
    state.error = String(typeof detail === "string" && detail !== "" ? detail : message.error);
    return;
  }
  if (typeof message.id !== "string") return;
  const layer = state.layers.get(message.id);
  if (message.status === "Downloading") {
    const current = message.progressDetail?.current;
    const total = message.progressDetail?.total;
    if (isCount(current) && isCount(total) && total > 0)
      state.layers.set(message.id, { done: Math.min(current, total), total });
  } else if (message.status === "Download complete" && layer) {
    state.layers.set(message.id, { done: layer.total, total: layer.total });
  }
}

/** The pull's bytes: the sum over the layers reported so far. */
export function pullBytes(state: PullState): PullBytes {
  let done = 0;
  let total = 0;
  for (const layer of state.layers.values()) {
    done += layer.done;
    total += layer.total;
  }
  return { done, total };
}

/** The pull failed at the registry or in dockerd: what docker said. */
export class PullStreamError extends AgentError {
  constructor(message: string) {
    super(message, "check the image's name and its registry (reachable, and the machine logged in to it)");
  }
}

/**
 * Pulls `image` through the dockerd at `socketPath`, telling `onBytes` as layers download.
 * Rejects with PullStreamError when dockerd answers an error (its status or the stream's last
 * message), and with the socket's error when dockerd cannot be reached. `signal` closes the
 * request: dockerd then cancels the pull.
 */
export function pullThroughApi(
  socketPath: string,
  image: string,
  options: { signal?: AbortSignal; onBytes?: (bytes: PullBytes) => void } = {},
): Promise<void> {
  // A reference without tag or digest would pull every tag of the repository.
  const path = `/images/create?fromImage=${encodeURIComponent(withLatest(image))}`;
  return new Promise((resolve, reject) => {
    const req = request(
      { socketPath, path, method: "POST", ...(options.signal ? { signal: options.signal } : {}) },
      (res) => {
        res.setEncoding("utf8");
        const state: PullState = { layers: new Map() };
        let pending = "";
        let body = "";
        res.on("data", (chunk: string) => {
          if (res.statusCode !== 200) {
            body += chunk;
            return;
          }
          pending += chunk;
          const lines = pending.split("\n");
          pending = lines.pop() ?? "";
          for (const line of lines) if (line.trim() !== "") foldPullLine(state, line);
          if (state.layers.size > 0) options.onBytes?.(pullBytes(state));
        });
        res.on("error", reject);
        res.on("end", () => {
          if (pending.trim() !== "") foldPullLine(state, pending);
          if (res.statusCode !== 200) {
            reject(new PullStreamError(`dockerd answered ${res.statusCode}: ${apiMessage(body)}`));
          } else if (state.error !== undefined) {
            reject(new PullStreamError(state.error));
          } else {
            resolve();
          }
        });
      },
    );
    req.on("error", reject);
    req.end();
  });
}

/** The `message` of dockerd's error answer, or the answer itself. */
function apiMessage(body: string): string {
  try {
    const parsed = JSON.parse(body) as { message?: unknown };
    if (typeof parsed.message === "string") return parsed.message;
  } catch {
    // not JSON: the text as it came
  }
  return body.trim();
}

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value) && value >= 0;
}
