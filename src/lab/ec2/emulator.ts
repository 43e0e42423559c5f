/**
 * The EC2 emulator: `startEc2Emulator()` wires the model, the state machine, the faults and
 * the HTTP server together and returns a handle for the lab and for tests.
 */
import type { Logger } from "../../log.ts";
import type { LabInstance, VolumeBackend } from "../types.ts";
import type { ActionContext } from "./actions/index.ts";
import type { AdminTarget } from "./admin.ts";
import { FaultInjector, type Faults } from "./faults.ts";
import { InstanceRegistry } from "./instances.ts";
import { InitializationHold } from "./initialization-hold.ts";
import { Lifecycle, type Delays, type ShutdownKind } from "./lifecycle.ts";
import type { Model } from "./model.ts";
import { RequestLedger } from "./requests.ts";
import { createEbsDirect } from "./ebs-direct.ts";
import { LabIam } from "./iam/enforcement.ts";
import { listen } from "./server.ts";
import { StateStore } from "./state.ts";

export interface Ec2EmulatorOptions {
  /** Does the disk work; called on create/delete/snapshot/attach/detach. */
  backend: VolumeBackend;
  /** Where the model is kept across restarts (written atomically after each change). */
  stateFile?: string;
  /** Default `us-east-1`; the zones are `${region}a`, `b` and `c`. */
  region?: string;
  /** Transition delays in ms (defaults: create, attach and detach 1000, snapshot 2000). */
  delays?: Partial<Delays>;
  /** Most volumes attached to one instance (default 27, as on Nitro with a root volume). */
  attachmentLimit?: number;
  /** Multiplies the volume-initialization rate (default 1) so tests can follow it to 100 %. */
  initializationSpeedup?: number;
  /**
   * The clock for timestamps and progress (ms since the epoch; default Date.now). Tests may
   * drive it to follow initialization deterministically; delays always use real timers.
   */
  clock?: () => number;
  /**
   * How far EC2's clock runs ahead of `clock` (ms; negative: behind; default 0): the emulator's
   * time, which stamps its answers (`Date`), its timestamps, and judges signatures' times, is
   * `clock() + clockOffsetMs`. Changeable with setClockOffset: a test moves "the host's clock" by
   * moving EC2's the other way, the agent's host clock staying real.
   */
  clockOffsetMs?: number;
  faults?: Faults;
  log?: Logger;
  /** Port on 127.0.0.1 (default 0: a free one). */
  port?: number;
  /** Decide requests of installed keys by their role's policies (default true); false allows everything. */
  enforceIam?: boolean;
  /**
   * The folder standing for the root filesystem of an instance RunInstances launches (the lab's host
   * folder, made when the lab adopts the instance as a host); default: none (an empty path).
   */
  launchedHostRoot?: (instanceId: string) => string;
}

export interface Ec2Emulator {
  /** `http://127.0.0.1:<port>`: the SDK's `endpoint`, the CLI's `--endpoint-url`. */
  readonly endpoint: string;
  readonly port: number;
  readonly region: string;
  /**
   * Adds an instance (running) and returns the live object the emulator keeps: CreateTags on
   * the instance changes its `tags`. Registering a known id again keeps its live tags and
   * takes the new hostRoot / metadataTags; its zone cannot change.
   */
  registerInstance(instance: LabInstance): LabInstance;
  /** The live instance objects, in registration order. */
  instances(): LabInstance[];
  /**
   * Terminates an instance at once, as a power loss would: no shutdown runs, its attachments end
   * and its volumes become available. (TerminateInstances goes through `shutting-down`.)
   */
  terminateInstance(instanceId: string): void;
  /**
   * What runs while the instance is `stopping` / `shutting-down` after StopInstances /
   * TerminateInstances (its OS shutting down: a lab host runs the agent's release there). The
   * instance reaches `stopped` / `terminated` only once it resolved (or failed). `undefined`
   * removes it.
   */
  setShutdownHook(instanceId: string, hook: ((kind: ShutdownKind) => Promise<void>) | undefined): void;
  /** EC2's time now (ms since the epoch): `clock() + clockOffsetMs`. */
  now(): number;
  /** Moves EC2's clock to `offsetMs` ahead of `clock` (negative: behind), from now on. */
  setClockOffset(offsetMs: number): void;
  clockOffsetMs(): number;
  /** Replaces all faults (and restarts the throttle counting). */
  setFaults(faults: Faults): void;
  faults(): Faults;
  /**
   * Changes transition delays for the transitions that start from now on (those under way keep
   * theirs): a bench draws new EC2 latencies for each boot.
   */
  setDelays(next: Partial<Delays>): void;
  /**
   * Stops provisioned-rate initialization where it is (a volume created during the hold stays at
   * 0 %) until releaseInitialization, so a test sees a volume still initializing on any machine.
   * The lab's cold layer warms such volumes' chunks on regardless.
   */
  holdInitialization(): void;
  /** Lets held initialization go on at its rate from now. */
  releaseInitialization(): void;
  /** A deep copy of the whole model, for assertions. */
  snapshotState(): Model;
  /** The EC2 requests received (counters, records) and the holds that park chosen ones. */
  readonly requests: RequestLedger;
  /** IAM: `iam.principals.install(key, principal)` makes a key's requests that principal's. */
  readonly iam: LabIam;
  /** Replaces the whole model; transitions under way in it restart. */
  replaceState(model: Model): void;
  /** Stops the server and the timers, waits for backend calls under way, saves the state. */
  close(): Promise<void>;
}

