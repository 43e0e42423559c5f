/** The lab's EC2 emulator: public API. */
export { startEc2Emulator, type Ec2Emulator, type Ec2EmulatorOptions } from "./emulator.ts";
export type { Faults, ActionFaults } from "./faults.ts";
export type { Delays, ShutdownKind } from "./lifecycle.ts";
export type {
  Model,
  VolumeRecord,
  SnapshotRecord,
  InstanceRecord,
  InstanceState,
  AttachmentRecord,
  LabEvent,
} from "./model.ts";
export type { AdminInstance } from "./admin.ts";
export { OWNER_ID } from "./ids.ts";
export { Ec2Admin } from "./admin-client.ts";
export { MemoryVolumeBackend, type BackendCall } from "./memory-backend.ts";
