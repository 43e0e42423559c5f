/**
 * A VolumeBackend that only keeps books: which images and devices would exist. For tests of
 * the emulator and for running the lab without root; it refuses calls that would be wrong on
 * the real (loop-device) backend, such as attaching a volume twice, so ordering bugs show up.
 */
import type { BlockSnapshotStore, LabInstance, VolumeBackend } from "../types.ts";

/** One call the backend received. */
export interface BackendCall {
  op: "createVolume" | "deleteVolume" | "createSnapshot" | "deleteSnapshot" | "attach" | "detach";
  id: string;
  /** The instance (attach/detach), the snapshot a volume is made from, or the snapshotted volume. */
  other?: string;
}

export interface MemoryVolumeBackendOptions {
  /** Time each call takes (ms). */
  delayMs?: number;
  /** Return an error to make that call fail. */
  fail?: (call: BackendCall) => Error | undefined;
  /**
   * Return a promise to hold that call until it settles: tests use it to observe an
   * in-between state (attaching, creating, pending) for as long as they need, whatever the
   * machine's speed.
   */
  hold?: (call: BackendCall) => Promise<void> | undefined;
}

export class MemoryVolumeBackend implements VolumeBackend {
  private readonly options: MemoryVolumeBackendOptions;
  /** Every call, in the order received. */
  readonly calls: BackendCall[] = [];
  readonly volumes = new Map<string, number>();
  readonly snapshots = new Set<string>();
  /** Volume id → instance id of the devices that exist. */
  readonly attached = new Map<string, string>();
  /** Volumes whose device counts as in use (mounted): tests add and remove them. */
  readonly busy = new Set<string>();
  /** Volume id → initialization progress to report (tests set it); absent: not tracked. */
  readonly initialization = new Map<string, { done: number; total: number }>();

  /** Snapshot id → its blocks written through the EBS direct APIs (index → bytes). */
  readonly snapshotBlocks = new Map<string, Map<number, Buffer>>();

  constructor(options: MemoryVolumeBackendOptions = {}) {
    this.options = options;
  }

  readonly blockSnapshots: BlockSnapshotStore = {
    start: async (snapshotId, _sizeGiB, parentSnapshotId) => {
      const parent = parentSnapshotId === undefined ? undefined : this.snapshotBlocks.get(parentSnapshotId);
      if (parentSnapshotId !== undefined && !this.snapshots.has(parentSnapshotId))
        throw new Error(`no snapshot image ${parentSnapshotId}`);
      this.snapshotBlocks.set(snapshotId, new Map(parent ?? []));
      this.snapshots.add(snapshotId);
    },
    put: async (snapshotId, index, data) => {
      const blocks = this.snapshotBlocks.get(snapshotId);
      if (!blocks) throw new Error(`no snapshot image ${snapshotId}`);
      if (data.equals(Buffer.alloc(data.length))) blocks.delete(index);
      else blocks.set(index, Buffer.from(data));
    },
    read: async (snapshotId, index, blockSize) =>
      Buffer.from(this.snapshotBlocks.get(snapshotId)?.get(index) ?? Buffer.alloc(blockSize)),
    blocks: async (snapshotId) => [...(this.snapshotBlocks.get(snapshotId)?.keys() ?? [])].sort((a, b) => a - b),
  };

  private async record(call: BackendCall, check: () => void): Promise<void> {
    this.calls.push(call);
    if (this.options.delayMs) await new Promise((resolve) => setTimeout(resolve, this.options.delayMs));
    await this.options.hold?.(call);
    const failure = this.options.fail?.(call);
    if (failure) throw failure;
    check();
  }

  /** The calls of one kind, e.g. `callsOf("attach")`. */
  callsOf(op: BackendCall["op"]): BackendCall[] {
    return this.calls.filter((c) => c.op === op);
  }

  createVolume(volumeId: string, sizeGiB: number, fromSnapshotId?: string): Promise<void> {
    return this.record({ op: "createVolume", id: volumeId, other: fromSnapshotId }, () => {
      if (fromSnapshotId !== undefined && !this.snapshots.has(fromSnapshotId)) {
        throw new Error(`no snapshot image ${fromSnapshotId}`);
      }
      this.volumes.set(volumeId, sizeGiB);
    });
  }

  deleteVolume(volumeId: string): Promise<void> {
    return this.record({ op: "deleteVolume", id: volumeId }, () => {
      if (this.attached.has(volumeId)) throw new Error(`${volumeId} still has a device`);
      this.volumes.delete(volumeId);
    });
  }

  createSnapshot(snapshotId: string, volumeId: string): Promise<void> {
    return this.record({ op: "createSnapshot", id: snapshotId, other: volumeId }, () => {
      if (!this.volumes.has(volumeId)) throw new Error(`no volume image ${volumeId}`);
      this.snapshots.add(snapshotId);
    });
  }

  deleteSnapshot(snapshotId: string): Promise<void> {
    return this.record({ op: "deleteSnapshot", id: snapshotId }, () => {
      this.snapshots.delete(snapshotId);
    });
  }

  attach(volumeId: string, instance: LabInstance): Promise<void> {
    return this.record({ op: "attach", id: volumeId, other: instance.instanceId }, () => {
      if (!this.volumes.has(volumeId)) throw new Error(`no volume image ${volumeId}`);
      const holder = this.attached.get(volumeId);
      if (holder !== undefined) throw new Error(`${volumeId} already has a device on ${holder}`);
      this.attached.set(volumeId, instance.instanceId);
    });
  }

  inUse(volumeId: string): Promise<boolean> {
    return Promise.resolve(this.attached.has(volumeId) && this.busy.has(volumeId));
  }

  initializationProgress(volumeId: string): { done: number; total: number } | undefined {
    return this.initialization.get(volumeId);
  }

  detach(volumeId: string, instance: LabInstance): Promise<void> {
    return this.record({ op: "detach", id: volumeId, other: instance.instanceId }, () => {
      if (this.attached.get(volumeId) !== instance.instanceId) {
        throw new Error(`${volumeId} has no device on ${instance.instanceId}`);
      }
      this.attached.delete(volumeId);
    });
  }
}
