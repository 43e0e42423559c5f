/**
 * What the lab's tests see of the EC2 traffic: a ledger of the requests the emulator received
 * (per action, per caller, per instance; resettable) and holds, which park one chosen request
 * (before or after its change is applied) until the test lets it go. With a hold a test can
 * kill an agent exactly between an EC2 call and its follow-up, or count an agent's calls while
 * other agents run.
 *
 * The caller is the access key id of the request's SigV4 `Authorization` header: each lab host's
 * IMDS hands out credentials of its own, so a CLI agent is told apart from the others and from
 * the test's own client (which uses the lab's fixed key).
 */
import type { Params } from "./params.ts";

/** One EC2 request as the emulator received and answered it. */
export interface RequestRecord {
  /** Arrival order since the emulator started (not reset with the counters). */
  seq: number;
  action: string;
  /** Access key id of the signature, when the request was signed. */
  caller?: string;
  /** `InstanceId` of the request (AttachVolume, DetachVolume, DescribeInstances' first id). */
  instanceId?: string;
  /** `VolumeId` of the request, or the first `VolumeId.n` / `ResourceId.n`. */
  volumeId?: string;
  /** HTTP status answered; undefined while the request is held or handled. */
  status?: number;
  /** EC2 error code answered (e.g. `RequestLimitExceeded`, `VolumeInUse`). */
  code?: string;
  /** A hold dropped the request: never applied (before) or never answered (after). */
  dropped?: boolean;
}

/** When a hold catches its request: before the emulator applies it, or after (answer kept). */
export type HoldPoint = "before" | "after";

/** Which request a hold catches. */
export interface HoldSpec {
  action: string;
  /** The n-th matching request from the hold's creation (default 1). */
  nth?: number;
  /** Only requests signed with this access key id (one agent among many). */
  caller?: string;
  /** Only requests whose parameters have these values (e.g. `{ VolumeId: "vol-…" }`). */
  match?: Record<string, string>;
  apply: HoldPoint;
}

/** A hold as the admin API shows it. */
export interface HoldStatus {
  id: string;
  spec: HoldSpec;
  /** Matching requests seen so far. */
  seen: number;
  /** The n-th matching request arrived and is parked (or was). */
  hit: boolean;
  released: boolean;
  request?: RequestRecord;
}

/** Counters since the last reset. */
export interface RequestCounts {
  total: number;
  byAction: Record<string, number>;
  /** Requests answered with an error code, per action and code (`AttachVolume VolumeInUse`). */
  byError: Record<string, number>;
  byCaller: Record<string, Record<string, number>>;
  byInstance: Record<string, Record<string, number>>;
}

/** What the server does with a request after `arrive`. */
export interface Ticket {
  record: RequestRecord;
  /** Resolves true to go on, false to drop the request (close the connection unanswered). */
  gate(point: HoldPoint): Promise<boolean>;
}

interface Hold {
  status: HoldStatus;
  /** Its request arrived (it is parked once it reaches the hold's point). */
  caught: boolean;
  /** Resolves when released: true to go on, false to drop. */
  released: Promise<boolean>;
  release(goOn: boolean): void;
  hitWaiters: (() => void)[];
}

/** The records kept for inspection; older ones are forgotten (counters are not). */
const MAX_RECORDS = 50_000;

/** The access key id of a SigV4 `Authorization` header (`… Credential=AKID/date/…`). */
export function callerOf(authorization: string | undefined): string | undefined {
  const match = /Credential=([^/,\s]+)\//.exec(authorization ?? "");
  return match?.[1];
}

function bump(counter: Record<string, number>, key: string): void {
  counter[key] = (counter[key] ?? 0) + 1;
}

function emptyCounts(): RequestCounts {
  return { total: 0, byAction: {}, byError: {}, byCaller: {}, byInstance: {} };
}

/** Problems with a HoldSpec given as JSON. */
export function validateHoldSpec(value: unknown): string[] {
  if (typeof value !== "object" || value === null) return ["hold must be an object"];
  const h = value as Record<string, unknown>;
  const problems: string[] = [];
  if (typeof h.action !== "string" || h.action === "") problems.push("action must be a non-empty string");
  if (h.apply !== "before" && h.apply !== "after") problems.push('apply must be "before" or "after"');
  if (h.nth !== undefined && !(Number.isInteger(h.nth) && (h.nth as number) >= 1))
    problems.push("nth must be an integer ≥ 1");
  if (h.caller !== undefined && typeof h.caller !== "string") problems.push("caller must be a string");
  if (
    h.match !== undefined &&
    (typeof h.match !== "object" || h.match === null || Object.values(h.match).some((v) => typeof v !== "string"))
  ) {
    problems.push("match must be an object of strings");
  }
  for (const key of Object.keys(h))
    if (!["action", "nth", "caller", "match", "apply"].includes(key)) problems.push(`unknown hold field ${key}`);
  return problems;
}

