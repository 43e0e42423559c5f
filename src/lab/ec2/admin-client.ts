/** A client for the emulator's `/_lab/` admin API, for processes other than the emulator's. */
import type { LabInstance } from "../types.ts";
import type { AdminInstance } from "./admin.ts";
import type { Faults } from "./faults.ts";
import type { LabEvent, Model } from "./model.ts";
import type { HoldSpec, HoldStatus, RequestCounts, RequestRecord } from "./requests.ts";

/** Talks to `/_lab/` of the emulator at `endpoint` (e.g. `http://127.0.0.1:4566`). */
export class Ec2Admin {
  readonly endpoint: string;

  constructor(endpoint: string) {
    this.endpoint = endpoint;
  }

  private async call<T>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
    const response = await fetch(`${this.endpoint}/_lab/${path}`, {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const parsed = (await response.json()) as T & { error?: string };
    if (response.status >= 400 && response.status !== 404) {
      throw new Error(`EC2 emulator ${method} /_lab/${path}: ${response.status} ${parsed.error ?? ""}`);
    }
    return { status: response.status, body: parsed };
  }

  async health(): Promise<{ ok: boolean; region: string; zones: string[] }> {
    return (await this.call<{ ok: boolean; region: string; zones: string[] }>("GET", "health")).body;
  }

  async registerInstance(instance: LabInstance): Promise<AdminInstance> {
    return (await this.call<AdminInstance>("POST", "instances", instance)).body;
  }

  async instances(): Promise<AdminInstance[]> {
    return (await this.call<AdminInstance[]>("GET", "instances")).body;
  }

  /** The instance with its live tags, or undefined when the emulator does not know it. */
  async instance(instanceId: string): Promise<AdminInstance | undefined> {
    const { status, body } = await this.call<AdminInstance>("GET", `instances/${encodeURIComponent(instanceId)}`);
    return status === 404 ? undefined : body;
  }

  async terminateInstance(instanceId: string): Promise<AdminInstance> {
    const { status, body } = await this.call<AdminInstance>(
      "POST",
      `instances/${encodeURIComponent(instanceId)}/terminate`,
    );
    if (status === 404) throw new Error(`EC2 emulator: no instance ${instanceId}`);
    return body;
  }

  async faults(): Promise<Faults> {
    return (await this.call<Faults>("GET", "faults")).body;
  }

  async setFaults(faults: Faults): Promise<Faults> {
    return (await this.call<Faults>("PUT", "faults", faults)).body;
  }

  /** EC2's clock: how far it runs ahead of the host's (ms), and its time now. */
  async clock(): Promise<{ offsetMs: number; now: string }> {
    return (await this.call<{ offsetMs: number; now: string }>("GET", "clock")).body;
  }

  async setClockOffset(offsetMs: number): Promise<{ offsetMs: number; now: string }> {
    return (await this.call<{ offsetMs: number; now: string }>("PUT", "clock", { offsetMs })).body;
  }

  async state(): Promise<Model> {
    return (await this.call<Model>("GET", "state")).body;
  }

  async replaceState(model: Model): Promise<Model> {
    return (await this.call<Model>("PUT", "state", model)).body;
  }

  async events(): Promise<LabEvent[]> {
    return (await this.call<LabEvent[]>("GET", "events")).body;
  }

  /** Counters and records of the EC2 requests since the last reset. */
  async requests(): Promise<{ counts: RequestCounts; records: RequestRecord[] }> {
    return (await this.call<{ counts: RequestCounts; records: RequestRecord[] }>("GET", "requests")).body;
  }

  async resetRequests(): Promise<void> {
    await this.call("DELETE", "requests");
  }

  async addHold(spec: HoldSpec): Promise<HoldStatus> {
    return (await this.call<HoldStatus>("POST", "holds", spec)).body;
  }

  async hold(id: string): Promise<HoldStatus | undefined> {
    const { status, body } = await this.call<HoldStatus>("GET", `holds/${encodeURIComponent(id)}`);
    return status === 404 ? undefined : body;
  }

  /** Polls until the hold caught its request; false at the deadline or when the hold is gone. */
  async waitForHold(id: string, timeoutMs: number, pollMs = 20): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hold = await this.hold(id);
      if (!hold) return false;
      if (hold.hit) return true;
      if (Date.now() >= deadline) return false;
      await new Promise((resolve) => setTimeout(resolve, pollMs));
    }
  }

  /** Lets the held request go on, or drops it (never applied / never answered). */
  async releaseHold(id: string, options: { drop?: boolean } = {}): Promise<void> {
    await this.call("POST", `holds/${encodeURIComponent(id)}/release`, { drop: options.drop ?? false });
  }

  async clearHolds(): Promise<void> {
    await this.call("DELETE", "holds");
  }
}
