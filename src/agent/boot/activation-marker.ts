/**
 * Preparing a volume's data-root once per activation. A data-root that arrives from another
 * tenant drops the state that must not travel (swarm identity, containers, networks, and on a
 * pool volume its named volumes); a reboot or a re-run of the same activation must keep it,
 * since by then it is this node's own. A marker on the volume, written after the cleanup,
 * records which activation it was done for, so the decision is made from the volume itself.
 *
 * A pool volume serves one activation: a stopped instance that starts again is a new tenant
 * (workspace-record.ts: one activation is one instance id and one EC2 LaunchTime, else one
 * kernel boot id), and a pool volume kept attached over the stop would otherwise hand the
 * previous tenant's containers and named volumes to the next. A workspace volume serves its
 * ids, which the boot checked before mounting it (plan.ts `attachedHere`): on the same instance
 * it keeps its node state across activations, as its user's data.
 *
 * A kill at any point converges: until the marker is replaced (atomically, after the cleanup)
 * a rerun decides the same and cleans again, which finds less or nothing to remove.
 *
 * The marker and the data-root are on the volume: this module decides, and reads and writes them
 * through the VolumeMarker port (src/host/volume-marker.ts reaches them without following a link).
 */
import { containerdRootOnVolume } from "../../layout.ts";
import { dirname } from "node:path";
import type { Logger } from "../../log.ts";
import type { ImageStore } from "../../docker/engine.ts";
import { VolumeKind } from "../../tags.ts";
import type { VolumeMarker } from "../ports.ts";
import { INSTANCE_ID, sameActivation, type Activation } from "../workspace-record.ts";

/**
 * The activation the marker names. Its text is JSON (`instanceId`, `launchTime`, `bootId`); a
 * marker of an older agent is the bare instance id, which names an instance and no activation.
 * Anything else names nothing (undefined).
 */
export function parsePreparedMarker(text: string): Activation | undefined {
  const trimmed = text.trim();
  if (INSTANCE_ID.test(trimmed)) return { instanceId: trimmed };
  let raw: unknown;
  try {
    raw = JSON.parse(trimmed);
  } catch {
    return undefined;
  }
  if (typeof raw !== "object" || raw === null) return undefined;
  const r = raw as Record<string, unknown>;
  if (typeof r.instanceId !== "string" || !INSTANCE_ID.test(r.instanceId)) return undefined;
  const marker: Activation = { instanceId: r.instanceId };
  for (const field of ["launchTime", "bootId"] as const) {
    if (typeof r[field] === "string" && r[field] !== "") marker[field] = r[field];
  }
  return marker;
}

export function preparedMarkerText(activation: Activation): string {
  const { instanceId, launchTime, bootId } = activation;
  return JSON.stringify({ instanceId, ...(launchTime ? { launchTime } : {}), ...(bootId ? { bootId } : {}) }) + "\n";
}

/**
 * Pure: whether the data-root the marker describes is this run's own node state (kept) or a
 * previous tenant's (cleaned). A pool volume: only the same activation (no marker, or no proof
 * of it, is another tenant). A workspace volume: the same instance.
 */
export function keepsNodeState(kind: VolumeKind, marker: Activation | undefined, now: Activation): boolean {
  if (!marker) return false;
  return kind === VolumeKind.workspace ? marker.instanceId === now.instanceId : sameActivation(marker, now);
}

/** Why a data-root is cleaned, for the log. */
function previousTenant(marker: Activation | undefined, now: Activation): string {
  if (!marker) return "no marker of an earlier preparation";
  if (marker.instanceId !== now.instanceId) return `prepared for another instance (${marker.instanceId})`;
  return `prepared in an earlier activation of this instance (launched ${marker.launchTime ?? "at an unknown time"})`;
}