const DEFAULT_DELAYS: Delays = {
  createMs: 1000,
  attachMs: 1000,
  detachMs: 1000,
  snapshotMs: 2000,
  startMs: 1000,
  stopMs: 1000,
  terminateMs: 1000,
};

/** Starts the emulator (loading `stateFile` when present) and resolves once it listens. */
export async function startEc2Emulator(opts: Ec2EmulatorOptions): Promise<Ec2Emulator> {
  const region = opts.region ?? "us-east-1";
  const zones = ["a", "b", "c"].map((suffix) => `${region}${suffix}`);
  const base = opts.clock ?? Date.now;
  let offsetMs = opts.clockOffsetMs ?? 0;
  const now = () => base() + offsetMs;
  const setClockOffset = (next: number): void => {
    if (!Number.isFinite(next)) throw new Error(`clock offset must be a finite number of ms, got ${next}`);
    offsetMs = next;
    log?.info("lab.ec2-emulator", "clock offset set", { offsetMs: next, now: new Date(now()).toISOString() });
  };
  const store = StateStore.open(opts.stateFile, now);
  const faults = new FaultInjector(opts.faults);
  const delays: Delays = { ...DEFAULT_DELAYS, ...opts.delays };
  const log = opts.log;

  const instances = new InstanceRegistry(store, region, zones, now, log);
  const shutdownHooks = new Map<string, (kind: ShutdownKind) => Promise<void>>();
  const lifecycle = new Lifecycle({
    shutdown: async (instanceId, kind) => shutdownHooks.get(instanceId)?.(kind),
    store,
    backend: opts.backend,
    faults,
    delays,
    log,
    now,
    instance: (id) => instances.get(id),
  });
  const initializationHold = new InitializationHold();
  const iam = new LabIam(opts.enforceIam ?? true);
  const ctx: ActionContext = {
    store,
    lifecycle,
    faults,
    region,
    zones,
    attachmentLimit: opts.attachmentLimit ?? 27,
    delays,
    initializationSpeedup: opts.initializationSpeedup ?? 1,
    initializationHold,
    now,
    launchedHostRoot: opts.launchedHostRoot ?? (() => ""),
    syncInstanceTags: (id) => instances.syncTags(id),
    iam,
    log,
  };

  const registerInstance = (instance: LabInstance) => instances.register(instance);
  const terminateInstance = (instanceId: string) => instances.terminate(instanceId, lifecycle);
  const setFaults = (next: Faults): void => {
    faults.set(next);
    lifecycle.faultsChanged();
    log?.info("lab.ec2-emulator", "faults set", { faults: JSON.stringify(next) });
  };
  const replaceState = (model: Model): void => {
    lifecycle.cancelTimers();
    store.replace(model);
    instances.syncAll();
    lifecycle.resume();
  };

  const requests = new RequestLedger();
  const admin: AdminTarget = {
    region,
    requests,
    zones,
    registerInstance,
    describeInstance: (id) => instances.describe(id),
    listInstances: () => store.instances().flatMap((r) => instances.describe(r.instanceId) ?? []),
    terminateInstance,
    faults: () => faults.get(),
    setFaults,
    clock: () => ({ offsetMs, now: new Date(now()).toISOString() }),
    setClockOffset,
    snapshotState: () => store.copy(),
    replaceState,
  };

  const ebs = createEbsDirect(ctx, opts.backend.blockSnapshots);
  const { server, port } = await listen(ctx, admin, requests, ebs, opts.port ?? 0, log);
  // Only once listening: a failed start leaves no timers behind.
  lifecycle.resume();
  const endpoint = `http://127.0.0.1:${port}`;
  log?.info("lab.ec2-emulator", "listening", { endpoint, region, stateFile: opts.stateFile });

  let closing: Promise<void> | undefined;
  return {
    endpoint,
    port,
    region,
    registerInstance,
    instances: () => instances.all(),
    terminateInstance,
    setShutdownHook: (instanceId, hook) => {
      if (hook) shutdownHooks.set(instanceId, hook);
      else shutdownHooks.delete(instanceId);
    },
    now,
    setClockOffset,
    clockOffsetMs: () => offsetMs,
    setFaults,
    faults: () => faults.get(),
    // The lifecycle and the actions hold this very object: changing it in place is enough.
    setDelays: (next) => void Object.assign(delays, next),
    holdInitialization: () => initializationHold.hold(now()),
    releaseInitialization: () => initializationHold.release(now()),
    snapshotState: () => store.copy(),
    requests,
    iam,
    replaceState,
    close: () => {
      closing ??= (async () => {
        // Held requests would keep their connections (and server.close) waiting.
        requests.clearHolds(false);
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeAllConnections();
        await closed;
        if (!(await lifecycle.close())) {
          log?.warning("lab.ec2-emulator", "backend calls still running at close; their results are not saved", {
            endpoint,
          });
        }
        store.seal();
        log?.info("lab.ec2-emulator", "closed", { endpoint });
      })();
      return closing;
    },
  };
}
