/**
 * The host's block devices and filesystems as the agent sees them (the `HostStorage` port): built
 * once in the CLI with the host's paths (`/dev/disk/by-id`, `/sys`), or a lab host's folders.
 */
import type { HostStorage } from "../agent/ports.ts";
import type { Logger } from "../log.ts";
import { findVolumeDevice, waitForVolumeDevice } from "./device.ts";
import { formatDevice, growFilesystem, probeDevice } from "./filesystem.ts";
import { assertCacheLabel, identifyWithEvidence, type IdentifiedDevice } from "./identify.ts";
import { findMountPoint, mountAt, mountDevice, unmountPath } from "./mount.ts";
import { filesystemLiveness } from "./mount-namespaces.ts";

export { DeviceTimeoutError } from "./device.ts";
export { DeviceIdentityError, DevicePathError, InvalidVolumeIdError } from "./serial.ts";
export { FormatRefusedError, ProbeError } from "./filesystem.ts";
export { ForeignVolumeError } from "./identify.ts";
export { MountConflictError } from "./mount.ts";

/** Where this host's devices show up. */
export interface HostStorageOptions {
  /** udev's by-id links (default `/dev/disk/by-id`). */
  byIdDir?: string;
  /** sysfs (default `/sys`): serials are read from `<sysfsRoot>/class/block/<dev>/device/serial`. */
  sysfsRoot?: string;
  log?: Logger;
}

/**
 * The real HostStorage: udev links, sysfs serials, blkid / wipefs / xfs_db -r, mkfs.xfs, mount,
 * xfs_growfs. mount and grow check the agent's XFS label themselves, whatever the caller did.
 */
export function createHostStorage(options: HostStorageOptions = {}): HostStorage {
  const where = {
    byIdDir: options.byIdDir ?? "/dev/disk/by-id",
    sysfsRoot: options.sysfsRoot ?? "/sys",
    log: options.log,
  };
  const { log } = options;
  // The last positive identification in this process: the mount's label check reuses its probe
  // while the device is unchanged (identify.ts, assertCacheLabel).
  let identified: IdentifiedDevice | undefined;
  return {
    waitForDevice: (volumeId, timeoutMs, call) => waitForVolumeDevice(volumeId, timeoutMs, where, call?.signal),
    findDevice: (volumeId) => findVolumeDevice(volumeId, where),
    probe: (device) => probeDevice(device, { log }),
    async identify(volume, device) {
      identified = undefined;
      const { identity, seen } = await identifyWithEvidence(volume, device, { log });
      identified = seen;
      return identity;
    },
    format: (device, label) => formatDevice(device, label, { log }),
    mountPointOf: (device) => findMountPoint(device),
    async mount(device, mountPoint) {
      const { type } = await assertCacheLabel(device, {
        log,
        ...(identified ? { identified } : {}),
      });
      await mountDevice(device, mountPoint, { fsType: type, log });
    },
    unmount: (mountPoint) => unmountPath(mountPoint, { log }),
    liveness: (device) => filesystemLiveness(device),
    async grow(mountPoint) {
      const mounted = await mountAt(mountPoint);
      if (mounted) await assertCacheLabel(mounted.source, { log });
      return growFilesystem(mountPoint, { log });
    },
  };
}
