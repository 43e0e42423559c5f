/**
 * The model and its persistence. Every change is written to the state file at once, atomically
 * (temporary file + rename), so a restarted emulator, or one killed mid-test, resumes from a
 * whole state and never from half a file. Writes are synchronous on purpose: the model is
 * small, and writing before the HTTP answer goes out means a client that saw a change can
 * rely on it surviving a restart.
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync, existsSync } from "node:fs";
import { dirname } from "node:path";
import {
  emptyModel,
  isModel,
  type InstanceRecord,
  type LabEvent,
  type Model,
  type NetworkInterfaceRecord,
  type SnapshotRecord,
  type VolumeRecord,
} from "./model.ts";

/** Events kept in the model; older ones are dropped so the state file stays small. */
const MAX_EVENTS = 1000;

/** Holds the model; call `commit()` after each change. */
export class StateStore {
  private readonly file: string | undefined;
  private readonly now: () => number;
  private current: Model;
  private sealed = false;

  private constructor(model: Model, file: string | undefined, now: () => number) {
    this.file = file;
    this.now = now;
    this.current = model;
  }

  /** Loads `file` when it exists (a malformed file is an error, not silently replaced). */
  static open(file: string | undefined, now: () => number = Date.now): StateStore {
    if (file === undefined || !existsSync(file)) return new StateStore(emptyModel(), file, now);
    const parsed: unknown = JSON.parse(readFileSync(file, "utf8"));
    if (!isModel(parsed)) throw new Error(`${file} is not an EC2 emulator state file (version 1)`);
    return new StateStore(parsed, file, now);
  }

  /**
   * Writes the file one last time and never again: a late callback of a closed emulator must
   * not overwrite the file a restarted one is now using.
   */
  seal(): void {
    this.commit();
    this.sealed = true;
  }

  get model(): Model {
    return this.current;
  }

  /** Replaces the whole model (admin `PUT /_lab/state`) and persists it. */
  replace(model: Model): void {
    if (!isModel(model)) throw new Error("not an EC2 emulator state (version 1)");
    this.current = structuredClone(model);
    this.commit();
  }

  /** A deep copy, so readers cannot change the model behind the emulator's back. */
  copy(): Model {
    return structuredClone(this.current);
  }

  /** A fresh sequence number (creation order, attachment tokens). */
  nextSeq(): number {
    return this.current.nextSeq++;
  }

  /** Records an event for tests and the lab's timeline. */
  event(event: Omit<LabEvent, "at">): void {
    this.current.events.push({ at: new Date(this.now()).toISOString(), ...event });
    if (this.current.events.length > MAX_EVENTS) this.current.events.splice(0, this.current.events.length - MAX_EVENTS);
  }

  /** Persists the model (no-op without a state file). */
  commit(): void {
    if (this.file === undefined || this.sealed) return;
    mkdirSync(dirname(this.file), { recursive: true });
    const temp = `${this.file}.${process.pid}.tmp`;
    writeFileSync(temp, JSON.stringify(this.current, null, 1) + "\n");
    renameSync(temp, this.file);
  }

  volume(id: string): VolumeRecord | undefined {
    return Object.hasOwn(this.current.volumes, id) ? this.current.volumes[id] : undefined;
  }

  snapshot(id: string): SnapshotRecord | undefined {
    return Object.hasOwn(this.current.snapshots, id) ? this.current.snapshots[id] : undefined;
  }

  instance(id: string): InstanceRecord | undefined {
    return Object.hasOwn(this.current.instances, id) ? this.current.instances[id] : undefined;
  }

  /** Volumes in creation order. */
  volumes(): VolumeRecord[] {
    return Object.values(this.current.volumes).sort((a, b) => a.seq - b.seq);
  }

  snapshots(): SnapshotRecord[] {
    return Object.values(this.current.snapshots).sort((a, b) => a.seq - b.seq);
  }

  instances(): InstanceRecord[] {
    return Object.values(this.current.instances).sort((a, b) => a.seq - b.seq);
  }

  networkInterface(id: string): NetworkInterfaceRecord | undefined {
    const all = this.current.networkInterfaces ?? {};
    return Object.hasOwn(all, id) ? all[id] : undefined;
  }

  /** ENIs in creation order. */
  networkInterfaces(): NetworkInterfaceRecord[] {
    return Object.values(this.current.networkInterfaces ?? {}).sort((a, b) => a.seq - b.seq);
  }
}