/** The emulator's request ledger and holds. */
export class RequestLedger {
  private seq = 0;
  private counts = emptyCounts();
  private kept: RequestRecord[] = [];
  private holds = new Map<string, Hold>();
  private nextHold = 1;

  /** Records a request as it arrives (before faults) and says whether a hold catches it. */
  arrive(params: Params, caller: string | undefined): Ticket {
    const action = params.action ?? "";
    const record: RequestRecord = { seq: ++this.seq, action };
    if (caller) record.caller = caller;
    const instanceId = params.str("InstanceId") ?? params.str("InstanceId.1");
    if (instanceId) record.instanceId = instanceId;
    const volumeId = params.str("VolumeId") ?? params.str("VolumeId.1") ?? params.str("ResourceId.1");
    if (volumeId) record.volumeId = volumeId;

    this.counts.total++;
    bump(this.counts.byAction, action);
    if (caller) bump((this.counts.byCaller[caller] ??= {}), action);
    if (instanceId) bump((this.counts.byInstance[instanceId] ??= {}), action);
    this.kept.push(record);
    if (this.kept.length > MAX_RECORDS) this.kept.splice(0, this.kept.length - MAX_RECORDS);

    const hold = this.catching(params, caller, action);
    return {
      record,
      gate: async (point) => {
        if (!hold || hold.status.spec.apply !== point) return true;
        // Hit once parked: for an `after` hold that is once the change is applied.
        hold.status.hit = true;
        hold.status.request = record;
        for (const wake of hold.hitWaiters.splice(0)) wake();
        const goOn = await hold.released;
        if (!goOn) record.dropped = true;
        return goOn;
      },
    };
  }

  /** Notes the answer sent (status and EC2 error code). */
  settle(record: RequestRecord, status: number, code: string | undefined): void {
    record.status = status;
    if (code) {
      record.code = code;
      bump(this.counts.byError, `${record.action} ${code}`);
    }
  }

  private catching(params: Params, caller: string | undefined, action: string): Hold | undefined {
    for (const hold of this.holds.values()) {
      const { spec } = hold.status;
      if (hold.caught || spec.action !== action) continue;
      if (spec.caller !== undefined && spec.caller !== caller) continue;
      if (spec.match && Object.entries(spec.match).some(([key, value]) => params.str(key) !== value)) continue;
      hold.status.seen++;
      if (hold.status.seen === (spec.nth ?? 1)) {
        hold.caught = true;
        return hold;
      }
    }
    return undefined;
  }

  /** Counters since the last reset (a deep copy). */
  snapshotCounts(): RequestCounts {
    return structuredClone(this.counts);
  }

  /** The requests received since the last reset, oldest first (copies). */
  records(): RequestRecord[] {
    return structuredClone(this.kept);
  }

  /** Starts counting (and recording) afresh; holds stay. */
  reset(): void {
    this.counts = emptyCounts();
    this.kept = [];
  }

  /** Adds a hold; it catches one request, then stays (as hit) until released or cleared. */
  addHold(spec: HoldSpec): HoldStatus {
    const problems = validateHoldSpec(spec);
    if (problems.length > 0) throw new Error(`invalid hold: ${problems.join("; ")}`);
    const id = `hold-${this.nextHold++}`;
    let release!: (goOn: boolean) => void;
    const released = new Promise<boolean>((resolve) => (release = resolve));
    const hold: Hold = {
      status: { id, spec: structuredClone(spec), seen: 0, hit: false, released: false },
      caught: false,
      released,
      release: (goOn) => {
        hold.status.released = true;
        release(goOn);
      },
      hitWaiters: [],
    };
    this.holds.set(id, hold);
    return structuredClone(hold.status);
  }

  hold(id: string): HoldStatus | undefined {
    const hold = this.holds.get(id);
    return hold ? structuredClone(hold.status) : undefined;
  }

  listHolds(): HoldStatus[] {
    return [...this.holds.values()].map((hold) => structuredClone(hold.status));
  }

  /**
   * Lets the held request go: `goOn` true answers it (applying it first for a `before` hold),
   * false drops it (a `before` request is never applied; the connection closes unanswered).
   * The hold is then forgotten. False when there is no such hold.
   */
  releaseHold(id: string, goOn = true): boolean {
    const hold = this.holds.get(id);
    if (!hold) return false;
    hold.release(goOn);
    this.holds.delete(id);
    return true;
  }

  /** Releases every hold (answering their requests) and forgets them: the emulator's close does this. */
  clearHolds(goOn = true): void {
    for (const id of [...this.holds.keys()]) this.releaseHold(id, goOn);
  }

  /** Resolves true once the hold caught its request, false after `timeoutMs` or when it is gone. */
  waitForHold(id: string, timeoutMs: number): Promise<boolean> {
    const hold = this.holds.get(id);
    if (!hold) return Promise.resolve(false);
    if (hold.status.hit) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(hold.status.hit), timeoutMs);
      hold.hitWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }
}
