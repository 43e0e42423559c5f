/**
 * The lab's own JSON API under `/_lab/`, beside the EC2 protocol on the same port, so another
 * process (the lab CLI, agents under test) can set up and inspect the emulated world:
 *
 *   GET  /_lab/health                     → { ok, region, zones }
 *   GET  /_lab/instances                  → [instance…]
 *   POST /_lab/instances                  body: LabInstance → 201 instance
 *   GET  /_lab/instances/<id>             → instance (live tags, state, attached volumes) | 404
 *   POST /_lab/instances/<id>/terminate   → instance (its volumes become available)
 *   GET  /_lab/faults                     → Faults
 *   PUT  /_lab/faults                     body: Faults (replaces all faults) → Faults
 *   GET  /_lab/clock                      → { offsetMs, now }: EC2's clock, ahead of the host's by offsetMs
 *   PUT  /_lab/clock                      body: { offsetMs } → { offsetMs, now }
 *   GET  /_lab/state                      → the whole model
 *   PUT  /_lab/state                      body: model (replaces it; transitions restart) → model
 *   GET  /_lab/events                     → [event…] (force-detaches, backend errors, …)
 *   GET  /_lab/requests                   → { counts, records } of the EC2 requests since the last reset
 *   DELETE /_lab/requests                 → resets the counters and records → { counts, records }
 *   GET  /_lab/holds                      → [hold…]
 *   POST /_lab/holds                      body: HoldSpec → 201 hold (see requests.ts)
 *   GET  /_lab/holds/<id>                 → hold (`hit` once its request is parked) | 404
 *   POST /_lab/holds/<id>/release         body: { drop?: boolean } → 200 (the request goes on, or is dropped)
 *   DELETE /_lab/holds                    → releases every hold (requests go on)
 *
 * Errors are `{ "error": "…" }` with 400 (bad input) or 404 (unknown instance / path).
 */
import type { LabInstance } from "../types.ts";
import { validateFaults, type Faults } from "./faults.ts";
import { isModel, type InstanceState, type Model } from "./model.ts";
import { validateHoldSpec, type HoldSpec, type RequestLedger } from "./requests.ts";

/** An instance as the admin API shows it. */
export interface AdminInstance extends LabInstance {
  state: InstanceState;
  volumes: { volumeId: string; device: string; state: string }[];
}

/** What the admin API needs from the emulator. */
export interface AdminTarget {
  region: string;
  zones: readonly string[];
  requests: RequestLedger;
  registerInstance(instance: LabInstance): LabInstance;
  describeInstance(instanceId: string): AdminInstance | undefined;
  listInstances(): AdminInstance[];
  terminateInstance(instanceId: string): void;
  faults(): Faults;
  setFaults(faults: Faults): void;
  clock(): { offsetMs: number; now: string };
  setClockOffset(offsetMs: number): void;
  snapshotState(): Model;
  replaceState(model: Model): void;
}

/** A JSON answer. */
export interface AdminAnswer {
  status: number;
  body: unknown;
}

/** Problems with a LabInstance given as JSON. */
export function validateLabInstance(value: unknown): string[] {
  if (typeof value !== "object" || value === null) return ["instance must be an object"];
  const i = value as Record<string, unknown>;
  const problems: string[] = [];
  for (const key of ["instanceId", "region", "availabilityZone", "hostRoot"]) {
    if (typeof i[key] !== "string" || i[key] === "") problems.push(`${key} must be a non-empty string`);
  }
  if (typeof i.metadataTags !== "boolean") problems.push("metadataTags must be a boolean");
  const tags = i.tags;
  if (typeof tags !== "object" || tags === null || Object.values(tags).some((v) => typeof v !== "string")) {
    problems.push("tags must be an object of strings");
  }
  return problems;
}

const bad = (error: string): AdminAnswer => ({ status: 400, body: { error } });
const notFound = (error: string): AdminAnswer => ({ status: 404, body: { error } });

