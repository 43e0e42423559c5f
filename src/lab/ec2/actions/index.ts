/** The EC2 actions the emulator implements, by their Query-protocol `Action` name. */
import { attachVolume, detachVolume } from "./attachments.ts";
import type { ActionHandler } from "./context.ts";
import { startInstances, stopInstances, terminateInstances } from "./instance-states.ts";
import { describeInstances } from "./instances.ts";
import { describeNetworkInterfaces } from "./network-interfaces.ts";
import { runInstances } from "./run-instances.ts";
import { createSnapshot, deleteSnapshot, describeSnapshots } from "./snapshots.ts";
import { createTags, deleteTags, describeTags } from "./tags.ts";
import { describeVolumeStatus } from "./volume-status.ts";
import { createVolume, deleteVolume, describeVolumes } from "./volumes.ts";

export type { ActionContext, ActionHandler } from "./context.ts";

export const ACTIONS: Readonly<Record<string, ActionHandler>> = {
  DescribeVolumes: describeVolumes,
  CreateVolume: createVolume,
  DeleteVolume: deleteVolume,
  AttachVolume: attachVolume,
  DetachVolume: detachVolume,
  DescribeVolumeStatus: describeVolumeStatus,
  CreateSnapshot: createSnapshot,
  DescribeSnapshots: describeSnapshots,
  DeleteSnapshot: deleteSnapshot,
  CreateTags: createTags,
  DeleteTags: deleteTags,
  DescribeTags: describeTags,
  DescribeInstances: describeInstances,
  RunInstances: runInstances,
  DescribeNetworkInterfaces: describeNetworkInterfaces,
  StopInstances: stopInstances,
  StartInstances: startInstances,
  TerminateInstances: terminateInstances,
};
