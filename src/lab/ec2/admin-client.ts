/** A client for the emulator's `/_lab/` admin API, for processes other than the emulator's. */
import type { LabInstance } from "../types.ts";
import type { AdminInstance } from "./admin.ts";
import type { Faults } from "./faults.ts";
import type { LabEvent, Model } from "./model.ts";

/** Talks to `/_lab/` of the emulator at `endpoint` (e.g. `http://127.0.0.1:4566`). */
export class Ec2Admin {
  constructor(readonly endpoint: string) {}

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

  async state(): Promise<Model> {
    return (await this.call<Model>("GET", "state")).body;
  }

  async replaceState(model: Model): Promise<Model> {
    return (await this.call<Model>("PUT", "state", model)).body;
  }

  async events(): Promise<LabEvent[]> {
    return (await this.call<LabEvent[]>("GET", "events")).body;
  }
}
