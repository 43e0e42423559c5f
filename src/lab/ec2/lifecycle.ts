/**
 * The state machine behind the actions: the delayed transitions (creating → available,
 * attaching → attached, detaching → available, pending → completed; instances pending →
 * running, stopping → stopped, shutting-down → terminated) and the backend calls that go with
 * them. Actions change the model synchronously and hand over to this module, so the
 * check-and-set of each request happens within one turn of the event loop (that is what makes
 * 20 concurrent AttachVolume calls for one volume give exactly one success).
 *
 * Backend calls for one volume run one after another (a per-volume queue), so for instance a
 * detach never overtakes the attach it undoes. A transition that fires after the model moved on
 * (another attachment, a deleted volume) finds its token stale and does nothing.
 */
import type { Logger } from "../../log.ts";
import type { LabInstance, VolumeBackend } from "../types.ts";
import type { FaultInjector } from "./faults.ts";
import type { AttachmentRecord, VolumeRecord } from "./model.ts";
import type { StateStore } from "./state.ts";

/** How long each transition takes (milliseconds). */
export interface Delays {
  attachMs: number;
  detachMs: number;
  snapshotMs: number;
  createMs: number;
  /** pending → running after StartInstances. */
  startMs: number;
  /** stopping → stopped after StopInstances (at least; the instance's shutdown hook too). */
  stopMs: number;
  /** shutting-down → terminated after TerminateInstances (at least; the shutdown hook too). */
  terminateMs: number;
}

/** Why an instance's OS is shutting down: what EC2 does with it afterwards. */
export type ShutdownKind = "stop" | "terminate";

/**
 * The instance's OS shutting down (its systemd stop jobs, the agent's release among them):
 * EC2 holds the instance in `stopping` / `shutting-down` while it runs, then powers it off.
 */
export type ShutdownHook = (instanceId: string, kind: ShutdownKind) => Promise<void>;

export interface LifecycleDeps {
  store: StateStore;
  backend: VolumeBackend;
  faults: FaultInjector;
  delays: Delays;
  log: Logger | undefined;
  /** The emulator's clock (ms since the epoch). */
  now(): number;
  /** The live instance object handed to the backend. */
  instance(instanceId: string): LabInstance | undefined;
  /** Runs the instance's shutdown (see ShutdownHook); absent or resolved at once: nothing runs. */
  shutdown?: ShutdownHook;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Runs the delayed transitions and backend calls; `close()` stops it. */
export class Lifecycle {
  private readonly deps: LifecycleDeps;
  private readonly timers = new Map<NodeJS.Timeout, (elapsed: boolean) => void>();
  /** Bumped whenever the timers are cancelled, so callbacks from before see they are stale. */
  private epoch = 0;
  private readonly queues = new Map<string, Promise<void>>();
  private readonly pending = new Set<Promise<unknown>>();
  /** Backend snapshot creations and volume creations from a snapshot, so deletion waits for them. */
  private readonly snapshotUsers = new Map<string, Set<Promise<void>>>();
  private stopping = false;
  /** Volumes made and past their delay, kept `creating` by the stuckCreate fault. */
  private readonly createsHeld = new Set<string>();

  constructor(deps: LifecycleDeps) {
    this.deps = deps;
  }

  private get store(): StateStore {
    return this.deps.store;
  }

