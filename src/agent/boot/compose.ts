/**
 * The boot's parts, composed from the host's adapters once its settings are known: the readiness
 * labels under the run's prefix and mode, the host checks before a claim (preflight.ts), and the
 * pre-warm of the volume in hand (prewarm/apply.ts) with the strategy the plan's step carries.
 */
import type { AgentConfig } from "../../config/index.ts";
import type { HostAdapters } from "../adapters.ts";
import type { CloudVolumes, PrewarmFromMount } from "../ports.ts";
import { beginPrewarmAtBoot } from "../prewarm/apply.ts";
import { prewarmSettingsFrom } from "../prewarm/plan.ts";
import type { ResolvedSettings } from "../settings.ts";
import type { BootDeps, MountRun } from "./deps.ts";
import { mountRunBegun, mountRunKey, openLabelsGate, recordMountRun } from "../prewarm/mount-run.ts";
import { preflightHost } from "./preflight.ts";

/** The boot's deps; `published` is told the labels each report published (the boot's record keeps the last). */
export function composeBoot(
  host: HostAdapters,
  config: AgentConfig,
  settings: ResolvedSettings,
  cloud: CloudVolumes,
  published?: (labels: Record<string, string>) => void,
): BootDeps {
  const { log } = host;
  const labels = { prefix: settings.effective.labels.prefix, mode: settings.effective.labels.mode };
  const { report } = host.labels({ ...labels, ...(published ? { onPublished: published } : {}) });
  return {
    cloud,
    storage: host.storage,
    daemonConfig: host.daemonConfig,
    docker: host.docker,
    engine: host.engine,
    ...(host.containerd ? { containerd: host.containerd } : {}),
    dataRoot: host.dataRoot,
    dockerVersion: () => host.dockerVersion(),
    report,
    preflight: () =>
      preflightHost({
        daemonJsonPath: config.paths.daemonJson,
        readDaemonJson: () => host.daemonConfig.read(),
        dockerdCommand: () => host.dockerdCommand(),
        dockerVersion: () => host.dockerVersion(),
        labels,
        log,
      }),
    fill: (mountPoint) => host.fill(mountPoint),
    // The plan's strategy (what `--dry-run` printed), the rest of config `prewarm` after the instance's overrides.
    prewarm: (target, strategy, options) =>
      beginPrewarmAtBoot(
        target,
        { ...prewarmSettingsFrom(settings.effective), strategy },
        {
          reader: host.reader,
          initializationStatus: (volumeId) => cloud.initializationStatus(volumeId),
          tagVolume: (volumeId, tags) => cloud.tagVolume(volumeId, tags),
          clock: cloud.clock,
          report,
          stateDir: config.paths.stateDir,
          log,
          ...(host.recorder ? { recorder: host.recorder } : {}),
          ...(host.serviceStatus ? { status: (text: string) => host.serviceStatus?.(text) } : {}),
          ...(host.startPrewarm ? { startBackground: host.startPrewarm } : {}),
        },
        options,
      ),
    ...(host.prewarmFromMount
      ? { mountRun: mountRunOf(host.prewarmFromMount, config.paths.stateDir, host.bootId) }
      : {}),
    log,
  };
}

/** The run begun at the mount: the host's unit, and its record in the state folder (this boot's, per volume). */
function mountRunOf(unit: PrewarmFromMount, stateDir: string, bootId: string | undefined): MountRun {
  const key = (volumeId: string) => mountRunKey(volumeId, bootId);
  return {
    begin: async ({ volumeId, tags }) => {
      // Recorded first, its labels held: the second phase learns of the run from the record even while it starts,
      // and the run never finds an earlier boot's gate open (the record names this boot). The tags: the run knows the
      // node's images and reads before it asks EC2 (prewarm/read-first.ts).
      await recordMountRun(stateDir, key(volumeId), { ...tags });
      await unit.start();
    },
    begun: (volumeId) => mountRunBegun(stateDir, key(volumeId)),
    published: (volumeId) => openLabelsGate(stateDir, key(volumeId)),
    stop: () => unit.stop(),
  };
}
