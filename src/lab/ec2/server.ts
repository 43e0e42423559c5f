/**
 * The HTTP side: one server on 127.0.0.1 answering the EC2 Query protocol (form-encoded
 * POST, or GET with a query string, on any other path), the EBS direct APIs under `/snapshots`
 * (ebs-direct.ts) and the JSON admin API under `/_lab/`. Every answer's `Date` header is the
 * emulator's clock (which may run apart from the host's: `setClockOffset`), as EC2's answers
 * carry EC2's time; an EC2 request signed too far from that clock is refused (signature-time.ts).
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "../../log.ts";
import { handleAdminRequest, type AdminTarget } from "./admin.ts";
import { isEbsDirectPath, type EbsDirect } from "./ebs-direct.ts";
import type { ActionContext } from "./actions/index.ts";
import { Params } from "./params.ts";
import { handleEc2Request } from "./protocol.ts";
import { callerOf, type RequestLedger } from "./requests.ts";
import { signatureTimeRefusal } from "./signature-time.ts";
import { renderError } from "./xml.ts";

/** Request bodies larger than this are refused (EC2 requests are a few KiB, an EBS block 512 KiB). */
const MAX_BODY = 8 * 1024 * 1024;

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY) {
        reject(new Error("request body too large"));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

/** The `Date` header of an answer at `nowMs` of the emulator's clock (Node would send the host's). */
function dateHeader(nowMs: number): { date: string } {
  return { date: new Date(nowMs).toUTCString() };
}

function send(
  res: ServerResponse,
  nowMs: number,
  status: number,
  contentType: string,
  body: string,
  extra: Record<string, string> = {},
): void {
  res.writeHead(status, {
    "content-type": contentType,
    "content-length": Buffer.byteLength(body),
    ...dateHeader(nowMs),
    ...extra,
  });
  res.end(body);
}

/** The request's SigV4 time: the `X-Amz-Date` header, or the query parameter of a presigned URL. */
function amzDateOf(req: IncomingMessage, url: URL): string | undefined {
  const header = req.headers["x-amz-date"];
  return (Array.isArray(header) ? header[0] : header) ?? url.searchParams.get("X-Amz-Date") ?? undefined;
}

async function handle(
  ctx: ActionContext,
  admin: AdminTarget,
  ledger: RequestLedger,
  ebs: EbsDirect,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const url = new URL(req.url ?? "/", "http://localhost");
  const raw = await readBody(req);
  if (isEbsDirectPath(url.pathname)) {
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      if (typeof value === "string") headers.set(name, value);
    }
    const header = req.headers.authorization;
    const caller = callerOf(Array.isArray(header) ? header[0] : header);
    const answer = await ebs.handle(req.method ?? "GET", url, headers, raw, caller);
    res.writeHead(answer.status, {
      ...answer.headers,
      ...dateHeader(ctx.now()),
      "content-length": Buffer.byteLength(answer.body),
    });
    res.end(answer.body);
    return;
  }
  const body = raw.toString("utf8");
  if (url.pathname === "/_lab" || url.pathname.startsWith("/_lab/")) {
    let json: unknown = undefined;
    if (body.trim() !== "") {
      try {
        json = JSON.parse(body);
      } catch {
        send(res, ctx.now(), 400, "application/json", JSON.stringify({ error: "body is not JSON" }));
        return;
      }
    }
    const answer = handleAdminRequest(admin, req.method ?? "GET", url.pathname, json);
    send(res, ctx.now(), answer.status, "application/json", JSON.stringify(answer.body, null, 1) + "\n");
    return;
  }
  // Query parameters and form body together: the SDK and the CLI put everything in the body,
  // a hand-made GET puts it in the URL.
  const params = new Params([...url.searchParams.entries(), ...new URLSearchParams(body).entries()]);
  const header = req.headers.authorization;
  const caller = callerOf(Array.isArray(header) ? header[0] : header);
  const ticket = ledger.arrive(params, caller);
  // EC2 judges the signature's time before anything else: a refused request changes nothing.
  const refusal = signatureTimeRefusal(amzDateOf(req, url), ctx.now());
  if (refusal) {
    const requestId = randomUUID();
    ledger.settle(ticket.record, refusal.status, refusal.code);
    ctx.log?.info("lab.ec2-emulator", "signature time refused", { action: params.action, code: refusal.code });
    send(res, ctx.now(), refusal.status, "text/xml;charset=UTF-8", renderError(refusal, requestId), {
      "x-amzn-requestid": requestId,
    });
    return;
  }
  // A dropped request ends like a client killed mid-call: the connection closes unanswered.
  if (!(await ticket.gate("before"))) {
    res.destroy();
    return;
  }
  const answer = await handleEc2Request(ctx, params, caller);
  ledger.settle(ticket.record, answer.status, /<Code>([^<]+)<\/Code>/.exec(answer.body)?.[1]);
  if (!(await ticket.gate("after"))) {
    res.destroy();
    return;
  }
  send(res, ctx.now(), answer.status, "text/xml;charset=UTF-8", answer.body, { "x-amzn-requestid": answer.requestId });
}

/** Starts listening on 127.0.0.1:`port` (0: any free port); resolves to the server and its port. */
export async function listen(
  ctx: ActionContext,
  admin: AdminTarget,
  ledger: RequestLedger,
  ebs: EbsDirect,
  port: number,
  log: Logger | undefined,
): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    handle(ctx, admin, ledger, ebs, req, res).catch((error: unknown) => {
      log?.error("lab.ec2-emulator", "request failed", {
        error: error instanceof Error ? error.message : String(error),
      });
      if (!res.headersSent) send(res, ctx.now(), 500, "text/plain", "internal error\n");
      else res.destroy();
    });
  });
  // The SDK keeps connections alive; a short keep-alive lets close() finish promptly.
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  return { server, port: (server.address() as AddressInfo).port };
}