  /**
   * Resolves with true after `ms`, or with false as soon as the timers are cancelled (state
   * replaced, emulator closing): the transition waiting on it then does nothing.
   */
  private delay(ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      if (this.stopping) return resolve(false);
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        resolve(true);
      }, ms);
      this.timers.set(timer, resolve);
    });
  }

  /** Whether a callback started in `epoch` may still change the model. */
  private live(epoch: number): boolean {
    return epoch === this.epoch;
  }

  /** Queues a backend call behind the earlier ones for the same key (volume id). */
  private enqueue(key: string, op: () => Promise<void>): Promise<void> {
    const previous = this.queues.get(key) ?? Promise.resolve();
    const result = previous.then(op);
    const tail = result.catch(() => undefined);
    this.queues.set(key, tail);
    this.track(tail);
    void tail.then(() => {
      if (this.queues.get(key) === tail) this.queues.delete(key);
    });
    return result;
  }

  private track(promise: Promise<unknown>): void {
    this.pending.add(promise);
    void promise.finally(() => this.pending.delete(promise)).catch(() => undefined);
  }

  private useSnapshot(snapshotId: string, promise: Promise<void>): void {
    const users = this.snapshotUsers.get(snapshotId) ?? new Set();
    const settled = promise.catch(() => undefined);
    users.add(settled);
    this.snapshotUsers.set(snapshotId, users);
    void settled.then(() => {
      users.delete(settled);
      if (users.size === 0 && this.snapshotUsers.get(snapshotId) === users) this.snapshotUsers.delete(snapshotId);
    });
  }

  /** Logs and records a failed backend call; returns the text kept in the model. */
  private backendFailed(
    what: string,
    error: unknown,
    ids: { volumeId?: string; snapshotId?: string; instanceId?: string },
  ): string {
    const detail = `${what}: ${message(error)}`;
    this.deps.log?.error("lab.ec2-emulator", `backend ${what} failed`, { ...ids, error: message(error) });
    this.store.event({ kind: "backend-error", ...ids, detail });
    return detail;
  }

  /** A new volume: the backend makes its image; it is `available` once that is done and createMs passed. */
  volumeCreated(volumeId: string): void {
    const volume = this.store.volume(volumeId);
    if (!volume) return;
    const epoch = this.epoch;
    const { sizeGiB, snapshotId } = volume;
    // After a restart the image may already exist: then only the delay is left to wait.
    const create = () => this.deps.backend.createVolume(volumeId, sizeGiB, snapshotId ?? undefined);
    const made = volume.imageReady
      ? Promise.resolve()
      : this.enqueue(volumeId, create).then(() => {
          const volume = this.store.volume(volumeId);
          if (volume) {
            volume.imageReady = true;
            this.store.commit();
          }
        });
    if (snapshotId) this.useSnapshot(snapshotId, made);
    const done = Promise.all([made, this.delay(this.deps.delays.createMs)]).then(
      ([, elapsed]) => {
        const volume = this.store.volume(volumeId);
        if (!elapsed || !this.live(epoch) || volume?.state !== "creating") return;
        if (this.deps.faults.stuckCreate()) {
          this.createsHeld.add(volumeId);
          this.store.event({ kind: "stuck-create", volumeId });
          this.store.commit();
          return;
        }
        volume.state = "available";
        this.store.commit();
      },
      (error: unknown) => {
        const volume = this.store.volume(volumeId);
        if (!this.live(epoch) || volume?.state !== "creating") return;
        volume.state = "error";
        volume.error = this.backendFailed("createVolume", error, { volumeId });
        this.store.commit();
      },
    );
    this.track(done);
  }

  /** A volume in `deleting`: gone from the model once the backend removed its image. */
  volumeDeleting(volumeId: string): void {
    const epoch = this.epoch;
    const done = this.enqueue(volumeId, () => this.deps.backend.deleteVolume(volumeId)).then(
      () => {
        if (!this.live(epoch) || this.store.volume(volumeId)?.state !== "deleting") return;
        delete this.store.model.volumes[volumeId];
        this.store.commit();
      },
      (error: unknown) => {
        const volume = this.store.volume(volumeId);
        if (!this.live(epoch) || !volume) return;
        volume.state = "error";
        volume.error = this.backendFailed("deleteVolume", error, { volumeId });
        this.store.commit();
      },
    );
    this.track(done);
  }

  /** A new attachment in `attaching`: completes after attachMs unless the stuckAttach fault holds it. */
  attachStarted(volumeId: string): void {
    const token = this.store.volume(volumeId)?.attachment?.token;
    if (token === undefined) return;
    const epoch = this.epoch;
    this.track(
      this.delay(this.deps.delays.attachMs).then((elapsed) => {
        if (elapsed && this.live(epoch)) this.completeAttach(volumeId, token);
      }),
    );
  }

  private current(volumeId: string, token: number): { volume: VolumeRecord; attachment: AttachmentRecord } | undefined {
    const volume = this.store.volume(volumeId);
    const attachment = volume?.attachment;
    if (!volume || !attachment || attachment.token !== token) return undefined;
    return { volume, attachment };
  }

  private completeAttach(volumeId: string, token: number): void {
    const found = this.current(volumeId, token);
    if (!found || found.attachment.state !== "attaching") return;
    const { attachment } = found;
    if (this.deps.faults.stuckAttach(volumeId)) {
      if (!attachment.stuck) {
        attachment.stuck = true;
        this.store.event({ kind: "stuck-attach", volumeId, instanceId: attachment.instanceId });
        this.store.commit();
      }
      return;
    }
    delete attachment.stuck;
    const instance = this.deps.instance(attachment.instanceId);
    if (!instance) return;
    const epoch = this.epoch;
    // Recorded before the call: from here on there may be a device that a detach must remove.
    attachment.deviceUp = true;
    this.store.commit();
    const done = this.enqueue(volumeId, () => this.deps.backend.attach(volumeId, instance)).then(
      () => {
        const now = this.current(volumeId, token);
        if (!this.live(epoch) || now?.attachment.state !== "attaching") return;
        now.attachment.state = "attached";
        delete now.attachment.error;
        this.store.commit();
      },
      (error: unknown) => {
        const now = this.current(volumeId, token);
        if (!this.live(epoch) || !now) return;
        // The attachment stays `attaching` (what a client sees of a failed attach on EC2),
        // with the reason kept in the model and the event log. No device was made, so a
        // DetachVolume that gives up on it has nothing to remove.
        now.attachment.deviceUp = false;
        now.attachment.error = this.backendFailed("attach", error, { volumeId, instanceId: instance.instanceId });
        now.volume.error = now.attachment.error;
        this.store.commit();
      },
    );
    this.track(done);
  }

  /** An attachment in `detaching`: the device goes away after detachMs, then the volume is `available`. */
  detachStarted(volumeId: string): void {
    const token = this.store.volume(volumeId)?.attachment?.token;
    if (token === undefined) return;
    const epoch = this.epoch;
    this.track(
      this.delay(this.deps.delays.detachMs).then((elapsed) => {
        if (elapsed && this.live(epoch)) this.completeDetach(volumeId, token);
      }),
    );
  }

  /**
   * A detach whose delay has passed: a device still in use on the instance (mounted) keeps the
   * attachment `busy`, checked again every busyRecheckMs, until it is free or the detach is
   * forced; EC2 does the same with a mounted volume ("the volume can get stuck in the busy
   * state while it is trying to detach").
   */
  private completeDetach(volumeId: string, token: number): void {
    const found = this.current(volumeId, token);
    if (!found || (found.attachment.state !== "detaching" && found.attachment.state !== "busy")) return;
    const { attachment } = found;
    const instance = this.deps.instance(attachment.instanceId);
    const inUse = this.deps.backend.inUse?.bind(this.deps.backend);
    if (attachment.forced || !attachment.deviceUp || !instance || !inUse) {
      this.finishDetach(volumeId, token);
      return;
    }
    const epoch = this.epoch;
    const checked = inUse(volumeId, instance).then(
      (busy) => busy,
      (error: unknown) => {
        // Not knowing is treated as in use: detaching a mounted device is what must not happen.
        this.deps.log?.warning("lab.ec2-emulator", "could not tell whether the device is in use", {
          volumeId,
          error: message(error),
        });
        return true;
      },
    );
    this.track(
      checked.then(async (busy) => {
        const now = this.current(volumeId, token);
        if (!this.live(epoch) || !now || (now.attachment.state !== "detaching" && now.attachment.state !== "busy"))
          return;
        if (!busy || now.attachment.forced) {
          this.finishDetach(volumeId, token);
          return;
        }
        if (now.attachment.state !== "busy") {
          now.attachment.state = "busy";
          this.store.event({ kind: "detach-busy", volumeId, instanceId: now.attachment.instanceId });
          this.store.commit();
        }
        if ((await this.delay(this.busyRecheckMs)) && this.live(epoch)) this.completeDetach(volumeId, token);
      }),
    );
  }

  /** How often a busy detach looks again whether the device is still in use. */
  private get busyRecheckMs(): number {
    return Math.max(20, Math.min(this.deps.delays.detachMs, 500));
  }

  /** Removes the device (if attach made one) and ends the attachment. */
  private finishDetach(volumeId: string, token: number): void {
    const found = this.current(volumeId, token);
    if (!found) return;
    const { attachment } = found;
    if (attachment.state === "busy") {
      attachment.state = "detaching";
      this.store.commit();
    }
    const instance = this.deps.instance(attachment.instanceId);
    const epoch = this.epoch;
    // Only a device that attach may have made is removed; a never-completed attach left none.
    const detach =
      attachment.deviceUp && instance
        ? this.enqueue(volumeId, () => this.deps.backend.detach(volumeId, instance))
        : this.enqueue(volumeId, async () => undefined);
    const done = detach.then(
      () => {
        const now = this.current(volumeId, token);
        if (!this.live(epoch) || now?.attachment.state !== "detaching") return;
        now.volume.attachment = null;
        now.volume.state = "available";
        this.store.commit();
      },
      (error: unknown) => {
        const now = this.current(volumeId, token);
        if (!this.live(epoch) || !now) return;
        now.attachment.error = this.backendFailed("detach", error, { volumeId, instanceId: attachment.instanceId });
        now.volume.error = now.attachment.error;
        this.store.commit();
      },
    );
    this.track(done);
  }

  /**
   * An instance went away: its volumes are detached at once (EC2 does so on termination), and
   * those attached with DeleteOnTermination are deleted.
   */
  instanceTerminated(instanceId: string): void {
    const instance = this.deps.instance(instanceId);
    const deleting: string[] = [];
    for (const volume of this.store.volumes()) {
      const attachment = volume.attachment;
      if (attachment?.instanceId !== instanceId) continue;
      volume.attachment = null;
      volume.state = attachment.deleteOnTermination ? "deleting" : "available";
      if (attachment.deleteOnTermination) deleting.push(volume.volumeId);
      if (attachment.deviceUp && instance) {
        const volumeId = volume.volumeId;
        this.track(
          this.enqueue(volumeId, () => this.deps.backend.detach(volumeId, instance)).catch((error: unknown) => {
            this.backendFailed("detach", error, { volumeId, instanceId });
            this.store.commit();
          }),
        );
      }
    }
    // Its primary network interface goes with it (RunInstances made it with DeleteOnTermination).
    const interfaces = this.store.model.networkInterfaces ?? {};
    for (const eni of Object.values(interfaces))
      if (eni.instanceId === instanceId) delete interfaces[eni.networkInterfaceId];
    this.store.commit();
    // Queued behind the detach of the same volume: the device goes before the image.
    for (const volumeId of deleting) this.volumeDeleting(volumeId);
  }

  /** StartInstances made the instance `pending`: `running` after startMs. */
  instanceStarting(instanceId: string): void {
    const epoch = this.epoch;
    this.track(
      this.delay(this.deps.delays.startMs).then((elapsed) => {
        const record = this.store.instance(instanceId);
        if (!elapsed || !this.live(epoch) || record?.state !== "pending") return;
        record.state = "running";
        this.store.event({ kind: "instance-started", instanceId });
        this.store.commit();
      }),
    );
  }

  /**
   * StopInstances or TerminateInstances made the instance `stopping` / `shutting-down`: its
   * shutdown hook runs (the agent's release, in a lab host), and once it is done and the delay
   * passed the instance is `stopped` (volumes stay attached, devices stay) or `terminated`.
   * A failing hook does not hold the instance: EC2 powers it off whatever the OS did.
   */
  instanceShuttingDown(instanceId: string, kind: ShutdownKind, runHook = true): void {
    const epoch = this.epoch;
    const hook = runHook && this.deps.shutdown ? this.deps.shutdown(instanceId, kind) : Promise.resolve();
    const shutDown = hook.catch((error: unknown) => {
      this.deps.log?.warning("lab.ec2-emulator", "the instance's shutdown hook failed; it is powered off anyway", {
        instanceId,
        error: message(error),
      });
    });
    const during = kind === "stop" ? "stopping" : "shutting-down";
    this.track(
      Promise.all([
        shutDown,
        this.delay(kind === "stop" ? this.deps.delays.stopMs : this.deps.delays.terminateMs),
      ]).then(([, elapsed]) => {
        const record = this.store.instance(instanceId);
        if (!elapsed || !this.live(epoch) || record?.state !== during) return;
        if (kind === "stop") {
          record.state = "stopped";
          this.store.event({ kind: "instance-stopped", instanceId });
          this.store.commit();
          return;
        }
        record.state = "terminated";
        this.store.event({ kind: "instance-terminated", instanceId });
        this.instanceTerminated(instanceId);
      }),
    );
  }

  /** A new snapshot: the backend copies the volume now; `completed` after snapshotMs. */
  snapshotStarted(snapshotId: string): void {
    const snapshot = this.store.snapshot(snapshotId);
    if (!snapshot) return;
    const epoch = this.epoch;
    const { volumeId } = snapshot;
    const copied = snapshot.imageReady
      ? Promise.resolve()
      : this.enqueue(volumeId, () => this.deps.backend.createSnapshot(snapshotId, volumeId)).then(() => {
          const snapshot = this.store.snapshot(snapshotId);
          if (snapshot) {
            snapshot.imageReady = true;
            this.store.commit();
          }
        });
    this.useSnapshot(snapshotId, copied);
    const done = Promise.all([copied, this.delay(this.deps.delays.snapshotMs)]).then(
      ([, elapsed]) => {
        const snapshot = this.store.snapshot(snapshotId);
        if (!elapsed || !this.live(epoch) || snapshot?.state !== "pending") return;
        snapshot.state = "completed";
        snapshot.completionTime = new Date(this.deps.now()).toISOString();
        this.store.commit();
      },
      (error: unknown) => {
        const snapshot = this.store.snapshot(snapshotId);
        if (!this.live(epoch) || !snapshot) return;
        snapshot.state = "error";
        snapshot.error = this.backendFailed("createSnapshot", error, { snapshotId, volumeId });
        this.store.commit();
      },
    );
    this.track(done);
  }

  /** A snapshot left the model: its image goes once nothing is still copying from or to it. */
  snapshotDeleted(snapshotId: string): void {
    const users = [...(this.snapshotUsers.get(snapshotId) ?? [])];
    const done = Promise.all(users)
      .then(() => this.deps.backend.deleteSnapshot(snapshotId))
      .catch((error: unknown) => {
        this.backendFailed("deleteSnapshot", error, { snapshotId });
        this.store.commit();
      });
    this.track(done);
  }

  /** What the backend has fetched of a volume made from a snapshot (see VolumeBackend.initializationProgress). */
  initializationProgress(volumeId: string): { done: number; total: number } | undefined {
    try {
      return this.deps.backend.initializationProgress?.(volumeId);
    } catch (error) {
      this.deps.log?.warning("lab.ec2-emulator", "could not read initialization progress", {
        volumeId,
        error: message(error),
      });
      return undefined;
    }
  }

  /** After the stuckAttach fault changed: releases the attachments it no longer holds. */
  faultsChanged(): void {
    if (!this.deps.faults.stuckCreate()) {
      for (const volumeId of this.createsHeld) {
        const volume = this.store.volume(volumeId);
        if (volume?.state === "creating") volume.state = "available";
      }
      if (this.createsHeld.size > 0) this.store.commit();
      this.createsHeld.clear();
    }
    for (const volume of this.store.volumes()) {
      const attachment = volume.attachment;
      if (attachment?.stuck && !this.deps.faults.stuckAttach(volume.volumeId)) {
        this.completeAttach(volume.volumeId, attachment.token);
      }
    }
  }

  /**
   * Restarts the transitions that were under way when the model was saved (a restarted
   * emulator, or a replaced state). Images known to be made are not made again; an attach or
   * detach whose backend call was cut short (the process died) is repeated, so the backend
   * should accept doing again what may already have been done.
   */
  resume(): void {
    for (const volume of this.store.volumes()) {
      if (volume.state === "creating") this.volumeCreated(volume.volumeId);
      if (volume.state === "deleting") this.volumeDeleting(volume.volumeId);
      const attachment = volume.attachment;
      if (attachment?.state === "attaching") this.attachStarted(volume.volumeId);
      if (attachment?.state === "detaching" || attachment?.state === "busy") this.detachStarted(volume.volumeId);
    }
    for (const snapshot of this.store.snapshots()) {
      if (snapshot.state === "pending") this.snapshotStarted(snapshot.snapshotId);
    }
    // The OS of an instance caught mid-shutdown is gone with the old process: no hook again.
    for (const instance of this.store.instances()) {
      if (instance.state === "pending") this.instanceStarting(instance.instanceId);
      if (instance.state === "stopping") this.instanceShuttingDown(instance.instanceId, "stop", false);
      if (instance.state === "shutting-down") this.instanceShuttingDown(instance.instanceId, "terminate", false);
    }
  }

  /**
   * Cancels every timer and makes callbacks from before ignore their results (the model they
   * belonged to was replaced). Transitions under way stay as they are in the model.
   */
  cancelTimers(): void {
    this.epoch++;
    this.createsHeld.clear(); // resume() holds again those of the new model
    this.clearTimers();
  }

  private clearTimers(): void {
    const timers = [...this.timers];
    this.timers.clear();
    for (const [timer, resolve] of timers) {
      clearTimeout(timer);
      resolve(false);
    }
  }

  /**
   * Stops starting transitions and waits for the backend calls already running; their results
   * still enter the model, so the saved state says what the backend really did. Transitions
   * still waiting on a delay stay where they are and resume after a restart. Resolves false
   * when backend calls were still running after `timeoutMs` (a hung backend must not hang
   * the lab's shutdown).
   */
  async close(timeoutMs = 10_000): Promise<boolean> {
    this.stopping = true;
    this.clearTimers();
    const deadline = Date.now() + timeoutMs;
    while (this.pending.size > 0) {
      const left = deadline - Date.now();
      if (left <= 0) return false;
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, left)));
      await Promise.race([Promise.allSettled([...this.pending]), timeout]);
      clearTimeout(timer);
    }
    return true;
  }
}
