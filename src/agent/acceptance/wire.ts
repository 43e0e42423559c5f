/**
 * The acceptance run composed from the host's adapters (src/agent/adapters.ts: IMDS, EC2, the
 * boot's device lookup by serial) and the host's own mount, XFS and fio functions: the CLI passes
 * the host's adapters, the lab a lab host's.
 */
import { randomBytes } from "node:crypto";
import { mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { AgentConfig } from "../../config/index.ts";
import { writeFileAtomic } from "../../fs-atomic.ts";
import { usedRanges } from "../../host/extents.ts";
import { canonicalPath, mountDevice, readMountTable, unmountPath } from "../../host/mount.ts";
import { timeDeviceReads } from "../../host/read-timing.ts";
import { deviceSize } from "../../host/volume-reads.ts";
import type { HostAdapters } from "../adapters.ts";
import { volumeCreation } from "../volume-creation.ts";
import type { AcceptanceDeps } from "./deps.ts";

/** Where the calibration goes without --output: the agent's state folder. */
export function defaultCalibrationFile(config: Pick<AgentConfig, "paths">): string {
  return join(config.paths.stateDir, "ebs-model.json");
}

export function wireAcceptance(
  config: AgentConfig,
  host: Pick<HostAdapters, "identify" | "cloudFor" | "storage" | "log">,
  options: { output?: string; say(line: string): void },
): AcceptanceDeps {
  const { log } = host;
  return {
    log,
    identify: () => host.identify(),
    cloudFor: (region) => host.cloudFor(config.region ?? region),
    storage: host.storage,
    mountReadOnly: (device, mountPoint) => mountDevice(device, mountPoint, { readOnly: true, log }),
    unmount: (mountPoint) => unmountPath(mountPoint, { log }),
    async mountsBelow(folder) {
      const root = await canonicalPath(folder);
      return (await readMountTable())
        .map((entry) => entry.target)
        .filter((target) => target.startsWith(`${root}/`))
        .sort((a, b) => b.length - a.length);
    },
    allocatedRanges: (mountPoint) => usedRanges(mountPoint, { log }),
    deviceBytes: (device) => deviceSize(device, log),
    timeReads: (device, read) => timeDeviceReads(device, read, { log }),
    async writeFile(path, text) {
      await mkdir(dirname(path), { recursive: true });
      await writeFileAtomic(path, text);
    },
    say: options.say,
    newRunId: () => `run-${randomBytes(4).toString("hex")}`,
    settings: {
      pool: config.pool,
      imageSet: config.imageSet,
      device: config.device,
      mountRoot: config.paths.mountRoot,
      attachTimeoutMs: config.timeouts.attachSeconds * 1000,
      deviceTimeoutMs: config.timeouts.deviceSeconds * 1000,
      prices: config.cost,
      creation: volumeCreation(config),
      output: options.output ?? defaultCalibrationFile(config),
    },
  };
}