/** Routes one admin request (`path` without the query string). */
export function handleAdminRequest(target: AdminTarget, method: string, path: string, body: unknown): AdminAnswer {
  const parts = path.split("/").filter(Boolean).slice(1).map(decodeURIComponent); // drop "_lab"
  const [collection, id, verb] = parts;
  try {
    if (method === "GET" && collection === "health" && parts.length === 1) {
      return { status: 200, body: { ok: true, region: target.region, zones: target.zones } };
    }
    if (collection === "instances") {
      if (parts.length === 1 && method === "GET") return { status: 200, body: target.listInstances() };
      if (parts.length === 1 && method === "POST") {
        const problems = validateLabInstance(body);
        if (problems.length > 0) return bad(problems.join("; "));
        const live = target.registerInstance(body as LabInstance);
        return { status: 201, body: target.describeInstance(live.instanceId) };
      }
      if (id !== undefined) {
        const found = target.describeInstance(id);
        if (!found) return notFound(`no instance ${id}`);
        if (parts.length === 2 && method === "GET") return { status: 200, body: found };
        if (parts.length === 3 && verb === "terminate" && method === "POST") {
          target.terminateInstance(id);
          return { status: 200, body: target.describeInstance(id) };
        }
      }
    }
    if (collection === "faults" && parts.length === 1) {
      if (method === "GET") return { status: 200, body: target.faults() };
      if (method === "PUT") {
        const problems = validateFaults(body);
        if (problems.length > 0) return bad(problems.join("; "));
        target.setFaults(body as Faults);
        return { status: 200, body: target.faults() };
      }
    }
    if (collection === "clock" && parts.length === 1) {
      if (method === "GET") return { status: 200, body: target.clock() };
      if (method === "PUT") {
        const offsetMs = (body as { offsetMs?: unknown } | undefined)?.offsetMs;
        if (typeof offsetMs !== "number" || !Number.isFinite(offsetMs))
          return bad("body must be { offsetMs: <a finite number of ms> }");
        target.setClockOffset(offsetMs);
        return { status: 200, body: target.clock() };
      }
    }
    if (collection === "state" && parts.length === 1) {
      if (method === "GET") return { status: 200, body: target.snapshotState() };
      if (method === "PUT") {
        if (!isModel(body)) return bad("not an EC2 emulator state (version 1)");
        target.replaceState(body);
        return { status: 200, body: target.snapshotState() };
      }
    }
    if (collection === "events" && parts.length === 1 && method === "GET") {
      return { status: 200, body: target.snapshotState().events };
    }
    if (collection === "requests" && parts.length === 1) {
      if (method === "DELETE") target.requests.reset();
      if (method === "GET" || method === "DELETE") {
        return { status: 200, body: { counts: target.requests.snapshotCounts(), records: target.requests.records() } };
      }
    }
    if (collection === "holds") return routeHolds(target.requests, method, parts, body);
  } catch (error) {
    return bad(error instanceof Error ? error.message : String(error));
  }
  return notFound(`no route ${method} ${path}`);
}

function routeHolds(requests: RequestLedger, method: string, parts: string[], body: unknown): AdminAnswer {
  const [, id, verb] = parts;
  if (parts.length === 1) {
    if (method === "GET") return { status: 200, body: requests.listHolds() };
    if (method === "DELETE") {
      requests.clearHolds(true);
      return { status: 200, body: [] };
    }
    if (method === "POST") {
      const problems = validateHoldSpec(body);
      if (problems.length > 0) return bad(problems.join("; "));
      return { status: 201, body: requests.addHold(body as HoldSpec) };
    }
  }
  if (id !== undefined) {
    const found = requests.hold(id);
    if (!found) return notFound(`no hold ${id}`);
    if (parts.length === 2 && method === "GET") return { status: 200, body: found };
    if (parts.length === 3 && verb === "release" && method === "POST") {
      const drop = typeof body === "object" && body !== null && (body as { drop?: unknown }).drop === true;
      requests.releaseHold(id, !drop);
      return { status: 200, body: { ...found, released: true } };
    }
  }
  return notFound(`no route ${method} /_lab/${parts.join("/")}`);
}