/** Runs `clean` unless the volume was already prepared for this activation (keepsNodeState); then records it. */
export async function prepareOncePerActivation(
  dataRoot: string,
  options: { kind: VolumeKind; activation: Activation },
  clean: () => Promise<void>,
  volume: Pick<VolumeMarker, "readMarker" | "writeMarker">,
  log: Logger,
): Promise<"prepared" | "already"> {
  const { kind, activation } = options;
  const volumeRoot = dirname(dataRoot);
  const marker = parsePreparedMarker((await volume.readMarker(volumeRoot)) ?? "");
  if (keepsNodeState(kind, marker, activation)) {
    // The activation as now known (a reboot's boot id, a launch time learned since): the
    // fallback to the boot id then holds for the rest of this boot.
    const current: Activation = {
      instanceId: activation.instanceId,
      launchTime: activation.launchTime ?? marker!.launchTime,
      bootId: activation.bootId ?? marker!.bootId,
    };
    if (preparedMarkerText(current) !== preparedMarkerText(marker!))
      await volume.writeMarker(volumeRoot, preparedMarkerText(current));
    log.info(
      "boot.data-root",
      `data-root already prepared for this ${kind === VolumeKind.pool ? "activation" : "instance"}: keeping its ` +
        `node state`,
      { dataRoot },
    );
    return "already";
  }
  await clean();
  await volume.writeMarker(volumeRoot, preparedMarkerText(activation));
  log.info("boot.data-root", `machine-local state removed from the data-root: ${previousTenant(marker, activation)}`, {
    dataRoot,
    previousInstance: marker?.instanceId,
  });
  return "prepared";
}

/**
 * The host's parts of a data-root's preparation, one adapter each (built in src/cli/wiring.ts): the
 * marker and the data-root folder on the volume (VolumeMarker), and what checks and cleans it.
 */
export interface DataRootPorts extends VolumeMarker {
  /**
   * Refuses a volume whose layout breaks the agent's (src/host/volume-layout.ts: no link, FIFO,
   * socket or device where docker or the agent expects a folder or a file; a refusal quarantines
   * the volume).
   */
  checkLayout(volumeRoot: string): Promise<void>;
  /** Removes from a data-root the state that must not travel between tenants (src/docker/data-root.ts). */
  clean(dataRoot: string, options: { kind: VolumeKind; imageStore?: ImageStore }): Promise<unknown>;
  /** Readies containerd's root on the volume and drops its machine-local state (src/docker/containerd-store.ts). */
  cleanContainerdRoot(root: string): Promise<void>;
}

/**
 * The prepare-data-root step: checks the volume's layout, then cleans its data-root of state
 * that must not travel between tenants, unless this activation (a pool volume) or this instance
 * (a workspace volume) prepared it already (prepareOncePerActivation). On a volume the agent
 * created blank (`createdByAgent`) that docker never initialized, it creates the empty data-root
 * folder instead: there is nothing to clean, and docker fills it.
 */
export async function prepareVolumeDataRoot(
  dataRoot: string,
  options: { kind: VolumeKind; activation: Activation; createdByAgent: boolean; imageStore?: ImageStore },
  ports: DataRootPorts,
  log: Logger,
): Promise<void> {
  const { kind, activation, createdByAgent, imageStore } = options;
  // On every boot, a reboot's included (its marker skips the cleanup, not this): docker
  // follows whatever links the volume holds.
  await ports.checkLayout(dirname(dataRoot));
  await prepareOncePerActivation(
    dataRoot,
    { kind, activation },
    async () => {
      // A blank volume the agent formatted has no data-root yet: docker makes it.
      if (createdByAgent && (await createFreshDataRoot(dataRoot, ports, log))) return;
      await ports.clean(dataRoot, { kind, ...(imageStore ? { imageStore } : {}) });
      // containerd's root beside the data-root: its machine-local state goes with the
      // data-root's, once per activation, before containerd starts on it.
      if (imageStore === "containerd" && kind === VolumeKind.pool) {
        await ports.cleanContainerdRoot(containerdRootOnVolume(dirname(dataRoot)));
      }
    },
    ports,
    log,
  );
}

/**
 * On a volume the agent created blank and formatted: creates the empty data-root folder and
 * returns true while docker has never initialized it (no `image/` yet), since there is nothing
 * to clean and the pool-volume cleanup would refuse a folder that is not a data-root yet. Once
 * docker has run on it, false: it is cleaned like any other volume.
 */
export async function createFreshDataRoot(
  dataRoot: string,
  volume: Pick<VolumeMarker, "dataRootInitialized" | "createDataRoot">,
  log: Logger,
): Promise<boolean> {
  if (await volume.dataRootInitialized(dataRoot)) return false;
  await volume.createDataRoot(dataRoot);
  log.info("boot.data-root", "empty data-root created on the blank volume: docker initializes it", { dataRoot });
  return true;
}
