/**
 * The emulated instances as the rest of the lab sees them: the live LabInstance objects that
 * registerInstance() hands out. The IMDS emulator and the volume backend read these objects, so
 * CreateTags/DeleteTags on an instance update their `tags` in place instead of replacing them.
 */
import { imdsTagKeyProblem } from "../../aws/imds.ts";
import type { Logger } from "../../log.ts";
import type { LabInstance } from "../types.ts";
import type { AdminInstance } from "./admin.ts";
import { newId } from "./ids.ts";
import type { Lifecycle } from "./lifecycle.ts";
import type { InstanceRecord } from "./model.ts";
import type { StateStore } from "./state.ts";

function toLabInstance(record: InstanceRecord): LabInstance {
  return {
    instanceId: record.instanceId,
    region: record.region,
    availabilityZone: record.availabilityZone,
    tags: { ...record.tags },
    metadataTags: record.metadataTags,
    hostRoot: record.hostRoot,
    ...(record.instanceType !== undefined ? { instanceType: record.instanceType } : {}),
  };
}

/** Registration, live objects and termination of instances. */
export class InstanceRegistry {
  private readonly store: StateStore;
  private readonly region: string;
  private readonly zones: readonly string[];
  private readonly now: () => number;
  private readonly log: Logger | undefined;
  private readonly live = new Map<string, LabInstance>();

  constructor(store: StateStore, region: string, zones: readonly string[], now: () => number, log: Logger | undefined) {
    this.store = store;
    this.region = region;
    this.zones = zones;
    this.now = now;
    this.log = log;
    this.syncAll();
  }

  /** The live object of an instance in the model (made from the record after a restart). */
  get(instanceId: string): LabInstance | undefined {
    const record = this.store.instance(instanceId);
    if (!record) return undefined;
    let instance = this.live.get(instanceId);
    if (!instance) {
      instance = toLabInstance(record);
      this.live.set(instanceId, instance);
    }
    return instance;
  }

  /** The live objects in registration order. */
  all(): LabInstance[] {
    return this.store.instances().flatMap((r) => this.get(r.instanceId) ?? []);
  }

  /** Makes the live object's tags equal the model's, in place. */
  syncTags(instanceId: string): void {
    const record = this.store.instance(instanceId);
    const instance = this.get(instanceId);
    if (!record || !instance) return;
    for (const key of Object.keys(instance.tags)) if (!Object.hasOwn(record.tags, key)) delete instance.tags[key];
    Object.assign(instance.tags, record.tags);
  }

  /** After the whole model changed: drops objects of vanished instances, syncs the others. */
  syncAll(): void {
    for (const id of this.live.keys()) if (!this.store.instance(id)) this.live.delete(id);
    for (const record of this.store.instances()) this.syncTags(record.instanceId);
  }

  /**
   * Adds a running instance and keeps `instance` as its live object. A known id keeps its
   * live tags (they may have been changed through the API) and takes the new hostRoot and
   * metadataTags; its zone cannot change and a terminated instance cannot come back.
   */
  register(instance: LabInstance): LabInstance {
    const { instanceId, availabilityZone } = instance;
    if (instance.region !== this.region) {
      throw new Error(`instance ${instanceId} is in ${instance.region}, not ${this.region}`);
    }
    if (!this.zones.includes(availabilityZone)) {
      throw new Error(`instance ${instanceId}: zone ${availabilityZone} is not one of ${this.zones.join(", ")}`);
    }
    const known = this.store.instance(instanceId);
    // As RunInstances / ModifyInstanceMetadataOptions: no tag keys IMDS could not serve.
    const badKey = instance.metadataTags
      ? Object.keys(known?.tags ?? instance.tags).find((key) => imdsTagKeyProblem(key))
      : undefined;
    if (badKey !== undefined) throw new Error(`instance ${instanceId}: ${imdsTagKeyProblem(badKey)}`);
    if (known) {
      if (known.availabilityZone !== availabilityZone) {
        throw new Error(`instance ${instanceId} is already registered in ${known.availabilityZone}`);
      }
      if (known.state === "terminated") throw new Error(`instance ${instanceId} is terminated`);
      known.hostRoot = instance.hostRoot;
      known.metadataTags = instance.metadataTags;
    } else {
      this.store.model.instances[instanceId] = {
        instanceId,
        seq: this.store.nextSeq(),
        reservationId: newId("reservation"),
        region: this.region,
        availabilityZone,
        tags: { ...instance.tags },
        metadataTags: instance.metadataTags,
        hostRoot: instance.hostRoot,
        ...(instance.instanceType !== undefined ? { instanceType: instance.instanceType } : {}),
        state: "running",
        launchTime: new Date(this.now()).toISOString(),
      };
    }
    this.store.commit();
    this.live.set(instanceId, instance);
    this.syncTags(instanceId);
    this.log?.info("lab.ec2-emulator", "instance registered", { instance: instanceId, zone: availabilityZone });
    return instance;
  }

  /** An instance as the admin API shows it: live tags, state, attached volumes. */
  describe(instanceId: string): AdminInstance | undefined {
    const record = this.store.instance(instanceId);
    const instance = this.get(instanceId);
    if (!record || !instance) return undefined;
    const volumes = this.store
      .volumes()
      .flatMap((v) =>
        v.attachment?.instanceId === instanceId
          ? [{ volumeId: v.volumeId, device: v.attachment.device, state: v.attachment.state }]
          : [],
      );
    return { ...instance, tags: { ...instance.tags }, state: record.state, volumes };
  }

  /** Terminates an instance: EC2 ends its attachments at once and its volumes become available. */
  terminate(instanceId: string, lifecycle: Lifecycle): void {
    const record = this.store.instance(instanceId);
    if (!record) throw new Error(`no instance ${instanceId}`);
    if (record.state === "terminated") return;
    record.state = "terminated";
    this.store.event({ kind: "instance-terminated", instanceId });
    lifecycle.instanceTerminated(instanceId);
    this.store.commit();
  }
}
