/**
 * Fault injection: what the lab can make EC2 do wrong, changeable while the emulator runs
 * (`setFaults()`, `PUT /_lab/faults`). Faults apply to EC2 requests only, never to `/_lab/`.
 *
 * Throttling is deterministic so tests can count on it: with rate r, the n-th request
 * (counting from the last `setFaults`, separately for each action that has its own rate) is
 * throttled exactly when floor(n·r) > floor((n−1)·r). So r = 0.5 throttles every second request
 * (the 2nd, 4th, …), r = 1 every request, r = 0.25 every fourth; a retrying client always gets
 * through after at most ⌈1/(1−r)⌉ attempts when r < 1.
 */

/** Overrides for one action (keys of `Faults.actions` are action names, e.g. `AttachVolume`). */
export interface ActionFaults {
  throttleRate?: number;
  latencyMs?: number;
  /** Apply this action's change, then answer 500 InternalError. */
  applyThen500?: boolean;
  /** This action does not see volumes younger than this (ms); overrides the global value. */
  notFoundAfterCreateMs?: number;
  /**
   * Answer every request of this action with this EC2 error code (HTTP 400, e.g.
   * `UnauthorizedOperation`, `InvalidVolume.NotFound`), changing nothing: the refusals a policy or
   * a vanished resource give, for tests of how the agent tells them.
   */
  errorCode?: string;
}

export interface Faults {
  /** Fraction (0–1) of requests answered `RequestLimitExceeded` with HTTP 503 (see above). */
  throttleRate?: number;
  /** Milliseconds waited before handling every request. */
  latencyMs?: number;
  /** Volumes whose attachment stays `attaching` forever (`true`: all volumes). */
  stuckAttach?: true | string[];
  /**
   * New volumes stay `creating` past their delay while this is set (EBS can take minutes to make a
   * volume from a large snapshot); once it is cleared, those whose delay has passed become `available`.
   */
  stuckCreate?: true;
  /** Actions whose change is applied but which answer 500 `InternalError`. */
  applyThen500?: string[];
  /**
   * EC2's eventual consistency after CreateVolume: for this long (ms) after its creation a
   * volume answers `InvalidVolume.NotFound` when named by id, and is missing from listings.
   * AWS documents this ("Eventual consistency in the Amazon EC2 API": a resource just created
   * may not be visible to the calls that follow it) and tells clients to retry with backoff.
   */
  notFoundAfterCreateMs?: number;
  /** Per-action overrides of the above. */
  actions?: Record<string, ActionFaults>;
}

/** Checks a Faults value (from JSON); returns the problems found. */
export function validateFaults(value: unknown): string[] {
  const problems: string[] = [];
  if (typeof value !== "object" || value === null || Array.isArray(value)) return ["faults must be an object"];
  const f = value as Record<string, unknown>;
  const rate = (name: string, v: unknown) => {
    if (v !== undefined && (typeof v !== "number" || !(v >= 0 && v <= 1))) problems.push(`${name} must be 0–1`);
  };
  const ms = (name: string, v: unknown) => {
    if (v !== undefined && (typeof v !== "number" || !(v >= 0))) problems.push(`${name} must be a number ≥ 0`);
  };
  rate("throttleRate", f.throttleRate);
  ms("latencyMs", f.latencyMs);
  ms("notFoundAfterCreateMs", f.notFoundAfterCreateMs);
  const stuck = f.stuckAttach;
  if (stuck !== undefined && stuck !== true && !(Array.isArray(stuck) && stuck.every((s) => typeof s === "string"))) {
    problems.push("stuckAttach must be true or a list of volume ids");
  }
  if (f.stuckCreate !== undefined && f.stuckCreate !== true) problems.push("stuckCreate must be true");
  const a500 = f.applyThen500;
  if (a500 !== undefined && !(Array.isArray(a500) && a500.every((s) => typeof s === "string"))) {
    problems.push("applyThen500 must be a list of action names");
  }
  if (f.actions !== undefined) {
    if (typeof f.actions !== "object" || f.actions === null) problems.push("actions must be an object");
    else
      for (const [action, o] of Object.entries(f.actions as Record<string, Record<string, unknown>>)) {
        rate(`actions.${action}.throttleRate`, o?.throttleRate);
        ms(`actions.${action}.latencyMs`, o?.latencyMs);
        ms(`actions.${action}.notFoundAfterCreateMs`, o?.notFoundAfterCreateMs);
        const code = o?.errorCode;
        if (code !== undefined && (typeof code !== "string" || !/^[A-Za-z][A-Za-z0-9.]*$/.test(code)))
          problems.push(`actions.${action}.errorCode must be an error code (letters, digits, dots)`);
      }
  }
  for (const key of Object.keys(f)) {
    if (
      ![
        "throttleRate",
        "latencyMs",
        "stuckAttach",
        "stuckCreate",
        "applyThen500",
        "notFoundAfterCreateMs",
        "actions",
      ].includes(key)
    ) {
      problems.push(`unknown fault ${key}`);
    }
  }
  return problems;
}

/** Decides, request by request, which faults fire. */
export class FaultInjector {
  private faults: Faults = {};
  /** Requests counted per throttle rate source ("*" for the global rate, else the action). */
  private counters = new Map<string, number>();

  constructor(faults: Faults = {}) {
    this.set(faults);
  }

  /** Replaces all faults and restarts the throttle counting. */
  set(faults: Faults): void {
    const problems = validateFaults(faults);
    if (problems.length > 0) throw new Error(`invalid faults: ${problems.join("; ")}`);
    this.faults = structuredClone(faults);
    this.counters.clear();
  }

  get(): Faults {
    return structuredClone(this.faults);
  }

  latencyMs(action: string): number {
    return this.faults.actions?.[action]?.latencyMs ?? this.faults.latencyMs ?? 0;
  }

  /** Counts this request and says whether it is to be throttled. */
  throttle(action: string): boolean {
    const own = this.faults.actions?.[action]?.throttleRate;
    const rate = own ?? this.faults.throttleRate ?? 0;
    if (rate <= 0) return false;
    const source = own === undefined ? "*" : action;
    const n = (this.counters.get(source) ?? 0) + 1;
    this.counters.set(source, n);
    // The small epsilon keeps e.g. 3 × 0.1 from landing just under 0.3 in floating point.
    return Math.floor(n * rate + 1e-9) > Math.floor((n - 1) * rate + 1e-9);
  }

  applyThen500(action: string): boolean {
    return this.faults.actions?.[action]?.applyThen500 ?? this.faults.applyThen500?.includes(action) ?? false;
  }

  /** How long (ms) after its creation a volume stays invisible to `action`. */
  notFoundAfterCreateMs(action: string): number {
    return this.faults.actions?.[action]?.notFoundAfterCreateMs ?? this.faults.notFoundAfterCreateMs ?? 0;
  }

  /** The error code `action` is to be answered with, if a fault says so. */
  errorCode(action: string): string | undefined {
    return this.faults.actions?.[action]?.errorCode;
  }

  stuckCreate(): boolean {
    return this.faults.stuckCreate === true;
  }

  stuckAttach(volumeId: string): boolean {
    const stuck = this.faults.stuckAttach;
    return stuck === true || (Array.isArray(stuck) && stuck.includes(volumeId));
  }
}
